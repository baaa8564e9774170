"""Episode datasets on disk (robomimic-style HDF5)."""

from embodied.datasets.hdf5 import (
    Dataset,
    DatasetWriter,
    EpisodeData,
    export_robomimic,
    write_episode_file,
)

__all__ = ["Dataset", "DatasetWriter", "EpisodeData", "export_robomimic", "write_episode_file"]
