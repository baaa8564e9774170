"""PNG plots of the PDP evaluation (matplotlib, Agg backend)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from embodied.io import atomic_path

ROUTE_COLORS = {"left": "tab:blue", "center": "tab:green", "right": "tab:red", "none": "0.6"}


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    _plt().close(fig)
    return path


def _draw_arena(ax: Any) -> None:
    from matplotlib.patches import Rectangle

    for x0 in (-0.24, 0.06):
        ax.add_patch(Rectangle((x0, -0.06), 0.18, 0.12, color="0.3"))
    ax.set_xlim(-0.4, 0.4)
    ax.set_ylim(-0.4, 0.4)
    ax.set_aspect("equal")
    ax.set_xlabel("x (m)")
    ax.set_ylabel("y (m)")


def plot_latents(
    path: str | Path,
    latents: np.ndarray,
    labels: Sequence[str],
    policy: Any,
    env: Any,
    seed: int = 0,
    grid: int = 7,
) -> Path:
    """Left: demo latents coloured by route. Right: route taken when rolling out grid z."""
    from embodied.apps.experiments.pdp import run_episodes

    plt = _plt()
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
    ax.set_title("demo latents (encoder mean, whitened)", fontsize=10)
    ax.set_xlabel("z[0]")
    ax.set_ylabel("z[1]")
    ax.legend(fontsize=8)
    ax = axes[1]
    lim = 2.5
    vals = np.linspace(-lim, lim, grid)
    zs = [np.array([a, b]) for b in vals for a in vals]
    rows = run_episodes(env, policy, [seed] * len(zs), z=zs)
    for z, r in zip(zs, rows, strict=True):
        ax.scatter(
            z[0],
            z[1],
            s=150,
            c=ROUTE_COLORS.get(r["route"], "k"),
            marker="o" if r["success"] else "x",
        )
    ax.set_title(f"rollout route over z (seed {seed}); x = failure", fontsize=10)
    ax.set_xlabel("z[0]")
    ax.set_ylabel("z[1]")
    ax.set_xlim(-lim - 0.5, lim + 0.5)
    ax.set_ylim(-lim - 0.5, lim + 0.5)
    return _save(fig, Path(path))


def plot_interpolation(
    path: str | Path,
    policy: Any,
    env: Any,
    centroids: Mapping[str, np.ndarray],
    seed: int = 0,
    n: int = 7,
) -> Path:
    """Trajectories at z linearly interpolated between the left and right route latents."""
    from embodied.apps.experiments.pdp import run_episodes

    plt = _plt()
    keys = [k for k in ("left", "right") if k in centroids]
    if len(keys) < 2:
        keys = sorted(centroids)[:2]
    za, zb = centroids[keys[0]], centroids[keys[-1]]
    alphas = np.linspace(0.0, 1.0, n)
    zs = [(1 - a) * za + a * zb for a in alphas]
    rows = run_episodes(env, policy, [seed] * n, z=zs)
    fig, ax = plt.subplots(figsize=(5.5, 5.5))
    _draw_arena(ax)
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
    ax.set_title(f"z = (1-a) z_{keys[0]} + a z_{keys[-1]}")
    ax.legend(fontsize=7, loc="lower left")
    return _save(fig, Path(path))
