"""MP4 videos of rollouts (H.264 through imageio-ffmpeg's bundled ffmpeg)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np

from embodied.io import atomic_path


def write_mp4(path: str | Path, frames: Iterable[np.ndarray], fps: float) -> Path:
    """Atomically write uint8 (H, W, 3) ``frames`` as an H.264 MP4 at ``fps`` frames/s."""
    import imageio.v2 as imageio

    target = Path(path)
    with atomic_path(target) as tmp:
        mp4 = tmp.with_suffix(".mp4")  # ffmpeg picks the container from the suffix
        # H.264's yuv420p needs even sizes; imageio rescales to a multiple of the block, so
        # a block of 8 would stretch an 84 px policy camera to 88 px
        writer = imageio.get_writer(
            str(mp4), fps=max(1.0, float(fps)), codec="libx264", quality=7, macro_block_size=2
        )
        try:
            for frame in frames:
                writer.append_data(np.asarray(frame, dtype=np.uint8))
        finally:
            writer.close()
        mp4.replace(tmp)
    return target
