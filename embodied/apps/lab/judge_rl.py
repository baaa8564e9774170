"""RL on judge rewards: does a reward judge train a policy the simulator calls successful?

SB3 PPO on a built-in task's state observations, with the success reward coming from one of
three sources (the arms), everything else the same (network, PPO settings, env-step budget,
training seeds):

* ``oracle``: the simulator's success check (the env's own sparse reward, 1 on success).
* ``judge``: the reward judge on the rendered camera frames with the generic instruction
  Demo2Reward starts from (:data:`~embodied.rewards.demo2reward.DEFAULT_TEMPLATE` around the
  task; ``JudgeReward``: reward 1 when the judge's probability reaches its calibrated
  threshold).
* ``judge_d2r``: the same judge with the instruction Demo2Reward froze for it
  (``instruction.json`` from ``embodied lab reward optimize``). Where Demo2Reward kept the generic
  instruction, this arm's runs would repeat the ``judge`` arm's exactly (same seeds, same
  deterministic judge); they are then copied from it and marked ``same_as``, not retrained.

Each arm's episode ends when its own success signal fires (the judge arms never see the
simulator's success; their env keeps running on it) or at the task's horizon. The policy sees
only the state vector. The reward is sparse in every arm (no shaping). Evaluation is by the
simulator oracle: deterministic episodes on reset seeds disjoint from training (training resets
draw from the env's RNG seeded by the training seed; evaluation uses explicit seeds from
``eval_seed0``). During training the judge arms also count how often the judge's reward
disagreed with the simulator on the states the learner visited (reward hacking shows here).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from controllers.rl.configuration_rl import PPOSettings
from controllers.rl.training_rl import quiet_logger
from embodied.apps.lab.stats import (
    format_pm,
    format_rate,
    markdown_table,
    mean_std,
    rate,
    runs_by_arm,
)
from embodied.config import Rule, checked, validate
from embodied.errors import ConfigError
from embodied.io import atomic_path, write_json, write_text

ARMS = ("oracle", "judge", "judge_d2r")
"""Reward sources, in table order."""
JUDGE_RL_PPO = PPOSettings(n_steps=256, batch_size=256)
"""PPO settings of every arm: rollouts of 256 steps per env, minibatches of 256, otherwise
stable-baselines3's defaults."""


@dataclass(frozen=True)
class JudgeRLConfig:
    """One RL-on-judge-rewards experiment (the options of ``embodied lab reward rl``).

    Args:
        env: Built-in task (a camera task whose info reports ``success``).
        judge: Judge spec for the judge arms (see ``embodied judge``).
        d2r_instruction: ``instruction.json`` (or its folder) from ``embodied lab reward optimize``
            for this judge and task: the ``judge_d2r`` arm's instruction template.
        arms: Comma-separated arms to run (``oracle``, ``judge``, ``judge_d2r``).
        seeds: Training seeds per arm (0, 1, ...; plus ``first_seed``).
        first_seed: First training seed.
        timesteps: Env steps per training run (the same for every arm).
        n_envs: Parallel training envs (one process; the judge scores them in turn).
        ppo: PPO hyperparameters (``ppo.n_steps`` per env).
        eval_episodes: Deterministic evaluation episodes per run.
        eval_seed0: First evaluation reset seed.
        image_size: Camera side in pixels for the judge (default: the task's).
        save_policies: Save each run's policy as ``policies/<arm>_seed<k>.safetensors``.
    """

    env: str = "mujoco:reach_around"
    judge: str = "minijudge"
    d2r_instruction: str = ""
    arms: str = ",".join(ARMS)
    config_name: ClassVar[str] = "judge RL"

    seeds: int = checked(3, ge=1, fix="set seeds to 1 or more")
    first_seed: int = checked(0, ge=0, fix="set first_seed to 0 or more")
    timesteps: int = checked(100_000, ge=1, fix="set timesteps to 1 or more")
    n_envs: int = checked(4, ge=1, fix="set n_envs to 1 or more")
    ppo: PPOSettings = JUDGE_RL_PPO
    eval_episodes: int = checked(50, ge=1, fix="set eval_episodes to 1 or more")
    eval_seed0: int = checked(100_000, ge=0, fix="set eval_seed0 to 0 or more")
    image_size: int = checked(0, ge=0, fix="set image_size to 0 (the task's) or more")
    save_policies: bool = True

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "arms",
            lambda c: bool(c.arm_list) and all(a in ARMS for a in c.arm_list),
            lambda c: (
                f"names unknown arms {[a for a in c.arm_list if a not in ARMS] or 'none given'}"
            ),
            f"use some of {ARMS}",
        ),
        Rule(
            "d2r_instruction",
            lambda c: "judge_d2r" not in c.arm_list or bool(c.d2r_instruction),
            "is empty but arms include judge_d2r",
            lambda c: (
                "pass the instruction.json of `embodied lab reward optimize --judge "
                f"{c.judge}` on {c.env} demonstrations, or drop judge_d2r from arms"
            ),
        ),
        Rule(
            "eval_seed0",
            lambda c: c.eval_seed0 >= c.first_seed + c.seeds,
            lambda c: f"overlaps the training seeds {c.first_seed}..{c.first_seed + c.seeds - 1}",
            "keep eval_seed0 far above the training seeds, e.g. 100000",
        ),
    )

    def __post_init__(self) -> None:
        validate(self)

    @property
    def arm_list(self) -> list[str]:
        """The arms to run, in table order."""
        given = {a.strip() for a in self.arms.split(",") if a.strip()}
        return [a for a in ARMS if a in given] + sorted(given - set(ARMS))


