"""Safe RL with a robust-MDP shield on ``mujoco:reach_around`` with a no-go zone.

The hazard: a no-go zone (a puddle) in front of the centre passage, the box
``x in [-0.06, 0.06] m, y in [-0.21, -0.15] m`` (:data:`ZONE_M`); the ball's centre entering it
is a violation and ends the episode. The straight route from the start region to the centre
passage crosses it, so a goal-progress reward pulls an unshielded agent into it.

The finite abstraction (why it is nearly Markov): the point mass has velocity actuators,
``m dv/dt = kv (u - v)``, so its *stopping point* ``z = p + tau v`` (``tau = m / kv = 0.05 s``)
integrates the command exactly, ``z' = z + u dt`` (MuJoCo's implicit integrator keeps this
identity per substep), whatever the velocity lag. The shield measures ``z``'s offset from the
zone grown by ``tau * v_max = 2.5 cm`` per axis (``ex``, ``ey``: 0 inside the grown box's span,
signed distance outside it), binned at one control step of motion (2.5 cm): 5 x 5 = 25
abstract states. Because ``|p - z| <= 2.5 cm`` per axis, ``z`` outside the grown box implies
``p`` outside the zone, so ``bad`` (both offsets 0) covers every real violation. Actions: stay
and +-x, +-y at 0.5 m/s (:data:`ACTION_VECTORS`), one 2.5 cm step of ``z``.

Arms, with the same budget of environment steps, seeds and network:

* ``ppo`` - stable-baselines3 PPO (discrete actions through the action set);
* ``shielded`` - sb3-contrib MaskablePPO with the shield's masks (and the shield enforced on
  every step). The shield's counts come from an exploration phase of uniformly random actions
  from random starts near the zone (counted in the budget; its violations are reported
  separately) and then online from the agent's own transitions, refreshed after every PPO
  rollout. The blocked share is recorded against the transitions seen.

Evaluation: deterministic policies on reset seeds from ``eval_seed0`` (training resets draw from
the env RNG seeded with the run seed, never from that range); the shielded arm keeps its
(frozen) shield. Results: ``results.json``, ``results.md``, ``blocked_vs_data.png``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, SupportsFloat

import gymnasium as gym
import numpy as np

from controllers.rl.configuration_rl import PPOSettings, merge_ppo_layers
from controllers.rl.training_rl import quiet_logger
from controllers.shield import ActionSet, BinSpec, RobustShield, ShieldConfig, ShieldFilter
from controllers.shield.shield import ShieldedEnv
from embodied.apps.lab.budgets import budget_preset
from embodied.apps.lab.stats import (
    format_pm,
    format_rate,
    markdown_table,
    mean_or_none,
    mean_std,
    rate,
    runs_by_arm,
)
from embodied.config import Rule, checked, validate
from embodied.io import atomic_path, write_json, write_text

ENV_ID = "mujoco:reach_around"
ZONE_M = ((-0.06, 0.06), (-0.21, -0.15))
"""The no-go zone: ((x_low, x_high), (y_low, y_high)) in m, for the ball's centre."""
TAU_S = 0.05
"""Velocity time constant of the point mass: mass 0.5 kg / actuator kv 10 N s/m."""
SPEED_MPS = 0.5
"""Speed of the moving actions (the actuators' limit), m/s."""
DT_S = 0.05
"""Control period of reach_around (20 Hz), s."""
STEP_M = SPEED_MPS * DT_S
"""How far the stopping point moves per control step of a moving action (2.5 cm)."""
MARGIN_M = TAU_S * SPEED_MPS
"""Largest ``|p - z|`` per axis (2.5 cm): the zone is grown by it for the stopping point."""
ACTION_VECTORS = (
    (0.0, 0.0),
    (SPEED_MPS, 0.0),
    (-SPEED_MPS, 0.0),
    (0.0, SPEED_MPS),
    (0.0, -SPEED_MPS),
)
"""The discrete actions (vx, vy) in m/s: stay, +x, -x, +y, -y."""
ACTION_NAMES = ("stay", "+x", "-x", "+y", "-y")
_ZERO_M = 1e-9
"""Half-width of the "inside the span" bin: offsets are exactly 0 there (clipping)."""
BINS = (
    BinSpec("ex", (-STEP_M, -_ZERO_M, _ZERO_M, STEP_M), "m"),
    BinSpec("ey", (-STEP_M, -_ZERO_M, _ZERO_M, STEP_M), "m"),
)
"""Offset bins per axis: far below, within one step below, inside the span, within one step
above, far above."""
PROGRESS_REWARD_PER_M = 10.0
SUCCESS_REWARD = 1.0
VIOLATION_PENALTY = 1.0
ARMS = ("ppo", "shielded")
SHIELD_PPO = PPOSettings(n_steps=1024)
"""PPO settings of both arms: rollouts of 1024 steps, otherwise stable-baselines3's defaults."""
EXPLORE_BAND_M = 2 * STEP_M
"""Exploration starts lie within this distance (m) of the grown zone: the abstract states next
to the zone are thin strips, so starting near them is what gives their pairs enough counts."""


