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
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from embodied.errors import DatasetError
from embodied.io import atomic_path, parse_json_text, read_json_file, write_json
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


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=lambda o: getattr(o, "tolist", lambda: str(o))()))


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
        "meta": json.dumps(_jsonable(ep.meta)),
    }
    return EpisodeData(ep.observations, ep.actions, ep.rewards, dones, attrs, extras)


def _write_group(group: h5py.Group, ep: Episode | EpisodeData, compress_images: bool) -> None:
    data = episode_data(ep) if isinstance(ep, Episode) else ep
    obs, actions, rewards, dones = data.obs, data.actions, data.rewards, data.dones
    extras, attrs = data.extras, dict(data.attrs)
    group.attrs["num_samples"] = int(actions.shape[0])
    for k, v in attrs.items():
        group.attrs[k] = json.dumps(_jsonable(v)) if isinstance(v, dict | list) else v
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
        data.attrs["env_args"] = json.dumps(_jsonable(dict(env_args or {})))
        data.attrs["total"] = int(sum(len(e) for e in episodes))
        for i, ep in enumerate(episodes):
            _write_group(data.create_group(f"demo_{i}"), ep, compress_images)


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
            with h5py.File(shard, "r") as h:
                raw = h["data"].attrs.get("env_args")
                value = json.loads(raw) if isinstance(raw, str | bytes) else None
        except (OSError, KeyError, ValueError):
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
            with h5py.File(file, "r") as h:
                if "data" not in h:
                    raise DatasetError(
                        f"{str(file)!r} has no 'data' group (keys: {list(h.keys())})",
                        fix="use a robomimic-layout file: data/demo_N/{obs,actions,rewards,dones}",
                    )
                if not self.env_args and "env_args" in h["data"].attrs:
                    raw = h["data"].attrs["env_args"]
                    if isinstance(raw, str | bytes):
                        self.env_args = parse_json_text(
                            raw,
                            f"{file}::data.attrs['env_args']",
                            what="dataset attribute env_args",
                            error=DatasetError,
                            fix=_RECOLLECT,
                        )
                names = [n for n in h["data"] if _GROUP_RE.match(n)]
        except DatasetError:
            raise  # already names the file (DatasetError is an OSError: do not wrap it again)
        except OSError as exc:
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
                actions = g["actions"][()]
                n = actions.shape[0]
                obs = {}
                for key in g["obs"]:
                    name = self.obs_key_map.get(key, key)
                    if self.obs_keys is None or name in self.obs_keys:
                        shape = g["obs"][key].shape
                        steps = shape[0] if shape else None
                        if steps != n:
                            # A wrong length silently misaligns observations with actions.
                            raise DatasetError(
                                f"{source}: observation 'obs/{key}' has {steps} steps but "
                                f"'actions' has {n}; each observation needs one entry per action",
                                fix=f"re-collect this episode, or cut/pad obs/{key} to {n} rows",
                            )
                        obs[name] = g["obs"][key][()]
                rewards = g["rewards"][()] if "rewards" in g else np.zeros(n)
                dones = g["dones"][()] if "dones" in g else np.eye(1, n, n - 1).ravel()
                extras: dict[str, np.ndarray] = {}
                g.visititems(
                    lambda name, node: (
                        extras.__setitem__(name, node[()])
                        if isinstance(node, h5py.Dataset)
                        and not name.startswith("obs/")
                        and name not in ("actions", "rewards", "dones")
                        else None
                    )
                )
                attrs = {
                    k: (v.item() if isinstance(v, np.generic) else v) for k, v in g.attrs.items()
                }
        except DatasetError:
            raise
        except OSError as exc:
            raise DatasetError(
                f"cannot read {source}: {exc}", fix="re-collect this episode"
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


def export_robomimic(src: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Merge a shard folder (or copy a file) into one robomimic HDF5 file at ``out``."""
    ds = Dataset(src)
    write_episode_file(out, list(ds), ds.env_args)
    return Path(out)
