"""Episode datasets on disk: robomimic-style HDF5 (ours) and LeRobotDataset v3 folders."""

from __future__ import annotations

import os
from collections.abc import Sequence

from embodied.datasets.hdf5 import (
    Dataset,
    DatasetWriter,
    EpisodeData,
    export_robomimic,
    write_episode_file,
)
from embodied.datasets.lerobot import LeRobotDataset, export_lerobot, is_lerobot_dataset


def open_dataset(
    path: str | os.PathLike[str], obs_keys: Sequence[str] | None = None
) -> Sequence[EpisodeData]:
    """Open the dataset at ``path`` in whichever format it is.

    Args:
        path: A folder holding ``meta/info.json`` (a LeRobotDataset v3), or a folder of
            ``embodied collect`` shards / a robomimic ``.hdf5`` file.
        obs_keys: Observation keys to load (default: all), e.g. ``["state"]`` to skip images.

    Returns:
        A :class:`LeRobotDataset` or a :class:`Dataset`; both are sequences of
        :class:`EpisodeData` with an ``env_args`` attribute.

    Raises:
        DatasetError: the path is missing or not a dataset.
    """
    if is_lerobot_dataset(path):
        return LeRobotDataset(path, obs_keys=obs_keys)
    return Dataset(path, obs_keys=obs_keys)


__all__ = [
    "Dataset",
    "DatasetWriter",
    "EpisodeData",
    "LeRobotDataset",
    "export_lerobot",
    "export_robomimic",
    "is_lerobot_dataset",
    "open_dataset",
    "write_episode_file",
]