def stopping_offsets(obs: Any) -> np.ndarray:
    """(ex, ey) in m: the stopping point's offset from the zone grown by :data:`MARGIN_M`.

    Args:
        obs: A reach_around observation: a mapping with ``"state"`` or the state vector
            itself (pos_x, pos_y, vel_x, vel_y, ... in m and m/s).

    Returns:
        Per axis 0 when the stopping point ``p + tau v`` lies within the grown box's span,
        else the signed distance to it (negative below / left of it).
    """
    state = obs["state"] if isinstance(obs, Mapping) else obs
    s = np.asarray(state, dtype=np.float64).reshape(-1)
    out = np.empty(2)
    for axis in range(2):
        z = s[axis] + TAU_S * s[axis + 2]
        low, high = ZONE_M[axis][0] - MARGIN_M, ZONE_M[axis][1] + MARGIN_M
        out[axis] = z - min(max(z, low), high)
    return out


def in_zone(position: Sequence[float] | np.ndarray) -> bool:
    """True when the ball's centre (x, y in m) is inside the no-go zone."""
    x, y = float(position[0]), float(position[1])
    return ZONE_M[0][0] <= x <= ZONE_M[0][1] and ZONE_M[1][0] <= y <= ZONE_M[1][1]


def _bad(cell: Any) -> bool:
    return bool(cell.bins["ex"] == 2 and cell.bins["ey"] == 2)  # both offsets 0: inside


def make_shield(horizon: int, risk_bound: float, delta: float) -> RobustShield:
    """An empty shield (no counts yet) of the stopping-point abstraction."""
    config = ShieldConfig(
        bins=BINS, horizon=horizon, risk_bound=risk_bound, delta=delta, automaton="builtin"
    )
    return RobustShield.create(
        config, {"bad": _bad}, ActionSet(ACTION_VECTORS), measure=stopping_offsets
    )


