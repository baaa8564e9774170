"""The shipped small contrastive judge (MiniLM text tower + small CNN image tower)."""

from embodied.rewards.minijudge.configuration_minijudge import JUDGE_TYPE, MiniJudgeConfig
from embodied.rewards.minijudge.modeling_minijudge import (
    SHIPPED,
    MiniJudge,
    MiniJudgeModel,
    TextEncoder,
    clips_to_pixels,
    resize_frames,
)

__all__ = [
    "JUDGE_TYPE",
    "SHIPPED",
    "MiniJudge",
    "MiniJudgeConfig",
    "MiniJudgeModel",
    "TextEncoder",
    "clips_to_pixels",
    "resize_frames",
]
