"""Configuration of the contrastive (CLIP/SigLIP-style) judge."""

from __future__ import annotations

from dataclasses import dataclass

from embodied.errors import ConfigError
from embodied.rewards.clips import check_clip_settings

FRAME_MODES = ("current", "mean")


@dataclass
class ContrastiveJudgeConfig:
    """Settings of :class:`~embodied.rewards.contrastive.ContrastiveJudge`.

    The probability is ``sigmoid(scale * (cos(image, text) - offset))``; :meth:`calibrate`
    fits ``scale``/``offset`` to labelled clips (Platt scaling) and picks ``threshold``.

    Args:
        model: Hub id or local folder of a transformers dual encoder with
            ``get_image_features`` / ``get_text_features`` (CLIPModel, SiglipModel, ...).
        device: ``"auto"``, ``"cpu"`` or ``"cuda[:N]"``.
        dtype: ``"auto"`` (bfloat16 on GPU, float32 on CPU) or a dtype name.
        n_context: Earlier frames per clip (the clip has ``n_context + 1`` frames).
        frames: ``"current"`` embeds the last frame; ``"mean"`` averages all frames' embeddings.
        scale: Slope of the cosine -> probability map (calibrated).
        offset: Cosine at probability 0.5 (calibrated).
        threshold: Probability above which a clip counts as success.
        batch_size: Clips per forward pass.
    """

    model: str
    device: str = "auto"
    dtype: str = "auto"
    n_context: int = 4
    frames: str = "current"
    scale: float = 10.0
    offset: float = 0.0
    threshold: float = 0.5
    batch_size: int = 16

    def __post_init__(self) -> None:
        if not self.model:
            raise ConfigError("contrastive judge needs a model", fix="pass a hub id or a folder")
        if self.frames not in FRAME_MODES:
            raise ConfigError(f"frames={self.frames!r} unknown", fix=f"use one of {FRAME_MODES}")
        check_clip_settings(self.n_context, self.batch_size, self.threshold)
        if self.scale <= 0:
            raise ConfigError(f"scale must be > 0, got {self.scale}", fix="refit with calibrate()")

    @property
    def n_frames(self) -> int:
        """Frames per clip (``n_context + 1``)."""
        return self.n_context + 1
