"""Read a LeRobotDataset v3.x folder like our datasets (:class:`LeRobotDataset`).

The counterpart of lerobot's ``lerobot_dataset.py`` / ``dataset_reader.py``: the metadata
(``meta/info.json``, tasks, episodes) is read and checked when the dataset is opened; an
episode's rows, video frames and extras are read when it is indexed. A damaged or
inconsistent file is a :class:`~embodied.errors.DatasetError` that names it.
"""

from __future__ import annotations

import io
import json
import math
import os
import tokenize
import zipfile
import zlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from embodied.datasets.hdf5 import EpisodeData
from embodied.datasets.lerobot.metadata import (
    _EMBODIED_ATTRS,
    _EPISODE_INTS,
    _INFO_FIX,
    _V2_FIX,
    DATA_PATH,
    DEFAULT_FEATURES,
    EMBODIED_META_PATH,
    EPISODES_DIR,
    EXTRAS_PATH,
    INFO_PATH,
    STATS_PATH,
    TASKS_PATH,
    VIDEO_PATH,
    _info_features,
    _is_int,
    _obs_name,
)
from embodied.datasets.lerobot.video import TOLERANCE_S, _decode_range
from embodied.errors import DatasetError
from embodied.io import parse_json_text, read_json_file


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
        table, source = self._episode_table(i, row)
        n = table.num_rows

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

    def _episode_table(self, i: int, row: Mapping[str, Any]) -> tuple[pa.Table, str]:
        """Episode ``i``'s rows of its data file, in frame order, and their source name.

        Only the columns of the features asked for (and lerobot's default ones) are read;
        videos are decoded separately.

        Args:
            i: The episode's index (in range).
            row: Its row of ``meta/episodes``.

        Returns:
            The table and ``<data file>::episode_index=<i>``.

        Raises:
            DatasetError: the data file is missing, damaged, lacks the index columns, or
                holds another number of frames than the episodes table says.
        """
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
        if table.num_rows != int(row["length"]):
            raise DatasetError(
                f"{source}: {table.num_rows} frames in the data file but the episode table "
                f"says {int(row['length'])}",
                fix="the dataset is inconsistent; download or export it again",
            )
        return table, source

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
