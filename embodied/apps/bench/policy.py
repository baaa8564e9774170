"""``embodied bench policy``: chunk latency of policies at batch 1 on one thread.

Key ``pdp``: the default low-dimensional PDP (``receding`` variant: residual-MLP denoiser,
20 DDIM steps, sized for ``mujoco:reach_around``: 8-dim state, 2-dim actions),
random-initialised weights (speed does not depend on the values). ``pdp_unet`` is the 1D-conv
U-Net option, ``dp`` the same policy without z, and ``pdp_reference`` the ``reference``
variant planning a whole 100-step trajectory (once per episode). Each entry reports ``chunk_latency_ms_p50`` (median of
``predict_action_chunk`` calls, including normalisation), ``chunks_per_s`` (= 1000 / p50)
and ``params``.
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


def _time(policy: Any, runs: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    obs = {"state": rng.uniform(-0.3, 0.3, 8).astype(np.float32)}
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
        "batch": 1,
        "threads": 1,
    }