BUDGETS: dict[str, dict[str, Any]] = {
    "cpu": {"seeds": 3, "timesteps": 100_000, "eval_episodes": 50},
    "smoke": {"seeds": 1, "timesteps": 512, "eval_episodes": 2, "n_envs": 2,
              "ppo": replace(JUDGE_RL_PPO, n_steps=128, batch_size=64)},
}  # fmt: skip
"""Presets: ``cpu`` (3 seeds x 3 arms x 100k env steps, about 40 min on 2 shared cores for
reach_around, most of it rendering and judging) and ``smoke`` (seconds)."""


class StateObservation(gym.Wrapper):  # type: ignore[type-arg]
    """The env's ``state`` vector as the observation (the policy never sees the camera)."""

    def __init__(self, env: gym.Env) -> None:  # type: ignore[type-arg]
        super().__init__(env)
        self.observation_space = env.observation_space["state"]  # type: ignore[index]

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        return obs["state"], info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs["state"], reward, terminated, truncated, info


def load_arm_judge(cfg: JudgeRLConfig) -> Any:
    """The judge of the judge arms (loaded once per experiment)."""
    from embodied.rewards import load_judge

    return load_judge(cfg.judge, device="cpu")


def arm_template(cfg: JudgeRLConfig, arm: str) -> str | None:
    """The instruction template of ``arm`` (None: the oracle arm has none)."""
    from embodied.rewards.demo2reward import DEFAULT_TEMPLATE
    from embodied.rewards.demo2reward.optimization import load_instruction

    if arm == "oracle":
        return None
    return load_instruction(cfg.d2r_instruction) if arm == "judge_d2r" else DEFAULT_TEMPLATE


def make_train_env(cfg: JudgeRLConfig, arm: str, judge: Any) -> gym.Env:  # type: ignore[type-arg]
    """One training env of ``arm``: its reward and episode end come from the arm's source."""
    import sim
    from embodied.rewards.wrappers import JudgeReward

    size = {"image_size": cfg.image_size} if cfg.image_size else {}
    if arm == "oracle":
        env = sim.make(cfg.env, camera=False, terminate_on_success=True)
        return StateObservation(env)
    env = sim.make(cfg.env, camera=True, terminate_on_success=False, **size)
    wrapped = JudgeReward(env, judge, template=arm_template(cfg, arm), terminate_on_success=True)
    return StateObservation(wrapped)


