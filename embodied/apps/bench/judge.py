"""Judge throughput: judged frames per second, one clip per call vs batches of 16.

Each judged frame is one clip (4 earlier frames + the current one) of 128x128 RGB frames
(the size of ``mujoco:arm_reach``'s front camera). Backends: the shipped ``minijudge`` and
tiny random-initialised generative (LLaVA) and contrastive (CLIP) models built on the fly
(they time the real code paths, not real model sizes); on a GPU each again on ``cuda``.

On one CPU thread the shipped judge is compute-bound: about 1 ms of convolutions per clip at
128 px against a few tenths of a millisecond of per-call work, so a batch can only save the
latter (and a batch of 16 runs the image tower 4 clips at a time, which keeps activations in
cache). ``speedup`` is therefore modest there; the tiny transformers models, whose per-call
work dominates, show what batching buys when overhead is the cost.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from embodied.rewards.contrastive import ContrastiveJudge, ContrastiveJudgeConfig
from embodied.rewards.generative import GenerativeJudge, GenerativeJudgeConfig
from embodied.rewards.minijudge import MiniJudge
from embodied.rewards.tiny import build_tiny_clip, build_tiny_llava

BATCH = 16


def _rate(fn: Callable[[], None], clips_per_call: int, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return clips_per_call / statistics.median(times)


def _measure(judge: Any, clips: list[np.ndarray], text: str, repeats: int) -> dict[str, Any]:
    def single() -> None:
        for c in clips:
            judge.score(c, text)

    def batched() -> None:
        judge.score_batch(clips, text, batch_size=BATCH)

    fs = _rate(single, len(clips), repeats)
    fb = _rate(batched, len(clips), repeats)
    return {
        "frames_per_s_single": round(fs, 1),
        "frames_per_s_batched": round(fb, 1),
        "speedup": round(fb / fs, 2),
        "batch": BATCH,
        "device": getattr(judge, "device", "cpu"),
    }


def run(quick: bool = False) -> dict[str, Any]:
    """Frames/s single vs batched (16) per backend; CUDA rows when a GPU is present."""
    import torch

    rng = np.random.default_rng(0)
    clips = [rng.integers(0, 256, (5, 128, 128, 3), dtype=np.uint8) for _ in range(BATCH)]
    text = "reach the red cube"
    repeats = 3 if quick else 15
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    out: dict[str, Any] = {"clip": "5 frames of 128x128 RGB", "repeats": repeats}
    with tempfile.TemporaryDirectory() as tmp:
        llava = build_tiny_llava(f"{tmp}/llava")
        clip_model = build_tiny_clip(f"{tmp}/clip")
        for dev in devices:
            sfx = "" if dev == "cpu" else "_cuda"
            out[f"minijudge{sfx}"] = _measure(
                MiniJudge.from_pretrained(device=dev), clips, text, repeats
            )
            gen = GenerativeJudge(
                GenerativeJudgeConfig(model=str(llava), device=dev, batch_size=BATCH)
            )
            out[f"generative_tiny_llava{sfx}"] = _measure(gen, clips, text, max(2, repeats // 3))
            con = ContrastiveJudge(ContrastiveJudgeConfig(model=str(clip_model), device=dev))
            out[f"contrastive_tiny_clip{sfx}"] = _measure(con, clips, text, repeats)
    return out