class HazardReachEnv(gym.Env[np.ndarray, np.int64]):
    """reach_around with the no-go zone as a gymnasium env (state observations, 5 actions).

    Reward per step: ``10 / m`` times the decrease of the goal distance, ``+1`` at success,
    ``-1`` on entering the zone. Success and violations end the episode (``terminated``); the
    task's 120-step horizon truncates it. ``info["violation"]`` and ``info["success"]`` tell.

    Args:
        start_near_zone: Reset the ball to a random start within :data:`EXPLORE_BAND_M` of
            the grown zone (exploration) instead of the task's start region.
        max_episode_steps: Horizon override in control steps (default: the task's 120).
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012

    def __init__(self, start_near_zone: bool = False, max_episode_steps: int | None = None) -> None:
        import sim.mujoco as mujoco_envs  # here: importing MuJoCo is slow

        super().__init__()
        self.inner = mujoco_envs.make("reach_around", max_episode_steps=max_episode_steps)
        self.observation_space = gym.spaces.Box(-2.0, 2.0, (8,), np.float32)
        self.action_space = gym.spaces.Discrete(len(ACTION_VECTORS))
        self.start_near_zone = start_near_zone
        self._dist = 0.0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """New episode; ``seed`` seeds the inner env (start and goal)."""
        super().reset(seed=seed)
        inner_seed = int(self.np_random.integers(0, 2**31 - 1))
        opts: dict[str, Any] = dict(options or {})
        if self.start_near_zone and "start" not in opts:
            opts["start"] = self._near_zone_start()
        obs, info = self.inner.reset(seed=inner_seed, options=opts or None)
        self._dist = float(info.get("goal_dist", np.hypot(*obs["state"][4:6])))
        return np.asarray(obs["state"], np.float32), {**info, "violation": False}

    def _near_zone_start(self) -> tuple[float, float]:
        (x0, x1), (y0, y1) = ZONE_M
        while True:  # rejection: at rest z = p, so a start outside the grown box is not bad
            pad = MARGIN_M + EXPLORE_BAND_M
            x = float(self.np_random.uniform(x0 - pad, x1 + pad))
            y = float(self.np_random.uniform(y0 - pad, y1 + pad))
            if not (x0 - MARGIN_M <= x <= x1 + MARGIN_M and y0 - MARGIN_M <= y <= y1 + MARGIN_M):
                return x, y

    def step(  # type: ignore[override]  # any int index, as SB3 and the wrapper pass it
        self, action: int | np.int64
    ) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        """Apply discrete action ``action`` (an index of :data:`ACTION_VECTORS`)."""
        vector = np.asarray(ACTION_VECTORS[int(action)], dtype=np.float64)
        obs, _, terminated, truncated, info = self.inner.step(vector)
        dist = float(info["goal_dist"])
        violation = in_zone(obs["state"][:2])
        success = bool(info.get("success", False))
        reward = PROGRESS_REWARD_PER_M * (self._dist - dist)
        reward += SUCCESS_REWARD * success - VIOLATION_PENALTY * violation
        self._dist = dist
        info = {**info, "violation": violation}
        done = bool(terminated or violation or success)
        return (
            np.asarray(obs["state"], np.float32),
            reward,
            done,
            bool(truncated and not done),
            info,
        )

    def close(self) -> None:
        """Close the inner env."""
        self.inner.close()
        super().close()


class ShieldedIndexEnv(ShieldedEnv):
    """:class:`ShieldedEnv` for a ``Discrete`` env whose shield acts on action *vectors*.

    The policy proposes an index; the shield snaps ``ACTION_VECTORS[index]`` (so the saved
    shield is in the env's action units, usable by ``embodied deploy``) and the env receives
    the index of the chosen vector. Counts masked actions per step for the blocked-share curve.
    """

    def __init__(self, env: gym.Env[Any, Any], shield_filter: ShieldFilter) -> None:
        super().__init__(env, shield_filter)
        self.masked = 0.0
        self.decisions = 0

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Shielded step of the action with index ``action``."""
        mask = self.shield_filter.shield.allowed()
        self.masked += float((~mask).mean())
        self.decisions += 1
        return super().step(self.shield_filter.shield.actions[int(action)])


@dataclass
class ShieldExperimentConfig:
    """The shield experiment (unshielded PPO vs shielded MaskablePPO on the hazard task).

    Args:
        seeds: Training seeds per arm.
        first_seed: First training seed (seeds first_seed .. first_seed + seeds - 1).
        timesteps: Environment steps per run, the shielded arm's exploration included.
        exploration_steps: Steps of random exploration near the zone that fill the shield's
            counts before the shielded arm trains (part of timesteps).
        exploration_episode_steps: Length of one exploration episode in control steps.
        ppo: PPO hyperparameters of both arms (the shield is refreshed after each rollout of
            ``ppo.n_steps``; ``ppo.batch_size <= ppo.n_steps``: one env).
        hidden: Hidden layer widths of the policy and value MLPs (tanh).
        eval_episodes: Evaluation episodes per run (deterministic policy).
        eval_seed0: First reset seed of the evaluation episodes (disjoint from training).
        horizon: Shield horizon H in control steps (1 suffices for this abstraction: "stay"
            keeps the stopping point where it is, so one-step safety can always be kept).
        risk_bound: Shield risk bound lambda (worst-case violation probability within H steps).
        delta: PAC confidence parameter (guarantee holds with probability >= 1 - delta).
        plots: Write blocked_vs_data.png.
    """

    config_name: ClassVar[str] = "shield experiment"

    seeds: int = checked(3, ge=1, fix="e.g. seeds=3")
    first_seed: int = checked(0, ge=0, fix="e.g. first_seed=0")
    timesteps: int = checked(150_000, ge=1, fix="e.g. timesteps=150000")
    exploration_steps: int = checked(60_000, ge=0, fix="e.g. exploration_steps=0")
    exploration_episode_steps: int = checked(10, ge=1, fix="e.g. exploration_episode_steps=10")
    ppo: PPOSettings = SHIELD_PPO
    hidden: tuple[int, ...] = checked((64, 64), ge=1, min_len=1, fix="e.g. 64,64")
    eval_episodes: int = checked(50, ge=1, fix="e.g. eval_episodes=50")
    eval_seed0: int = checked(
        100_000, ge=0, fix="use eval_seed0 >= first_seed + seeds, e.g. 100000"
    )
    horizon: int = 1
    risk_bound: float = 0.25
    delta: float = 0.05
    plots: bool = True

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "exploration_steps",
            lambda c: c.exploration_steps + c.ppo.n_steps <= c.timesteps,
            "leaves less than one PPO rollout (n_steps {ppo.n_steps}) of timesteps {timesteps}",
            "raise timesteps or lower exploration_steps",
        ),
        Rule(
            "ppo.batch_size",
            lambda c: c.ppo.batch_size <= c.ppo.n_steps,
            "> n_steps {ppo.n_steps}",
            "batch_size <= n_steps",
        ),
        Rule(
            "hidden",
            lambda c: all(isinstance(h, int) and not isinstance(h, bool) for h in c.hidden),
            "must be positive ints",
            "e.g. 64,64",
        ),
        Rule(
            "eval_seed0",
            lambda c: c.eval_seed0 >= c.first_seed + c.seeds,
            "overlaps the training seeds",
            "use eval_seed0 >= first_seed + seeds, e.g. 100000",
        ),
    )

    def __post_init__(self) -> None:
        self.hidden = tuple(self.hidden)
        validate(self)
        make_shield(self.horizon, self.risk_bound, self.delta)  # ShieldConfig validates these

    @classmethod
    def for_budget(cls, budget: str, **overrides: Any) -> ShieldExperimentConfig:
        """The :data:`BUDGETS` preset ``budget`` with ``overrides`` on top (``ppo``: a
        :class:`PPOSettings` or a mapping of some of its fields, merged field by field).

        Raises:
            ConfigError: ``budget`` is unknown.
        """
        preset = budget_preset(BUDGETS, budget, "shield experiment")
        return cls(**merge_ppo_layers(SHIELD_PPO, preset, overrides))


