"""``embodied bench steer``: cost of activation steering and of the PID update.

* ``generate_ms_plain`` / ``generate_ms_steered``: median wall time (ms) of a 7-token greedy
  generate of the default tiny OpenVLA (64 px image, batch 1, 1 thread), without a hook and
  with the steering hook attached at alpha = 1 (prefill + 6 cached steps all steered).
* ``overhead``: steered / plain (target <= 1.03).
* ``pid_update_us``: median time of one full-featured PID update (``embodied.apps.bench._pid``).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from embodied.apps.bench._pid import pid_update_us
from policies.openvla.configuration_openvla import OpenVLAConfig
from policies.openvla.modeling_openvla import OpenVLAModel
from policies.openvla.processor_openvla import OpenVLAProcessor, build_tiny_tokenizer
from policies.openvla.steering import SteeringDirection, SteeringHook


def run(quick: bool = False) -> dict[str, Any]:
    """Interleaved plain/steered timings; medians over many repetitions."""
    import numpy as np
    import torch

    stats = {
        "bench": {"action": {"q01": [-1.0] * 7, "q99": [1.0] * 7, "mask": [True] * 6 + [False]}}
    }
    torch.manual_seed(0)
    cfg = OpenVLAConfig.tiny(norm_stats=stats)
    model = OpenVLAModel(cfg).eval()
    proc = OpenVLAProcessor(cfg, build_tiny_tokenizer())
    pv = proc.images([np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)])
    ids, mask = proc.encode_prompts(["reach the red cube"])
    n_tok = cfg.action_dim()
    direction = SteeringDirection(torch.randn(cfg.llm_dim), layer=len(model.decoder_layers) // 2)
    hook = SteeringHook(model, direction, alpha=1.0)

    def once(steered: bool) -> float:
        if steered:
            hook.attach()
        t0 = time.perf_counter()
        model.generate_tokens(pv, ids, mask, n_tok)
        dt = time.perf_counter() - t0
        hook.remove()
        return dt * 1e3

    for _ in range(3):  # warm-up
        once(False)
        once(True)
    reps = 10 if quick else 60
    plain: list[float] = []
    steered: list[float] = []
    for i in range(reps):
        order = (False, True) if i % 2 == 0 else (True, False)
        for with_hook in order:
            (steered if with_hook else plain).append(once(with_hook))
    p, s = statistics.median(plain), statistics.median(steered)
    result: dict[str, Any] = {
        "generate_ms_plain": round(p, 3),
        "generate_ms_steered": round(s, 3),
        "overhead": round(s / p, 4),
        "tokens": n_tok,
        "repetitions": reps,
    }
    result["pid_update_us"] = round(pid_update_us(n=2000 if quick else 20000), 3)
    return result
