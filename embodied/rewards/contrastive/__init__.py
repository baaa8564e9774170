"""Contrastive (CLIP/SigLIP-style) judge with a calibrated threshold."""

from embodied.rewards.contrastive.configuration_contrastive import ContrastiveJudgeConfig
from embodied.rewards.contrastive.modeling_contrastive import ContrastiveJudge

__all__ = ["ContrastiveJudge", "ContrastiveJudgeConfig"]
