"""Figures of the applications: the headless backend, chosen once, one atomic save, and the
plots the product draws (judge reliability, steered tracking, the reach_around arena).

Importing this module selects matplotlib's ``Agg`` backend (no display on CI or robots) before
``pyplot`` is imported anywhere; every plot of the applications imports ``plt`` from here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Rectangle

from embodied.errors import ConfigError
from embodied.io import atomic_path

if TYPE_CHECKING:
    from embodied.loop import Episode

__all__ = [
    "Box",
    "draw_arena",
    "obstacle_boxes",
    "plot_interpolation",
    "plot_reliability",
    "plot_tracking",
    "plt",
    "save_figure",
]


def save_figure(fig: Any, path: str | Path, *, dpi: int = 110, **savefig_kwargs: Any) -> Path:
    """Write ``fig`` to ``path`` atomically (format from the suffix, PNG by default), close it.

    Args:
        fig: A matplotlib figure.
        path: Output file; a reader never sees a half-written image.
        dpi: Resolution in dots per inch.
        **savefig_kwargs: More ``Figure.savefig`` options (e.g. ``bbox_inches="tight"``).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    """
    out = Path(path)
    with atomic_path(out) as tmp:
        fig.savefig(tmp, format=out.suffix.lstrip(".") or "png", dpi=dpi, **savefig_kwargs)
    plt.close(fig)
    return out


def plot_reliability(reports: dict[str, dict[str, Any]], path: str | Path, title: str) -> Path:
    """Reliability diagram of judges against the oracle, one curve per judge.

    Args:
        reports: Judge name -> :func:`embodied.rewards.calibration.judge_report` dict.
        path: Output image.
        title: Figure title (what was judged).

    Returns:
        ``path``.
    """
    fig, ax = plt.subplots(figsize=(5.0, 4.6))
    ax.plot([0, 1], [0, 1], color="0.6", lw=1, ls="--", label="perfectly calibrated")
    for name, rep in reports.items():
        bins = rep["reliability"]
        x = [b["mean_prob"] for b in bins]
        y = [b["frac_success"] for b in bins]
        sizes = [12 + 60 * b["count"] / max(rep["n"], 1) for b in bins]
        auc = rep["roc_auc"]
        label = f"{name} (AUC {auc:.2f}, ECE {rep['ece']:.2f})" if auc == auc else name
        (line,) = ax.plot(x, y, marker="", lw=1.2, label=label)
        ax.scatter(x, y, s=sizes, color=line.get_color(), zorder=3)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("judge's success probability (bin mean)")
    ax.set_ylabel("oracle success fraction")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    return save_figure(fig, path, bbox_inches="tight")


# ---- the reach_around arena (top view) -----------------------------------------------------

ARENA_VIEW_M = 0.4
"""Half width (m) of the top-view axes: the reach_around arena is |x|, |y| <= 0.40 m."""
OBSTACLE_PREFIX = "obstacle_"
"""Name prefix of the obstacle geoms in ``reach_around.xml`` (``obstacle_left/right``)."""


@dataclass(frozen=True)
class Box:
    """An axis-aligned rectangle of the top view (x, y in m), e.g. an obstacle geom."""

    name: str
    x_min: float
    y_min: float
    x_max: float
    y_max: float


def obstacle_boxes(model: Any, prefix: str = OBSTACLE_PREFIX) -> list[Box]:
    """Top-view boxes of the geoms named ``prefix*`` in a MuJoCo model: ``geom_pos +- geom_size``.

    Args:
        model: ``mujoco.MjModel`` of the task (e.g. ``env.unwrapped.model``).
        prefix: Geom name prefix of the boxes wanted.

    Raises:
        ConfigError: No geom has that prefix, or one is rotated (not axis-aligned).
    """
    boxes = []
    for i in range(int(model.ngeom)):
        name = str(model.geom(i).name)
        if not name.startswith(prefix):
            continue
        if not np.allclose(model.geom_quat[i], (1.0, 0.0, 0.0, 0.0)):
            raise ConfigError(
                f"geom {name!r} is rotated (quat {model.geom_quat[i].tolist()})",
                fix="draw only axis-aligned box geoms",
            )
        (x, y), (hx, hy) = model.geom_pos[i, :2], model.geom_size[i, :2]
        boxes.append(Box(name, float(x - hx), float(y - hy), float(x + hx), float(y + hy)))
    if not boxes:
        raise ConfigError(
            f"the MuJoCo model has no geom named {prefix}*",
            fix="pass the reach_around env's model (env.unwrapped.model)",
        )
    return boxes


def draw_arena(ax: Any, boxes: Sequence[Box]) -> None:
    """Draw the reach_around arena's top view on ``ax``: ``boxes`` (obstacles), axes in m."""
    for b in boxes:
        ax.add_patch(
            Rectangle((b.x_min, b.y_min), b.x_max - b.x_min, b.y_max - b.y_min, color="0.3")
        )
    ax.set_xlim(-ARENA_VIEW_M, ARENA_VIEW_M)
    ax.set_ylim(-ARENA_VIEW_M, ARENA_VIEW_M)
    ax.set_aspect("equal")
    ax.set_xlabel("x (m)")
    ax.set_ylabel("y (m)")


