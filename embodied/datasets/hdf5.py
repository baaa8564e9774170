"""Robomimic-style HDF5 datasets (the layout of LIBERO's official demonstrations).

One file holds ``data/demo_N/{obs/<key>, actions, rewards, dones}`` with attributes
(``data.attrs["env_args"]`` JSON, ``data/demo_N.attrs["num_samples"]``); ``demo_N`` is the
format's name of episode ``N``. We write one such file per episode (a *shard*), atomically,
into a dataset folder, so a crash mid-episode loses at most that episode;
:func:`export_robomimic` merges shards into one file. :class:`Dataset` reads a folder of
shards or any single robomimic file, e.g. LIBERO's ``*_demo.hdf5``.
"""

from __future__ import annotations

import json
import mmap
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from embodied.errors import DatasetError
from embodied.io import atomic_path, parse_json_text, plain_json, read_json_file, write_json
from embodied.loop import Episode

SHARD_PATTERN = "episode_{:06d}.hdf5"
_SHARD_RE = re.compile(r"^episode_(\d{6})\.hdf5$")
_GROUP_RE = re.compile(r"^demo_(\d+)$")
"""Name of an episode's group under ``data/`` (the robomimic format's name)."""
_FORMAT = "robomimic-shards"
_RECOLLECT = (
    "delete this shard, then run the same `embodied collect --out` with --episodes 1: it adds "
    "one episode in its place (with the next unused seed; shard numbers may skip)"
)
H5_ERRORS: tuple[type[Exception], ...] = (OSError, RuntimeError, KeyError, ValueError, TypeError)
"""What h5py raises reading a damaged file: HDF5's errors surface as ``OSError`` (unreadable
file), ``RuntimeError`` (a broken B-tree, heap or link table), ``KeyError`` (an object header
it cannot open), ``ValueError`` (a datatype it cannot represent) and ``TypeError`` (a name that
is not UTF-8, a group where a dataset belongs). Readers turn these into :class:`DatasetError`."""


@dataclass
class EpisodeData:
    """One episode as loaded from disk.

    Attributes:
        obs: Observation key -> array of length T.
        actions: (T, action_dim) float array.
        rewards: (T,) rewards.
        dones: (T,) done flags.
        attrs: Episode attributes (instruction, success, seed, ...).
        extras: Other per-step arrays (knobs, measurements, setpoints).
        source: ``file::data/demo_N`` for error messages.
    """

    obs: dict[str, np.ndarray]
    actions: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    attrs: dict[str, Any] = field(default_factory=dict)
    extras: dict[str, np.ndarray] = field(default_factory=dict)
    source: str = ""

    def __len__(self) -> int:
        return int(self.actions.shape[0])

    @property
    def instruction(self) -> str:
        """The episode's instruction, if recorded."""
        return str(self.attrs.get("instruction", ""))


def episode_data(ep: Episode) -> EpisodeData:
    """``ep`` as it is written to disk: ``actions`` are those sent to the env; knobs,
    measurements and setpoints are extras; meta is JSON in the ``meta`` attribute."""
    dones = np.zeros(len(ep), dtype=np.uint8)
    if len(ep):
        dones[-1] = 1
    extras: dict[str, np.ndarray] = {f"knobs/{k}": v for k, v in ep.knobs.items()}
    extras["measurements"] = ep.measurements
    extras["setpoints"] = ep.setpoints
    attrs: dict[str, Any] = {
        "instruction": ep.instruction,
        "success": bool(ep.success),
        "success_step": int(ep.success_step),
        "judge_score": -1.0 if ep.judge_score is None else float(ep.judge_score),
        "meta": json.dumps(plain_json(ep.meta, fallback=str)),
    }
    return EpisodeData(ep.observations, ep.actions, ep.rewards, dones, attrs, extras)