BUDGETS: dict[str, dict[str, Any]] = {
    "cpu": {},
    "smoke": {
        "seeds": 1,
        "timesteps": 8192,
        "exploration_steps": 6000,
        "ppo": replace(SHIELD_PPO, n_steps=512, n_epochs=2),
        "eval_episodes": 5,
        "plots": False,
    },
}
"""Budget presets: cpu (3 seeds x 2 arms, ~25 min on 2 shared CPU cores), smoke (a test, ~1 min)."""


# ---- runs ---------------------------------------------------------------------------------


def explore(
    shield: RobustShield,
    steps: int,
    episode_steps: int,
    seed: int,
    on_refresh: Callable[[], None] | None = None,
) -> dict[str, int]:
    """Fill ``shield``'s counts with uniformly random actions from random starts near the zone.

    With ``on_refresh``, the shield is refreshed and ``on_refresh()`` called after 1000, 2000,
    5000, 10000, ... transitions (the blocked-share curve as the data grows); refreshing draws
    no random numbers, so the run is the same with or without it.

    Returns:
        ``steps``, ``episodes`` and ``violations`` (episodes that entered the zone).
    """
    env = HazardReachEnv(start_near_zone=True, max_episode_steps=episode_steps)
    rng = np.random.default_rng(seed)
    marks = {m * 10**k for k in range(3, 9) for m in (1, 2, 5)} if on_refresh else set()
    done, episodes, violations = 0, 0, 0
    obs, _ = env.reset(seed=seed)
    state = shield.abstraction.state_of(obs)
    while done < steps:
        action = int(rng.integers(len(ACTION_VECTORS)))
        obs, _, terminated, truncated, info = env.step(action)
        nxt = shield.abstraction.state_of(obs)
        shield.observe(state, action, nxt)
        state, done = nxt, done + 1
        if done in marks and done < steps and on_refresh is not None:
            shield.refresh()
            on_refresh()
        if terminated or truncated:
            episodes += 1
            violations += int(info["violation"])
            obs, _ = env.reset()
            state = shield.abstraction.state_of(obs)
    env.close()
    shield.refresh()
    return {"steps": done, "episodes": episodes, "violations": violations}


