"""MP4 video of a LeRobotDataset: encoding episodes into shared files, decoding time ranges.

The counterpart of lerobot's ``video_utils.py``, with PyAV only: the codecs and their encoders,
:class:`_VideoWriter` (successive episodes appended to one camera's files, rolled over by
size), the ``info`` of a video feature, and :func:`_decode_range` (the frames of a time
range, as lerobot's ``decode_video_frames_pyav`` seeks them).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

from embodied.datasets.lerobot.metadata import VIDEO_PATH, _next_file
from embodied.errors import ConfigError

TOLERANCE_S = 1e-4
"""How far (seconds) a decoded frame may be from the timestamp it stands for (lerobot's)."""

CODECS: dict[str, str] = {"h264": "libx264", "hevc": "libx265", "libsvtav1": "libsvtav1"}
"""``codec`` (lerobot's ``vcodec`` names) -> the PyAV encoder that writes it; ``av1`` is an
alias of ``libsvtav1`` (lerobot's default)."""


def _encoder(codec: str) -> str:
    name = CODECS.get("libsvtav1" if codec == "av1" else codec)
    if name is None:
        raise ConfigError(
            f"codec {codec!r} is not one of {sorted([*CODECS, 'av1'])}",
            fix="pass codec='h264' (--codec h264), 'hevc' or 'libsvtav1' (lerobot's default)",
        )
    try:
        av.codec.Codec(name, "w")
    except Exception as exc:
        raise ConfigError(
            f"codec {codec!r} needs the encoder {name!r}, which this PyAV build lacks ({exc})",
            fix="pass codec='h264' (libx264 ships with PyAV's wheels)",
        ) from exc
    return name


@contextmanager
def _scheduling_kept() -> Iterator[None]:
    """Restores the calling thread's CPU scheduling policy after an encoder call.

    SVT-AV1 (``libsvtav1``) raises the thread that opens it to ``SCHED_FIFO`` priority 99
    when it may (as root). Left so, every thread and process started afterwards inherits a
    real-time policy: a busy-polling child (a ROS node, a rosbridge server) then starves the
    machine. Lowering a policy back needs no privilege. No-op where ``os.sched_*`` is absent.
    """
    if not hasattr(os, "sched_getscheduler"):
        yield
        return
    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        yield
    finally:
        if (os.sched_getscheduler(0), os.sched_getparam(0)) != (policy, param):
            os.sched_setscheduler(0, policy, param)


class _VideoWriter:
    """Appends frames of successive episodes to one camera's MP4 files, rolling over by size."""

    def __init__(
        self,
        root: Path,
        key: str,
        fps: int,
        encoder: str,
        pix_fmt: str,
        options: dict[str, str],
        chunks_size: int,
        max_bytes: int,
    ) -> None:
        self.root, self.key, self.fps = root, key, fps
        self.encoder, self.pix_fmt, self.options = encoder, pix_fmt, options
        self.chunks_size, self.max_bytes = chunks_size, max_bytes
        self.chunk, self.file = 0, 0
        self.container: Any = None
        self.stream: Any = None
        self.frames = 0  # frames in the open file
        self.bytes = 0  # bytes muxed into the open file
        self.first_path: Path | None = None

    def path(self) -> Path:
        rel = VIDEO_PATH.format(video_key=self.key, chunk_index=self.chunk, file_index=self.file)
        return self.root / rel

    def _open(self, height: int, width: int) -> None:
        path = self.path()
        path.parent.mkdir(parents=True, exist_ok=True)
        self.container = av.open(str(path), mode="w")
        self.stream = self.container.add_stream(self.encoder, rate=self.fps, options=self.options)
        self.stream.width, self.stream.height = width, height
        self.stream.pix_fmt = self.pix_fmt
        self.stream.codec_context.time_base = Fraction(1, self.fps)
        self.frames = self.bytes = 0
        if self.first_path is None:
            self.first_path = path

    def _encode(self, frame: Any) -> None:
        with _scheduling_kept():
            packets = self.stream.encode(frame)
        for packet in packets:
            self.bytes += packet.size
            self.container.mux(packet)

    def close(self) -> None:
        if self.container is not None:
            self._encode(None)
            with _scheduling_kept():
                self.container.close()
            self.container = self.stream = None

    def add_episode(self, frames: np.ndarray) -> dict[str, Any]:
        """Encode one episode's ``(T, H, W, 3)`` frames; returns its ``videos/<key>/*`` row."""
        if self.container is not None and self.bytes >= self.max_bytes:
            self.close()
            self.chunk, self.file = _next_file(self.chunk, self.file, self.chunks_size)
        if self.container is None:
            self._open(int(frames.shape[1]), int(frames.shape[2]))
        start = self.frames
        for img in frames:
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(img), format="rgb24")
            frame.pts = self.frames
            frame.time_base = Fraction(1, self.fps)
            self._encode(frame)
            self.frames += 1
        prefix = f"videos/{self.key}/"
        return {
            prefix + "chunk_index": self.chunk,
            prefix + "file_index": self.file,
            prefix + "from_timestamp": start / self.fps,
            prefix + "to_timestamp": self.frames / self.fps,
        }


def _video_info(path: Path) -> dict[str, Any]:
    """The ``info`` of a video feature, probed from its file (lerobot's ``get_video_info``)."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        info = {
            "video.height": stream.height,
            "video.width": stream.width,
            "video.codec": stream.codec_context.codec.canonical_name,
            "video.pix_fmt": stream.pix_fmt,
            "video.is_depth_map": False,
            "video.fps": int(stream.base_rate or 0),
            "video.channels": 3,
            "has_audio": bool(container.streams.audio),
        }
    return info


def _decode_range(path: Path, first: float, last: float) -> tuple[np.ndarray, list[np.ndarray]]:
    """Decode the frames of ``path`` from ``first`` to ``last`` seconds (with tolerance)."""
    loaded_ts: list[float] = []
    frames: list[np.ndarray] = []
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        time_base = stream.time_base or Fraction(1, 1)
        # seek to the keyframe at or before `first`, as lerobot's decode_video_frames_pyav
        container.seek(
            max(0, round(first / time_base) - 1), backward=True, any_frame=False, stream=stream
        )
        for frame in container.decode(stream):
            if frame.pts is None:
                continue
            ts = float(frame.pts * time_base)
            if ts < first - TOLERANCE_S:
                continue
            if ts > last + TOLERANCE_S:
                break
            loaded_ts.append(ts)
            frames.append(frame.to_ndarray(format="rgb24"))
            if ts >= last:
                break
    return np.asarray(loaded_ts, dtype=np.float64), frames