def _counter() -> Any:
    """An SB3 callback counting training episodes and, per judged success, the oracle's view."""
    from stable_baselines3.common.callbacks import BaseCallback

    class Counter(BaseCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.episodes = 0
            self.rewarded = 0  # episodes ended by the arm's own success signal
            self.false_rewards = 0  # judged success at a step the simulator called failure

        def _on_step(self) -> bool:
            for info, done, reward in zip(
                self.locals["infos"], self.locals["dones"], self.locals["rewards"], strict=True
            ):
                if info.get("judge_success") and not info.get("success", False):
                    self.false_rewards += 1
                if done:
                    self.episodes += 1
                    self.rewarded += int(float(reward) > 0)
            return True

    return Counter


def train_arm(cfg: JudgeRLConfig, arm: str, seed: int, judge: Any) -> tuple[Any, dict[str, Any]]:
    """Train PPO for one arm and seed; returns the model and its training record."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    venv = make_vec_env(lambda: make_train_env(cfg, arm, judge), n_envs=cfg.n_envs, seed=seed)
    model = quiet_logger(
        PPO(
            "MlpPolicy",
            venv,
            **cfg.ppo.sb3_kwargs(),
            seed=seed,
            device="cpu",
            verbose=0,
        )
    )
    counter = _counter()()
    model.learn(cfg.timesteps, callback=counter)
    venv.close()
    record = {
        "train_steps": int(model.num_timesteps),
        "train_episodes": counter.episodes,
        "train_rewarded_episodes": counter.rewarded,
        "train_false_reward_steps": counter.false_rewards,
        "train_seconds": round(time.perf_counter() - t0, 1),
    }
    return model, record


def evaluate(model: Any, cfg: JudgeRLConfig) -> dict[str, Any]:
    """Deterministic episodes on seeds ``eval_seed0 + i``, success by the simulator."""
    import sim

    env = StateObservation(sim.make(cfg.env, camera=False, terminate_on_success=True))
    successes, lengths = 0, []
    for i in range(cfg.eval_episodes):
        obs, _ = env.reset(seed=cfg.eval_seed0 + i)
        info: dict[str, Any] = {}
        steps, done = 0, False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, _, terminated, truncated, info = env.step(action)
            steps += 1
            done = bool(terminated or truncated)
        successes += int(bool(info.get("success", False)))
        lengths.append(steps)
    env.close()
    return {
        "eval_episodes": cfg.eval_episodes,
        "eval_successes": successes,
        "eval_length_mean": float(np.mean(lengths)),
    }


def save_policy(model: Any, path: Path) -> None:
    """The SB3 policy's state dict as safetensors (no pickle)."""
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in model.policy.state_dict().items()}
    with atomic_path(path) as tmp:
        save_file(state, str(tmp))


