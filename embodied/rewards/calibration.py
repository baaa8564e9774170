"""Calibration: rates, thresholds and Platt scaling of judge scores against labels."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from embodied.errors import ConfigError


@dataclass(frozen=True)
class Rates:
    """Confusion rates of binary success decisions, in percent.

    Attributes:
        tpr: True-positive rate (success frames called success).
        tnr: True-negative rate (non-success frames called failure).
        fpr: False-positive rate (= 100 - tnr).
        fnr: False-negative rate (= 100 - tpr).
        n_pos: Positive samples.
        n_neg: Negative samples.
    """

    tpr: float
    tnr: float
    fpr: float
    fnr: float
    n_pos: int
    n_neg: int

    @property
    def accuracy(self) -> float:
        """Accuracy in percent over all samples."""
        n = self.n_pos + self.n_neg
        return (self.tpr * self.n_pos + self.tnr * self.n_neg) / max(n, 1)

    def to_dict(self) -> dict[str, float]:
        """Plain dict with accuracy added."""
        return {**asdict(self), "accuracy": self.accuracy}


def rates(decisions: Sequence[bool] | np.ndarray, labels: Sequence[bool] | np.ndarray) -> Rates:
    """TPR/TNR/FPR/FNR (percent) of ``decisions`` against ``labels``.

    A class with no samples gets rate 100 for its "true" rate (nothing was missed).
    """
    d = np.asarray(decisions, dtype=bool).ravel()
    y = np.asarray(labels, dtype=bool).ravel()
    if d.shape != y.shape:
        raise ConfigError(f"{d.size} decisions for {y.size} labels", fix="pass one per sample")
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    tpr = 100.0 * float((d & y).sum()) / n_pos if n_pos else 100.0
    tnr = 100.0 * float((~d & ~y).sum()) / n_neg if n_neg else 100.0
    return Rates(tpr, tnr, 100.0 - tnr, 100.0 - tpr, n_pos, n_neg)


def calibration_table(
    probs: Sequence[float] | np.ndarray,
    labels: Sequence[bool] | np.ndarray,
    thresholds: Sequence[float] | np.ndarray | None = None,
) -> list[dict[str, float]]:
    """Rates at each threshold (default 0.05 .. 0.95 in steps of 0.05)."""
    p = np.asarray(probs, dtype=np.float64)
    ths = np.round(np.arange(0.05, 0.951, 0.05), 2) if thresholds is None else thresholds
    return [{"threshold": float(t), **rates(p >= t, labels).to_dict()} for t in ths]


def best_threshold(
    probs: Sequence[float] | np.ndarray, labels: Sequence[bool] | np.ndarray
) -> float:
    """Threshold maximising balanced accuracy (TPR + TNR) over the observed scores.

    Ties go to the highest threshold (fewer false positives).
    """
    p = np.asarray(probs, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    if p.size == 0:
        raise ConfigError("no scores to calibrate on", fix="score at least one labelled clip")
    cands = np.unique(np.concatenate([p, [0.5]]))
    mids = np.concatenate([cands, (cands[:-1] + cands[1:]) / 2])
    best_t, best_v = 0.5, -1.0
    for t in np.sort(mids):
        r = rates(p >= t, y)
        v = r.tpr + r.tnr
        if v >= best_v:
            best_t, best_v = float(t), v
    return best_t


def tnr_threshold(
    probs: Sequence[float] | np.ndarray,
    labels: Sequence[bool] | np.ndarray,
    groups: Sequence[str] | np.ndarray,
    target: float,
) -> float:
    """Lowest threshold at which every group's TNR is at least ``target`` (Neyman-Pearson).

    For a false-positive budget (e.g. ``target`` 0.99: at most 1 % of each task's non-success
    frames called success) this spends the rest on detection, where :func:`best_threshold`
    weighs every frame alike and so sets the boundary by the plentiful easy frames, not by the
    few arrival frames at the goal's edge. Per group, the threshold lies midway between the
    highest negative score it must reject (call failure) and the next higher negative score;
    the result is the highest over groups.

    Args:
        probs: Scores in [0, 1].
        labels: Oracle labels (True: success).
        groups: A group per score (e.g. the env id); each must have negatives.
        target: Required TNR per group, a fraction in (0, 1).

    Raises:
        ConfigError: ``target`` outside (0, 1), mismatched lengths, or a group without
            negatives.
    """
    if not 0.0 < target < 1.0:
        raise ConfigError(
            f"target TNR {target!r} must be a fraction in (0, 1)", fix="e.g. target=0.99"
        )
    p = np.asarray(probs, dtype=np.float64).ravel()
    y = np.asarray(labels, dtype=bool).ravel()
    g = np.asarray(groups).ravel()
    if not p.size == y.size == g.size:
        raise ConfigError(
            f"{p.size} scores, {y.size} labels and {g.size} groups",
            fix="pass one label and one group per score",
        )
    out = 0.0
    for group in sorted(set(g.tolist())):
        neg = np.sort(p[(g == group) & ~y])
        if neg.size == 0:
            raise ConfigError(
                f"group {group!r} has no negative scores to hold a TNR on",
                fix="calibrate on a split with failure frames for every group",
            )
        # the k lowest negatives must score below the threshold (1e-9: 0.99 * 100 is 99)
        k = int(np.ceil(target * neg.size - 1e-9))
        v = neg[k - 1]
        above = neg[neg > v]
        t = float((v + above[0]) / 2) if above.size else float(np.nextafter(v, np.inf))
        out = max(out, t)
    return out


def fit_platt(
    scores: Sequence[float] | np.ndarray,
    labels: Sequence[bool] | np.ndarray,
    iters: int = 200,
    l2: float = 1e-3,
) -> tuple[float, float]:
    """Fit ``p = sigmoid(a * s + b)`` to labels by Newton's method (Platt scaling).

    Returns:
        ``(a, b)``.

    Raises:
        ConfigError: only one class present (nothing to separate).
    """
    s = np.asarray(scores, dtype=np.float64).ravel()
    y = np.asarray(labels, dtype=np.float64).ravel()
    if s.shape != y.shape or s.size == 0:
        raise ConfigError(f"{s.size} scores for {y.size} labels", fix="pass one label per score")
    if y.min() == y.max():
        raise ConfigError(
            "calibration labels are all one class",
            fix="calibrate on clips with both successes and failures",
        )
    x = np.stack([s, np.ones_like(s)], axis=1)
    w = np.zeros(2)
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        grad = x.T @ (p - y) + l2 * w
        hess = (x * (p * (1 - p))[:, None]).T @ x + l2 * np.eye(2)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-9:
            break
    return float(w[0]), float(w[1])


def roc_auc(probs: Sequence[float] | np.ndarray, labels: Sequence[bool] | np.ndarray) -> float:
    """Area under the ROC curve: P(a random positive scores above a random negative).

    Ties count one half (the Mann-Whitney U statistic over average ranks), so a constant
    score gives 0.5. NaN when only one class is present (no curve to draw).
    """
    p = np.asarray(probs, dtype=np.float64).ravel()
    y = np.asarray(labels, dtype=bool).ravel()
    if p.shape != y.shape:
        raise ConfigError(f"{p.size} scores for {y.size} labels", fix="pass one label per score")
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    _, inverse, counts = np.unique(p, return_inverse=True, return_counts=True)
    # average 1-based rank of each distinct score: tied scores share their ranks' mean
    ends = np.cumsum(counts)
    avg_rank = ends - (counts - 1) / 2.0
    rank_sum = float(avg_rank[inverse][y].sum())
    return (rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)


def reliability(
    probs: Sequence[float] | np.ndarray, labels: Sequence[bool] | np.ndarray, n_bins: int = 10
) -> list[dict[str, float]]:
    """Reliability diagram rows: per equal-width probability bin, the mean predicted
    probability and the observed fraction of successes (empty bins are left out).

    Returns:
        ``[{"lo", "hi", "count", "mean_prob", "frac_success"}]``, bins ordered by ``lo``.
    """
    if n_bins < 1:
        raise ConfigError(f"n_bins must be >= 1, got {n_bins}", fix="e.g. n_bins=10")
    p = np.clip(np.asarray(probs, dtype=np.float64).ravel(), 0.0, 1.0)
    y = np.asarray(labels, dtype=bool).ravel()
    if p.shape != y.shape:
        raise ConfigError(f"{p.size} scores for {y.size} labels", fix="pass one label per score")
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    # the last bin is closed so p = 1.0 lands in it
    idx = np.minimum(np.searchsorted(edges, p, side="right") - 1, n_bins - 1)
    rows = []
    for b in range(n_bins):
        sel = idx == b
        if sel.any():
            rows.append(
                {
                    "lo": float(edges[b]),
                    "hi": float(edges[b + 1]),
                    "count": int(sel.sum()),
                    "mean_prob": float(p[sel].mean()),
                    "frac_success": float(y[sel].mean()),
                }
            )
    return rows


def judge_report(
    probs: Sequence[float] | np.ndarray,
    labels: Sequence[bool] | np.ndarray,
    threshold: float,
    n_bins: int = 10,
) -> dict[str, Any]:
    """One judge's calibration against the simulator oracle, in the format every judge shares.

    Args:
        probs: The judge's success probabilities, one per judged clip.
        labels: The oracle's verdicts of the same clips.
        threshold: The judge's decision threshold (``prob >= threshold`` is success).
        n_bins: Bins of the reliability diagram.

    Returns:
        ``{"threshold", "n", "roc_auc", "tpr", "tnr", "fpr", "fnr", "n_pos", "n_neg",
        "accuracy", "ece", "reliability"}``: rates in percent at the threshold, ROC-AUC
        (NaN with one class), the expected calibration error (count-weighted mean of
        |mean prob - fraction of successes| over the reliability bins) and the bins.
    """
    p = np.asarray(probs, dtype=np.float64).ravel()
    y = np.asarray(labels, dtype=bool).ravel()
    bins = reliability(p, y, n_bins)
    n = int(p.size)
    ece = (
        sum(b["count"] * abs(b["mean_prob"] - b["frac_success"]) for b in bins) / n
        if n
        else float("nan")
    )
    return {
        "threshold": float(threshold),
        "n": n,
        "roc_auc": roc_auc(p, y),
        **rates(p >= threshold, y).to_dict(),
        "ece": float(ece),
        "reliability": bins,
    }
