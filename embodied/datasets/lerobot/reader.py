"""LeRobotDataset v3.0 folders: export our episodes to the format, and read it like our datasets.

The layout is lerobot's (``src/lerobot/datasets/utils.py``, ``dataset_metadata.py``,
``dataset_writer.py``, ``video_utils.py``, ``compute_stats.py`` of huggingface/lerobot), written
and read here with pyarrow and PyAV only (lerobot itself is not a dependency)::

    meta/info.json                     codebase_version "v3.0", fps, features, path templates
    meta/stats.json                    min/max/mean/std/count/q01..q99 per feature
    meta/tasks.parquet                 task string (pandas index) -> task_index
    meta/episodes/chunk-000/file-000.parquet
                                       one row per episode: tasks, length, the data/video file
                                       that holds it, its rows and seconds there, stats/<f>/<s>
    data/chunk-XXX/file-YYY.parquet    one row per frame, many episodes per file
    videos/<key>/chunk-XXX/file-YYY.mp4
                                       one video per camera, many episodes per file: episode e
                                       is [from_timestamp, to_timestamp) of its file

Our names map to lerobot's as ``state`` <-> ``observation.state``, ``image.<camera>`` <->
``observation.images.<camera>`` (a video feature), other observations ``<key>`` <->
``observation.<key>``, actions <-> ``action``, rewards/dones <-> ``next.reward``/``next.done``, the
instruction <-> the frame's task. What lerobot has no place for stays beside it where lerobot
does not look: episode attributes (success, seed, meta, ...) in ``embodied/*`` columns of the
episodes table, per-step extras in ``embodied/extras/episode_NNNNNN.npz``, ``env_args`` in
``meta/embodied.json``; so ours -> lerobot -> ours keeps everything but the exact pixels (video
is lossy).
"""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import tempfile
import tokenize
import zipfile
import zlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from embodied.datasets.hdf5 import EpisodeData
from embodied.errors import ConfigError, DatasetError
from embodied.io import parse_json_text, read_json_file

CODEBASE_VERSION = "v3.0"
"""The format version written (``info.json["codebase_version"]``) and read (``v3.x``)."""
INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
EPISODES_DIR = "meta/episodes"
EPISODES_PATH = EPISODES_DIR + "/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EMBODIED_META_PATH = "meta/embodied.json"
"""Our own metadata (``env_args``, ``repo_id``); lerobot ignores files it does not know."""
EXTRAS_PATH = "embodied/extras/episode_{episode_index:06d}.npz"
DEFAULT_CHUNK_SIZE = 1000
DEFAULT_DATA_FILE_SIZE_IN_MB = 100
DEFAULT_VIDEO_FILE_SIZE_IN_MB = 200
DEFAULT_QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
TOLERANCE_S = 1e-4
"""How far (seconds) a decoded frame may be from the timestamp it stands for (lerobot's)."""
DEFAULT_FEATURES: dict[str, dict[str, Any]] = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}
"""Columns lerobot adds to every dataset (``lerobot.utils.constants.DEFAULT_FEATURES``)."""
CODECS: dict[str, str] = {"h264": "libx264", "hevc": "libx265", "libsvtav1": "libsvtav1"}
"""``codec`` (lerobot's ``vcodec`` names) -> the PyAV encoder that writes it; ``av1`` is an
alias of ``libsvtav1`` (lerobot's default)."""
_STAT_ORDER = ("min", "max", "mean", "std", "count")
_EMBODIED_ATTRS = "embodied/attrs"
_EMBODIED_SOURCE = "embodied/source"
_V2_FIX = (
    "convert it to v3.0 with lerobot's converter: "
    "`python -m lerobot.scripts.convert_dataset_v21_to_v30 --repo-id=<owner/name>`"
)


# ---- statistics (compute_stats.py) ---------------------------------------------------------
#
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


# ---- export --------------------------------------------------------------------------------


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, bytes):
        return obj.decode("utf-8", "replace")
    if isinstance(obj, Path):
        return str(obj)
    return str(obj)


def _dumps(value: Any) -> str:
    return json.dumps(value, default=_json_default, ensure_ascii=False)


def _write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # lerobot writes its JSON files with indent=4, ensure_ascii=False
    path.write_text(json.dumps(value, indent=4, ensure_ascii=False, default=_json_default) + "\n")


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _next_file(chunk: int, file: int, chunks_size: int) -> tuple[int, int]:
    """The file after ``(chunk, file)`` (lerobot's ``update_chunk_file_indices``)."""
    return (chunk + 1, 0) if file == chunks_size - 1 else (chunk, file + 1)


def _control_rate(ep: EpisodeData) -> float | None:
    """The episode's ``meta["control_rate_hz"]`` (None when not recorded)."""
    meta = ep.attrs.get("meta")
    if isinstance(meta, str | bytes):
        try:
            meta = json.loads(meta)
        except ValueError:
            meta = None
    if isinstance(meta, dict) and meta.get("control_rate_hz"):
        return float(meta["control_rate_hz"])
    return None


def _check_fps(fps: float) -> int:
    if not (math.isfinite(fps) and fps > 0 and abs(fps - round(fps)) < 1e-9):
        raise ConfigError(
            f"fps {fps!r} is not a positive whole number; LeRobotDataset v3 stores an integer fps",
            fix="pass fps= (--fps) as a positive integer, e.g. --fps 20",
        )
    return round(fps)


def _encoder(codec: str) -> str:
    name = CODECS.get("libsvtav1" if codec == "av1" else codec)
    if name is None:
        raise ConfigError(
            f"codec {codec!r} is not one of {sorted([*CODECS, 'av1'])}",
            fix="pass codec='h264' (--codec h264), 'hevc' or 'libsvtav1' (lerobot's default)",
        )
    try:
        av.codec.Codec(name, "w")
    except Exception as exc:
        raise ConfigError(
            f"codec {codec!r} needs the encoder {name!r}, which this PyAV build lacks ({exc})",
            fix="pass codec='h264' (libx264 ships with PyAV's wheels)",
        ) from exc
    return name


def _names(spec: Any, dim: int) -> list[str] | None:
    names = spec.get("names") if isinstance(spec, Mapping) else None
    if isinstance(names, list | tuple) and len(names) == dim:
        return [str(n) for n in names]
    return None


@dataclass
class _Feature:
    """One exported column or video: our key, lerobot key, dtype and per-frame shape.

    ``shape`` is the shape ``info.json`` records: ``(D,)`` for a vector, ``(1,)`` for a scalar
    (a plain parquet column, as lerobot stores shape-``(1,)`` features), ``(H, W, 3)`` for a
    video.
    """

    ours: str
    key: str
    dtype: str
    shape: tuple[int, ...]
    names: list[str] | None = None
    video: bool = False

    @property
    def scalar(self) -> bool:
        return not self.video and self.shape == (1,)

    def describe(self) -> dict[str, Any]:
        if self.video:
            return {
                "dtype": "video",
                "shape": list(self.shape),
                "names": ["height", "width", "channels"],
            }
        return {"dtype": self.dtype, "shape": list(self.shape), "names": self.names}

    def arrow_type(self) -> pa.DataType:
        value = pa.from_numpy_dtype(np.dtype(self.dtype))
        return value if self.scalar else pa.list_(value, self.shape[0])

    def hf_feature(self) -> dict[str, Any]:
        """The column's ``datasets`` feature, as lerobot's parquet files record it."""
        value = {"dtype": self.dtype, "_type": "Value"}
        if self.scalar:
            return value
        return {"feature": value, "length": self.shape[0], "_type": "List"}


