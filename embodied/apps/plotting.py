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