def _write_group(group: h5py.Group, ep: Episode | EpisodeData, compress_images: bool) -> None:
    data = episode_data(ep) if isinstance(ep, Episode) else ep
    obs, actions, rewards, dones = data.obs, data.actions, data.rewards, data.dones
    extras, attrs = data.extras, dict(data.attrs)
    group.attrs["num_samples"] = int(actions.shape[0])
    for k, v in attrs.items():
        group.attrs[k] = (
            json.dumps(plain_json(v, fallback=str)) if isinstance(v, dict | list) else v
        )
    og = group.create_group("obs")
    for key, arr in obs.items():
        arr = np.asarray(arr)
        if arr.dtype == np.uint8 and arr.ndim == 4 and compress_images:
            og.create_dataset(key, data=arr, chunks=(1, *arr.shape[1:]), compression="lzf")
        else:
            og.create_dataset(key, data=arr)
    group.create_dataset("actions", data=np.asarray(actions))
    group.create_dataset("rewards", data=np.asarray(rewards))
    group.create_dataset("dones", data=np.asarray(dones))
    for key, arr in extras.items():
        group.create_dataset(key, data=np.asarray(arr))


def write_episode_file(
    path: str | os.PathLike[str],
    episodes: Sequence[Episode | EpisodeData],
    env_args: Mapping[str, Any] | None = None,
    compress_images: bool = True,
    replace: bool = True,
) -> None:
    """Atomically write ``episodes`` as ``data/demo_0..N-1`` into one robomimic file.

    Args:
        path: The ``.hdf5`` file.
        episodes: The episodes, in order.
        env_args: Env description stored as ``data.attrs["env_args"]`` (JSON).
        compress_images: LZF-compress uint8 image stacks, one chunk per frame.
        replace: Replace an existing ``path``; with False an existing file is kept and
            ``FileExistsError`` is raised.
    """
    with atomic_path(path, replace=replace) as tmp, h5py.File(tmp, "w") as f:
        data = f.create_group("data")
        data.attrs["env_args"] = json.dumps(plain_json(dict(env_args or {}), fallback=str))
        data.attrs["total"] = int(sum(len(e) for e in episodes))
        for i, ep in enumerate(episodes):
            _write_group(data.create_group(f"demo_{i}"), ep, compress_images)


_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_GCOL = b"GCOL\x01\x00\x00\x00"
"""A global heap collection's signature, version 1 and zero reserved bytes (HDF5 spec III.E)."""
_GCOL_MAX_OBJECTS = 65535
"""Objects a collection can hold: their index is 16 bits (0 is its free space)."""


