"""PNG plots of the PDP evaluation (matplotlib, Agg backend).

The plots only draw what they are given: demonstration latents and labels, rollout rows (as
returned by :func:`embodied.apps.experiments.pdp.run_episodes`: ``route``, ``success``,
``path``) and obstacle boxes read from the task's MuJoCo model (:func:`obstacle_boxes`). Every
rollout happens in the experiment (:mod:`embodied.apps.experiments.pdp`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.patches import Rectangle

from embodied.apps.plotting import plt, save_figure
from embodied.errors import ConfigError

ROUTE_COLORS = {"left": "tab:blue", "center": "tab:green", "right": "tab:red", "none": "0.6"}
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


def _save(fig: Any, path: Path) -> Path:
    return save_figure(fig, path, bbox_inches="tight")


def _draw_arena(ax: Any, boxes: Sequence[Box]) -> None:
    for b in boxes:
        ax.add_patch(
            Rectangle((b.x_min, b.y_min), b.x_max - b.x_min, b.y_max - b.y_min, color="0.3")
        )
    ax.set_xlim(-ARENA_VIEW_M, ARENA_VIEW_M)
    ax.set_ylim(-ARENA_VIEW_M, ARENA_VIEW_M)
    ax.set_aspect("equal")
    ax.set_xlabel("x (m)")
    ax.set_ylabel("y (m)")


def plot_latents(
    path: str | Path,
    latents: np.ndarray,
    labels: Sequence[str],
    grid_z: Sequence[np.ndarray],
    grid_rows: Sequence[Mapping[str, Any]],
    seed: int = 0,
) -> Path:
    """Left: demonstration latents coloured by route. Right: route taken by the rollout at each
    grid z.

    Args:
        path: PNG written.
        latents: (N, 2) demonstration latents (knob space).
        labels: Route of each demonstration.
        grid_z: The z of each grid rollout.
        grid_rows: Rollout rows (``route``, ``success``), one per ``grid_z``.
        seed: Episode seed of the grid rollouts (for the title).
    """
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.5))
    ax = axes[0]
    for route in sorted(set(labels)):
        m = np.asarray(labels) == route
        ax.scatter(
            latents[m, 0],
            latents[m, 1],
            s=18,
            c=ROUTE_COLORS.get(route, "k"),
            label=f"{route} ({int(m.sum())})",
        )
    ax.set_title("demonstration latents (encoder mean, whitened)", fontsize=10)
    ax.set_xlabel("z[0]")
    ax.set_ylabel("z[1]")
    ax.legend(fontsize=8)
    ax = axes[1]
    for z, r in zip(grid_z, grid_rows, strict=True):
        ax.scatter(
            z[0],
            z[1],
            s=150,
            c=ROUTE_COLORS.get(r["route"], "k"),
            marker="o" if r["success"] else "x",
        )
    lim = float(np.abs(np.asarray(grid_z)).max()) if len(grid_z) else 0.0
    ax.set_title(f"rollout route over z (seed {seed}); x = failure", fontsize=10)
    ax.set_xlabel("z[0]")
    ax.set_ylabel("z[1]")
    ax.set_xlim(-lim - 0.5, lim + 0.5)
    ax.set_ylim(-lim - 0.5, lim + 0.5)
    return _save(fig, Path(path))


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
    _draw_arena(ax, boxes)
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
    return _save(fig, Path(path))


def plot_route_histograms(
    path: str | Path, histograms: Mapping[str, Mapping[str, int]], routes: Sequence[str]
) -> Path:
    """Grouped bars: per source (e.g. demonstrations, PDP with z from the prior, DP) the
    fraction of its episodes taking each route.

    Args:
        path: PNG written.
        histograms: Source name -> route -> count.
        routes: Route classes on the x axis, in order.
    """
    fig, ax = plt.subplots(figsize=(6, 3.5))
    width = 0.8 / max(len(histograms), 1)
    x = np.arange(len(routes))
    for i, (name, counts) in enumerate(histograms.items()):
        total = max(sum(counts.get(r, 0) for r in routes), 1)
        frac = [counts.get(r, 0) / total for r in routes]
        ax.bar(x + (i - (len(histograms) - 1) / 2) * width, frac, width, label=f"{name} ({total})")
    ax.set_xticks(x, list(routes))
    ax.set_ylabel("fraction of successful episodes")
    ax.set_ylim(0.0, 1.0)
    ax.legend(fontsize=8)
    ax.set_title("route coverage")
    return _save(fig, Path(path))