def _features(
    first: EpisodeData,
    env_args: Mapping[str, Any],
    obs_keys: Sequence[str] | None,
    float_dtype: str | None,
) -> list[_Feature]:
    """The exported features, from the first episode (the others must match)."""

    def vector_dtype(arr: np.ndarray) -> str:
        kind = arr.dtype.kind
        if kind == "f":
            return float_dtype or arr.dtype.name
        if kind == "b":
            return "bool"
        if kind in "iu":
            return "int64"
        raise DatasetError(
            f"{first.source}: array of dtype {arr.dtype} has no LeRobotDataset column type",
            fix="export only numeric observations (pass obs_keys=)",
        )

    obs_spec = env_args.get("observation", {}) if isinstance(env_args, Mapping) else {}
    features: list[_Feature] = []
    for key, arr in first.obs.items():
        if obs_keys is not None and key not in obs_keys:
            continue
        arr = np.asarray(arr)
        if key.startswith("image."):
            if arr.dtype != np.uint8 or arr.ndim != 4 or arr.shape[-1] != 3:
                raise DatasetError(
                    f"{first.source}: observation {key!r} has shape {arr.shape} dtype {arr.dtype}; "
                    "a LeRobotDataset video needs (T, H, W, 3) uint8 frames",
                    fix="export RGB uint8 cameras only (leave this key out with obs_keys=)",
                )
            camera = key.removeprefix("image.")
            shape = tuple(int(s) for s in arr.shape[1:])
            features.append(
                _Feature(key, f"observation.images.{camera}", "video", shape, video=True)
            )
            continue
        if arr.ndim not in (1, 2):
            raise DatasetError(
                f"{first.source}: observation {key!r} has shape {arr.shape}; only (T,) and (T, D) "
                "vectors and (T, H, W, 3) images under 'image.<camera>' can be exported",
                fix="leave this key out with obs_keys=, or store the frames as 'image.<camera>'",
            )
        dim = int(arr.shape[1]) if arr.ndim == 2 else 1
        spec = obs_spec.get(key) if isinstance(obs_spec, Mapping) else None
        features.append(
            _Feature(key, f"observation.{key}", vector_dtype(arr), (dim,), _names(spec, dim))
        )
    actions = np.asarray(first.actions)
    if actions.ndim == 1:
        actions = actions[:, None]
    adim = int(actions.shape[1])
    features.append(
        _Feature(
            "actions",
            "action",
            vector_dtype(actions),
            (adim,),
            _names(env_args.get("action"), adim),
        )
    )
    rewards = np.asarray(first.rewards)
    reward_dtype = float_dtype or (rewards.dtype.name if rewards.dtype.kind == "f" else "float32")
    features.append(_Feature("rewards", "next.reward", reward_dtype, (1,)))
    features.append(_Feature("dones", "next.done", "bool", (1,)))
    return features


@contextmanager
def _scheduling_kept() -> Iterator[None]:
    """Restores the calling thread's CPU scheduling policy after an encoder call.

    SVT-AV1 (``libsvtav1``) raises the thread that opens it to ``SCHED_FIFO`` priority 99
    when it may (as root). Left so, every thread and process started afterwards inherits a
    real-time policy: a busy-polling child (a ROS node, a rosbridge server) then starves the
    machine. Lowering a policy back needs no privilege. No-op where ``os.sched_*`` is absent.
    """
    if not hasattr(os, "sched_getscheduler"):
        yield
        return
    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        yield
    finally:
        if (os.sched_getscheduler(0), os.sched_getparam(0)) != (policy, param):
            os.sched_setscheduler(0, policy, param)


class _VideoWriter:
    """Appends frames of successive episodes to one camera's MP4 files, rolling over by size."""

    def __init__(
        self,
        root: Path,
        key: str,
        fps: int,
        encoder: str,
        pix_fmt: str,
        options: dict[str, str],
        chunks_size: int,
        max_bytes: int,
    ) -> None:
        self.root, self.key, self.fps = root, key, fps
        self.encoder, self.pix_fmt, self.options = encoder, pix_fmt, options
        self.chunks_size, self.max_bytes = chunks_size, max_bytes
        self.chunk, self.file = 0, 0
        self.container: Any = None
        self.stream: Any = None
        self.frames = 0  # frames in the open file
        self.bytes = 0  # bytes muxed into the open file
        self.first_path: Path | None = None

    def path(self) -> Path:
        rel = VIDEO_PATH.format(video_key=self.key, chunk_index=self.chunk, file_index=self.file)
        return self.root / rel

    def _open(self, height: int, width: int) -> None:
        path = self.path()
        path.parent.mkdir(parents=True, exist_ok=True)
        self.container = av.open(str(path), mode="w")
        self.stream = self.container.add_stream(self.encoder, rate=self.fps, options=self.options)
        self.stream.width, self.stream.height = width, height
        self.stream.pix_fmt = self.pix_fmt
        self.stream.codec_context.time_base = Fraction(1, self.fps)
        self.frames = self.bytes = 0
        if self.first_path is None:
            self.first_path = path

    def _encode(self, frame: Any) -> None:
        with _scheduling_kept():
            packets = self.stream.encode(frame)
        for packet in packets:
            self.bytes += packet.size
            self.container.mux(packet)

    def close(self) -> None:
        if self.container is not None:
            self._encode(None)
            with _scheduling_kept():
                self.container.close()
            self.container = self.stream = None

    def add_episode(self, frames: np.ndarray) -> dict[str, Any]:
        """Encode one episode's ``(T, H, W, 3)`` frames; returns its ``videos/<key>/*`` row."""
        if self.container is not None and self.bytes >= self.max_bytes:
            self.close()
            self.chunk, self.file = _next_file(self.chunk, self.file, self.chunks_size)
        if self.container is None:
            self._open(int(frames.shape[1]), int(frames.shape[2]))
        start = self.frames
        for img in frames:
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(img), format="rgb24")
            frame.pts = self.frames
            frame.time_base = Fraction(1, self.fps)
            self._encode(frame)
            self.frames += 1
        prefix = f"videos/{self.key}/"
        return {
            prefix + "chunk_index": self.chunk,
            prefix + "file_index": self.file,
            prefix + "from_timestamp": start / self.fps,
            prefix + "to_timestamp": self.frames / self.fps,
        }


