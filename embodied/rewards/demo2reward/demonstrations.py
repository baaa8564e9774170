"""Labelled demonstrations: frames with per-frame success labels, recorded or read from disk.

Frame ``i`` of a demonstration is the camera image *after* ``i`` control steps (frame 0 follows the
reset); label ``i`` says whether the task has been accomplished by then. Once success is
reached every later frame is positive (Demo2Reward's labelling).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from embodied.contracts import Env, Policy
from embodied.datasets import Dataset, DatasetWriter, EpisodeData
from embodied.errors import ConfigError, DatasetError
from embodied.loop import StepRecord, rollout
from embodied.rewards.clips import episode_clips, validate_frames
from embodied.rewards.oracle import frame_labels

PAST_LEN = 4
"""Earlier frames per Demo2Reward sample: the reference's ``--past_len`` default
(``demo2reward.py``)."""


def past_frame_indices(t: int, num_frames: int = PAST_LEN) -> list[int]:
    """The earlier frames of the sample at frame ``t``, as the reference picks them.

    ``utils/images.py: past_frames_single_video`` (the same indices as ``past_frames``, which
    the reference's ``datasets/dataset.py: _divide_episodes`` uses): ``min(t + 1, num_frames)``
    frames ``round(k * t / num_frames)`` for ``k = 0, 1, ...`` with Python's ``round`` (half to
    even: t = 10 gives 0, 2, 5, 8; t = 14 gives 0, 4, 7, 10), so frames repeat early on and the
    first samples have fewer of them (t = 0: [0]; t = 1: [0, 0]; t = 2: [0, 0, 1]).
    Departure: ``num_frames`` 0 gives no earlier frames (the reference divides by zero).

    Raises:
        ConfigError: a negative ``t`` or ``num_frames``.
    """
    if t < 0:
        raise ConfigError(f"frame index {t} is negative")
    if num_frames < 0:
        raise ConfigError(f"num_frames must be >= 0, got {num_frames}")
    n_available = min(t + 1, num_frames)
    if n_available == 0:
        return []
    if n_available == 1:
        return [0]
    step = t / num_frames
    return [round(k * step) for k in range(n_available)]


def sample_indices(t: int, num_frames: int = PAST_LEN) -> list[int]:
    """Frame indices of the clip the Critic sees for frame ``t``: :func:`past_frame_indices`
    followed by ``t`` (``datasets/dataset.py: VLMCritic_Dataset._yield_videos``); 2 to
    ``num_frames + 1`` frames (t = 10: 0, 2, 5, 8, 10)."""
    return [*past_frame_indices(t, num_frames), t]


FALLBACK_TASKS: dict[str, str] = {
    "mujoco:reach_around": "move the blue ball to the green goal",
}
"""Task text for envs whose instruction is empty (judges need words)."""


def task_text(instruction: str, env_id: str = "") -> str:
    """The episode's instruction, or the env's fallback task text when it is empty."""
    if instruction and instruction.strip():
        return instruction.strip()
    if env_id in FALLBACK_TASKS:
        return FALLBACK_TASKS[env_id]
    raise ConfigError(
        f"episode of {env_id!r} has no instruction and no fallback task text",
        fix="record the env's instruction or pass --task 'what the robot should do'",
    )


@dataclass
class LabelledDemonstration:
    """One demonstration: frames, per-frame success labels and the task.

    Attributes:
        frames: (T, H, W, 3) uint8 camera frames.
        labels: (T,) bool success labels (monotone: all True after the first True).
        task: The task in words (fills ``{task}`` of a judge instruction template).
        env_id: Env the demonstration comes from.
        infos: Per-frame env info (sim state for captions), if recorded live.
        meta: Seed, policy, source.
    """

    frames: np.ndarray
    labels: np.ndarray
    task: str
    env_id: str = ""
    infos: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.frames = validate_frames(self.frames, what="demonstration frames")
        self.labels = np.asarray(self.labels, dtype=bool).reshape(-1)
        if len(self.labels) != len(self.frames):
            raise ConfigError(
                f"demonstration has {len(self.frames)} frames but {len(self.labels)} labels",
                fix="label every frame",
            )
        first = int(np.argmax(self.labels)) if self.labels.any() else len(self.labels)
        self.labels[first:] = True

    def __len__(self) -> int:
        return len(self.frames)

    @property
    def success(self) -> bool:
        """Whether the demonstration ever succeeds."""
        return bool(self.labels.any())

    def clips(self, n_context: int = 4, steps: Sequence[int] | None = None) -> np.ndarray:
        """(N, n_context + 1, H, W, 3) clips (4 earlier frames + current) for ``steps``.

        The judges' clip sampling (:func:`~embodied.rewards.clips.context_indices`); Demo2Reward
        scores its samples with :meth:`sample_clips` (the reference's frame indices).
        """
        return episode_clips(self.frames, n_context, steps)

    def sample_clips(
        self, num_frames: int = PAST_LEN, steps: Sequence[int] | None = None
    ) -> list[np.ndarray]:
        """Demo2Reward's samples for ``steps`` (default: every frame): one clip of
        :func:`sample_indices` frames each, (2..num_frames + 1, H, W, 3) uint8, as the
        reference builds them.

        Raises:
            ConfigError: a step outside the demonstration.
        """
        steps = range(len(self.frames)) if steps is None else steps
        out = []
        for t in steps:
            if not 0 <= int(t) < len(self.frames):
                raise ConfigError(
                    f"step {int(t)} outside the demonstration's {len(self.frames)} frames"
                )
            out.append(self.frames[sample_indices(int(t), num_frames)])
        return out


def record_demonstration(
    env: Env,
    policy: Policy,
    seed: int,
    *,
    max_steps: int | None = None,
    steps_after_success: int = 20,
    reset_options: Mapping[str, Any] | None = None,
    camera: str | None = None,
    task: str | None = None,
) -> LabelledDemonstration:
    """Run ``policy`` with the closed loop and keep post-step frames with oracle labels.

    The episode continues ``steps_after_success`` steps past the first success (so
    demonstrations hold positives), or runs to ``max_steps``.

    Args:
        env: An env with a camera (``env.render(camera)`` gives the frame).
        policy: Expert, perturbed expert or random policy.
        seed: Reset seed.
        max_steps: Step limit (default: the env's horizon).
        steps_after_success: Steps kept after the first success.
        reset_options: Passed to ``env.reset``.
        camera: Camera to render (default: the env's default camera).
        task: Task text (default: the env's instruction or its fallback).
    """
    frames: list[np.ndarray] = []
    infos: list[dict[str, Any]] = []
    first_success = [-1]

    render: Any = env.render

    def grab(record: StepRecord) -> None:
        frames.append(np.asarray(render(camera) if camera else render()).copy())
        info = {k: v for k, v in record.info.items() if np.ndim(v) <= 1}
        infos.append(info)
        if record.success and first_success[0] < 0:
            first_success[0] = record.t

    def stop() -> bool:
        return first_success[0] >= 0 and len(frames) > first_success[0] + steps_after_success

    _obs, info0 = env.reset(seed=seed, options=dict(reset_options) if reset_options else None)
    frame0 = np.asarray(render(camera) if camera else render()).copy()
    info0 = {k: v for k, v in info0.items() if np.ndim(v) <= 1}
    ep = rollout(
        env,
        policy,
        seed=seed,
        reset_options=reset_options,
        max_steps=max_steps,
        record_images=False,
        stop_on_success=False,
        callbacks=[grab],
        should_stop=stop,
    )
    all_frames = np.stack([frame0, *frames])
    labels = np.zeros(len(all_frames), dtype=bool)
    if first_success[0] >= 0:
        labels[first_success[0] + 1 :] = True
    return LabelledDemonstration(
        frames=all_frames,
        labels=labels,
        task=task or task_text(env.instruction, env.env_id),
        env_id=env.env_id,
        infos=[info0, *infos],
        meta={
            "seed": seed,
            "policy": type(policy).__name__,
            "reason": ep.meta.get("reason"),
            "reset_options": dict(reset_options or {}),
        },
    )


def load_demonstrations(
    path: str | os.PathLike[str], camera: str | None = None, task: str | None = None
) -> list[LabelledDemonstration]:
    """Labelled demonstrations from a dataset folder written by `embodied collect` (or
    :func:`save_demonstrations`).

    Labels come from a per-frame ``labels`` array when the shard has one, else from the
    episode's ``success_step`` (see :func:`embodied.rewards.oracle.frame_labels`).

    Raises:
        DatasetError: no camera frames in the episodes.
    """
    out = []
    for ep in Dataset(path):
        keys = sorted(k for k in ep.obs if k.startswith("image."))
        key = f"image.{camera}" if camera else (keys[0] if keys else None)
        if key is None or key not in ep.obs:
            raise DatasetError(
                f"{ep.source} has no camera frames {key or ''} (obs keys: {sorted(ep.obs)})",
                fix="collect with a camera enabled (and record_images) or pass --camera",
            )
        frames = ep.obs[key]
        labels = ep.extras.get("labels")
        if labels is None:
            labels = frame_labels(ep, len(frames))
        meta = ep.attrs.get("meta", {})
        env_id = meta.get("env_id", "") if isinstance(meta, dict) else ""
        out.append(
            LabelledDemonstration(
                frames,
                labels,
                task or task_text(ep.instruction, env_id),
                env_id,
                meta={"source": ep.source},
            )
        )
    return out


def save_demonstrations(
    demonstrations: Sequence[LabelledDemonstration], path: str | os.PathLike[str]
) -> Path:
    """Write demonstrations as a dataset folder (one atomic shard each) readable by
    :func:`load_demonstrations`."""
    env_id = demonstrations[0].env_id if demonstrations else ""
    writer = DatasetWriter(path, env_args={"env_id": env_id})
    for d in demonstrations:
        n = len(d)
        first = int(np.argmax(d.labels)) if d.success else -1
        meta: dict[str, Any] = {"env_id": d.env_id}
        meta.update({k: v for k, v in d.meta.items() if isinstance(v, str | int | float | bool)})
        writer.add(
            EpisodeData(
                obs={"image.camera": d.frames},
                actions=np.zeros((n, 1)),
                rewards=d.labels.astype(np.float64),
                dones=np.eye(1, n, n - 1, dtype=np.uint8).ravel(),
                attrs={
                    "instruction": d.task,
                    "success": d.success,
                    # frame i follows step i - 1, so first positive frame f <-> success_step f - 1
                    "success_step": first - 1 if first > 0 else first,
                    "meta": json.dumps(meta),
                },
                extras={"labels": d.labels.astype(np.uint8)},
            )
        )
    return Path(path)


def split_demonstrations(
    demonstrations: Sequence[LabelledDemonstration],
    n_train: int,
    key: Callable[[LabelledDemonstration], Any] | None = None,
) -> tuple[list[LabelledDemonstration], list[LabelledDemonstration]]:
    """First ``n_train`` demonstrations (by order or ``key``) for optimisation, the rest held
    out."""
    items = sorted(demonstrations, key=key) if key else list(demonstrations)
    if not 0 < n_train < len(items):
        raise ConfigError(f"cannot split {len(items)} demonstrations into {n_train} + rest")
    return items[:n_train], items[n_train:]
