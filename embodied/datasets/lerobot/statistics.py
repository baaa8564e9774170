"""``meta/stats.json`` and the episodes' ``stats/*`` columns, as lerobot 0.4.4 computes them.

The counterpart of lerobot's ``compute_stats.py``: per-episode statistics of vector and video
features (:func:`_vector_stats`, :func:`_image_stats`) and their aggregation over episodes
(:func:`_dataset_stats`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

# meta/stats.json and the episodes' stats/* columns are computed as lerobot 0.4.4 computes them
# (lerobot/datasets/compute_stats.py, lerobot_dataset.py::save_episode), with one exception
# (image std, below). Checked against stats lerobot 0.4.4 itself wrote for the same episodes:
# tests/dataset_io/fixtures/lerobot_stats_0.4.4.json.
#
# Per episode (compute_episode_stats -> get_feature_stats -> RunningQuantileStats, one batch):
#   * a vector or scalar feature: per dimension over the episode's frames, in the column's own
#     dtype (a float32 state's mean and std are float32): min, max, mean, std =
#     sqrt(max(0, E[x^2] - E[x]^2)), count = frames, and q01/q10/q50/q90/q99 read off a
#     5000-bin histogram over [min - 1e-10, max + 1e-10] with linear interpolation in the bin.
#     A one-frame episode gets np.std and every quantile = the mean (_compute_basic_stats).
#     ``timestamp`` is taken as float64 frame_index / fps, as add_frame makes it (the parquet
#     column is float32).
#   * a video feature: the frames of sample_indices (all of them up to 100, then n**0.75
#     evenly spaced), subsampled by auto_downsample_height_width when a side is >= 300 px, per
#     channel over all their pixels; every stat but count divided by 255 and shaped (3, 1, 1);
#     count = sampled frames. Exception: lerobot 0.4.4 squares the uint8 pixels in uint8, which
#     overflows and clamps its per-episode image std to 0 (fixed after 0.4.4 in
#     huggingface/lerobot#3697); we square them in float64, so the image std is the std of the
#     sampled pixels. Everything else about image stats is 0.4.4's.
# Across episodes (aggregate_feature_stats, folded episode by episode as
# LeRobotDatasetMetadata.save_episode does, aggregate_stats([stats, episode_stats])): min of
# the mins, max of the maxes, count summed, the count-weighted mean, std from the pooled
# variance sum(count * (std^2 + (mean - total_mean)^2)) / total_count, and each quantile the
# count-weighted mean of the episodes' quantiles. That last is lerobot 0.4.4's approximation,
# not a quantile of the pooled frames: it can lie inside or outside the per-episode range.

DEFAULT_QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
_STAT_ORDER = ("min", "max", "mean", "std", "count")
"""The stats of every feature besides its quantiles, in the episodes table's column order."""
_QUANTILE_BINS = 5000
"""``RunningQuantileStats``' default ``num_quantile_bins``."""


def _quantile_keys() -> list[str]:
    return [f"q{int(q * 100):02d}" for q in DEFAULT_QUANTILES]


def _histogram_quantile(hist: np.ndarray, edges: np.ndarray, target: float) -> Any:
    """``RunningQuantileStats._compute_single_quantile`` (lerobot 0.4.4)."""
    cumsum = np.cumsum(hist)
    idx = np.searchsorted(cumsum, target)
    if idx == 0:
        return edges[0]
    if idx >= len(cumsum):
        return edges[-1]
    before = cumsum[idx - 1]
    in_bin = cumsum[idx] - before
    if in_bin == 0:
        return edges[idx]
    return edges[idx] + (target - before) / in_bin * (edges[idx + 1] - edges[idx])