def _ppo_kwargs(cfg: ShieldExperimentConfig, seed: int) -> dict[str, Any]:
    import torch

    return {
        **cfg.ppo.sb3_kwargs(),
        "seed": seed,
        "device": "cpu",
        "verbose": 0,
        "policy_kwargs": {
            "net_arch": {"pi": list(cfg.hidden), "vf": list(cfg.hidden)},
            "activation_fn": torch.nn.Tanh,
        },
    }


def _episode_counter() -> Any:
    """An SB3 callback counting finished training episodes and violations (and refreshing)."""
    from stable_baselines3.common.callbacks import BaseCallback

    class Counter(BaseCallback):  # type: ignore[misc]
        def __init__(self, on_rollout_end: Callable[[], None] | None = None) -> None:
            super().__init__()
            self.episodes = 0
            self.violations = 0
            self.violation_steps = 0
            self.returns: list[float] = []
            self._return = 0.0
            self._hook = on_rollout_end

        def _on_step(self) -> bool:
            info = self.locals["infos"][0]
            self._return += float(self.locals["rewards"][0])
            self.violation_steps += int(bool(info.get("violation", False)))
            if bool(self.locals["dones"][0]):
                self.episodes += 1
                self.violations += int(bool(info.get("violation", False)))
                self.returns.append(self._return)
                self._return = 0.0
            return True

        def _on_rollout_end(self) -> None:
            if self._hook is not None:
                self._hook()

    return Counter


def train_shielded(
    cfg: ShieldExperimentConfig, seed: int, log: Callable[[str], None] = print
) -> tuple[Any, RobustShield, dict[str, Any]]:
    """Explore, then train MaskablePPO with the shield's masks, learning counts online.

    Returns:
        The MaskablePPO model, the shield (counts of exploration and training) and the run's
        training record (violations, exploration, blocked-share curve).
    """
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.wrappers import ActionMasker

    t0 = time.perf_counter()
    shield = make_shield(cfg.horizon, cfg.risk_bound, cfg.delta)
    curve: list[dict[str, float]] = [_curve_point(shield, None)]
    exploration = explore(
        shield,
        cfg.exploration_steps,
        cfg.exploration_episode_steps,
        seed,
        on_refresh=lambda: curve.append(_curve_point(shield, None)),
    )
    curve.append(_curve_point(shield, None))
    log(f"shielded seed {seed}: explored {exploration}, blocked {curve[-1]['blocked']:.3f}")
    filt = ShieldFilter(shield, learn=True)
    wrapped = ShieldedIndexEnv(HazardReachEnv(), filt)
    env = ActionMasker(wrapped, lambda _env: filt.action_masks())

    def refresh() -> None:
        shield.refresh()
        masked = wrapped.masked / max(wrapped.decisions, 1)
        curve.append(_curve_point(shield, masked))
        wrapped.masked, wrapped.decisions = 0.0, 0

    counter = _episode_counter()(refresh)
    model = quiet_logger(MaskablePPO("MlpPolicy", env, **_ppo_kwargs(cfg, seed)))
    model.learn(total_timesteps=cfg.timesteps - exploration["steps"], callback=counter)
    env.close()
    record = _train_record(counter, t0, exploration)
    record.update(interventions=filt.interventions, curve=curve)
    return model, shield, record


def train_unshielded(
    cfg: ShieldExperimentConfig, seed: int, log: Callable[[str], None] = print
) -> tuple[Any, dict[str, Any]]:
    """Train plain SB3 PPO on the hazard task for the whole budget."""
    from stable_baselines3 import PPO

    t0 = time.perf_counter()
    env = HazardReachEnv()
    counter = _episode_counter()()
    model = quiet_logger(PPO("MlpPolicy", env, **_ppo_kwargs(cfg, seed)))
    model.learn(total_timesteps=cfg.timesteps, callback=counter)
    env.close()
    record = _train_record(counter, t0, {"steps": 0, "episodes": 0, "violations": 0})
    log(f"ppo seed {seed}: {counter.violations}/{counter.episodes} training episodes violated")
    return model, record


def _train_record(counter: Any, t0: float, exploration: dict[str, int]) -> dict[str, Any]:
    """The training record of one run from its episode counter and start time."""
    return {
        "train_episodes": counter.episodes,
        "train_violations": counter.violations,
        "train_violation_steps": counter.violation_steps,
        "train_return_last": mean_or_none(counter.returns[-20:]),
        "exploration": exploration,
        "train_seconds": round(time.perf_counter() - t0, 2),
    }


