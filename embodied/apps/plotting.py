"""Figures of the applications: the headless backend, chosen once, and one atomic save.

Importing this module selects matplotlib's ``Agg`` backend (no display on CI or robots) before
``pyplot`` is imported anywhere; every plot of the applications imports ``plt`` from here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from embodied.io import atomic_path

__all__ = ["plt", "save_figure"]


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
