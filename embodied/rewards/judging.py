"""Judge recorded episodes quickly (for ``embodied demo``, ``embodied judge`` and ``embodied eval``).

from embodied.rewards.judging import judge_episodes
report = judge_episodes(episodes, judge="minijudge")
print(report["agreement"], report["episodes"][0]["judge_prob"])
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from embodied.contracts import Judge
from embodied.datasets import Dataset
from embodied.errors import ConfigError
from embodied.rewards import load_judge
from embodied.rewards.calibration import judge_report
from embodied.rewards.clips import context_indices, episode_clips, format_instruction
from embodied.rewards.demo2reward.demonstrations import task_text
from embodied.rewards.oracle import (
    RecordedOracle,
    SimOracle,
    episode_success_step,
    frame_labels,
)


def episode_frames(episode: Any, camera: str | None = None) -> np.ndarray:
    """Frames of an Episode/EpisodeData, plus the post-episode frame when it was recorded.

    Raises:
        ConfigError: the episode has no camera frames.
    """
    obs = getattr(episode, "observations", None)
    if obs is None:
        obs = episode.obs
    keys = sorted(k for k in obs if k.startswith("image."))
    key = f"image.{camera}" if camera else (keys[0] if keys else "")
    if key not in obs:
        raise ConfigError(
            f"episode has no camera frames {key!r} (keys: {sorted(obs)})",
            fix="record with a camera (env camera=True, record_images=True) or pass camera=",
        )
    frames = np.asarray(obs[key])
    final = getattr(episode, "final_observation", {}) or {}
    if key in final:
        frames = np.concatenate([frames, np.asarray(final[key])[None]])
    return frames


def _task(episode: Any) -> str:
    meta = getattr(episode, "meta", None) or getattr(episode, "attrs", {}).get("meta", {})
    env_id = meta.get("env_id", "") if isinstance(meta, dict) else ""
    return task_text(str(getattr(episode, "instruction", "")), env_id)


class _ClipJudge:
    """A :class:`~embodied.contracts.Judge` scoring an episode's frames through clips."""

    def __init__(self, judge: Judge) -> None:
        self.judge = judge
        self.threshold = float(getattr(judge, "threshold", 0.5))
        self.n_context = int(getattr(judge, "n_frames", 5)) - 1

    def describe(self) -> dict[str, Any]:
        describe = getattr(self.judge, "describe", None)
        return describe() if describe else {"backend": type(self.judge).__name__}  # type: ignore[no-any-return]

    def score_steps(
        self, episode: Any, frames: np.ndarray, text: str, steps: Sequence[int]
    ) -> np.ndarray:
        del episode
        if len(steps) == 1:  # the final clip: a single score, as the live judge computes it
            clip = frames[context_indices(int(steps[0]), self.n_context)]
            return np.array([float(self.judge.score(clip, text))])
        clips = episode_clips(frames, self.n_context, steps)
        batch = getattr(self.judge, "score_batch", None)
        scores = batch(clips, text) if batch else [self.judge.score(c, text) for c in clips]
        return np.asarray(scores, dtype=np.float64)


def _episode_judge(judge: Judge | str | os.PathLike[str]) -> RecordedOracle | _ClipJudge:
    if isinstance(judge, SimOracle) or (isinstance(judge, str) and judge == "oracle"):
        return RecordedOracle()  # recorded episodes: the oracle reads their success labels
    return _ClipJudge(load_judge(judge) if isinstance(judge, str | os.PathLike) else judge)


def judge_episodes(
    episodes: Sequence[Any] | str | os.PathLike[str],
    judge: Judge | str = "minijudge",
    template: str | None = None,
    camera: str | None = None,
    per_frame: bool = False,
    stride: int = 1,
) -> dict[str, Any]:
    """Score episodes with a judge and compare with the simulator oracle.

    Each episode is judged on its final clip (4 earlier frames evenly spaced + the last frame);
    with ``per_frame`` every ``stride``-th frame is judged too and compared with the oracle's
    per-frame labels.

    Args:
        episodes: :class:`~embodied.loop.Episode` / :class:`~embodied.datasets.EpisodeData`
            objects, or a dataset folder written by `embodied collect`.
        judge: A judge or a spec for :func:`embodied.rewards.load_judge`; ``"oracle"`` (or a
            :class:`~embodied.rewards.oracle.SimOracle`) scores each clip with the simulator's
            recorded verdict of its last frame (:class:`~embodied.rewards.oracle.RecordedOracle`:
            the reference row of a comparison, agreement 100 % and ROC-AUC 1 by construction).
        template: Instruction template with ``{task}`` (default: the task itself).
        camera: Camera to judge (default: the first).
        per_frame: Also judge every frame and report per-frame agreement.
        stride: Frames between per-frame samples.

    Returns:
        ``{"judge", "episodes": [{index, task, judge_prob, judge_success, oracle_success,
        agree}], "agreement", "frame_agreement" (None without ``per_frame``), "seconds"}``;
        agreement and frame agreement are :func:`~embodied.rewards.calibration.judge_report`
        dicts (rates at the threshold, ROC-AUC, calibration error, reliability bins).
    """
    t0 = time.perf_counter()
    if isinstance(episodes, str | os.PathLike):
        episodes = list(Dataset(episodes))
    if not len(episodes):
        raise ConfigError("no episodes to judge", fix="record or collect at least one episode")
    j = _episode_judge(judge)
    if template is not None:
        format_instruction(template, "check")
    thr = j.threshold
    rows: list[dict[str, Any]] = []
    probs: list[float] = []
    truths: list[bool] = []
    f_probs: list[np.ndarray] = []
    f_labels: list[np.ndarray] = []
    for i, ep in enumerate(episodes):
        frames = episode_frames(ep, camera)
        task = _task(ep)
        text = format_instruction(template, task) if template else task
        last = len(frames) - 1
        labels = frame_labels(ep, len(frames))
        prob = float(j.score_steps(ep, frames, text, [last])[0])
        oracle = bool(labels[-1])
        rows.append(
            {
                "index": i,
                "task": task,
                "frames": len(frames),
                "judge_prob": prob,
                "judge_success": prob >= thr,
                "oracle_success": oracle,
                "oracle_success_step": episode_success_step(ep),
                "agree": (prob >= thr) == oracle,
            }
        )
        probs.append(prob)
        truths.append(oracle)
        if per_frame:
            steps = list(range(0, len(frames), stride))
            f_probs.append(j.score_steps(ep, frames, text, steps))
            f_labels.append(labels[steps])
    frame_agreement = None
    if per_frame:
        frame_agreement = judge_report(np.concatenate(f_probs), np.concatenate(f_labels), thr)
    return {
        "judge": j.describe(),
        "template": template,
        "episodes": rows,
        "agreement": judge_report(probs, truths, thr),
        "frame_agreement": frame_agreement,
        "seconds": round(time.perf_counter() - t0, 3),
    }