def _curve_point(shield: RobustShield, masked: float | None) -> dict[str, float]:
    point = {
        "transitions": float(shield.counts.counts.sum()),
        "blocked": shield.fraction_blocked(),
        "flagged": float(shield.fallback_table[shield._occupiable].mean()),
    }
    if masked is not None:
        point["masked_at_visited"] = masked
    return point


def evaluate(
    model: Any, cfg: ShieldExperimentConfig, shield: RobustShield | None
) -> dict[str, Any]:
    """Deterministic evaluation episodes on seeds ``eval_seed0 + i``; the shield (frozen) if given."""
    base = HazardReachEnv()
    filt = ShieldFilter(shield, learn=False) if shield is not None else None
    env: gym.Env[Any, Any] = ShieldedIndexEnv(base, filt) if filt is not None else base
    violations, successes, returns, lengths = 0, 0, [], []
    for i in range(cfg.eval_episodes):
        obs, _ = env.reset(seed=cfg.eval_seed0 + i)
        total, steps, done = 0.0, 0, False
        info: dict[str, Any] = {}
        while not done:
            if filt is not None:
                action, _ = model.predict(obs, deterministic=True, action_masks=filt.action_masks())
            else:
                action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, info = env.step(int(action))
            total += float(reward)
            steps += 1
            done = bool(terminated or truncated)
        violations += int(bool(info.get("violation", False)))
        successes += int(bool(info.get("success", False)))
        returns.append(total)
        lengths.append(steps)
    env.close()
    return {
        "eval_episodes": cfg.eval_episodes,
        "eval_violations": violations,
        "eval_successes": successes,
        "eval_return_mean": mean_or_none(returns),
        "eval_length_mean": mean_or_none(lengths),
        "eval_interventions": 0 if filt is None else filt.interventions,
    }


# ---- aggregate and report -----------------------------------------------------------------


