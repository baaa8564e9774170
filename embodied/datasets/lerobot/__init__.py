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

The package follows lerobot's own split:

* :mod:`~embodied.datasets.lerobot.metadata` - the layout: path templates, default columns,
  the exported features, the tasks table, the checks of ``meta/info.json``'s features;
* :mod:`~embodied.datasets.lerobot.statistics` - ``meta/stats.json`` and the episodes'
  ``stats/*`` columns, as lerobot 0.4.4 computes them (``compute_stats.py``);
* :mod:`~embodied.datasets.lerobot.video` - MP4 encoding into shared files and decoding of
  time ranges (``video_utils.py``);
* :mod:`~embodied.datasets.lerobot.writer` - :func:`export_lerobot` (``dataset_writer.py``);
* :mod:`~embodied.datasets.lerobot.reader` - :class:`LeRobotDataset` and
  :func:`is_lerobot_dataset` (``lerobot_dataset.py``).
"""

from __future__ import annotations

from embodied.datasets.lerobot.metadata import (
    CODEBASE_VERSION,
    DATA_PATH,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_DATA_FILE_SIZE_IN_MB,
    DEFAULT_FEATURES,
    DEFAULT_VIDEO_FILE_SIZE_IN_MB,
    EMBODIED_META_PATH,
    EPISODES_DIR,
    EPISODES_PATH,
    EXTRAS_PATH,
    INFO_PATH,
    STATS_PATH,
    TASKS_PATH,
    VIDEO_PATH,
)
from embodied.datasets.lerobot.reader import LeRobotDataset, is_lerobot_dataset
from embodied.datasets.lerobot.statistics import DEFAULT_QUANTILES
from embodied.datasets.lerobot.video import CODECS, TOLERANCE_S
from embodied.datasets.lerobot.writer import export_lerobot

__all__ = [
    "CODEBASE_VERSION",
    "CODECS",
    "DATA_PATH",
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_DATA_FILE_SIZE_IN_MB",
    "DEFAULT_FEATURES",
    "DEFAULT_QUANTILES",
    "DEFAULT_VIDEO_FILE_SIZE_IN_MB",
    "EMBODIED_META_PATH",
    "EPISODES_DIR",
    "EPISODES_PATH",
    "EXTRAS_PATH",
    "INFO_PATH",
    "STATS_PATH",
    "TASKS_PATH",
    "TOLERANCE_S",
    "VIDEO_PATH",
    "LeRobotDataset",
    "export_lerobot",
    "is_lerobot_dataset",
]
