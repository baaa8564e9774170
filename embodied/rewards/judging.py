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
from embodied.rewards.oracle import episode_success_step, frame_labels


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
        judge: A judge or a spec for :func:`embodied.rewards.load_judge`; ``"oracle"`` scores
            each clip with the simulator's own verdict of its last frame (the reference row
            of a comparison: agreement 100 % and ROC-AUC 1 by construction).
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
    is_oracle = isinstance(judge, str) and judge == "oracle"
    j: Any = None
    if not is_oracle:
        j = load_judge(judge) if isinstance(judge, str | os.PathLike) else judge
    if template is not None:
        format_instruction(template, "check")
    thr = float(getattr(j, "threshold", 0.5))
    n_context = int(getattr(j, "n_frames", 5)) - 1
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
        if is_oracle:
            prob = float(labels[-1])
        else:
            prob = float(j.score(frames[context_indices(last, n_context)], text))
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
            if is_oracle:
                p = labels[steps].astype(np.float64)
            else:
                clips = episode_clips(frames, n_context, steps)
                batch = getattr(j, "score_batch", None)
                p = batch(clips, text) if batch else np.array([j.score(c, text) for c in clips])
            f_probs.append(np.asarray(p))
            f_labels.append(labels[steps])
    frame_agreement = None
    if per_frame:
        frame_agreement = judge_report(np.concatenate(f_probs), np.concatenate(f_labels), thr)
    describe = getattr(j, "describe", None)
    if is_oracle:
        name: dict[str, Any] = {"backend": "oracle"}
    else:
        name = describe() if describe else {"backend": type(j).__name__}
    return {
        "judge": name,
        "template": template,
        "episodes": rows,
        "agreement": judge_report(probs, truths, thr),
        "frame_agreement": frame_agreement,
        "seconds": round(time.perf_counter() - t0, 3),
    }
