"""Choose a diffusion policy's checkpoint on development scenes, never on the benchmark's.

``train_pdp(..., snapshot_every_s=...)`` keeps the EMA policy every few minutes of training
wall time (``RUN/snapshots/step_<step>/``). :func:`select_snapshot` evaluates each snapshot on
*sampled* scenes (``EvalConfig(scenes="sampled")``: placements the simulator samples itself
from placement seeds ``seed + k``, none of LIBERO's 50 fixed init states), draws the learning
curve (development success against training wall time), and copies the best snapshot to
``RUN/best/``. The fixed init states of the benchmark are left for one final evaluation of
the chosen policy.

Resumable: each snapshot's evaluation is kept in ``RUN/selection/<snapshot>/results.json``
and not run again; snapshots added later (a resumed training) are evaluated on the next call.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from embodied.apps.evaluation import EvalConfig, PolicyLoader, evaluate
from embodied.apps.evaluation.stats import wilson_interval
from embodied.config import checked, validate
from embodied.errors import ConfigError
from embodied.io import read_json_file, write_json
from policies.diffusion.configuration_pdp import SNAPSHOT_JSON, SNAPSHOTS, PDPConfig

DEVELOPMENT_SEED = 900_000
"""Default first placement seed of the development scenes (training data: 1000+)."""


@dataclass
class SelectConfig:
    """Checkpoint selection of one training run on development scenes.

    Args:
        run: The training run folder (``embodied train pdp --out`` with
            ``--snapshot-every-s``).
        env: Env or suite id the scenes come from (a LIBERO suite: every task).
        episodes: Development episodes per task and snapshot.
        seed: First placement seed; episode k of a task uses ``seed + k`` (keep it apart from
            the placement seeds the training demonstrations were collected from).
        workers: Evaluation worker processes.
        env_kwargs: Family name -> env options (cameras, render size), as ``embodied eval``.
        max_steps: Step limit per episode; None: the env's protocol (LIBERO-Object: 280).
        min_step: Evaluate only snapshots from this training step on (the curve's earlier
            points are left out; a budget for long runs with many snapshots).
    """

    config_name: ClassVar[str] = "snapshot selection"

    run: str
    env: str = "libero:libero_object"
    episodes: int = checked(3, ge=1, fix="use e.g. 3")
    seed: int = checked(DEVELOPMENT_SEED, ge=0, fix=f"use {DEVELOPMENT_SEED}")
    workers: int = checked(1, ge=0, fix="use e.g. 1 (0 runs inline)")
    env_kwargs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    max_steps: int | None = checked(None, ge=1, fix="use a positive step limit, or None")
    min_step: int = checked(0, ge=0, fix="e.g. 40000")

    def __post_init__(self) -> None:
        validate(self)


def trained_env_kwargs(run: Path) -> dict[str, Any]:
    """The camera options of the env a visuomotor run trained on, from its ``config.json``
    (``vision``): its ``cameras`` and, for square frames, ``render_size`` (px); empty for a
    state-only run. Evaluating at another size is refused by the policy's processor."""
    fix = "pass a `train pdp --out` folder"
    raw = read_json_file(Path(run) / "config.json", what="training config", fix=fix)
    if raw.get("policy_type", "pdp") != "pdp":
        raise ConfigError(
            f"{run}/config.json is a {raw['policy_type']!r} checkpoint, not a PDP training run",
            fix=fix,
        )
    cfg = PDPConfig.from_dict(raw)
    cameras, (h, w) = cfg.vision.cameras, cfg.vision.image_shape
    if not cameras:
        return {}
    out: dict[str, Any] = {"cameras": tuple(cameras)}
    if h == w:
        out["render_size"] = int(h)
    return out