def aggregate(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per arm: pooled Wilson 95 % success over all evaluation episodes, mean +- std over seeds."""
    out: dict[str, Any] = {}
    for arm, rs in runs_by_arm(runs, ARMS).items():
        out[arm] = {
            "seeds": len(rs),
            "eval_success_rate": rate(
                sum(r["eval_successes"] for r in rs), sum(r["eval_episodes"] for r in rs)
            ),
            "eval_success_per_seed": mean_std(
                [r["eval_successes"] / r["eval_episodes"] for r in rs]
            ),
            "train_rewarded_share": mean_std(
                [r["train_rewarded_episodes"] / max(1, r["train_episodes"]) for r in rs]
            ),
            "train_false_reward_steps": mean_std([r["train_false_reward_steps"] for r in rs]),
            "train_seconds": mean_std([r["train_seconds"] for r in rs]),
        }
    return out


def results_markdown(summary: Mapping[str, Any]) -> str:
    """The results table (per arm) and the setting, as Markdown."""
    cfg = summary["config"]
    lines = [
        f"# RL on judge rewards: SB3 PPO on {cfg['env']} (state observations)",
        "",
        f"{cfg['seeds']} training seeds per arm, {cfg['timesteps']} env steps per run, sparse "
        f"reward from the arm's success signal; {cfg['eval_episodes']} deterministic evaluation "
        f"episodes per run on reset seeds from {cfg['eval_seed0']}, success by the simulator. "
        f"Judge: `{cfg['judge']}` at its calibrated threshold. Instructions ({{task}}: the "
        f"episode's own): judge = {summary['instructions'].get('judge')!r}, judge_d2r = "
        f"{summary['instructions'].get('judge_d2r')!r}. Success pools the evaluation episodes "
        "of all seeds (Wilson 95 %); ± is the std over seeds.",
        "",
    ]
    rows = []
    for arm, a in summary["aggregate"].items():
        same = {r.get("same_as") for r in summary["runs"] if r["arm"] == arm} - {None}
        label = f"{arm} (instruction = {', '.join(sorted(same))}'s: its runs)" if same else arm
        rows.append(
            [
                label,
                format_rate(a["eval_success_rate"]),
                format_pm(a["eval_success_per_seed"]),
                format_pm(a["train_rewarded_share"]),
                format_pm(a["train_false_reward_steps"], 0),
                format_pm(a["train_seconds"], 0),
            ]
        )
    header = [
        "arm",
        "eval success (oracle) [95 % CI]",
        "per seed",
        "training episodes ended by the arm's reward",
        "judged-success steps the simulator calls failure",
        "train s",
    ]
    lines += markdown_table(header, rows)
    lines += ["", f"Wall time: {summary['wall_seconds']:.0f} s.", ""]
    return "\n".join(lines)


def _run_one(
    cfg: JudgeRLConfig, arm: str, seed: int, out: str, judge: Any = None
) -> dict[str, Any]:
    """Train and evaluate one (arm, seed); save its policy. Runs in a worker process too."""
    if judge is None and arm != "oracle":
        judge = load_arm_judge(cfg)
    model, record = train_arm(cfg, arm, seed, judge)
    run = {"arm": arm, "seed": seed, **record, **evaluate(model, cfg)}
    if cfg.save_policies:
        save_policy(model, Path(out) / "policies" / f"{arm}_seed{seed}.safetensors")
    return run


def run_experiment(
    out: str | Path, cfg: JudgeRLConfig, log: Callable[[str], None] = print, workers: int = 1
) -> dict[str, Any]:
    """Every arm for every seed; writes ``results.json`` and ``results.md`` into ``out``.

    Results are written after every run, so an interrupted experiment keeps what it finished
    and a rerun into the same folder skips the runs already there. ``workers`` > 1 trains that
    many runs at once in separate processes (each loads its own judge); results do not depend
    on it.
    """
    if workers < 1:
        raise ConfigError(f"workers {workers!r} must be >= 1", fix="e.g. workers=2")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    # templates: {task} is each episode's own instruction
    instructions = {arm: arm_template(cfg, arm) for arm in cfg.arm_list}
    config = asdict(cfg)  # nested settings (ppo) as JSON objects, as results.json holds them
    runs: list[dict[str, Any]] = []
    previous = out / "results.json"
    if previous.exists():
        from embodied.io import read_json_file

        old = read_json_file(previous, what="judge RL results", fix="move the folder away")
        if old.get("config") == config:
            runs = list(old.get("runs", []))
    # an arm whose instruction an earlier judge arm already has repeats that arm's runs
    twin_of = {
        arm: next(
            (a for a in cfg.arm_list[:k] if a != "oracle" and instructions[a] == instructions[arm]),
            None,
        )
        for k, arm in enumerate(cfg.arm_list)
        if arm != "oracle"
    }
    todo = [
        (arm, seed)
        for seed in range(cfg.first_seed, cfg.first_seed + cfg.seeds)
        for arm in cfg.arm_list
        if twin_of.get(arm) is None and not any(r["arm"] == arm and r["seed"] == seed for r in runs)
    ]

    def finished(run: dict[str, Any]) -> None:
        runs.append(run)
        log(
            f"{run['arm']} seed {run['seed']}: eval success {run['eval_successes']}/"
            f"{run['eval_episodes']} ({run['train_seconds']:.0f} s training)"
        )
        _write(out, cfg, config, runs, instructions, t0)

    if workers == 1 or len(todo) <= 1:
        judge = load_arm_judge(cfg) if any(arm != "oracle" for arm, _ in todo) else None
        for arm, seed in todo:
            finished(_run_one(cfg, arm, seed, str(out), judge))
    else:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed

        # spawn: a forked worker would inherit torch's threads and the parent's GL state
        with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
            futures = [pool.submit(_run_one, cfg, arm, seed, str(out)) for arm, seed in todo]
            for future in as_completed(futures):
                finished(future.result())
    for arm, twin in twin_of.items():
        for seed in range(cfg.first_seed, cfg.first_seed + cfg.seeds):
            have = any(r["arm"] == arm and r["seed"] == seed for r in runs)
            source = next((r for r in runs if r["arm"] == twin and r["seed"] == seed), None)
            if twin is not None and not have and source is not None:
                runs.append({**source, "arm": arm, "same_as": twin})
    order = {arm: k for k, arm in enumerate(cfg.arm_list)}
    runs.sort(key=lambda r: (r["seed"], order.get(r["arm"], len(order))))
    return _write(out, cfg, config, runs, instructions, t0)


def _write(
    out: Path,
    cfg: JudgeRLConfig,
    config: dict[str, Any],
    runs: list[dict[str, Any]],
    instructions: dict[str, Any],
    t0: float,
) -> dict[str, Any]:
    summary = {
        "config": config,
        "instructions": instructions,
        "reward": "sparse: 1 on the step the arm's success signal fires (episode ends), else 0",
        "runs": runs,
        "aggregate": aggregate(runs),
        "wall_seconds": time.perf_counter() - t0,
    }
    write_json(out / "results.json", summary)
    write_text(out / "results.md", results_markdown(summary))
    return summary
