"""Configuration of the contrastive (CLIP/SigLIP-style) judge."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from embodied.config import checked, validate

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

    config_name: ClassVar[str] = "contrastive judge"

    model: str = checked(min_len=1, fix="pass a hub id or a folder")
    device: str = "auto"
    dtype: str = "auto"
    n_context: int = checked(4, ge=0, fix="use n_context >= 0 earlier frames")
    frames: str = checked("current", choices=FRAME_MODES)
    scale: float = checked(10.0, gt=0, fix="refit with calibrate()")
    offset: float = checked(0.0, fix="refit with calibrate()")
    threshold: float = checked(0.5, gt=0, lt=1, fix="use a probability in (0, 1), e.g. 0.5")
    batch_size: int = checked(16, ge=1, fix="use e.g. 16")

    def __post_init__(self) -> None:
        validate(self)

    @property
    def n_frames(self) -> int:
        """Frames per clip (``n_context + 1``)."""
        return self.n_context + 1
