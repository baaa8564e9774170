"""LeRobotDataset v3.0 folders: export our episodes to the format, and read it like our datasets."""

from __future__ import annotations

from embodied.datasets.lerobot.reader import (
    CODEBASE_VERSION,
    CODECS,
    DATA_PATH,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_DATA_FILE_SIZE_IN_MB,
    DEFAULT_FEATURES,
    DEFAULT_QUANTILES,
    DEFAULT_VIDEO_FILE_SIZE_IN_MB,
    EMBODIED_META_PATH,
    EPISODES_DIR,
    EPISODES_PATH,
    EXTRAS_PATH,
    INFO_PATH,
    STATS_PATH,
    TASKS_PATH,
    TOLERANCE_S,
    VIDEO_PATH,
    LeRobotDataset,
    export_lerobot,
    is_lerobot_dataset,
)

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
