"""RePPO (ReMax) vs PPO at equal budget on MinAtar games and a built-in task.

Every run trains the same network with the same hyperparameters and timesteps; only the
advantage differs: ``m = 1`` is PPO with the Q critic RePPO needs (the reference's PPO-Q
baseline, ``agents/minatar/ppo_q.py``; :class:`stable_baselines3.PPO` with
:class:`~controllers.rl.reppo.QActorCriticPolicy`), ``m > 1`` is
:class:`~controllers.rl.reppo.RePPO`. Reported per env and m, mean +- std over seeds:

* **final return**: the greedy (argmax) policy's mean return on held-out evaluation episodes
  (the reference evaluates greedily too) and the mean of the last training episodes;
* **exploration**: distinct states visited during training (MinAtar: distinct observation
  grids; reach_around: distinct 2 cm cells of the ball's position) and the best training
  episode return found, both at the same number of environment steps.

Envs (*our choices*, labelled): MinAtar (``minatar`` package, sticky actions 0.1, minimal
action set as pgx - which the reference uses - exposes, observation (C, 10, 10) float,
episodes cut at ``max_episode_steps``) through a small CNN (the reference's: conv 2x2 32,
average pool 2, dense 64, then 64-64 tanh heads); ``mujoco:reach_around`` with 9 discrete
commands (8 compass directions at the action bound, 0.5 m/s, and stop), its own sparse
reward (1 on reaching the goal, which ends the episode) and an MLP 64-64. Craftax (the paper's
other benchmark) needs JAX and is left out.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from matplotlib.ticker import EngFormatter
from stable_baselines3 import PPO
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.common.vec_env import DummyVecEnv

import sim
from controllers.rl.configuration_rl import PPOSettings, merge_ppo_layers
from controllers.rl.reppo import QActorCriticPolicy, RePPO
from embodied.apps.lab.budgets import budget_preset
from embodied.apps.lab.stats import format_pm, markdown_table, mean_std
from embodied.apps.plotting import plt, save_figure
from embodied.config import checked, validate
from embodied.errors import ConfigError
from embodied.io import write_json, write_text

MINATAR_PREFIX = "minatar:"
REACH_CELL_M = 0.02
"""Cell size of the reach_around exploration count (the ball's x, y)."""
REPPO_PPO = PPOSettings(n_steps=128, batch_size=256, n_epochs=3)
"""PPO settings of every run, PPO and RePPO alike (the reference's epochs; 8 envs x 128 steps
per update)."""


class MinAtarEnv(gym.Env[np.ndarray, int]):
    """A MinAtar game as a gymnasium env: observation (C, 10, 10) float32, minimal actions.

    Args:
        game: MinAtar game name (``breakout``, ``space_invaders``, ``freeway``, ``asterix``,
            ``seaquest``).
        max_episode_steps: Episodes are truncated after this many steps.
        sticky_action_prob: MinAtar's sticky-action probability.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012

    def __init__(
        self, game: str, max_episode_steps: int = 1000, sticky_action_prob: float = 0.1
    ) -> None:
        import minatar

        super().__init__()
        self.game = minatar.Environment(game, sticky_action_prob=sticky_action_prob)
        self.actions = list(self.game.minimal_action_set())
        h, w, c = self.game.state_shape()
        self.observation_space = spaces.Box(0.0, 1.0, (c, h, w), np.float32)
        self.action_space = spaces.Discrete(len(self.actions))  # type: ignore[assignment]
        self.max_episode_steps = int(max_episode_steps)
        self._t = 0

    def _obs(self) -> np.ndarray:
        return np.ascontiguousarray(self.game.state().transpose(2, 0, 1), dtype=np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:
            self.game.seed(seed)
        self.game.reset()
        self._t = 0
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        reward, done = self.game.act(self.actions[int(action)])
        self._t += 1
        return self._obs(), float(reward), bool(done), self._t >= self.max_episode_steps, {}


class DiscreteReachEnv(gym.Env[np.ndarray, int]):
    """``mujoco:reach_around`` with 9 discrete velocity commands (8 directions + stop).

    Args:
        env_id: A built-in env id with a 2-D velocity action (``mujoco:reach_around``).
        max_episode_steps: Truncate episodes earlier than the task does (None: the task's).
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012

    def __init__(self, env_id: str = "mujoco:reach_around", max_episode_steps: int | None = None):
        super().__init__()
        self.inner = sim.make(env_id)
        high = np.asarray(self.inner.action_spec.high, dtype=np.float32)
        if high.shape != (2,):
            raise ConfigError(
                f"DiscreteReachEnv needs a 2-D velocity action, {env_id} has {high.shape}",
                fix="use mujoco:reach_around",
            )
        angles = np.arange(8) * np.pi / 4
        dirs = np.stack([np.cos(angles), np.sin(angles)], axis=1)
        dirs /= np.abs(dirs).max(axis=1, keepdims=True)  # diagonals at the box corner
        self.commands = np.vstack([dirs * high, np.zeros((1, 2))]).astype(np.float32)
        n = len(self.inner.observation_spec.state.names)
        self.observation_space = spaces.Box(-np.inf, np.inf, (n,), np.float32)
        self.action_space = spaces.Discrete(len(self.commands))  # type: ignore[assignment]
        self.max_episode_steps = int(max_episode_steps or self.inner.max_episode_steps)
        self._t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        obs, info = self.inner.reset(seed=seed, options=options)
        self._t = 0
        return np.asarray(obs["state"], np.float32), info

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, term, trunc, info = self.inner.step(self.commands[int(action)])
        self._t += 1
        trunc = bool(trunc) or self._t >= self.max_episode_steps
        return np.asarray(obs["state"], np.float32), float(reward), bool(term), trunc, info


class Tracker(gym.Wrapper[Any, Any, Any, Any]):
    """Counts distinct states and records (step, return) of finished training episodes.

    Args:
        env: The env.
        state_key: Maps an observation to a hashable state key.
        steps: Shared step counter of all envs of a run (one-element list).
    """

    def __init__(
        self, env: gym.Env[Any, Any], state_key: Callable[[np.ndarray], bytes], steps: list[int]
    ) -> None:
        super().__init__(env)
        self.state_key, self.steps = state_key, steps
        self.states: set[bytes] = set()
        self.episodes: list[tuple[int, float]] = []
        self._ret = 0.0

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self._ret = 0.0
        self.states.add(self.state_key(obs))
        return obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, term, trunc, info = self.env.step(action)
        self.steps[0] += 1
        self._ret += float(reward)
        self.states.add(self.state_key(obs))
        if term or trunc:
            self.episodes.append((self.steps[0], self._ret))
        return obs, float(reward), term, trunc, info


class MinAtarCNN(BaseFeaturesExtractor):
    """The reference's MinAtar torso: conv 2x2 (32) + ReLU, average pool 2, dense 64 + ReLU.

    Args:
        observation_space: Box (C, 10, 10).
        features_dim: Output size.
    """

    def __init__(self, observation_space: spaces.Box, features_dim: int = 64) -> None:
        super().__init__(observation_space, features_dim)
        c, h, w = observation_space.shape
        self.net = torch.nn.Sequential(
            torch.nn.ZeroPad2d((0, 1, 0, 1)),  # flax Conv padding="SAME" for a 2x2 kernel
            torch.nn.Conv2d(c, 32, kernel_size=2),
            torch.nn.ReLU(),
            torch.nn.AvgPool2d(2),
            torch.nn.Flatten(),
            torch.nn.Linear(32 * (h // 2) * (w // 2), features_dim),
            torch.nn.ReLU(),
        )

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        """Features (B, features_dim)."""
        return self.net(observations)  # type: ignore[no-any-return]


@dataclass
class RePPOExperimentConfig:
    """What :func:`run_experiment` runs (same network, hyperparameters and steps for every m).

    Args:
        envs: Env ids: ``minatar:<game>`` or a built-in id (``mujoco:reach_around``).
        ms: Retry parameters; ``1`` is the PPO baseline (PPO with the Q critic).
        seeds: Training seeds per env and m (0 .. seeds - 1).
        total_timesteps: Environment steps per run.
        n_envs: Parallel envs per run.
        ppo: PPO hyperparameters, the same for every m (the reference: 3 epochs, learning
            rate 3e-4, gamma 0.99, GAE lambda 0.8 for RePPO and 0.95 for PPO; here 0.95 for
            both, and no entropy bonus).
        eval_episodes: Greedy evaluation episodes per run (env seeds from 10000).
        max_episode_steps: Episode cut for MinAtar games.
        last_episodes: Training episodes averaged for the final training return.
        extra: More keyword arguments for every model (``stable_baselines3.PPO``).
    """

    config_name: ClassVar[str] = "RePPO experiment"

    envs: tuple[str, ...] = checked(
        ("minatar:breakout", "minatar:space_invaders", "mujoco:reach_around"),
        min_len=1,
        fix="name at least one env (--envs)",
    )
    ms: tuple[float, ...] = checked(
        (1.0, 1.5, 3.0),
        gt=0,
        min_len=1,
        fix="use m=1 for plain PPO or m > 1 for more exploration (the paper sweeps 0.8 ... 3)",
    )
    seeds: int = checked(3, ge=1, fix="e.g. seeds=3")
    total_timesteps: int = checked(40_000, ge=1, fix="e.g. total_timesteps=40000")
    n_envs: int = checked(8, ge=1, fix="e.g. n_envs=8")
    ppo: PPOSettings = REPPO_PPO
    eval_episodes: int = 10
    max_episode_steps: int = 1000
    last_episodes: int = 20
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.envs = tuple(self.envs)
        self.ms = tuple(self.ms)
        validate(self)
        self.ms = tuple(float(m) for m in self.ms)

    @classmethod
    def for_budget(cls, budget: str, **fields: Any) -> RePPOExperimentConfig:
        """The preset :data:`BUDGETS` ``budget`` with ``fields`` on top (``ppo`` merged field by
        field, see :func:`~controllers.rl.configuration_rl.merge_ppo_layers`).

        Raises:
            ConfigError: ``budget`` is unknown.
        """
        preset = budget_preset(BUDGETS, budget, "RePPO experiment")
        return cls(**merge_ppo_layers(REPPO_PPO, preset, fields))


BUDGETS: dict[str, dict[str, Any]] = {
    "cpu": {"total_timesteps": 200_000},
    "smoke": {
        "ms": (1.0, 3.0),
        "seeds": 2,
        "total_timesteps": 256,
        "n_envs": 2,
        "ppo": replace(REPPO_PPO, n_steps=64, batch_size=64, n_epochs=1),
        "eval_episodes": 1,
        "max_episode_steps": 100,
        "last_episodes": 5,
    },
}
"""``cpu``: the defaults with 200k steps (3 envs x m in {1, 1.5, 3} x 3 seeds; 27 runs of 100-180 s
each measured on 2 shared CPU cores, 61 min); ``smoke``: seconds, for tests."""


def _state_key(env_id: str) -> Callable[[np.ndarray], bytes]:
    if env_id.startswith(MINATAR_PREFIX):
        return lambda obs: np.packbits(obs.astype(bool)).tobytes()
    return lambda obs: np.floor(np.asarray(obs[:2]) / REACH_CELL_M).astype(np.int16).tobytes()


def make_env(env_id: str, max_episode_steps: int = 1000) -> gym.Env[Any, Any]:
    """The discrete-action gymnasium env of ``env_id`` (``minatar:<game>`` or a built-in id)."""
    if env_id.startswith(MINATAR_PREFIX):
        return MinAtarEnv(env_id.removeprefix(MINATAR_PREFIX), max_episode_steps)
    return DiscreteReachEnv(env_id)


def build_model(env: Any, env_id: str, m: float, seed: int, cfg: RePPOExperimentConfig) -> Any:
    """PPO (m = 1, Q critic) or RePPO (m != 1) with the experiment's network and settings."""
    policy_kwargs: dict[str, Any] = {
        "net_arch": {"pi": [64, 64], "vf": [64, 64]},
        "activation_fn": torch.nn.Tanh,
    }
    if env_id.startswith(MINATAR_PREFIX):
        policy_kwargs["features_extractor_class"] = MinAtarCNN
    common: dict[str, Any] = {
        **cfg.ppo.sb3_kwargs(),
        "seed": seed,
        "device": "cpu",
        "verbose": 0,
        "policy_kwargs": policy_kwargs,
        **cfg.extra,
    }
    if m == 1.0:
        model = PPO(QActorCriticPolicy, env, **common)
    else:
        model = RePPO("MlpPolicy", env, m=m, **common)
    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


def evaluate_greedy(model: Any, env_id: str, cfg: RePPOExperimentConfig, seed0: int) -> list[float]:
    """Returns of ``cfg.eval_episodes`` greedy (argmax) episodes on env seeds from ``seed0``."""
    env = make_env(env_id, cfg.max_episode_steps)
    out = []
    for i in range(cfg.eval_episodes):
        obs, _ = env.reset(seed=seed0 + i)
        total, done = 0.0, False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, r, term, trunc, _ = env.step(int(action))
            total += float(r)
            done = term or trunc
        out.append(total)
    env.close()
    return out


def train_one(
    env_id: str, m: float, seed: int, cfg: RePPOExperimentConfig, save_to: Path | None = None
) -> dict[str, Any]:
    """Train one run; returns its returns, exploration counts and learning curve."""
    steps = [0]
    trackers: list[Tracker] = []

    def factory(rank: int) -> Callable[[], gym.Env[Any, Any]]:
        def _make() -> gym.Env[Any, Any]:
            tracker = Tracker(make_env(env_id, cfg.max_episode_steps), _state_key(env_id), steps)
            trackers.append(tracker)
            return tracker

        return _make

    venv = DummyVecEnv([factory(i) for i in range(cfg.n_envs)])
    model = build_model(venv, env_id, m, seed, cfg)
    t0 = time.perf_counter()
    model.learn(total_timesteps=cfg.total_timesteps, progress_bar=False)
    train_s = time.perf_counter() - t0
    episodes = sorted(e for t in trackers for e in t.episodes)
    states: set[bytes] = set().union(*(t.states for t in trackers))
    rets = [r for _, r in episodes]
    greedy = evaluate_greedy(model, env_id, cfg, seed0=10_000 + 100 * seed)
    if save_to is not None:
        model.save(save_to)
    venv.close()
    return {
        "env": env_id,
        "m": m,
        "seed": seed,
        "timesteps": int(model.num_timesteps),
        "train_seconds": round(train_s, 2),
        "greedy_return": float(np.mean(greedy)),
        "train_return_last": float(np.mean(rets[-cfg.last_episodes :])) if rets else 0.0,
        "max_train_return": float(max(rets)) if rets else 0.0,
        "distinct_states": len(states),
        "episodes": len(rets),
        "curve": [[int(s), float(r)] for s, r in episodes],
    }


METRICS = ("greedy_return", "train_return_last", "max_train_return", "distinct_states")


def aggregate(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{env: {m: {metric: {mean, std}, "n": seeds}}}`` over seeds."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for run in runs:
        cell = out.setdefault(run["env"], {}).setdefault(_label(run["m"]), {"_runs": []})
        cell["_runs"].append(run)
    for cells in out.values():
        for cell in cells.values():
            rs = cell.pop("_runs")
            cell.update({k: mean_std([r[k] for r in rs]) for k in METRICS})
            cell["n"] = len(rs)
    return out


def _label(m: float) -> str:
    return "PPO (m=1)" if m == 1.0 else f"RePPO m={m:g}"


def results_markdown(agg: dict[str, dict[str, dict[str, Any]]], cfg: RePPOExperimentConfig) -> str:
    """The results table (mean +- std over seeds)."""
    lines = [
        f"RePPO vs PPO, {cfg.total_timesteps} env steps per run, {cfg.seeds} seeds "
        f"(mean ± std over seeds), ent_coef {cfg.ppo.ent_coef}.",
        "",
        *markdown_table(
            [
                "env",
                "method",
                "greedy return",
                "last-episodes return",
                "best train return",
                "distinct states",
            ],
            [
                [
                    env_id,
                    label,
                    *(format_pm(c[k]) for k in METRICS[:3]),
                    format_pm(c["distinct_states"], 0),
                ]
                for env_id, cells in agg.items()
                for label, c in cells.items()
            ],
        ),
    ]
    return "\n".join(lines) + "\n"


def plot_curves(runs: Sequence[dict[str, Any]], cfg: RePPOExperimentConfig, path: Path) -> Path:
    """Training-episode return vs env steps (binned; mean +- std over seeds), one panel per env."""
    envs = list(dict.fromkeys(r["env"] for r in runs))
    fig, axes = plt.subplots(1, len(envs), figsize=(4.2 * len(envs), 3.4), squeeze=False)
    edges = np.linspace(0, cfg.total_timesteps, 11)
    centers = (edges[:-1] + edges[1:]) / 2
    for ax, env_id in zip(axes[0], envs, strict=True):
        for m in cfg.ms:
            per_seed = []
            for r in runs:
                if r["env"] != env_id or r["m"] != m:
                    continue
                c = np.asarray(r["curve"], dtype=float).reshape(-1, 2)
                idx = np.digitize(c[:, 0], edges[1:-1])
                per_seed.append(
                    [c[idx == i, 1].mean() if np.any(idx == i) else np.nan for i in range(10)]
                )
            a = np.asarray(per_seed, dtype=float)
            with warnings.catch_warnings():  # bins without a finished episode stay NaN
                warnings.simplefilter("ignore", RuntimeWarning)
                mean, std = np.nanmean(a, axis=0), np.nanstd(a, axis=0)
            ax.plot(centers, mean, label=_label(m))
            ax.fill_between(centers, mean - std, mean + std, alpha=0.2)
        ax.set_title(env_id, fontsize=9)
        ax.set_xlabel("env steps")
        ax.xaxis.set_major_formatter(EngFormatter())  # 50k, 100k: plain digits run together
        ax.set_ylabel("training episode return")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path)


def run_experiment(
    out: Path, cfg: RePPOExperimentConfig, log: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Every env x m x seed; writes ``results.json``, ``results.md``, ``curves.png`` in ``out``.

    Returns:
        ``{"config", "runs", "aggregate", "wall_seconds"}`` (what results.json holds).
    """
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    runs = []
    for env_id in cfg.envs:
        for m in cfg.ms:
            for seed in range(cfg.seeds):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)
                    run = train_one(env_id, m, seed, cfg)
                runs.append(run)
                if log is not None:
                    log(
                        f"{env_id} {_label(m)} seed {seed}: greedy {run['greedy_return']:.2f}, "
                        f"states {run['distinct_states']}, {run['train_seconds']:.0f} s"
                    )
    agg = aggregate(runs)
    summary = {
        "config": asdict(cfg),
        "runs": runs,
        "aggregate": agg,
        "wall_seconds": round(time.perf_counter() - t0, 1),
    }
    write_json(out / "results.json", json.loads(json.dumps(summary)))
    write_text(out / "results.md", results_markdown(agg, cfg))
    plot_curves(runs, cfg, out / "curves.png")
    return summary
