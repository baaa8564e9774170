"""Simulator oracle: success from sim state, the ground truth the other judges are measured on.

Two uses:

* Labelling recorded episodes: :func:`frame_labels` marks each recorded frame success or not
  from the episode's first success step (all later frames positive, as Demo2Reward assumes).
* Judging recorded episodes: :class:`RecordedOracle` answers from those labels, the reference
  row of a judge comparison (``judge_episodes(..., "oracle")``).
* Live judging: :class:`SimOracle` follows a rollout through its ``observe`` callback and
  answers :meth:`SimOracle.score` from the latest ``info["success"]`` (the frames are
  validated but not looked at - the oracle reads the simulator, not pixels).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from embodied.errors import ConfigError
from embodied.rewards.base import BaseJudge
from embodied.rewards.clips import success_labels


def episode_success_step(episode: Any) -> int:
    """First step whose ``env.step`` reported success (-1: never), from an Episode or EpisodeData."""
    if hasattr(episode, "success_step"):
        return int(episode.success_step)
    attrs = getattr(episode, "attrs", {})
    if "success_step" in attrs:
        return int(attrs["success_step"])
    if "success" in attrs:
        return 0 if bool(attrs["success"]) else -1
    raise ConfigError(
        f"episode {getattr(episode, 'source', '')!r} records no success information",
        fix="record episodes with `embodied collect` (stores success_step)",
    )


def frame_labels(episode: Any, n_frames: int | None = None) -> np.ndarray:
    """Oracle label of every recorded frame of ``episode``.

    Frame ``i`` is the observation the action of step ``i`` was chosen from; success reported
    after step ``s`` is first visible in frame ``s + 1``. Frames past the recording (e.g. the
    final frame appended by :func:`embodied.rewards.demo2reward.record_demonstration`) follow
    the same rule.

    Args:
        episode: An :class:`~embodied.loop.Episode` or :class:`~embodied.datasets.EpisodeData`.
        n_frames: Number of frames to label (default: the episode length).
    """
    n = len(episode) if n_frames is None else int(n_frames)
    step = episode_success_step(episode)
    return success_labels(n, step + 1 if step >= 0 else -1)


class RecordedOracle:
    """The simulator's verdicts recorded with an episode, as the judge of that episode.

    Scores a frame 1.0 once the recorded success is visible in it (:func:`frame_labels`),
    whatever the pixels: agreement 100 % and ROC-AUC 1 by construction, the reference row of
    a comparison. Unlike a :class:`~embodied.contracts.Judge` it reads the episode, not clips.
    """

    threshold = 0.5

    def describe(self) -> dict[str, Any]:
        """Description for reports."""
        return {"backend": "oracle"}

    def score_steps(
        self, episode: Any, frames: np.ndarray, text: str, steps: Sequence[int]
    ) -> np.ndarray:
        """Scores (0.0 or 1.0) of ``frames[steps]`` of ``episode``; ``text`` is not read."""
        del text
        return frame_labels(episode, len(frames))[list(steps)].astype(np.float64)


class SimOracle(BaseJudge):
    """Success straight from the simulator (``info["success"]``), behind the Judge contract.

    Pass :meth:`observe` in ``rollout(..., callbacks=[oracle.observe])`` or call
    :meth:`update` with each step's info; :meth:`score` then returns 1.0 once the env has
    reported success in this episode (0.0 before), whatever the frames.
    """

    name = "oracle"

    def __init__(self, sticky: bool = True) -> None:
        self.sticky = sticky
        self._success: bool | None = None

    def reset(self) -> None:
        """Forget the episode (call at reset)."""
        self._success = None

    def update(self, info: Any) -> None:
        """Record one step's env info."""
        now = bool(info.get("success", False))
        self._success = (bool(self._success) or now) if self.sticky else now

    def observe(self, record: Any) -> None:
        """Loop callback: record the step's info (a :class:`~embodied.loop.StepRecord`)."""
        if record.t == 0:
            self.reset()
        self.update(record.info)

    def _score_clips(self, clips: list[np.ndarray], instructions: list[str]) -> np.ndarray:
        if self._success is None:
            raise ConfigError(
                "the simulator oracle has not seen any step",
                fix="pass oracle.observe in rollout(callbacks=...) or call oracle.update(info)",
            )
        return np.full(len(clips), float(self._success))
