"""Statistics and tables the lab's experiments share: rates with Wilson intervals, mean ± std
over seeds, and their Markdown cells.

Every experiment aggregates its runs (one per training seed) the same way: a success or
violation *rate* pools the episodes of all seeds and carries its Wilson 95 % interval
(:func:`rate`, :func:`pooled_stat`); a per-run figure is summarised as mean ± sample std over
the seeds (:func:`mean_std`). The ``format_*`` functions write those as table cells and
:func:`markdown_table` the table around them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from embodied.apps.evaluation.stats import Z95, wilson_interval

__all__ = [
    "Z95",
    "format_pm",
    "format_pooled",
    "format_rate",
    "markdown_table",
    "mean_or_none",
    "mean_std",
    "pooled_stat",
    "rate",
    "runs_by_arm",
    "wilson_interval",
]


def runs_by_arm(
    runs: Sequence[Mapping[str, Any]], arms: Sequence[str]
) -> dict[str, list[Mapping[str, Any]]]:
    """The runs (one per arm and seed, keyed ``"arm"``) of each arm, in the order of ``arms``.

    Arms without runs are left out, so a partial result (an interrupted experiment) aggregates
    what it has.
    """
    out: dict[str, list[Mapping[str, Any]]] = {}
    for arm in arms:
        rs = [r for r in runs if r["arm"] == arm]
        if rs:
            out[arm] = rs
    return out


def mean_or_none(values: Sequence[float]) -> float | None:
    """The mean of ``values``, or None when there are none."""
    return float(np.mean(values)) if len(values) else None


def mean_std(values: Sequence[float | None]) -> dict[str, float | None]:
    """Mean and sample std (ddof = 1; 0 for one value) over seeds, Nones left out.

    Returns:
        ``{"mean", "std"}``; both None when no value is given.
    """
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return {"mean": None, "std": None}
    return {"mean": float(np.mean(xs)), "std": float(np.std(xs, ddof=1)) if len(xs) > 1 else 0.0}


def rate(k: int, n: int) -> dict[str, Any]:
    """``k`` of ``n`` episodes as a rate with its Wilson 95 % interval.

    Returns:
        ``{"count": k, "n": n, "rate": k / n (0 when n is 0), "wilson95": [low, high]}``.
    """
    low, high = wilson_interval(k, n)
    return {"count": k, "n": n, "rate": k / n if n else 0.0, "wilson95": [low, high]}


def pooled_stat(per_seed: Sequence[tuple[int, int]]) -> dict[str, Any]:
    """Statistics of one cell over training seeds, from ``(successes, n)`` per seed.

    Returns:
        ``mean`` and ``std`` (sample std, ddof=1; 0 for one seed) of the per-seed rates,
        pooled ``successes`` and ``n``, the Wilson 95 % interval of the pooled episodes and the
        number of seeds.
    """
    rates = [k / n for k, n in per_seed if n > 0]
    k_all = int(sum(k for k, _ in per_seed))
    n_all = int(sum(n for _, n in per_seed))
    lo, hi = wilson_interval(k_all, n_all)
    return {
        "mean": float(np.mean(rates)) if rates else float("nan"),
        "std": float(np.std(rates, ddof=1)) if len(rates) > 1 else 0.0,
        "successes": k_all,
        "n": n_all,
        "wilson": [lo, hi],
        "seeds": len(per_seed),
    }


def format_pm(stat: Mapping[str, Any], digits: int = 2) -> str:
    """A :func:`mean_std` as ``"mean ± std"`` with ``digits`` decimals (``"-"`` when empty)."""
    if stat.get("mean") is None:
        return "-"
    return f"{stat['mean']:.{digits}f} ± {stat['std']:.{digits}f}"


def format_rate(stat: Mapping[str, Any]) -> str:
    """A :func:`rate` as ``"k/n = rate [low, high]"`` (three decimals)."""
    low, high = stat["wilson95"]
    return f"{stat['count']}/{stat['n']} = {stat['rate']:.3f} [{low:.3f}, {high:.3f}]"


def format_pooled(stat: Mapping[str, Any]) -> str:
    """A :func:`pooled_stat` as ``"mean ± std [Wilson lo–hi] (n)"`` in percent."""
    lo, hi = stat["wilson"]
    return (
        f"{100 * stat['mean']:.0f} ± {100 * stat['std']:.0f} "
        f"[{100 * lo:.0f}–{100 * hi:.0f}] ({stat['n']})"
    )


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The lines of a Markdown table: the header, its rule, one line per row of cells."""
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(r) + " |" for r in rows),
    ]