def check_global_heaps(path: str | os.PathLike[str]) -> None:
    """Refuse an HDF5 file whose global heap libhdf5 would decode forever.

    Variable-length strings (our JSON attributes, LIBERO's ``problem_info``) live in global
    heap collections. libhdf5 (2.0.0 too) decodes a collection object by object and never
    leaves its loop when it meets a free-space object of length 0, which one flipped bit in
    the collection's size or in an object header makes: opening such a file would hang, not
    fail. So every collection is walked here first, as libhdf5 walks it, and must be what
    libhdf5 writes: objects inside the collection, the free space (index 0) last and
    reaching exactly to its end. Files libhdf5 refuses anyway (no superblock) pass.

    Args:
        path: The HDF5 file.

    Raises:
        DatasetError: a damaged collection, naming the file and its offset.
    """
    file = Path(path)
    with open(file, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            return
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            if hasattr(mmap, "MADV_SEQUENTIAL"):  # one pass front to back (about 1 s per GB)
                mm.madvise(mmap.MADV_SEQUENTIAL)
            # the superblock sits at 0, 512, 1024, ... (after a user block); HDF5 needs it
            base = 0
            while base < size and mm[base : base + 8] != _HDF5_SIGNATURE:
                base = 512 if base == 0 else base * 2
            if base >= size or size < base + 16:
                return
            # size of lengths: byte 14 of a version 0/1 superblock, byte 10 of a 2/3 one
            length = mm[base + 14] if mm[base + 8] in (0, 1) else mm[base + 10]
            if length not in (2, 4, 8, 16):
                return  # libhdf5 refuses this superblock itself
            pos = mm.find(_GCOL)
            while pos >= 0:
                problem = _gcol_problem(mm, pos, length)
                if problem:
                    raise DatasetError(
                        f"{str(file)!r} is damaged: its global heap at byte {pos} {problem}",
                        fix=f"restore the file from its source; a shard of `embodied collect`: "
                        f"{_RECOLLECT}",
                    )
                pos = mm.find(_GCOL, pos + 1)


def _gcol_problem(mm: mmap.mmap, pos: int, length: int) -> str:
    """What is wrong with the global heap collection at ``pos`` ('' when nothing)."""

    def number(at: int, width: int) -> int:
        return int.from_bytes(mm[at : at + width], "little")

    header = obj_header = 8 + length  # signature, version, reserved, size / index, refs, size
    end = pos + number(pos + 8, length)
    if end > len(mm):
        return f"claims {end - pos} bytes, past the end of the file"
    p = pos + header
    for _ in range(_GCOL_MAX_OBJECTS + 1):
        if p + obj_header > end:
            return ""  # a tail too short for an object is free space
        index, size = number(p, 2), number(p + 8, length)
        if index == 0:  # the free space: last, up to the end exactly
            return "" if p + size == end else f"has free space of {size} bytes at byte {p}"
        p += obj_header + (size + 7) // 8 * 8
        if p > end:
            return f"holds an object (index {index}) past its end"
    return f"holds more than {_GCOL_MAX_OBJECTS} objects"


class DatasetWriter:
    """Appends episodes to a dataset folder, one atomically written shard each.

    Re-opening an existing folder continues after its highest-numbered shard (resumable
    collection; a deleted shard leaves a gap, it is never refilled), and an existing shard
    is never replaced.

    Args:
        root: Dataset folder (created if missing).
        env_args: Env description stored in every shard and in ``meta.json``. ``None``
            keeps the folder's recorded ``meta.json`` (and uses its ``env_args``).

    Raises:
        DatasetError: the folder's ``meta.json`` is unreadable or malformed.
    """

    def __init__(
        self, root: str | os.PathLike[str], env_args: Mapping[str, Any] | None = None
    ) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        meta_path = self.root / "meta.json"
        meta: dict[str, Any] = {}
        if meta_path.exists():
            meta = read_json_file(
                meta_path,
                what="dataset metadata",
                error=DatasetError,
                fix=f"repair {meta_path.name} (JSON with 'format' and 'env_args') or delete it",
            )
        shards = _shards(self.root)
        self.next_index = 1 + max((_shard_index(p) for p in shards), default=-1)
        if env_args is None:
            recorded = meta["env_args"] if "env_args" in meta else _shard_env_args(shards)
            if not isinstance(recorded, dict):
                raise DatasetError(
                    f"{str(meta_path)!r}: 'env_args' is a {type(recorded).__name__}, not an object",
                    fix=f"repair {meta_path.name} or pass env_args=",
                )
            self.env_args = dict(recorded)
            if not meta_path.exists():
                write_json(meta_path, {"format": _FORMAT, "env_args": self.env_args})
        else:
            self.env_args = dict(env_args)
            # Keep keys other tools added to meta.json; only ours are (re)written.
            write_json(meta_path, {**meta, "format": _FORMAT, "env_args": self.env_args})

    def add(self, episode: Episode | EpisodeData) -> Path:
        """Write ``episode`` as the next shard; returns its path.

        Raises:
            DatasetError: the shard's file already exists (e.g. another writer on the same
                folder); it is left untouched.
        """
        path = self.root / SHARD_PATTERN.format(self.next_index)
        try:
            if path.exists():  # fail before spending time on the write
                raise FileExistsError(path)
            write_episode_file(path, [episode], self.env_args, replace=False)
        except FileExistsError:
            raise DatasetError(
                f"shard {str(path)!r} already exists; refusing to replace a recorded episode",
                fix="let one writer at a time write into a dataset folder, or reopen the "
                "folder with a new DatasetWriter (it continues after the highest shard)",
            ) from None
        self.next_index += 1
        return path


def _shards(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if _SHARD_RE.match(p.name))


def _shard_index(path: Path) -> int:
    return int(_SHARD_RE.match(path.name).group(1))  # type: ignore[union-attr]


def _shard_env_args(shards: Sequence[Path]) -> dict[str, Any]:
    """``env_args`` recorded in the newest readable shard (a folder without ``meta.json``)."""
    for shard in reversed(shards):
        try:
            check_global_heaps(shard)
            with h5py.File(shard, "r") as h:
                raw = read_attr(h["data"], "env_args")
                value = json.loads(raw) if isinstance(raw, str | bytes) else None
        except H5_ERRORS:  # DatasetError is an OSError; json's errors are ValueErrors
            continue  # a damaged shard is reported by Dataset, not by the writer
        if isinstance(value, dict):
            return value
    return {}


class Dataset(Sequence[EpisodeData]):
    """Read-only view over a shard folder or a single robomimic HDF5 file.

    Args:
        path: A folder written by :class:`DatasetWriter`, or one ``.hdf5`` file.
        obs_keys: Observation keys to load (default: all); e.g. skip images to save memory.
        obs_key_map: Renames keys on load, e.g. ``{"agentview_rgb": "image.agentview"}``.

    Raises:
        DatasetError: the path is missing, unreadable, or not in robomimic layout.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        obs_keys: Sequence[str] | None = None,
        obs_key_map: Mapping[str, str] | None = None,
    ) -> None:
        self.path = Path(path)
        self.obs_keys = None if obs_keys is None else list(obs_keys)
        self.obs_key_map = dict(obs_key_map or {})
        if not self.path.exists():
            raise DatasetError(
                f"dataset {str(self.path)!r} does not exist",
                fix="pass a folder written by `embodied collect` or a robomimic .hdf5 file",
            )
        files = _shards(self.path) if self.path.is_dir() else [self.path]
        if not files:
            raise DatasetError(
                f"dataset folder {str(self.path)!r} holds no episode_*.hdf5 shards",
                fix="collect episodes with `embodied collect --out DIR` first",
            )
        self._index: list[tuple[Path, str]] = []
        self.env_args: dict[str, Any] = {}
        for f in files:
            for group in self._groups(f):
                self._index.append((f, group))

    def _groups(self, file: Path) -> list[str]:
        try:
            check_global_heaps(file)  # before libhdf5 reads an attribute (it could hang)
            with h5py.File(file, "r") as h:
                if "data" not in h:
                    raise DatasetError(
                        f"{str(file)!r} has no 'data' group (keys: {list(h.keys())})",
                        fix="use a robomimic-layout file: data/demo_N/{obs,actions,rewards,dones}",
                    )
                if not isinstance(h["data"], h5py.Group):
                    raise DatasetError(
                        f"{str(file)!r}: 'data' is a dataset, not a group of episodes",
                        fix=f"the file is damaged or not robomimic-layout: {_RECOLLECT}",
                    )
                if not self.env_args:
                    raw = read_attr(h["data"], "env_args")
                    if isinstance(raw, str | bytes):
                        self.env_args = parse_json_text(
                            raw,
                            f"{file}::data.attrs['env_args']",
                            what="dataset attribute env_args",
                            error=DatasetError,
                            fix=_RECOLLECT,
                        )
                # a damaged link table can yield names that are not text (bytes): not ours
                names = [n for n in h["data"] if isinstance(n, str) and _GROUP_RE.match(n)]
        except DatasetError:
            raise  # already names the file (DatasetError is an OSError: do not wrap it again)
        except H5_ERRORS as exc:
            raise DatasetError(
                f"cannot read dataset file {str(file)!r}: {exc}",
                fix=f"the file is damaged or not HDF5: {_RECOLLECT}",
            ) from exc
        return sorted(names, key=lambda n: int(n.removeprefix("demo_")))  # names match _GROUP_RE

    def __len__(self) -> int:
        return len(self._index)

    def __getitem__(self, i: int) -> EpisodeData:  # type: ignore[override]
        if not -len(self) <= i < len(self):
            raise IndexError(f"episode {i} out of range for {len(self)} episodes")
        file, group = self._index[i]
        source = f"{file}::data/{group}"
        try:
            with h5py.File(file, "r") as h:
                g = h["data"][group]
                missing = [k for k in ("obs", "actions") if k not in g]
                if missing:
                    raise DatasetError(f"{source} lacks {missing}", fix="re-collect this episode")
                if not isinstance(g, h5py.Group) or not isinstance(g["obs"], h5py.Group):
                    raise DatasetError(
                        f"{source}: the episode or its 'obs' is a dataset, not a group",
                        fix="re-collect this episode",
                    )
                actions = _array(g, "actions", source)
                if actions.ndim == 0:
                    # one row per step: a scalar has no steps (and no shape[0] to read)
                    raise DatasetError(
                        f"{source}: 'actions' is a scalar, not one row per step",
                        fix="re-collect this episode",
                    )
                n = actions.shape[0]
                obs = {}
                for key in g["obs"]:
                    name = self.obs_key_map.get(key, key)
                    if self.obs_keys is None or name in self.obs_keys:
                        node = g["obs"][key]
                        shape = node.shape if isinstance(node, h5py.Dataset) else None
                        steps = shape[0] if shape else None
                        if steps != n:
                            # A wrong length silently misaligns observations with actions.
                            raise DatasetError(
                                f"{source}: observation 'obs/{key}' has {steps} steps but "
                                f"'actions' has {n}; each observation needs one entry per action",
                                fix=f"re-collect this episode, or cut/pad obs/{key} to {n} rows",
                            )
                        obs[name] = read_array(node)
                rewards = _array(g, "rewards", source) if "rewards" in g else np.zeros(n)
                dones = _array(g, "dones", source) if "dones" in g else np.eye(1, n, n - 1).ravel()
                extras: dict[str, np.ndarray] = {}
                g.visititems(
                    lambda name, node: (
                        extras.__setitem__(name, read_array(node))
                        if isinstance(node, h5py.Dataset)
                        and not name.startswith("obs/")
                        and name not in ("actions", "rewards", "dones")
                        else None
                    )
                )
                attrs = {k: read_attr(g, k) for k in g.attrs}
        except DatasetError:
            raise
        except H5_ERRORS as exc:
            raise DatasetError(
                f"cannot read {source}: the file is damaged ({type(exc).__name__}: {exc})",
                fix=f"re-collect this episode: {_RECOLLECT}",
            ) from exc
        if isinstance(attrs.get("meta"), str | bytes):
            attrs["meta"] = parse_json_text(
                attrs["meta"],
                f"{source}.attrs['meta']",
                what="episode attribute meta",
                error=DatasetError,
                fix=_RECOLLECT,
            )
        return EpisodeData(obs, actions, rewards, dones, attrs, extras, source)

    def __iter__(self) -> Iterator[EpisodeData]:
        for i in range(len(self)):
            yield self[i]


def _array(group: h5py.Group, key: str, source: str) -> np.ndarray:
    """The dataset ``group[key]`` read whole.

    Raises:
        DatasetError: ``key`` is a group (a damaged or foreign file), naming ``source``.
    """
    node = group[key]
    if not isinstance(node, h5py.Dataset):
        raise DatasetError(
            f"{source}: {key!r} is a group, not an array", fix="re-collect this episode"
        )
    return read_array(node)


def _check_type(tid: h5py.h5t.TypeID, what: str) -> None:
    """Refuse a variable-length sequence type before libhdf5 converts a value of it.

    libhdf5 crashes the process (SIGSEGV in ``H5VL_blob_put``) converting a variable-length
    type whose kind field is damaged (one flipped bit in a string attribute's datatype
    message makes it); such a type shows as a variable-length *sequence*, which neither we
    nor LIBERO write (variable-length strings are a class of their own).

    Raises:
        TypeError: a sequence type (one of :data:`H5_ERRORS`: readers name the file).
    """
    if tid.get_class() == h5py.h5t.VLEN:
        raise TypeError(f"{what} has a variable-length sequence type")


def read_attr(obj: h5py.HLObject, name: str) -> Any:
    """Attribute ``name`` of ``obj`` (None when absent), numpy scalars as Python values.

    Raises:
        TypeError, and the other :data:`H5_ERRORS`: a damaged attribute.
    """
    if name not in obj.attrs:
        return None
    _check_type(obj.attrs.get_id(name).get_type(), f"attribute {name!r}")
    value = obj.attrs[name]
    return value.item() if isinstance(value, np.generic) else value


def read_array(node: h5py.Dataset) -> np.ndarray:
    """All of the dataset ``node``.

    Raises:
        TypeError, and the other :data:`H5_ERRORS`: a damaged dataset.
    """
    _check_type(node.id.get_type(), f"dataset {node.name!r}")
    return np.asarray(node[()])


def export_robomimic(src: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Merge a shard folder (or copy a file) into one robomimic HDF5 file at ``out``."""
    ds = Dataset(src)
    write_episode_file(out, list(ds), ds.env_args)
    return Path(out)
