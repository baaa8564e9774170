"""Export our episodes as a LeRobotDataset v3.0 folder (:func:`export_lerobot`).

The counterpart of lerobot's ``dataset_writer.py``: episodes are written one at a time, their
rows appended to data parquet files and their frames to per-camera MP4 files (both rolled over
by size), then ``meta/info.json``, ``meta/stats.json``, ``meta/tasks.parquet``, the episodes
table and our ``meta/embodied.json``; the folder is built beside its destination and renamed
into place when complete.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from embodied.datasets.hdf5 import EpisodeData
from embodied.datasets.lerobot.metadata import (
    _EMBODIED_ATTRS,
    _EMBODIED_SOURCE,
    CODEBASE_VERSION,
    DATA_PATH,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_DATA_FILE_SIZE_IN_MB,
    DEFAULT_FEATURES,
    DEFAULT_VIDEO_FILE_SIZE_IN_MB,
    EMBODIED_META_PATH,
    EPISODES_PATH,
    EXTRAS_PATH,
    INFO_PATH,
    STATS_PATH,
    TASKS_PATH,
    VIDEO_PATH,
    _Feature,
    _features,
    _next_file,
    _tasks_table,
)
from embodied.datasets.lerobot.statistics import (
    _STAT_ORDER,
    _dataset_stats,
    _image_stats,
    _quantile_keys,
    _vector_stats,
)
from embodied.datasets.lerobot.video import _encoder, _video_info, _VideoWriter
from embodied.errors import ConfigError, DatasetError
from embodied.io import plain_json


def _dumps(value: Any, indent: int | None = None) -> str:
    """``value`` as JSON text: numpy values, paths and bytes converted
    (:func:`~embodied.io.json_default`), anything else written as its ``str``."""
    return json.dumps(plain_json(value, fallback=str), indent=indent, ensure_ascii=False)


def _write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # lerobot writes its JSON files with indent=4, ensure_ascii=False
    path.write_text(_dumps(value, indent=4) + "\n")


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


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
    """Write ``episodes`` as a LeRobotDataset into the empty folder ``root``.

    The steps: describe the features (from ``first``), open the video and data writers, write
    the episodes one at a time, then the metadata (:func:`_write_meta`). Arguments as
    :func:`export_lerobot`'s, checked there; ``encoder`` is ``codec``'s PyAV encoder and
    ``check_rate`` whether each episode's recorded rate must equal ``fps``.

    Raises:
        DatasetError: an episode that does not match the first one, has no steps or was
            recorded at another rate; odd frame sizes for ``pix_fmt``.
    """
    features = _features(first, env_args, obs_keys, float_dtype)
    videos = [f for f in features if f.video]
    writers = _video_writers(
        root,
        videos,
        first,
        fps=fps,
        encoder=encoder,
        pix_fmt=pix_fmt,
        crf=crf,
        gop=gop,
        chunks_size=chunks_size,
        max_bytes=video_files_size_in_mb * 1024**2,
    )
    columns = [f for f in features if not f.video]
    data = _DataWriter(root, _schema(columns), chunks_size, data_files_size_in_mb * 1024**2)
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
    info = _info(
        features,
        writers,
        totals,
        robot_type=robot_type,
        fps=fps,
        chunks_size=chunks_size,
        data_files_size_in_mb=data_files_size_in_mb,
        video_files_size_in_mb=video_files_size_in_mb,
    )
    _write_meta(root, info, totals, repo_id=repo_id, codec=codec, env_args=env_args)


def _video_writers(
    root: Path,
    videos: Sequence[_Feature],
    first: EpisodeData,
    *,
    fps: int,
    encoder: str,
    pix_fmt: str,
    crf: int | None,
    gop: int,
    chunks_size: int,
    max_bytes: int,
) -> dict[str, _VideoWriter]:
    """One :class:`_VideoWriter` per video feature (no file is opened yet).

    Args:
        root: The dataset folder.
        videos: The video features.
        first: The first episode (named in errors).
        fps: Frames per second.
        encoder: The PyAV encoder.
        pix_fmt: The pixel format.
        crf: Encoder quality (None: the codec's default).
        gop: Keyframe interval (frames).
        chunks_size: Files per ``chunk-XXX`` folder.
        max_bytes: Start a new MP4 file past this size (bytes).

    Returns:
        lerobot key -> its writer.

    Raises:
        DatasetError: a camera's frame size is odd and ``pix_fmt`` subsamples chroma.
    """
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
    return {
        f.key: _VideoWriter(root, f.key, fps, encoder, pix_fmt, options, chunks_size, max_bytes)
        for f in videos
    }


def _schema(columns: Sequence[_Feature]) -> pa.Schema:
    """The data files' schema: ``columns`` then lerobot's default ones, with the ``datasets``
    features lerobot's parquet files record."""
    all_columns = [
        *columns,
        *(_Feature(k, k, v["dtype"], (1,)) for k, v in DEFAULT_FEATURES.items()),
    ]
    hf_meta = {"info": {"features": {f.key: f.hf_feature() for f in all_columns}}}
    return pa.schema([pa.field(f.key, f.arrow_type()) for f in all_columns]).with_metadata(
        {b"huggingface": json.dumps(hf_meta).encode()}
    )


def _info(
    features: Sequence[_Feature],
    writers: Mapping[str, _VideoWriter],
    totals: _Totals,
    *,
    robot_type: str,
    fps: int,
    chunks_size: int,
    data_files_size_in_mb: int,
    video_files_size_in_mb: int,
) -> dict[str, Any]:
    """``meta/info.json`` of the written dataset, keys in the order lerobot writes them.

    Args:
        features: The exported features.
        writers: The (closed) video writers; each video feature's ``info`` is probed from
            its first file.
        totals: What the episodes added up to.
        robot_type: ``info["robot_type"]``.
        fps: Frames per second.
        chunks_size: Files per ``chunk-XXX`` folder.
        data_files_size_in_mb: The data files' size limit (MB).
        video_files_size_in_mb: The video files' size limit (MB).

    Returns:
        The ``info.json`` object.
    """
    info_features: dict[str, Any] = {}
    for f in features:
        info_features[f.key] = f.describe()
        if f.video:
            first_path = writers[f.key].first_path
            assert first_path is not None
            info_features[f.key]["info"] = _video_info(first_path)
    info_features.update(json.loads(json.dumps(DEFAULT_FEATURES)))
    # key order as lerobot's create_empty_dataset_info writes info.json
    return {
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
        "video_path": VIDEO_PATH if any(f.video for f in features) else None,
        "features": info_features,
    }


def _write_meta(
    root: Path,
    info: Mapping[str, Any],
    totals: _Totals,
    *,
    repo_id: str | None,
    codec: str,
    env_args: Mapping[str, Any],
) -> None:
    """Write ``meta/``: info, stats (aggregated over the episodes), tasks, the episodes table
    and our ``meta/embodied.json``.

    Args:
        root: The dataset folder.
        info: ``meta/info.json``.
        totals: The episodes' rows, tasks, per-episode stats and observation ranks.
        repo_id: Hub id recorded in ``meta/embodied.json``.
        codec: The video codec (lerobot's name), recorded there.
        env_args: The env description, recorded there.
    """
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
    """Append episode ``index``: its rows, frames, episodes-table row, stats and extras.

    Args:
        root: The dataset folder.
        index: The episode's index.
        ep: The episode.
        features: The exported features (the first episode's).
        writers: lerobot key -> the video feature's writer.
        data: The data files' writer.
        totals: What the earlier episodes added up to; updated.
        fps: Frames per second.

    Raises:
        DatasetError: no steps, or observations or shapes other than the first episode's.
    """
    n = len(ep)
    if n == 0:
        raise DatasetError(f"{ep.source or f'episode {index}'} has no steps", fix="drop it")
    task = _text(ep.attrs.get("instruction", ""))
    task_index = totals.tasks.setdefault(task, len(totals.tasks))
    arrays, images = _episode_arrays(ep, index, features, totals)
    frame_index = np.arange(n, dtype=np.int64)
    arrays["timestamp"] = (frame_index / fps).astype(np.float32)
    arrays["frame_index"] = frame_index
    arrays["episode_index"] = np.full(n, index, np.int64)
    arrays["index"] = np.arange(totals.frames, totals.frames + n, dtype=np.int64)
    arrays["task_index"] = np.full(n, task_index, np.int64)
    location = data.add(_table(data.schema, arrays))

    row: dict[str, Any] = {"episode_index": index, "tasks": [task], "length": n}
    row.update(location)
    row["dataset_from_index"] = totals.frames
    row["dataset_to_index"] = totals.frames + n
    for key, frames in images.items():
        row.update(writers[key].add_episode(frames))
    episode_stats = _episode_stats(features, arrays, images, frame_index, fps)
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


def _episode_arrays(
    ep: EpisodeData, index: int, features: Sequence[_Feature], totals: _Totals
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The episode's arrays by lerobot key, checked against the first episode's features.

    Args:
        ep: The episode.
        index: Its index (named in errors).
        features: The exported features.
        totals: Where each observation's rank is kept (from the first episode that has it).

    Returns:
        The columns, ``(T,)`` or ``(T, D)`` in their features' dtypes, and the video
        features' ``(T, H, W, 3)`` uint8 frames.

    Raises:
        DatasetError: an observation the episode lacks, or a shape other than the feature's.
    """
    n = len(ep)
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
    return arrays, images


def _table(schema: pa.Schema, arrays: Mapping[str, np.ndarray]) -> pa.Table:
    """The episode's rows: ``arrays`` as the columns of ``schema`` (vectors as fixed-size
    lists)."""
    table_columns = []
    for name in schema.names:
        arr = arrays[name]
        typ = schema.field(name).type
        if pa.types.is_fixed_size_list(typ):
            flat = pa.array(np.ascontiguousarray(arr).reshape(-1), type=typ.value_type)
            table_columns.append(pa.FixedSizeListArray.from_arrays(flat, typ.list_size))
        else:
            table_columns.append(pa.array(arr, type=typ))
    return pa.Table.from_arrays(table_columns, schema=schema)


def _episode_stats(
    features: Sequence[_Feature],
    arrays: Mapping[str, np.ndarray],
    images: Mapping[str, np.ndarray],
    frame_index: np.ndarray,
    fps: int,
) -> dict[str, dict[str, np.ndarray]]:
    """Stats of each of the episode's features and default columns (lerobot 0.4.4's).

    Args:
        features: The exported features.
        arrays: The episode's columns by lerobot key, default columns included.
        images: The video features' frames by lerobot key.
        frame_index: (T,) int64 frame indices.
        fps: Frames per second (timestamps are ``frame_index / fps`` seconds).

    Returns:
        lerobot key -> stat name -> value.
    """
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
    return episode_stats
