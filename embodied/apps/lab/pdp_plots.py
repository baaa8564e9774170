"""PNG plots of the PDP evaluation (matplotlib, Agg backend).

The plots only draw what they are given: demonstration latents and labels, rollout rows (as
returned by :func:`embodied.apps.route_task.run_episodes`: ``route``, ``success``, ``path``)
and obstacle boxes read from the task's MuJoCo model
(:func:`embodied.apps.plotting.obstacle_boxes`, which also holds the interpolation plot). Every
rollout happens in the experiment (:mod:`embodied.apps.lab.pdp`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from embodied.apps.plotting import plt, save_figure

ROUTE_COLORS = {"left": "tab:blue", "center": "tab:green", "right": "tab:red", "none": "0.6"}


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
    return save_figure(fig, Path(path), bbox_inches="tight")


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
    return save_figure(fig, Path(path), bbox_inches="tight")