def _video_info(path: Path) -> dict[str, Any]:
    """The ``info`` of a video feature, probed from its file (lerobot's ``get_video_info``)."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        info = {
            "video.height": stream.height,
            "video.width": stream.width,
            "video.codec": stream.codec_context.codec.canonical_name,
            "video.pix_fmt": stream.pix_fmt,
            "video.is_depth_map": False,
            "video.fps": int(stream.base_rate or 0),
            "video.channels": 3,
            "has_audio": bool(container.streams.audio),
        }
    return info


def _tasks_table(tasks: Sequence[str]) -> pa.Table:
    """``meta/tasks.parquet`` as pandas writes lerobot's DataFrame (task string as the index)."""
    pandas_meta = {
        "index_columns": ["task"],
        "column_indexes": [
            {
                "name": None,
                "field_name": None,
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": {"encoding": "UTF-8"},
            }
        ],
        "columns": [
            {
                "name": "task_index",
                "field_name": "task_index",
                "pandas_type": "int64",
                "numpy_type": "int64",
                "metadata": None,
            },
            {
                "name": "task",
                "field_name": "task",
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": None,
            },
        ],
        "attributes": {},
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.3",
    }
    table = pa.table(
        {
            "task_index": pa.array(range(len(tasks)), pa.int64()),
            "task": pa.array(list(tasks), pa.string()),
        }
    )
    return table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})


def _nested(value: np.ndarray) -> Any:
    return np.asarray(value).tolist()


def _dtype_kind(name: str) -> str:
    try:
        return np.dtype(name).kind
    except TypeError:
        return ""


def _check_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DatasetError(
            f"{str(out)!r} already exists and is not an empty folder; refusing to overwrite it",
            fix="choose a new output folder (--out), or delete the old one first",
        )


