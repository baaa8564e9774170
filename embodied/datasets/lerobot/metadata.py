"""The LeRobotDataset v3.0 layout: path templates, features, tasks and episode tables.

What ``meta/`` describes and where the files lie, as lerobot's ``utils.py``,
``dataset_metadata.py`` and ``feature_utils.py`` define it: the path templates, the columns
lerobot adds to every dataset, the exported features (:class:`_Feature`, our key <-> lerobot's
key, dtype, shape, names), ``meta/tasks.parquet`` as pandas writes it, and the checks of
``meta/info.json``'s features that the reader indexes by.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from embodied.datasets.hdf5 import EpisodeData
from embodied.errors import DatasetError

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
DEFAULT_FEATURES: dict[str, dict[str, Any]] = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}
"""Columns lerobot adds to every dataset (``lerobot.utils.constants.DEFAULT_FEATURES``)."""
_EMBODIED_ATTRS = "embodied/attrs"
_EMBODIED_SOURCE = "embodied/source"
_V2_FIX = (
    "convert it to v3.0 with lerobot's converter: "
    "`python -m lerobot.scripts.convert_dataset_v21_to_v30 --repo-id=<owner/name>`"
)


def _next_file(chunk: int, file: int, chunks_size: int) -> tuple[int, int]:
    """The file after ``(chunk, file)`` (lerobot's ``update_chunk_file_indices``)."""
    return (chunk + 1, 0) if file == chunks_size - 1 else (chunk, file + 1)


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
