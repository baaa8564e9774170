"""Real-time chunking (Black, Galliker and Levine 2025) for the diffusion policies.

While a chunk executes, the next one is computed; the rows of the old chunk that will still
execute during inference (the first ``delay`` rows of the new chunk) are fixed, and the rows
after them should agree with the old chunk as far as it goes. RTC treats this as inpainting:
every denoising step is guided toward the old chunk's rows with a soft mask over the new
chunk's rows (:func:`prefix_weights`) and a guidance weight capped at ``max_guidance_weight``
(:meth:`policies.diffusion.modeling_pdp.PDPModel._guided_step`).

Defaults follow the paper: the exponential soft mask and beta = 5. lerobot's
``policies/rtc`` defaults to a linear mask and a cap of 10; both are options here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from embodied.config import checked, validate

SCHEDULES = ("exp", "linear", "ones", "zeros")
"""Soft masks over the rows after the frozen prefix: ``exp`` (the paper's), ``linear``
(lerobot's default), ``ones`` (hard: every overlapping row weight 1), ``zeros`` (only the
frozen rows guided)."""


JACOBIANS = ("vjp", "identity")
"""``vjp``: the paper's vector-Jacobian product through the denoiser (``J^T e``);
``identity`` (our ablation): ``J = I`` in flow coordinates, the guidance moves the clean-sample
estimate by the masked error itself (reconstruction guidance without differentiating the
denoiser). An epsilon-predicting denoiser's ``J`` carries a ``1 / tau`` term that only an
exact model cancels, so at high noise the VJP can overshoot where the identity cannot."""


@dataclass(frozen=True)
class RTCConfig:
    """Real-time chunking settings.

    Args:
        schedule: Soft mask of the overlap after the frozen rows (:data:`SCHEDULES`).
        max_guidance_weight: The cap beta on the guidance weight (the paper: 5).
        jacobian: How the guidance maps the prefix error back to the noisy sample
            (:data:`JACOBIANS`).
    """

    config_name: ClassVar[str] = "rtc"

    schedule: str = checked("exp", choices=SCHEDULES)
    max_guidance_weight: float = checked(5.0, gt=0, fix="pass e.g. 5 (the paper's beta)")
    jacobian: str = checked("vjp", choices=JACOBIANS)

    def __post_init__(self) -> None:
        validate(self)


def prefix_weights(delay: int, overlap: int, horizon: int, schedule: str = "exp") -> torch.Tensor:
    """The soft mask W over a chunk's ``horizon`` rows (the paper's Eq. 5).

    Rows ``< delay`` (executed while the new chunk is computed) weigh 1; rows from ``delay``
    to ``overlap`` (where the old chunk still has actions) decay to 0 by ``schedule``; rows
    from ``overlap`` on weigh 0.

    Args:
        delay: Inference delay in control steps (rows frozen).
        overlap: Rows of the new chunk the old chunk still covers.
        horizon: Rows of a chunk.
        schedule: One of :data:`SCHEDULES`.
    """
    delay = max(0, min(delay, horizon))
    overlap = max(delay, min(overlap, horizon))
    w = torch.zeros(horizon)
    w[:delay] = 1.0
    span = overlap - delay
    if span > 0 and schedule != "zeros":
        if schedule == "ones":
            w[delay:overlap] = 1.0
        else:
            # c_i = (overlap - i) / (overlap - delay + 1): 1 at the last frozen row, 0 at overlap
            c = torch.linspace(1.0, 0.0, span + 2)[1:-1]
            w[delay:overlap] = c * torch.expm1(c) / (math.e - 1.0) if schedule == "exp" else c
    return w


@dataclass
class RTCGuide:
    """What one guided sampling call needs.

    Attributes:
        prefix: (B, horizon, action_dim) normalised old-chunk rows (zeros where none).
        weights: (horizon,) soft mask (:func:`prefix_weights`).
        max_guidance_weight: The cap beta.
        jacobian: ``vjp`` or ``identity`` (:data:`JACOBIANS`).
    """

    prefix: torch.Tensor
    weights: torch.Tensor
    max_guidance_weight: float = 5.0
    jacobian: str = "vjp"
