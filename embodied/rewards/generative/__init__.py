"""Generative VLM judge (any transformers image-text-to-text model)."""

from embodied.rewards.generative.configuration_generative import (
    DEFAULT_PROMPT,
    GenerativeJudgeConfig,
)
from embodied.rewards.generative.modeling_generative import GenerativeJudge

__all__ = ["DEFAULT_PROMPT", "GenerativeJudge", "GenerativeJudgeConfig"]
