"""Judge throughput: judged frames per second, one clip per call vs batches of 16.

Each judged frame is one clip (4 earlier frames + the current one) of 128x128 RGB frames
(the size of ``mujoco:arm_reach``'s front camera). Backends: the shipped ``minijudge`` and
tiny random-initialised generative (LLaVA) and contrastive (CLIP) models built on the fly
(they time the real code paths, not real model sizes); on a GPU each again on ``cuda``.

On one CPU thread the shipped judge is compute-bound, and ``minijudge.profile`` shows it in
the same run: the floor of a batched call is the network's own forward pass on ready float
input at its best chunk size plus the one conversion every clip needs (uint8 camera frames,
channels last, to normalised planar float: ``preprocess_ms_per_clip``; a transposing
``torch`` copy and a fused conversion measured slower, and ``uint8_to_float_ms_per_clip``, the
same bytes converted without the transposition, is the memory-bound limit below it);
``network_gflops_per_s`` (its FLOPs per clip over that time) next to ``matmul_gflops_per_s``
(a 1024^2 float32 matmul on the same thread) says how close the convolutions run to the
core's arithmetic peak. A batch can only remove per-call work, so
batching is bounded by ``max_speedup`` (single-clip time over the floor); ``floor_fraction`` is
how much of the floor the batched path reaches. The tiny transformers models, whose per-call
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


def _rate(fn: Callable[[], object], clips_per_call: int, repeats: int) -> float:
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


def _conv_flops(model: Any, pixels: Any) -> int:
    """Multiply-add FLOPs (2 per MAC) of the model's convolutions on one clip."""
    import torch

    flops = 0

    def hook(mod: torch.nn.Conv2d, _inp: Any, out: torch.Tensor) -> None:
        nonlocal flops
        k = mod.kernel_size[0] * mod.kernel_size[1] * mod.in_channels // mod.groups
        flops += 2 * k * out[0].numel()

    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    handles = [m.register_forward_hook(hook) for m in convs]
    try:
        with torch.inference_mode():
            model.embed_images(pixels[:1])
    finally:
        for h in handles:
            h.remove()
    return flops


def _matmul_gflops(repeats: int) -> float:
    import torch

    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    return 2 * 1024**3 / 1e9 * _rate(lambda: torch.mm(a, b), 1, repeats)


def _profile_minijudge(
    judge: MiniJudge,
    clips: list[np.ndarray],
    text: str,
    single_fps: float,
    batched_fps: float,
    repeats: int,
) -> dict[str, Any]:
    """Where a batched call of the shipped judge spends its time, and the floor it can reach."""
    import torch

    from embodied.rewards.minijudge.modeling_minijudge import clips_to_pixels

    size = judge.config.image_size
    model = judge.model
    pixels = clips_to_pixels(clips, size)
    txt, film = judge._text(text)
    film_b = None if film is None else film[None]

    def network(chunk: int) -> Callable[[], None]:
        def fn() -> None:
            with torch.inference_mode():
                for i in range(0, len(pixels), chunk):
                    model.logits(model.embed_images(pixels[i : i + chunk], film_b), txt[None])

        return fn

    chunks = [c for c in (1, 2, 4, 8, 16) if c <= len(clips)]
    net = {c: 1e3 / _rate(network(c), len(clips), repeats) for c in chunks}
    best = min(net, key=lambda c: net[c])
    stacked = np.stack(clips)
    convert_ms = 1e3 / _rate(lambda: torch.from_numpy(stacked).float(), len(clips), repeats)
    prep_ms = 1e3 / _rate(lambda: clips_to_pixels(clips, size), len(clips), repeats)
    floor = net[best] + prep_ms
    flops = _conv_flops(model, pixels)
    return {
        "network_ms_per_clip_by_chunk": {str(c): round(v, 3) for c, v in net.items()},
        "best_chunk": best,
        "cpu_chunk_used": judge.config.cpu_chunk,
        "uint8_to_float_ms_per_clip": round(convert_ms, 3),
        "preprocess_ms_per_clip": round(prep_ms, 3),
        "floor_ms_per_clip": round(floor, 3),
        "batched_ms_per_clip": round(1e3 / batched_fps, 3),
        "single_ms_per_clip": round(1e3 / single_fps, 3),
        "max_speedup": round(1e3 / single_fps / floor, 2),
        "floor_fraction": round(floor / (1e3 / batched_fps), 3),
        "conv_mflops_per_clip": round(flops / 1e6, 1),
        "network_gflops_per_s": round(flops / 1e6 / net[best], 1),
        "matmul_gflops_per_s": round(_matmul_gflops(repeats), 1),
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
            mini = MiniJudge.from_pretrained(device=dev)
            row = _measure(mini, clips, text, repeats)
            if dev == "cpu":
                profile = _profile_minijudge(
                    mini,
                    clips,
                    text,
                    row["frames_per_s_single"],
                    row["frames_per_s_batched"],
                    repeats,
                )
                row["floor_fraction"] = profile["floor_fraction"]
                row["max_speedup"] = profile["max_speedup"]
                row["profile"] = profile
            out[f"minijudge{sfx}"] = row
            gen = GenerativeJudge(
                GenerativeJudgeConfig(model=str(llava), device=dev, batch_size=BATCH)
            )
            out[f"generative_tiny_llava{sfx}"] = _measure(gen, clips, text, max(2, repeats // 3))
            con = ContrastiveJudge(ContrastiveJudgeConfig(model=str(clip_model), device=dev))
            out[f"contrastive_tiny_clip{sfx}"] = _measure(con, clips, text, repeats)
    return out
