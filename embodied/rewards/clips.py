"""Clips: validation of judge inputs and the sampling of frames a judge sees.

A judge looks at a *clip*: a few earlier frames evenly spaced over the history plus the
current frame (default 4 + 1), uint8 RGB of shape (T, H, W, 3), oldest first.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from embodied.errors import ConfigError

DEFAULT_CONTEXT = 4
"""Earlier frames in a clip (the current frame comes on top)."""

TASK_FIELD = "{task}"


def validate_frames(frames: Sequence[np.ndarray] | np.ndarray, what: str = "clip") -> np.ndarray:
    """Return ``frames`` as a uint8 array (T, H, W, 3), refusing anything else.

    A single frame (H, W, 3) is accepted as a one-frame clip.

    Raises:
        ConfigError: empty clip, wrong dtype, wrong shape, or frames of different sizes;
            the message names the bad value and the fix.
    """
    if isinstance(frames, np.ndarray):
        arr = frames
    else:
        seq = list(frames)
        if not seq:
            raise ConfigError(
                f"{what} is empty (0 frames)",
                fix="pass at least one uint8 (H, W, 3) frame, e.g. episode.frames()[-5:]",
            )
        shapes = {np.shape(f) for f in seq}
        if len(shapes) > 1:
            raise ConfigError(
                f"{what} mixes frame shapes {sorted(shapes)}",
                fix="render every frame of a clip from the same camera at the same size",
            )
        arr = np.stack([np.asarray(f) for f in seq])
    shape = tuple(arr.shape)
    if arr.ndim == 3:
        arr = arr[None]
    if arr.ndim != 4 or arr.shape[-1] != 3:
        raise ConfigError(
            f"{what} has shape {shape}; judges take RGB frames (T, H, W, 3) or one (H, W, 3)",
            fix="pass uint8 RGB frames channel-last, e.g. env.render() outputs",
        )
    if arr.shape[0] == 0:
        raise ConfigError(
            f"{what} is empty (shape {tuple(arr.shape)})",
            fix="pass at least one uint8 (H, W, 3) frame",
        )
    if arr.shape[1] < 8 or arr.shape[2] < 8:
        raise ConfigError(
            f"{what} frames are {arr.shape[1]}x{arr.shape[2]} pixels; judges need at least 8x8",
            fix="render the camera at a larger size",
        )
    if arr.dtype != np.uint8:
        raise ConfigError(
            f"{what} has dtype {arr.dtype}; judges take uint8 RGB in [0, 255]",
            fix="convert with (x * 255).clip(0, 255).astype(np.uint8) for float images in [0, 1]",
        )
    return arr


def validate_instruction(instruction: str) -> str:
    """Return ``instruction`` stripped, refusing empty or non-string values."""
    if not isinstance(instruction, str) or not instruction.strip():
        raise ConfigError(
            f"instruction {instruction!r} is empty or not a string",
            fix="pass the task in words, e.g. 'reach the red target'",
        )
    return instruction.strip()


def format_instruction(template: str, task: str) -> str:
    """Fill ``{task}`` of a judge instruction template with the task.

    Raises:
        ConfigError: ``template`` lacks ``{task}`` (the judge would not know the task).
    """
    if not isinstance(template, str) or TASK_FIELD not in template:
        raise ConfigError(
            f"instruction template {template!r} has no {TASK_FIELD} field",
            fix="write the template with the placeholder, e.g. 'The robot was instructed "
            "with the task: {task}.'",
        )
    task = validate_instruction(task).rstrip(".")
    return template.replace(TASK_FIELD, task)


def context_indices(t: int, n_context: int = DEFAULT_CONTEXT) -> np.ndarray:
    """Frame indices of the clip for step ``t``: ``n_context`` earlier frames evenly spaced over
    ``[0, t)`` followed by ``t`` itself (indices repeat early in an episode)."""
    if t < 0:
        raise ConfigError(f"frame index {t} is negative")
    if n_context < 0:
        raise ConfigError(f"n_context must be >= 0, got {n_context}")
    earlier = np.floor(np.linspace(0, t, n_context + 1, endpoint=True)[:-1]).astype(int)
    return np.concatenate([earlier, [t]]).astype(int)


def resample_clip(frames: np.ndarray, n_frames: int) -> np.ndarray:
    """Evenly resample a validated clip to ``n_frames`` frames ending at its last frame."""
    if len(frames) == n_frames:
        return frames
    return frames[context_indices(len(frames) - 1, n_frames - 1)]


def episode_clips(
    frames: np.ndarray, n_context: int = DEFAULT_CONTEXT, steps: Sequence[int] | None = None
) -> np.ndarray:
    """Clips for every step (or for ``steps``) of an episode's frames.

    Args:
        frames: (T, H, W, 3) uint8 frames of one episode.
        n_context: Earlier frames per clip.
        steps: Steps to build clips for (default: all T).

    Returns:
        (len(steps), n_context + 1, H, W, 3) uint8.
    """
    frames = validate_frames(frames, what="episode frames")
    steps = range(len(frames)) if steps is None else steps
    idx = np.stack([context_indices(int(t), n_context) for t in steps])
    if idx.size and idx.max() >= len(frames):
        raise ConfigError(f"step {int(idx.max())} beyond the episode's {len(frames)} frames")
    return frames[idx]


def success_labels(length: int, success_step: int) -> np.ndarray:
    """Per-frame labels: 0 before the first success, 1 from ``success_step`` on (-1: never)."""
    labels = np.zeros(length, dtype=bool)
    if success_step >= 0:
        labels[success_step:] = True
    return labels