def snapshots(run: Path) -> list[tuple[Path, dict[str, Any]]]:
    """The run's complete snapshots (folder, ``snapshot.json``), by step."""
    folder = run / SNAPSHOTS
    if not folder.is_dir():
        raise ConfigError(
            f"{run} has no {SNAPSHOTS}/ folder",
            fix="train with `embodied train pdp ... --snapshot-every-s 600`",
        )
    found = []
    for snap in sorted(folder.glob("step_*")):
        meta = read_json_file(
            snap / SNAPSHOT_JSON, what="snapshot", fix="delete that snapshot folder"
        )
        found.append((snap, meta))
    if not found:
        raise ConfigError(f"{folder} holds no snapshot yet", fix="let training run longer")
    return found


def select_snapshot(
    config: SelectConfig, on_event: Callable[[str, dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """Evaluate every snapshot of ``config.run`` on development scenes; copy the best to
    ``run/best``; write ``run/selection/curve.json`` and ``curve.png``.

    The best snapshot has the highest development success; ties go to the later one.

    Returns:
        ``{"chosen": snapshot name, "curve": [{snapshot, step, train_seconds, successes, n,
        success_rate, ci_low, ci_high}, ...], "scenes": ...}``.
    """
    run = Path(config.run)
    sel = run / "selection"
    rows: list[dict[str, Any]] = []
    chosen_from = [(s, m) for s, m in snapshots(run) if int(m["step"]) >= config.min_step]
    if not chosen_from:
        raise ConfigError(
            f"{run} has no snapshot at or after step {config.min_step}",
            fix="lower --min-step, or let training run longer",
        )
    for snap, meta in chosen_from:
        out = sel / snap.name
        if (out / "results.json").exists():
            result = read_json_file(out / "results.json", what="evaluation", fix=f"delete {out}")
            groups = result["groups"]
        else:
            shutil.rmtree(out, ignore_errors=True)  # an evaluation killed before its results
            eval_config = EvalConfig(
                envs=config.env,
                episodes=config.episodes,
                workers=config.workers,
                out=out,
                seed=config.seed,
                scenes="sampled",
                env_kwargs=config.env_kwargs,
                max_steps=config.max_steps,
            )
            groups = [
                g.to_dict() for g in evaluate(eval_config, PolicyLoader(str(snap)), on_event).groups
            ]
        successes = sum(int(g["successes"]) for g in groups)
        n = sum(int(g["n"]) for g in groups)
        low, high = wilson_interval(successes, n)
        rows.append(
            {
                "snapshot": snap.name,
                "step": int(meta["step"]),
                "train_seconds": float(meta["train_seconds"]),
                "successes": successes,
                "n": n,
                "success_rate": successes / n if n else 0.0,
                "ci_low": low,
                "ci_high": high,
            }
        )
    best = max(rows, key=lambda r: (r["success_rate"], r["step"]))
    chosen = run / SNAPSHOTS / best["snapshot"]
    tmp = run / ".best.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(chosen, tmp)
    shutil.rmtree(run / "best", ignore_errors=True)
    tmp.rename(run / "best")
    summary: dict[str, Any] = {
        "chosen": best["snapshot"],
        "curve": rows,
        "scenes": {
            "env": config.env,
            "kind": "sampled",
            "episodes_per_task": config.episodes,
            "placement_seeds": [config.seed, config.seed + config.episodes - 1],
            "min_step": config.min_step,
        },
    }
    write_json(sel / "curve.json", summary)
    plot_curve(summary, sel / "curve.png")
    return summary


def plot_curve(summary: dict[str, Any], path: Path) -> None:
    """Development success (Wilson 95 % bars) against training wall time (min)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = summary["curve"]
    x = [r["train_seconds"] / 60.0 for r in rows]
    y = [100 * r["success_rate"] for r in rows]
    err = [
        [100 * (r["success_rate"] - r["ci_low"]) for r in rows],
        [100 * (r["ci_high"] - r["success_rate"]) for r in rows],
    ]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.errorbar(x, y, yerr=err, marker="o", capsize=3)
    ax.set_xlabel("training wall time (min)")
    ax.set_ylabel("development success (%)")
    ax.set_ylim(0, 100)
    scenes = summary["scenes"]
    ax.set_title(
        f"{scenes['env']}: {scenes['episodes_per_task']} sampled scenes per task",
        fontsize=9,
    )
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)