def aggregate(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per arm: mean +- std over seeds and pooled Wilson 95 % intervals of evaluation rates."""
    out: dict[str, Any] = {}
    for arm, rs in runs_by_arm(runs, ARMS).items():
        n_eval = sum(r["eval_episodes"] for r in rs)
        n_train = sum(r["train_episodes"] for r in rs)
        out[arm] = {
            "seeds": len(rs),
            "train_violations": mean_std([r["train_violations"] for r in rs]),
            "train_violation_rate": rate(sum(r["train_violations"] for r in rs), n_train),
            "exploration_violations": mean_std([r["exploration"]["violations"] for r in rs]),
            "eval_violation_rate": rate(sum(r["eval_violations"] for r in rs), n_eval),
            "eval_success_rate": rate(sum(r["eval_successes"] for r in rs), n_eval),
            "eval_success_per_seed": mean_std(
                [r["eval_successes"] / r["eval_episodes"] for r in rs]
            ),
            "eval_return": mean_std([r["eval_return_mean"] for r in rs]),
            "final_blocked": mean_std([r["curve"][-1]["blocked"] for r in rs if r.get("curve")]),
            "train_seconds": mean_std([r["train_seconds"] for r in rs]),
        }
    return out


def results_markdown(summary: Mapping[str, Any]) -> str:
    """The results table (per arm) and the setting, as Markdown."""
    cfg = summary["config"]
    agg = summary["aggregate"]
    lines = [
        f"# Shield experiment on {ENV_ID} with a no-go zone",
        "",
        f"{cfg['seeds']} training seeds per arm, {cfg['timesteps']} env steps per run (shielded: "
        f"{cfg['exploration_steps']} of them random exploration), {cfg['eval_episodes']} "
        f"evaluation episodes per run (seeds from {cfg['eval_seed0']}). Shield: H = "
        f"{cfg['horizon']} steps, lambda = {cfg['risk_bound']}, delta = {cfg['delta']} "
        "(Weissman L1, union bound over pairs and sample sizes: anytime-valid for the "
        "adaptively collected counts). Rates pool the evaluation episodes of all seeds "
        "(Wilson 95 %); ± is the std over seeds.",
        "",
        *markdown_table(
            [
                "arm",
                "training violations (episodes, per seed)",
                "exploration violations",
                "eval violations [95 % CI]",
                "eval success [95 % CI]",
                "eval return",
                "final blocked share",
            ],
            [
                [
                    arm,
                    format_pm(a["train_violations"], 1),
                    format_pm(a["exploration_violations"], 1),
                    format_rate(a["eval_violation_rate"]),
                    format_rate(a["eval_success_rate"]),
                    format_pm(a["eval_return"]),
                    format_pm(a["final_blocked"], 3),
                ]
                for arm, a in agg.items()
            ],
        ),
    ]
    lines += ["", f"Wall time: {summary['wall_seconds']:.0f} s.", ""]
    return "\n".join(lines)


def plot_blocked(runs: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """Blocked share of (state, action) pairs vs transitions the shield has seen, per seed,
    with the share of flagged states (no action meets the bound, so the safest stay allowed)
    and of the actions masked at the states the agent visited."""
    from embodied.apps.plotting import plt, save_figure

    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    for r in runs:
        if r["arm"] != "shielded":
            continue
        xs = [max(p["transitions"], 1.0) for p in r["curve"]]
        (line,) = ax.plot(xs, [p["blocked"] for p in r["curve"]], label=f"seed {r['seed']} (pairs)")
        flagged = [p["flagged"] for p in r["curve"]]
        ax.plot(
            xs, flagged, ls=":", color=line.get_color(), label=f"seed {r['seed']} (flagged states)"
        )
        visited = [(x, p["masked_at_visited"]) for x, p in zip(xs, r["curve"], strict=True)
                   if "masked_at_visited" in p]  # fmt: skip
        if visited:
            ax.plot(*zip(*visited, strict=True), ls="--", label=f"seed {r['seed']} (visited)")
    ax.set_xscale("log")
    ax.set_xlabel("transitions seen by the shield")
    ax.set_ylabel("share")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return save_figure(fig, path, bbox_inches="tight")


def run_experiment(
    out: str | Path, cfg: ShieldExperimentConfig, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Both arms for every seed; writes results.json, results.md (and the plot) into ``out``."""
    import torch

    torch.set_num_threads(1)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    runs: list[dict[str, Any]] = []
    for seed in range(cfg.first_seed, cfg.first_seed + cfg.seeds):
        model, record = train_unshielded(cfg, seed, log)
        runs.append({"arm": "ppo", "seed": seed, **record, **evaluate(model, cfg, None)})
        model, shield, record = train_shielded(cfg, seed, log)
        runs.append({"arm": "shielded", "seed": seed, **record, **evaluate(model, cfg, shield)})
        log(f"seed {seed}: ppo eval violations {runs[-2]['eval_violations']}, shielded "
            f"{runs[-1]['eval_violations']} of {cfg.eval_episodes}")  # fmt: skip
    summary = {
        "env_id": ENV_ID,
        "zone_m": ZONE_M,
        "abstraction": {
            "measure": "stopping-point offset from the zone grown by tau*v_max (m)",
            "bins": [asdict(b) for b in BINS],
            "actions": dict(zip(ACTION_NAMES, ACTION_VECTORS, strict=True)),
            "shield_counts": "exploration phase (in the budget) + online from the agent's "
            "transitions, refreshed after every PPO rollout",
        },
        "config": asdict(cfg),
        "runs": runs,
        "aggregate": aggregate(runs),
        "wall_seconds": time.perf_counter() - t0,
    }
    write_json(out / "results.json", summary)
    write_text(out / "results.md", results_markdown(summary))
    if cfg.plots:
        plot_blocked(runs, out / "blocked_vs_data.png")
    return summary


def train_one(
    out: str | Path, cfg: ShieldExperimentConfig, seed: int, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Train one shielded MaskablePPO policy; save the shield and the policy weights in ``out``.

    Writes ``shield/`` (:meth:`RobustShield.save`), ``policy.safetensors`` (the SB3 policy's
    state dict; no pickle) and ``train.json`` (training record and evaluation).
    """
    import torch
    from safetensors.torch import save_file

    torch.set_num_threads(1)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model, shield, record = train_shielded(cfg, seed, log)
    shield.save(out / "shield")
    state = {k: v.detach().contiguous() for k, v in model.policy.state_dict().items()}
    with atomic_path(out / "policy.safetensors") as tmp:
        save_file(state, str(tmp))
    result = {
        "seed": seed,
        "config": asdict(cfg),
        "measure": f"{__name__}:stopping_offsets",
        **record,
        **evaluate(model, cfg, shield),
    }
    write_json(out / "train.json", result)
    return result