def _stats_2d(rows: np.ndarray, count: int, *, wide_squares: bool = False) -> dict[str, Any]:
    """lerobot 0.4.4's ``get_feature_stats`` of ``(N, D)`` rows, per column, in their dtype.

    ``wide_squares`` squares in float64 for ``E[x^2]`` (uint8 pixels; lerobot squares them
    in uint8, which overflows).
    """
    squares = rows.astype(np.float64) ** 2 if wide_squares else rows**2
    if rows.shape[0] < 2:  # _compute_basic_stats
        mean = np.mean(rows, axis=0)
        stats: dict[str, Any] = {
            "min": np.min(rows, axis=0),
            "max": np.max(rows, axis=0),
            "mean": mean,
            "std": np.std(rows, axis=0),
            "count": np.array([count]),
        }
        for key in _quantile_keys():
            stats[key] = mean.copy()
        return stats
    # RunningQuantileStats().update(rows) then get_statistics(), step for step (dtypes included)
    n, dims = rows.shape
    mean = np.mean(rows, axis=0)
    mean_of_squares = np.mean(squares, axis=0)
    lo, hi = np.min(rows, axis=0), np.max(rows, axis=0)
    edges = [np.linspace(lo[d] - 1e-10, hi[d] + 1e-10, _QUANTILE_BINS + 1) for d in range(dims)]
    # update()'s running-mean step: a no-op for one batch but for inf/nan, kept as lerobot's
    mean += (np.mean(rows, axis=0) - mean) * (n / n)
    mean_of_squares += (np.mean(squares, axis=0) - mean_of_squares) * (n / n)
    # np.histogram converts bool to uint8 itself (with a warning)
    columns = rows.astype(np.uint8) if rows.dtype == np.bool_ else rows
    hists = [np.histogram(columns[:, d], bins=edges[d])[0] for d in range(dims)]
    stats = {
        "min": lo.copy(),
        "max": hi.copy(),
        "mean": mean.copy(),
        "std": np.sqrt(np.maximum(0, mean_of_squares - mean**2)),
        "count": np.array([count]),
    }
    for q, key in zip(DEFAULT_QUANTILES, _quantile_keys(), strict=True):
        stats[key] = np.array(
            [_histogram_quantile(h, e, q * n) for h, e in zip(hists, edges, strict=True)]
        )
    return stats


def _vector_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """Stats of a ``(T,)`` or ``(T, D)`` feature: shape ``(1,)`` or ``(D,)`` each."""
    rows = values.reshape(values.shape[0], -1)
    return _stats_2d(rows, values.shape[0])


def _sample_indices(n: int) -> list[int]:
    """Frames lerobot samples for image stats (``compute_stats.sample_indices``)."""
    min_samples = min(100, n)
    samples = max(min_samples, min(int(n**0.75), 10_000))
    return np.round(np.linspace(0, n - 1, samples)).astype(int).tolist()


def _image_stats(frames: np.ndarray) -> dict[str, np.ndarray]:
    """Per-channel stats of ``(T, H, W, C)`` uint8 frames in [0, 1], shape ``(C, 1, 1)``."""
    sampled = frames[_sample_indices(frames.shape[0])]
    height, width = sampled.shape[1:3]
    if max(height, width) >= 300:  # lerobot's auto_downsample_height_width
        step = int(width / 150) if width > height else int(height / 150)
        sampled = sampled[:, ::step, ::step]
    channels = sampled.shape[-1]
    stats = _stats_2d(sampled.reshape(-1, channels), sampled.shape[0], wide_squares=True)
    return {k: v if k == "count" else (v / 255.0).reshape(channels, 1, 1) for k, v in stats.items()}


def _aggregate_stats(stats_list: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """lerobot 0.4.4's ``aggregate_feature_stats``: merge stats of one feature."""
    means = np.stack([s["mean"] for s in stats_list])
    variances = np.stack([s["std"] ** 2 for s in stats_list])
    counts = np.stack([s["count"] for s in stats_list])
    total = counts.sum(axis=0)
    while counts.ndim < means.ndim:
        counts = np.expand_dims(counts, axis=-1)
    mean = (means * counts).sum(axis=0) / total
    variance = ((variances + (means - mean) ** 2) * counts).sum(axis=0) / total
    out: dict[str, np.ndarray] = {
        "min": np.min(np.stack([s["min"] for s in stats_list]), axis=0),
        "max": np.max(np.stack([s["max"] for s in stats_list]), axis=0),
        "mean": mean,
        "std": np.sqrt(variance),
        "count": total,
    }
    for key in _quantile_keys():
        out[key] = (np.stack([s[key] for s in stats_list]) * counts).sum(axis=0) / total
    return out


def _dataset_stats(per_episode: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """One feature's ``meta/stats.json`` entry: the episodes' stats folded in episode order."""
    stats = dict(per_episode[0])
    for episode in per_episode[1:]:
        stats = _aggregate_stats([stats, episode])
    return stats