def export_lerobot(
    episodes: Sequence[EpisodeData],
    out: str | os.PathLike[str],
    *,
    fps: float | None = None,
    robot_type: str = "unknown",
    codec: str = "h264",
    pix_fmt: str = "yuv420p",
    crf: int | None = 23,
    gop: int = 2,
    repo_id: str | None = None,
    chunks_size: int = DEFAULT_CHUNK_SIZE,
    data_files_size_in_mb: int = DEFAULT_DATA_FILE_SIZE_IN_MB,
    video_files_size_in_mb: int = DEFAULT_VIDEO_FILE_SIZE_IN_MB,
    obs_keys: Sequence[str] | None = None,
    float_dtype: str | None = None,
    env_args: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``episodes`` as a LeRobotDataset v3.0 folder ``out``, atomically.

    The folder is built beside ``out`` and renamed into place when complete, so ``out`` either
    does not exist or holds the whole dataset.

    Args:
        episodes: The episodes, e.g. a :class:`~embodied.datasets.Dataset` (read one at a time).
        out: The dataset folder to create; it must not exist or be empty.
        fps: Frames per second; default: the episodes' ``meta["control_rate_hz"]`` (or
            ``env_args["control_rate_hz"]``). Must be a whole number (lerobot stores an int).
        robot_type: ``info.json["robot_type"]``.
        codec: Video codec, lerobot's names: ``"h264"`` (libx264), ``"hevc"`` (libx265) or
            ``"libsvtav1"``/``"av1"`` (lerobot's default); recorded as ``video.codec``.
        pix_fmt: Video pixel format (lerobot's default ``yuv420p`` needs even frame sizes).
        crf: Encoder quality, lower is better: 23 keeps a round trip's mean pixel error
            under ~2.5 on rendered scenes (lerobot records with 30); None: the codec's default.
        gop: Keyframe interval in frames (lerobot's ``g=2``: fast random access).
        repo_id: Hub id recorded in ``meta/embodied.json`` (informational).
        chunks_size: Files per ``chunk-XXX`` folder.
        data_files_size_in_mb: Start a new data parquet file past this size.
        video_files_size_in_mb: Start a new MP4 file past this size.
        obs_keys: Observation keys to export (default: all).
        float_dtype: Cast float columns (state, action, reward, ...) to this dtype, e.g.
            ``"float32"`` as lerobot's own datasets use; default: keep each array's dtype, so a
            round trip returns them unchanged.
        env_args: Env description for ``meta/embodied.json`` (default: ``episodes.env_args``).

    Returns:
        ``out`` as a :class:`~pathlib.Path`.

    Raises:
        DatasetError: ``out`` exists and is not empty; no episodes; episodes that disagree on
            their observations; no fps known.
        ConfigError: a bad ``fps``, ``codec``, ``float_dtype`` or size setting.
    """
    out = Path(out)
    _check_out(out)
    if len(episodes) == 0:
        raise DatasetError("no episodes to export", fix="pass a dataset with episodes")
    encoder = _encoder(codec)
    if float_dtype is not None and _dtype_kind(float_dtype) != "f":
        raise ConfigError(
            f"float_dtype {float_dtype!r} is not a float dtype", fix="pass 'float32' or None"
        )
    for name, value in (
        ("chunks_size", chunks_size),
        ("data_files_size_in_mb", data_files_size_in_mb),
        ("video_files_size_in_mb", video_files_size_in_mb),
        ("gop", gop),
    ):
        if not isinstance(value, int) or value <= 0:
            raise ConfigError(
                f"{name} {value!r} is not a positive integer", fix=f"pass {name}=1 or more"
            )
    env = dict(env_args if env_args is not None else getattr(episodes, "env_args", {}) or {})
    first = episodes[0]
    check_rate = fps is None
    if fps is None:
        fps = _control_rate(first) or (
            float(env["control_rate_hz"]) if env.get("control_rate_hz") else None
        )
        if fps is None:
            raise DatasetError(
                "no fps: the episodes record no meta['control_rate_hz'] and env_args has none",
                fix="pass fps= (--fps), the rate the episodes were recorded at",
            )
    fps_int = _check_fps(float(fps))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp creates 0700; give the usual permissions
    try:
        _write_dataset(
            tmp,
            episodes,
            first,
            check_rate=check_rate,
            fps=fps_int,
            robot_type=robot_type,
            codec=codec,
            encoder=encoder,
            pix_fmt=pix_fmt,
            crf=crf,
            gop=gop,
            repo_id=repo_id,
            chunks_size=chunks_size,
            data_files_size_in_mb=data_files_size_in_mb,
            video_files_size_in_mb=video_files_size_in_mb,
            obs_keys=obs_keys,
            float_dtype=float_dtype,
            env_args=env,
        )
        _check_out(out)  # nobody wrote it meanwhile
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


@dataclass
class _DataWriter:
    """Appends episodes' rows to data parquet files, one row group per episode."""

    root: Path
    schema: pa.Schema
    chunks_size: int
    max_bytes: int
    chunk: int = 0
    file: int = 0
    bytes: int = 0
    writer: Any = None

    def add(self, table: pa.Table) -> dict[str, int]:
        if self.writer is not None and self.bytes >= self.max_bytes:
            self.close()
            self.chunk, self.file = _next_file(self.chunk, self.file, self.chunks_size)
        if self.writer is None:
            path = self.root / DATA_PATH.format(chunk_index=self.chunk, file_index=self.file)
            path.parent.mkdir(parents=True, exist_ok=True)
            self.writer = pq.ParquetWriter(str(path), self.schema, compression="snappy")
            self.bytes = 0
        self.writer.write_table(table)
        self.bytes += table.nbytes
        return {"data/chunk_index": self.chunk, "data/file_index": self.file}

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


@dataclass
class _Totals:
    frames: int = 0
    tasks: dict[str, int] = field(default_factory=dict)
    stats: dict[str, list[dict[str, np.ndarray]]] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    obs_ndim: dict[str, int] = field(default_factory=dict)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _write_dataset(
    root: Path,
    episodes: Sequence[EpisodeData],
    first: EpisodeData,
    *,
    check_rate: bool,
    fps: int,
    robot_type: str,
    codec: str,
    encoder: str,
    pix_fmt: str,
    crf: int | None,
    gop: int,
    repo_id: str | None,
    chunks_size: int,
    data_files_size_in_mb: int,
    video_files_size_in_mb: int,
    obs_keys: Sequence[str] | None,
    float_dtype: str | None,
    env_args: Mapping[str, Any],
) -> None:
    features = _features(first, env_args, obs_keys, float_dtype)
    videos = [f for f in features if f.video]
    columns = [f for f in features if not f.video]
    for f in videos:
        height, width = f.shape[:2]
        if pix_fmt in ("yuv420p", "yuvj420p", "nv12") and (height % 2 or width % 2):
            raise DatasetError(
                f"{first.source}: camera {f.ours!r} frames are {height}x{width}; pix_fmt "
                f"{pix_fmt!r} needs an even height and width",
                fix="pass pix_fmt='yuv444p' (h264/hevc), or crop/pad the frames to even sizes",
            )
    options = {"g": str(gop)}
    if crf is not None:
        options["crf"] = str(crf)
    if encoder == "libsvtav1":
        options["preset"] = "12"  # lerobot's default preset for libsvtav1
    writers = {
        f.key: _VideoWriter(
            root,
            f.key,
            fps,
            encoder,
            pix_fmt,
            options,
            chunks_size,
            video_files_size_in_mb * 1024**2,
        )
        for f in videos
    }
    all_columns = [
        *columns,
        *(_Feature(k, k, v["dtype"], (1,)) for k, v in DEFAULT_FEATURES.items()),
    ]
    hf_meta = {"info": {"features": {f.key: f.hf_feature() for f in all_columns}}}
    schema = pa.schema([pa.field(f.key, f.arrow_type()) for f in all_columns]).with_metadata(
        {b"huggingface": json.dumps(hf_meta).encode()}
    )
    data = _DataWriter(root, schema, chunks_size, data_files_size_in_mb * 1024**2)
    totals = _Totals()
    try:
        for index in range(len(episodes)):
            ep = first if index == 0 else episodes[index]
            rate = _control_rate(ep) if check_rate else None
            if rate is not None and abs(rate - fps) > 1e-9:
                raise DatasetError(
                    f"{ep.source or f'episode {index}'} was recorded at {rate} Hz, the first "
                    f"episode at {fps} Hz; a LeRobotDataset has one fps",
                    fix="export the episodes of each rate separately, or pass fps= (--fps)",
                )
            _write_episode(root, index, ep, features, writers, data, totals, fps)
    finally:
        data.close()
        for writer in writers.values():
            writer.close()

    info_features: dict[str, Any] = {}
    for f in features:
        info_features[f.key] = f.describe()
        if f.video:
            first_path = writers[f.key].first_path
            assert first_path is not None
            info_features[f.key]["info"] = _video_info(first_path)
    info_features.update(json.loads(json.dumps(DEFAULT_FEATURES)))
    # key order as lerobot's create_empty_dataset_info writes info.json
    info = {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": robot_type,
        "total_episodes": len(totals.rows),
        "total_frames": totals.frames,
        "total_tasks": len(totals.tasks),
        "chunks_size": chunks_size,
        "data_files_size_in_mb": data_files_size_in_mb,
        "video_files_size_in_mb": video_files_size_in_mb,
        "fps": fps,
        "splits": {"train": f"0:{len(totals.rows)}"},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH if videos else None,
        "features": info_features,
    }
    _write_json(root / INFO_PATH, info)
    stats = {
        key: {k: _nested(v) for k, v in _dataset_stats(per_episode).items()}
        for key, per_episode in totals.stats.items()
    }
    _write_json(root / STATS_PATH, stats)
    (root / TASKS_PATH).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(_tasks_table(list(totals.tasks)), str(root / TASKS_PATH))
    episodes_path = root / EPISODES_PATH.format(chunk_index=0, file_index=0)
    episodes_path.parent.mkdir(parents=True, exist_ok=True)
    names = list(totals.rows[0])
    pq.write_table(pa.table({n: [row[n] for row in totals.rows] for n in names}), episodes_path)
    _write_json(
        root / EMBODIED_META_PATH,
        {
            "format": "embodied-lerobot-export",
            "repo_id": repo_id,
            "codec": codec,
            "env_args": json.loads(_dumps(dict(env_args))),
            "obs_ndim": totals.obs_ndim,
        },
    )


def _write_episode(
    root: Path,
    index: int,
    ep: EpisodeData,
    features: Sequence[_Feature],
    writers: Mapping[str, _VideoWriter],
    data: _DataWriter,
    totals: _Totals,
    fps: int,
) -> None:
    n = len(ep)
    if n == 0:
        raise DatasetError(f"{ep.source or f'episode {index}'} has no steps", fix="drop it")
    task = _text(ep.attrs.get("instruction", ""))
    task_index = totals.tasks.setdefault(task, len(totals.tasks))
    arrays: dict[str, np.ndarray] = {}
    images: dict[str, np.ndarray] = {}
    for f in features:
        if f.ours == "actions":
            arr = np.asarray(ep.actions)
        elif f.ours == "rewards":
            arr = np.asarray(ep.rewards)
        elif f.ours == "dones":
            arr = np.asarray(ep.dones).astype(bool)
        elif f.ours in ep.obs:
            arr = np.asarray(ep.obs[f.ours])
            totals.obs_ndim.setdefault(f.ours, arr.ndim)
        else:
            raise DatasetError(
                f"{ep.source or f'episode {index}'} lacks observation {f.ours!r}, which the "
                f"first episode has (keys: {sorted(ep.obs)})",
                fix="export episodes with the same observations, or pass obs_keys=",
            )
        if f.scalar and arr.ndim == 2 and arr.shape[1:] == (1,):
            arr = arr[:, 0]
        expected = (n,) if f.scalar else (n, *f.shape)
        if arr.shape != expected:
            raise DatasetError(
                f"{ep.source or f'episode {index}'}: {f.ours!r} has shape {arr.shape}, expected "
                f"{expected} (the first episode's, with {n} steps)",
                fix="export episodes with the same observation/action shapes",
            )
        if f.video:
            images[f.key] = arr
        else:
            arrays[f.key] = arr.astype(f.dtype, copy=False)
    frame_index = np.arange(n, dtype=np.int64)
    arrays["timestamp"] = (frame_index / fps).astype(np.float32)
    arrays["frame_index"] = frame_index
    arrays["episode_index"] = np.full(n, index, np.int64)
    arrays["index"] = np.arange(totals.frames, totals.frames + n, dtype=np.int64)
    arrays["task_index"] = np.full(n, task_index, np.int64)

    table_columns = []
    for name in data.schema.names:
        arr = arrays[name]
        typ = data.schema.field(name).type
        if pa.types.is_fixed_size_list(typ):
            flat = pa.array(np.ascontiguousarray(arr).reshape(-1), type=typ.value_type)
            table_columns.append(pa.FixedSizeListArray.from_arrays(flat, typ.list_size))
        else:
            table_columns.append(pa.array(arr, type=typ))
    location = data.add(pa.Table.from_arrays(table_columns, schema=data.schema))

    row: dict[str, Any] = {"episode_index": index, "tasks": [task], "length": n}
    row.update(location)
    row["dataset_from_index"] = totals.frames
    row["dataset_to_index"] = totals.frames + n
    for key, frames in images.items():
        row.update(writers[key].add_episode(frames))
    episode_stats: dict[str, dict[str, np.ndarray]] = {}
    for f in features:
        if f.video:
            episode_stats[f.key] = _image_stats(images[f.key])
        else:
            episode_stats[f.key] = _vector_stats(arrays[f.key])
    for key in DEFAULT_FEATURES:
        # lerobot's add_frame keeps timestamps as float64 frame_index / fps for the stats
        values = frame_index / fps if key == "timestamp" else arrays[key]
        episode_stats[key] = _vector_stats(values)
    for key, stats in episode_stats.items():
        totals.stats.setdefault(key, []).append(stats)
        for stat in (*_STAT_ORDER, *_quantile_keys()):
            row[f"stats/{key}/{stat}"] = _nested(stats[stat])
    row["meta/episodes/chunk_index"] = 0
    row["meta/episodes/file_index"] = 0
    attrs = {k: v for k, v in ep.attrs.items() if k != "instruction"}
    row[_EMBODIED_ATTRS] = _dumps(attrs)
    row[_EMBODIED_SOURCE] = ep.source
    totals.rows.append(row)
    totals.frames += n
    if ep.extras:
        path = root / EXTRAS_PATH.format(episode_index=index)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as fh:
            arrays_out: dict[str, Any] = {k: np.asarray(v) for k, v in ep.extras.items()}
            np.savez(fh, **arrays_out)


# ---- import --------------------------------------------------------------------------------


def is_lerobot_dataset(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a folder with ``meta/info.json`` (a LeRobotDataset)."""
    return (Path(path) / INFO_PATH).is_file()


def _column_values(column: pa.ChunkedArray | pa.Array, shape: Sequence[int]) -> np.ndarray:
    """A parquet column as ``(N, *shape)`` (``(N,)`` for shape ``[1]``) numpy array."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    n = len(array)
    while (
        pa.types.is_list(array.type)
        or pa.types.is_large_list(array.type)
        or (pa.types.is_fixed_size_list(array.type))
    ):
        array = array.flatten()
    values = array.to_numpy(zero_copy_only=False)
    if list(shape) in ([1], []):
        return values.reshape(n, -1)[:, 0] if values.size == n else values.reshape(n, -1)
    return values.reshape(n, *shape)


_PARQUET_ERRORS = (OSError, pa.ArrowException, ValueError)
"""What pyarrow raises reading a damaged parquet file: ``OSError`` and ``ArrowException``s,
and ``UnicodeDecodeError`` (a ``ValueError``) for a column name that is not UTF-8."""
_INFO_FIX = "restore meta/info.json from the dataset's source (e.g. re-download it)"


def _info_features(info: Mapping[str, Any], path: Path) -> dict[str, dict[str, Any]]:
    """``info["features"]``, checked: feature name -> object with a ``dtype`` string and an
    optional ``shape`` list of sizes (what the reader indexes and reshapes by).

    Raises:
        DatasetError: another structure, naming ``path`` (``meta/info.json``).
    """
    features = info.get("features", {})
    if not isinstance(features, dict):
        raise DatasetError(
            f"{str(path)!r}: 'features' is a {type(features).__name__}, not an object",
            fix=_INFO_FIX,
        )
    for key, ft in features.items():
        if not isinstance(ft, dict) or not isinstance(ft.get("dtype"), str):
            raise DatasetError(
                f"{str(path)!r}: feature {key!r} is {ft!r}, not an object with a 'dtype' string",
                fix=_INFO_FIX,
            )
        shape = ft.get("shape", [1])
        sizes = isinstance(shape, list) and all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        )
        if not sizes:
            raise DatasetError(
                f"{str(path)!r}: feature {key!r} has shape {shape!r}, not a list of sizes",
                fix=_INFO_FIX,
            )
    return dict(features)


_EPISODE_INTS = ("episode_index", "length", "data/chunk_index", "data/file_index")
"""Columns of ``meta/episodes`` that locate an episode's rows."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _obs_name(key: str, dtype: str) -> str | None:
    """Our observation key of lerobot feature ``key`` (None: not an observation)."""
    if not key.startswith("observation."):
        return None
    rest = key.removeprefix("observation.")
    if dtype in ("video", "image"):
        return "image." + rest.removeprefix("images.")
    return rest


class LeRobotDataset(Sequence[EpisodeData]):
    """Read-only view over a LeRobotDataset v3 folder, episodes as :class:`EpisodeData`.

    ``observation.state`` -> ``obs["state"]`` (T, D); ``observation.images.<cam>`` ->
    ``obs["image.<cam>"]`` (T, H, W, 3) uint8, decoded with PyAV (each frame the one at the
    episode's ``from_timestamp`` + the frame's ``timestamp`` in its video, within
    :data:`TOLERANCE_S`); other ``observation.<key>`` -> ``obs[<key>]``; ``action`` ->
    ``actions``; ``next.reward``/``next.done`` -> ``rewards``/``dones`` (zeros, and a done last
    step, when absent); the frame's task -> ``attrs["instruction"]``; other per-frame features
    (e.g. ``next.success``) -> ``extras``.

    Args:
        path: The dataset folder (holding ``meta/info.json``).
        obs_keys: Our observation keys to load (default: all); videos not asked for are not
            decoded.

    Attributes:
        info: ``meta/info.json``.
        fps: Frames per second.
        features: ``info["features"]``.
        tasks: task_index -> task string.
        env_args: ``meta/embodied.json``'s ``env_args`` for our exports; else what info tells
            (``robot_type``, ``control_rate_hz``, state/action names).

    Raises:
        DatasetError: not a v3 folder (no ``meta/info.json``, a v2.x dataset), or missing or
            unreadable metadata files.
    """

    def __init__(self, path: str | os.PathLike[str], obs_keys: Sequence[str] | None = None) -> None:
        self.path = Path(path)
        self.obs_keys = None if obs_keys is None else list(obs_keys)
        info_path = self.path / INFO_PATH
        if not info_path.is_file():
            raise DatasetError(
                f"{str(self.path)!r} is not a LeRobotDataset folder: {INFO_PATH} is missing",
                fix="pass the dataset's root folder (the one holding meta/, data/, videos/)",
            )
        self.info: dict[str, Any] = read_json_file(
            info_path,
            what="LeRobotDataset info",
            error=DatasetError,
            fix="restore meta/info.json from the dataset's source (e.g. re-download it)",
        )
        version = str(self.info.get("codebase_version", ""))
        if not version.startswith("v3."):
            fix = _V2_FIX if version.startswith(("v2", "v1")) else "use a v3.0 dataset"
            raise DatasetError(
                f"{str(info_path)!r}: codebase_version {version!r} is not supported; "
                f"only LeRobotDataset v3.x is read",
                fix=fix,
            )
        self.features: dict[str, dict[str, Any]] = _info_features(self.info, info_path)
        try:
            self.fps = int(self.info["fps"])
        except (KeyError, TypeError, ValueError, OverflowError) as exc:  # inf: OverflowError
            raise DatasetError(
                f"{str(info_path)!r} has no integer 'fps' ({exc})", fix=_INFO_FIX
            ) from exc
        if self.fps <= 0:  # timestamps are frame / fps
            raise DatasetError(
                f"{str(info_path)!r}: 'fps' {self.fps} is not positive", fix=_INFO_FIX
            )
        for key in ("data_path", "video_path"):
            if not isinstance(self.info.get(key) or "", str):
                raise DatasetError(
                    f"{str(info_path)!r}: {key!r} is {self.info[key]!r}, not a path template",
                    fix=_INFO_FIX,
                )
        self.tasks = self._read_tasks()
        self._episodes = self._read_episodes()
        self._embodied = self._read_embodied()
        self.env_args: dict[str, Any] = self._env_args()

    # -- metadata --

    def _read_parquet(self, path: Path, what: str, **kwargs: Any) -> pa.Table:
        if not path.is_file():
            raise DatasetError(
                f"LeRobotDataset {str(self.path)!r} lacks {what} {str(path)!r}",
                fix="the dataset is incomplete; download or export it again",
            )
        try:
            table = pq.read_table(str(path), **kwargs)
            # parquet keeps no UTF-8 check of its strings: a damaged byte would surface as a
            # UnicodeDecodeError wherever a value is converted; full validation finds it here
            table.validate(full=True)
            return table
        except _PARQUET_ERRORS as exc:
            raise DatasetError(
                f"cannot read {what} {str(path)!r}: {exc}",
                fix="the file is damaged; download or export the dataset again",
            ) from exc

    def _read_schema(self, path: Path, what: str) -> pa.Schema:
        try:
            return pq.read_schema(str(path))
        except _PARQUET_ERRORS as exc:
            raise DatasetError(
                f"cannot read {what} {str(path)!r}: {exc}",
                fix="the file is damaged; download or export the dataset again",
            ) from exc

    def _read_tasks(self) -> dict[int, str]:
        path = self.path / TASKS_PATH
        if not path.exists() and not int(self.info.get("total_tasks", 0) or 0):
            return {}
        table = self._read_parquet(path, "task table")
        names = table.column_names
        text_column = None
        pandas_meta = (table.schema.metadata or {}).get(b"pandas")
        if pandas_meta:
            try:
                index_columns = json.loads(pandas_meta).get("index_columns", [])
            except (ValueError, AttributeError):
                index_columns = []
            text_column = next((c for c in index_columns if isinstance(c, str)), None)
        if text_column not in names:
            strings = [
                n
                for n in names
                if pa.types.is_string(table.schema.field(n).type)
                or pa.types.is_large_string(table.schema.field(n).type)
            ]
            text_column = next((n for n in ("task", "__index_level_0__") if n in strings), None)
            text_column = text_column or (strings[0] if strings else None)
        if text_column is None or "task_index" not in names:
            raise DatasetError(
                f"task table {str(path)!r} has columns {names}, not a task string and task_index",
                fix="restore meta/tasks.parquet from the dataset's source",
            )
        indices = table.column("task_index").to_pylist()
        texts = table.column(text_column).to_pylist()
        if not all(_is_int(i) for i in indices):
            raise DatasetError(
                f"task table {str(path)!r}: task_index holds {indices!r}, not integers",
                fix="restore meta/tasks.parquet from the dataset's source",
            )
        return {i: str(t) for i, t in zip(indices, texts, strict=True)}

    def _read_episodes(self) -> list[dict[str, Any]]:
        folder = self.path / EPISODES_DIR
        files = sorted(folder.glob("*/*.parquet")) if folder.is_dir() else []
        if not files:
            raise DatasetError(
                f"LeRobotDataset {str(self.path)!r} has no episode table "
                f"({EPISODES_DIR}/chunk-*/file-*.parquet)",
                fix="the dataset is incomplete; download or export it again",
            )
        rows: list[dict[str, Any]] = []
        for file in files:
            schema = self._read_schema(file, "episode table")
            columns = [n for n in schema.names if not n.startswith("stats/")]
            table = self._read_parquet(file, "episode table", columns=columns).to_pylist()
            for row in table:
                # the columns every episode is located by: integers, or the file is damaged
                bad = [k for k in _EPISODE_INTS if not _is_int(row.get(k))]
                if bad:
                    raise DatasetError(
                        f"episode table {str(file)!r}: a row's {', '.join(bad)} is "
                        f"{[row.get(k) for k in bad]!r}, not an integer (None: no such column)",
                        fix="restore meta/episodes/ from the dataset's source",
                    )
            rows.extend(table)
        rows.sort(key=lambda r: int(r["episode_index"]))
        for i, row in enumerate(rows):
            if int(row["episode_index"]) != i:
                raise DatasetError(
                    f"LeRobotDataset {str(self.path)!r}: episode indices are not 0..N-1 "
                    f"(found {int(row['episode_index'])} at position {i})",
                    fix="restore meta/episodes/ from the dataset's source",
                )
        return rows

    def _read_embodied(self) -> dict[str, Any]:
        path = self.path / EMBODIED_META_PATH
        if not path.is_file():
            return {}
        return read_json_file(path, what="embodied export metadata", error=DatasetError)

    def _env_args(self) -> dict[str, Any]:
        if isinstance(self._embodied.get("env_args"), dict):
            return dict(self._embodied["env_args"])
        env: dict[str, Any] = {
            "robot_type": self.info.get("robot_type"),
            "control_rate_hz": self.fps,
        }
        for key, target in (
            ("observation.state", ("observation", "state")),
            ("action", ("action",)),
        ):
            names = self.features.get(key, {}).get("names")
            if isinstance(names, dict) and len(names) == 1:  # v2-style {"motors": [...]}
                names = next(iter(names.values()))
            if isinstance(names, list) and all(isinstance(n, str) for n in names):
                node = env
                for part in target:
                    node = node.setdefault(part, {})
                node["names"] = list(names)
        return env

    @property
    def stats(self) -> dict[str, Any]:
        """``meta/stats.json`` (empty if the dataset has none)."""
        path = self.path / STATS_PATH
        if not path.is_file():
            return {}
        return read_json_file(path, what="LeRobotDataset stats", error=DatasetError)

    @property
    def video_keys(self) -> list[str]:
        """lerobot keys of the video features."""
        return [k for k, f in self.features.items() if f.get("dtype") == "video"]

    @property
    def num_frames(self) -> int:
        """Frames in all episodes."""
        return int(sum(int(r["length"]) for r in self._episodes))

    def episode_row(self, i: int) -> dict[str, Any]:
        """Episode ``i``'s row of ``meta/episodes`` (without the stats columns)."""
        return dict(self._episodes[i])

    # -- episodes --

    def __len__(self) -> int:
        return len(self._episodes)

    def _wanted(self, name: str | None) -> bool:
        return name is not None and (self.obs_keys is None or name in self.obs_keys)

    def __getitem__(self, i: int) -> EpisodeData:  # type: ignore[override]
        if not -len(self) <= i < len(self):
            raise IndexError(f"episode {i} out of range for {len(self)} episodes")
        i %= len(self)
        try:
            return self._episode(i)
        except (KeyError, TypeError, ValueError, IndexError, ArithmeticError) as exc:
            # Columns of the wrong type, nulls, sizes other than info.json's shapes: the data
            # file disagrees with the metadata (pa.ArrowInvalid is a ValueError).
            raise DatasetError(
                f"LeRobotDataset {str(self.path)!r}: episode {i} does not match "
                f"{INFO_PATH} and {EPISODES_DIR} ({type(exc).__name__}: {exc})",
                fix="the dataset is damaged or inconsistent; download or export it again",
            ) from exc

    def _episode(self, i: int) -> EpisodeData:
        """Episode ``i`` (in range); its data, video and extras files as they are."""
        row = self._episodes[i]
        data_rel = str(self.info.get("data_path", DATA_PATH)).format(
            chunk_index=int(row["data/chunk_index"]), file_index=int(row["data/file_index"])
        )
        data_path = self.path / data_rel
        source = f"{data_path}::episode_index={i}"
        columns = []
        for key, ft in self.features.items():
            if ft.get("dtype") == "video":
                continue
            name = _obs_name(key, str(ft.get("dtype")))
            if name is None or self._wanted(name):
                columns.append(key)
        columns.extend(k for k in DEFAULT_FEATURES if k not in columns)
        schema = self._read_schema(data_path, "data file") if data_path.is_file() else None
        if schema is not None:
            missing = [c for c in ("episode_index", "frame_index") if c not in schema.names]
            if missing:
                raise DatasetError(
                    f"{data_path}: columns {missing} are missing", fix="export the dataset again"
                )
            columns = [c for c in columns if c in schema.names]
        table = self._read_parquet(
            data_path, "data file", columns=columns, filters=[("episode_index", "=", i)]
        )
        order = np.argsort(table.column("frame_index").to_numpy(), kind="stable")
        table = table.take(pa.array(order))
        n = table.num_rows
        if n != int(row["length"]):
            raise DatasetError(
                f"{source}: {n} frames in the data file but the episode table says "
                f"{int(row['length'])}",
                fix="the dataset is inconsistent; download or export it again",
            )

        def values(key: str) -> np.ndarray:
            return _column_values(table.column(key), self.features[key].get("shape", [1]))

        obs: dict[str, np.ndarray] = {}
        extras: dict[str, np.ndarray] = {}
        for key, ft in self.features.items():
            dtype = str(ft.get("dtype"))
            name = _obs_name(key, dtype)
            if name is not None and not self._wanted(name):
                continue
            if dtype == "video":
                if name is not None:
                    timestamps = (
                        table.column("timestamp").to_numpy().astype(np.float64)
                        if "timestamp" in table.column_names
                        else np.arange(n) / self.fps
                    )
                    obs[name] = self._decode_video(key, row, timestamps, i)
                continue
            if key not in table.column_names or key in DEFAULT_FEATURES:
                continue
            if dtype == "image":
                obs[name or key] = self._decode_images(table.column(key), source, key)
            elif key in ("action", "next.reward", "next.done"):
                continue
            elif name is not None:
                arr = values(key)
                two_d = name == "state" or self._embodied.get("obs_ndim", {}).get(name) == 2
                obs[name] = arr[:, None] if two_d and arr.ndim == 1 else arr
            elif dtype not in ("string", "language"):
                extras[key] = values(key)
        if "action" not in table.column_names:
            raise DatasetError(
                f"{source} has no 'action' column (features: {sorted(self.features)})",
                fix="use a dataset that records actions",
            )
        actions = values("action")
        if actions.ndim == 1:
            actions = actions[:, None]
        if "next.reward" in table.column_names:
            rewards = values("next.reward").reshape(n)
        else:
            rewards = np.zeros(n)
        if "next.done" in table.column_names:
            dones = values("next.done").reshape(n).astype(np.uint8)
        else:
            dones = np.eye(1, n, n - 1, dtype=np.uint8).ravel()
        attrs = self._attrs(row, table, i)
        extras.update(self._extras(i))
        return EpisodeData(obs, actions, rewards, dones, attrs, extras, source)

    def __iter__(self) -> Iterator[EpisodeData]:
        for i in range(len(self)):
            yield self[i]

    def _attrs(self, row: Mapping[str, Any], table: pa.Table, i: int) -> dict[str, Any]:
        attrs: dict[str, Any] = {}
        raw = row.get(_EMBODIED_ATTRS)
        if isinstance(raw, str) and raw:
            attrs.update(
                parse_json_text(
                    raw,
                    f"{self.path}::{EPISODES_DIR}[{i}].{_EMBODIED_ATTRS}",
                    what="episode attributes",
                    error=DatasetError,
                    fix="export the dataset again",
                )
            )
        else:
            attrs["meta"] = {"control_rate_hz": float(self.fps), "lerobot_episode_index": i}
            attrs["tasks"] = [str(t) for t in row.get("tasks") or []]
        task = None
        if "task_index" in table.column_names and table.num_rows:
            task = self.tasks.get(int(table.column("task_index")[0].as_py()))
        if task is None and row.get("tasks"):
            task = str(row["tasks"][0])
        attrs["instruction"] = task or ""
        return attrs

    def _extras(self, i: int) -> dict[str, np.ndarray]:
        path = self.path / EXTRAS_PATH.format(episode_index=i)
        if not path.is_file():
            return {}
        try:
            return _read_npz(path)
        except _NPZ_ERRORS as exc:
            raise DatasetError(
                f"cannot read episode extras {str(path)!r}: {exc}",
                fix="the file is damaged; export the dataset again",
            ) from exc

    def _decode_images(self, column: pa.ChunkedArray, source: str, key: str) -> np.ndarray:
        """Frames of an ``image`` feature (PNG/JPEG bytes in the parquet file)."""
        frames = []
        for item in column.to_pylist():
            data = item.get("bytes") if isinstance(item, dict) else item
            if not data:
                raise DatasetError(
                    f"{source}: image {key!r} has no embedded bytes (path {item!r})",
                    fix="use a dataset with embedded images (lerobot embeds them in parquet)",
                )
            with av.open(io.BytesIO(data), mode="r") as container:
                frame = next(container.decode(video=0))
                frames.append(frame.to_ndarray(format="rgb24"))
        return np.stack(frames)

    def _decode_video(
        self, key: str, row: Mapping[str, Any], timestamps: np.ndarray, i: int
    ) -> np.ndarray:
        prefix = f"videos/{key}/"
        try:
            rel = str(self.info.get("video_path") or VIDEO_PATH).format(
                video_key=key,
                chunk_index=int(row[prefix + "chunk_index"]),
                file_index=int(row[prefix + "file_index"]),
            )
            start = float(row[prefix + "from_timestamp"])
        except (KeyError, TypeError) as exc:
            raise DatasetError(
                f"LeRobotDataset {str(self.path)!r}: episode {i} has no {prefix}* columns ({exc})",
                fix="restore meta/episodes/ from the dataset's source",
            ) from exc
        path = self.path / rel
        if not path.is_file():
            raise DatasetError(
                f"LeRobotDataset {str(self.path)!r} lacks video {str(path)!r} (episode {i}, {key})",
                fix="the dataset is incomplete; download or export it again",
            )
        queries = start + timestamps
        if not np.isfinite(queries).all():  # a null or NaN from_timestamp or timestamp
            raise DatasetError(
                f"LeRobotDataset {str(self.path)!r}: episode {i}'s frame times for {key} "
                f"({EPISODES_DIR} from_timestamp + the data's timestamp) are not all finite",
                fix="the dataset is damaged; download or export it again",
            )
        try:
            loaded_ts, frames = _decode_range(path, float(queries.min()), float(queries.max()))
        except (av.error.FFmpegError, StopIteration, IndexError, UnicodeDecodeError) as exc:
            # UnicodeDecodeError: PyAV decoding damaged metadata text (e.g. the MP4's brand)
            raise DatasetError(
                f"cannot decode video {str(path)!r}: {exc}",
                fix="the file is damaged or its codec unsupported by PyAV; re-download it",
            ) from exc
        if not frames:
            raise DatasetError(
                f"{str(path)!r} holds no frames in [{queries.min():.4f}, {queries.max():.4f}] s "
                f"(episode {i}, {key})",
                fix="the video is shorter than meta/episodes says; re-download the dataset",
            )
        pos = np.clip(np.searchsorted(loaded_ts, queries), 1, max(len(loaded_ts) - 1, 1))
        left = np.clip(pos - 1, 0, len(loaded_ts) - 1)
        right = np.clip(pos, 0, len(loaded_ts) - 1)
        pick = np.where(
            np.abs(loaded_ts[left] - queries) <= np.abs(loaded_ts[right] - queries), left, right
        )
        error = np.abs(loaded_ts[pick] - queries)
        if (error > TOLERANCE_S).any():
            bad = int(np.argmax(error > TOLERANCE_S))
            raise DatasetError(
                f"{str(path)!r}: no frame within {TOLERANCE_S} s of {queries[bad]:.6f} s "
                f"(episode {i}, frame {bad}, {key}); nearest at {loaded_ts[pick[bad]]:.6f} s",
                fix="the video's timestamps disagree with meta/episodes from_timestamp and the "
                "data's timestamp column; re-export or re-download the dataset",
            )
        return np.stack([frames[j] for j in pick])


_NPZ_ERRORS = (
    OSError,
    EOFError,
    ValueError,
    RuntimeError,  # zipfile: an encrypted or (NotImplementedError) unknown-method member
    zipfile.BadZipFile,
    zlib.error,
    tokenize.TokenError,  # numpy's header parser on an unterminated header
)
"""What reading a damaged ``.npz`` file raises."""


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    """The arrays of an ``np.savez`` file (no pickled objects), as ``np.load`` reads them.

    Each array's header must declare exactly the bytes that follow it: ``np.load`` allocates
    what a header declares before reading, so a damaged shape would ask for terabytes.

    Raises:
        ValueError: a header that does not match its data, or holds objects; and the rest
            of :data:`_NPZ_ERRORS` for a damaged archive.
    """
    fmt = np.lib.format
    arrays: dict[str, np.ndarray] = {}
    with zipfile.ZipFile(path) as archive:
        for member in archive.infolist():
            with archive.open(member) as fh:
                major, _ = fmt.read_magic(fh)
                read_header = fmt.read_array_header_1_0 if major == 1 else fmt.read_array_header_2_0
                shape, fortran, dtype = read_header(fh)
                data = fh.read()  # what is stored: bounded by the archive, not by the header
            if dtype.hasobject:
                raise ValueError(f"{member.filename} holds Python objects (pickles)")
            count = math.prod(shape)
            if count * dtype.itemsize != len(data):
                raise ValueError(
                    f"{member.filename} declares shape {shape} of {dtype} but holds "
                    f"{len(data)} bytes"
                )
            flat = np.frombuffer(data, dtype=dtype, count=count).copy()
            arrays[member.filename.removesuffix(".npy")] = flat.reshape(
                shape, order="F" if fortran else "C"
            )
    return arrays


def _decode_range(path: Path, first: float, last: float) -> tuple[np.ndarray, list[np.ndarray]]:
    """Decode the frames of ``path`` from ``first`` to ``last`` seconds (with tolerance)."""
    loaded_ts: list[float] = []
    frames: list[np.ndarray] = []
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        time_base = stream.time_base or Fraction(1, 1)
        # seek to the keyframe at or before `first`, as lerobot's decode_video_frames_pyav
        container.seek(
            max(0, round(first / time_base) - 1), backward=True, any_frame=False, stream=stream
        )
        for frame in container.decode(stream):
            if frame.pts is None:
                continue
            ts = float(frame.pts * time_base)
            if ts < first - TOLERANCE_S:
                continue
            if ts > last + TOLERANCE_S:
                break
            loaded_ts.append(ts)
            frames.append(frame.to_ndarray(format="rgb24"))
            if ts >= last:
                break
    return np.asarray(loaded_ts, dtype=np.float64), frames