def plot_interpolation(
    path: str | Path,
    alphas: Sequence[float] | np.ndarray,
    rows: Sequence[Mapping[str, Any]],
    ends: tuple[str, str],
    boxes: Sequence[Box],
) -> Path:
    """Trajectories at z = (1 - a) z_start + a z_end over the arena and its obstacles.

    Args:
        path: PNG written.
        alphas: Interpolation weight a of each rollout.
        rows: Rollout rows (``path`` (T, 2) in m, ``route``, ``success``), one per alpha.
        ends: Names of the start and end latents (route names).
        boxes: Obstacles drawn (:func:`obstacle_boxes` of the task's model).
    """
    fig, ax = plt.subplots(figsize=(5.5, 5.5))
    draw_arena(ax, boxes)
    cmap = plt.get_cmap("coolwarm")
    for a, r in zip(alphas, rows, strict=True):
        p = r["path"]
        ax.plot(
            p[:, 0],
            p[:, 1],
            color=cmap(a),
            lw=2,
            label=f"a={a:.2f} {r['route']}{'' if r['success'] else ' (fail)'}",
        )
    ax.set_title(f"z = (1-a) z_{ends[0]} + a z_{ends[1]}")
    ax.legend(fontsize=7, loc="lower left")
    return save_figure(fig, Path(path), bbox_inches="tight")


def plot_tracking(
    runs: Mapping[str, Episode],
    path: str | os.PathLike[str],
    *,
    knob: str = "alpha",
    title: str = "",
    units: str = "m/s",
    concept: str = "ee_speed",
) -> Path:
    """Save a two-panel PNG: measured concept with setpoint (top), knob value (bottom).

    Args:
        runs: Label -> episode (e.g. ``{"no control": ep0, "PID": ep1}``).
        path: Output file (``.png``), written atomically.
        knob: Knob plotted in the lower panel (first element for vector knobs).
        title: Figure title.
        units: Concept units for the axis label.
        concept: Concept name for the axis label.
    """
    if not runs:
        raise ConfigError("plot_tracking needs at least one episode")
    fig, (ax_c, ax_k) = plt.subplots(2, 1, figsize=(7.5, 5.5), sharex=True)
    setpoint_drawn = False
    for label, ep in runs.items():
        rate = float(ep.meta.get("control_rate_hz") or 1.0)
        t = np.arange(len(ep)) / rate
        (line,) = ax_c.plot(t, ep.measurements, label=label)
        if not setpoint_drawn and np.isfinite(ep.setpoints).any():
            ax_c.plot(t, ep.setpoints, "k--", lw=1.2, label="setpoint")
            setpoint_drawn = True
        if knob in ep.knobs:
            ax_k.plot(t, ep.knobs[knob][:, 0], color=line.get_color(), label=label)
        if ep.success_step >= 0:
            ax_c.axvline(ep.success_step / rate, color=line.get_color(), ls=":", lw=0.8)
    ax_c.set_ylabel(f"{concept} [{units}]")
    ax_k.set_ylabel(knob)
    ax_k.set_xlabel("time [s]")
    ax_c.legend(loc="best", fontsize=8)
    ax_c.grid(alpha=0.3)
    ax_k.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out = Path(path)
    save_figure(fig, out)
    return out
