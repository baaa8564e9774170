"""Closed-loop steering on the built-in task: no control vs fixed alpha vs PID (vs RL).

``embodied lab steer reference --out runs/ctrl_reference [--rl runs/rl_speed] [--train-rl 20000]``
(:func:`run`) writes ``tracking.png`` (ee_speed and alpha_t over time) and ``table.json`` (RMSE,
rise time, overshoot, settling time, success per controller).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import controllers
from controllers.analysis import step_response, tracking_rmse
from embodied.apps.plotting import plot_tracking
from embodied.apps.reference_task import (
    REFERENCE_PID,
    STEP_HIGH_MPS,
    STEP_LOW_MPS,
    STEP_TIME_S,
    reference_task,
    step_setpoint,
    train_on_reference_task,
)
from embodied.errors import ConfigError
from embodied.io import write_json
from embodied.loop import Episode, Steering, rollout


def compare(
    out_dir: str | os.PathLike[str], rl_path: str | None = None, seeds: int = 5
) -> dict[str, dict[str, float | None]]:
    """Run every controller on the setpoint step over ``seeds`` episodes; write table + figure."""
    task = reference_task(camera=False)
    candidates: dict[str, Callable[[], Any]] = {
        "no control (alpha=0)": lambda: None,
        "fixed alpha=0.5": lambda: controllers.make("fixed", value=0.5),
        "PID": lambda: controllers.make("pid", **REFERENCE_PID),
    }
    if rl_path:
        candidates["RL (PPO)"] = lambda: controllers.make("rl", path=rl_path)
    table: dict[str, dict[str, float | None]] = {}
    first: dict[str, Episode] = {}
    for label, build in candidates.items():
        rows = []
        for seed in range(seeds):
            ep = rollout(
                task.env, task.policy, seed=seed, record_images=False,
                steering=Steering(task.concept, build(), task.knob, step_setpoint()),
            )  # fmt: skip
            first.setdefault(label, ep)
            t = np.arange(len(ep)) * task.env.dt
            try:
                r = step_response(
                    t, ep.measurements, STEP_HIGH_MPS, step_time=STEP_TIME_S, initial=STEP_LOW_MPS
                )
                figures = [r.rise_time_s, r.overshoot_pct, r.settling_time_s]
            except ConfigError:  # the episode ended (success) before the step
                figures = [math.nan] * 3
            rows.append(
                [tracking_rmse(ep.measurements, ep.setpoints, skip=5), *figures,
                 float(ep.success)]
            )  # fmt: skip
        arr = np.asarray(rows, dtype=np.float64)
        names = ("rmse_mps", "rise_time_s", "overshoot_pct", "settling_time_s", "success_rate")
        table[label] = {
            n: (None if np.isnan(arr[:, i]).all() else float(np.nanmean(arr[:, i])))
            for i, n in enumerate(names)
        }
    out = Path(out_dir)
    write_json(out / "table.json", table)
    plot_tracking(
        first, out / "tracking.png",
        title=f"arm_reach ee_speed step {STEP_LOW_MPS} -> {STEP_HIGH_MPS} m/s at {STEP_TIME_S} s",
    )  # fmt: skip
    return table


def run(
    out: str | os.PathLike[str],
    rl_path: str | os.PathLike[str] | None = None,
    train_rl_steps: int = 0,
    seeds: int = 5,
) -> dict[str, dict[str, Any]]:
    """Compare the controllers on the reference task (optionally training RL first).

    Args:
        out: Output folder (``table.json``, ``tracking.png``, the trained RL controller).
        rl_path: Folder of a trained RL controller to include.
        train_rl_steps: Train an RL controller for this many PPO steps first (0: no).
        seeds: Episodes per controller.

    Returns:
        Controller label -> its row of :func:`compare`.
    """
    if train_rl_steps:
        rl_path = str(Path(out) / "rl_controller")
        train_on_reference_task(train_rl_steps, save_to=rl_path)
    return compare(out, rl_path=None if rl_path is None else str(rl_path), seeds=seeds)


def format_table(table: dict[str, dict[str, Any]]) -> str:
    """The comparison as fixed-width text, one controller per line."""
    width = max(len(k) for k in table)
    lines = [f"{'controller':{width}s}  rmse[m/s]  rise[s]  overshoot[%]  settle[s]  success"]
    for label, row in table.items():
        cells = [row[k] for k in ("rmse_mps", "rise_time_s", "overshoot_pct", "settling_time_s")]
        text = "  ".join("    n/a  " if v is None else f"{v:9.4f}" for v in cells)
        lines.append(f"{label:{width}s}  {text}  {row['success_rate']:.2f}")
    return "\n".join(lines)
