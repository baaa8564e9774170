"""LIBERO's official demonstrations (robomimic HDF5) through :class:`embodied.datasets.Dataset`.

A LIBERO demonstration file (``<suite>/<task>_demo.hdf5``) holds ``data/demo_N`` groups with
``obs/{agentview_rgb, eye_in_hand_rgb, ee_pos, ee_ori, ee_states, gripper_states,
joint_states}``, ``actions`` (T, 7; gripper -1 open / +1 close), ``rewards``, ``dones`` and
``states``. The instruction is the one LIBERO's benchmark gives the task, read from the
task's file name (``data.attrs["bddl_file_name"]``), else ``problem_info``'s (JSON).

:func:`load_demonstrations` renames the keys to ours (:data:`LIBERO_OBS_KEY_MAP`) and adds
the ``state`` vector the env observes (ee_pos + ee_ori + gripper_states, see
:data:`sim.libero.env.STATE_SPEC`), so a policy trained on the demonstrations runs on the env.
Actions stay in LIBERO's native convention, the one :class:`sim.libero.env.LiberoEnv` takes
(gripper ``close_positive``: -1 open, +1 close); converting them to a policy's convention is
the policy processor's job.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import h5py
import numpy as np

from embodied.datasets import Dataset, EpisodeData
from embodied.datasets.hdf5 import H5_ERRORS, read_attr
from embodied.errors import DatasetError
from embodied.io import parse_json_text
from sim.libero.tasks import language_from_task_name

LIBERO_OBS_KEY_MAP: Mapping[str, str] = {
    "agentview_rgb": "image.agentview",
    "eye_in_hand_rgb": "image.eye_in_hand",
    "ee_pos": "ee_pos",
    "ee_ori": "ee_ori",
    "ee_states": "ee_states",
    "gripper_states": "gripper_states",
    "joint_states": "joint_states",
}
"""LIBERO demonstration obs key -> our observation key (cameras become ``image.<camera>``)."""

STATE_PARTS = ("ee_pos", "ee_ori", "gripper_states")
"""Demonstration obs keys concatenated (in this order) into the 8-dim ``state`` vector."""
_DAMAGED_FIX = (
    "the file is damaged: restore it from its source (LIBERO's files: download the suite "
    "again; files of `embodied collect --format libero`: collect them again)"
)


class LiberoDemonstrations(Dataset):
    """LIBERO demonstration file(s) as a :class:`Dataset` with our key names and a ``state`` vector.

    Actions are returned as LIBERO stores them (gripper -1 open, +1 close).

    Args:
        path: One LIBERO ``*_demo.hdf5`` file (or a folder of our shards in that layout).
        obs_keys: Keys to load after renaming (default: all); ``state`` is built when its
            parts are loaded.

    Raises:
        DatasetError: missing file, wrong layout, or a demonstration lacking the state parts.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        obs_keys: Sequence[str] | None = None,
    ) -> None:
        self.want_state = obs_keys is None or "state" in obs_keys
        load_keys = None
        if obs_keys is not None:
            load_keys = [k for k in obs_keys if k != "state"]
            if self.want_state:
                load_keys += [k for k in STATE_PARTS if k not in load_keys]
        super().__init__(path, obs_keys=load_keys, obs_key_map=LIBERO_OBS_KEY_MAP)
        self.requested = None if obs_keys is None else list(obs_keys)
        self.instruction = self._read_instruction()

    def _read_instruction(self) -> str:
        file = self.path if self.path.is_file() else None
        if file is None:
            return ""
        try:
            with h5py.File(file, "r") as h:
                raw = read_attr(h["data"], "problem_info")
                bddl = read_attr(h["data"], "bddl_file_name")
        except H5_ERRORS as exc:
            raise DatasetError(
                f"cannot read LIBERO demonstration file {str(file)!r}: {exc}", fix=_DAMAGED_FIX
            ) from exc
        language = ""
        if raw is not None:
            info = parse_json_text(
                _attr_text(raw, file, "problem_info"),
                f"{file}::data.attrs['problem_info']",
                what="LIBERO problem info",
                fix="re-export the demonstration file with LIBERO's scripts (the attribute is "
                "damaged)",
                error=DatasetError,
            )
            language = str(info.get("language_instruction", "")).strip()
        if bddl is not None:
            # LIBERO's benchmark (and OpenVLA, and the env here) instruct with the language in
            # the task's file name; problem_info holds the BDDL's own, lower-cased wording,
            # which differs ("pick the ..." vs "pick up the ...").
            name = os.path.basename(_attr_text(bddl, file, "bddl_file_name"))
            if name.endswith(".bddl"):
                language = language_from_task_name(name.removesuffix(".bddl"))
        return language

    def __getitem__(self, i: int) -> EpisodeData:  # type: ignore[override]
        ep = super().__getitem__(i)
        obs = dict(ep.obs)
        if self.want_state:
            missing = [k for k in STATE_PARTS if k not in obs]
            if missing:
                raise DatasetError(
                    f"{ep.source} lacks {missing} needed for the state vector; has {sorted(obs)}",
                    fix="load with obs_keys excluding 'state', or use LIBERO's official "
                    "demonstration files",
                )
            try:
                with np.errstate(over="ignore"):  # beyond float32: inf, refused by the trainer
                    obs["state"] = np.concatenate(
                        [
                            np.asarray(obs[k], dtype=np.float32).reshape(len(ep), -1)
                            for k in STATE_PARTS
                        ],
                        axis=1,
                    )
            except (TypeError, ValueError) as exc:  # text, or no steps to reshape into
                raise DatasetError(
                    f"{ep.source}: {list(STATE_PARTS)} do not make a numeric state per step "
                    f"({exc})",
                    fix=_DAMAGED_FIX,
                ) from exc
        if self.requested is not None:
            obs = {k: v for k, v in obs.items() if k in self.requested}
        try:
            actions = np.asarray(ep.actions, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise DatasetError(
                f"{ep.source}: actions are not numeric ({exc})", fix=_DAMAGED_FIX
            ) from exc
        attrs = dict(ep.attrs)
        attrs.setdefault("instruction", self.instruction)
        return replace(ep, obs=obs, actions=actions, attrs=attrs)


def demonstration_files(path: str | os.PathLike[str]) -> list[Path]:
    """The LIBERO demonstration files at ``path``, scanned once.

    Returns:
        ``[path]`` for an HDF5 file in LIBERO's layout (``data.attrs["problem_info"]``), a
        folder's ``*_demo.hdf5`` files in that layout in name order, else ``[]``.
    """
    p = Path(path)
    if p.is_dir():
        return [f for f in sorted(p.glob("*_demo.hdf5")) if _is_libero_file(f)]
    return [p] if _is_libero_file(p) else []


def _attr_text(value: object, file: Path, name: str) -> str:
    """A text attribute of ``data`` as ``str``.

    Raises:
        DatasetError: the attribute holds no text or bytes that are not UTF-8 (a number
            would otherwise become ``bytes(n)``: n zero bytes, an absurd allocation).
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError as exc:
            raise DatasetError(
                f"{str(file)!r}: attribute data.attrs[{name!r}] is not UTF-8 text ({exc})",
                fix=_DAMAGED_FIX,
            ) from exc
    raise DatasetError(
        f"{str(file)!r}: attribute data.attrs[{name!r}] is a {type(value).__name__}, not text",
        fix=_DAMAGED_FIX,
    )


def _is_libero_file(path: Path) -> bool:
    """True for a readable HDF5 file in LIBERO's layout.

    Raises:
        DatasetError: an HDF5 file that libhdf5 cannot open or list (a damaged file is
            named here, not skipped: in a suite folder that would drop a task silently).
    """
    if not path.is_file() or not h5py.is_hdf5(path):
        return False
    try:
        with h5py.File(path, "r") as h:
            return "data" in h and "problem_info" in h["data"].attrs
    except H5_ERRORS as exc:
        raise DatasetError(f"cannot read HDF5 file {str(path)!r}: {exc}", fix=_DAMAGED_FIX) from exc


def is_libero_demonstration_file(path: str | os.PathLike[str]) -> bool:
    """True for an HDF5 file in LIBERO's demonstration layout, or a folder holding such
    ``*_demo.hdf5`` files (a suite's tasks)."""
    return bool(demonstration_files(path))


class LiberoDemonstrationSuite(Sequence[EpisodeData]):
    """Several LIBERO demonstration files (e.g. the 10 tasks of a suite) as one dataset.

    Files are read in name order; each episode keeps its own task's instruction, so one
    language-conditioned policy trains on all of them. ``env_args`` are the first file's.

    Args:
        folder: A folder of LIBERO ``*_demo.hdf5`` files.
        obs_keys: As :class:`LiberoDemonstrations`.
        files: The folder's demonstration files when the caller has scanned it already
            (:func:`demonstration_files`).

    Raises:
        DatasetError: the folder holds no LIBERO demonstration file.
    """

    def __init__(
        self,
        folder: str | os.PathLike[str],
        obs_keys: Sequence[str] | None = None,
        files: Sequence[Path] | None = None,
    ):
        self.path = Path(folder)
        if files is None:
            files = demonstration_files(self.path) if self.path.is_dir() else []
        if not files:
            raise DatasetError(
                f"{str(self.path)!r} holds no LIBERO demonstration file (*_demo.hdf5)",
                fix="pass a folder of LIBERO's demonstration files, or one file",
            )
        self.parts = [LiberoDemonstrations(f, obs_keys=obs_keys) for f in files]
        self.env_args = self.parts[0].env_args
        self._index = [(i, j) for i, part in enumerate(self.parts) for j in range(len(part))]

    @property
    def instructions(self) -> list[str]:
        """The tasks' instructions, one per file."""
        return [part.instruction for part in self.parts]

    def __len__(self) -> int:
        return len(self._index)

    def __getitem__(self, i: int) -> EpisodeData:  # type: ignore[override]
        part, j = self._index[i]
        return self.parts[part][j]


def load_demonstrations(
    path: str | os.PathLike[str],
    obs_keys: Sequence[str] | None = None,
    files: Sequence[Path] | None = None,
) -> LiberoDemonstrations | LiberoDemonstrationSuite:
    """Open a LIBERO demonstration file, or a folder of them, as a dataset (see
    :class:`LiberoDemonstrations`, :class:`LiberoDemonstrationSuite`).

    Actions are LIBERO-native (gripper -1 open, +1 close), as the env takes them. ``files``:
    :func:`demonstration_files` of ``path`` when the caller has them (saves a second scan).
    """
    if Path(path).is_dir():
        return LiberoDemonstrationSuite(path, obs_keys=obs_keys, files=files)
    return LiberoDemonstrations(path, obs_keys=obs_keys)
