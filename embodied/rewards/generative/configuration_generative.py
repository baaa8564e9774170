"""Configuration of the generative VLM judge."""

from __future__ import annotations

from dataclasses import dataclass

from embodied.errors import ConfigError
from embodied.rewards.clips import check_clip_settings

DEFAULT_PROMPT = (
    "The images are {n_frames} frames of a robot episode, oldest first; the last one is the "
    "current frame.\nInstruction: {instruction}\n"
    "Has the robot accomplished the instruction in the current frame? "
    "Answer with 1 for yes or 0 for no."
)


@dataclass
class GenerativeJudgeConfig:
    """Settings of :class:`~embodied.rewards.generative.GenerativeJudge`.

    Args:
        model: Hub id or local folder of any transformers image-text-to-text model
            (loaded with ``AutoModelForImageTextToText`` + ``AutoProcessor``).
        device: ``"auto"`` (GPU when present), ``"cpu"`` or ``"cuda[:N]"``.
        dtype: ``"auto"`` (bfloat16 on GPU, float32 on CPU), ``"bfloat16"``, ``"float16"``,
            ``"float32"``.
        n_context: Earlier frames per clip; the clip has ``n_context + 1`` frames.
        prompt: User text; must contain ``{instruction}``; may use ``{n_frames}``.
        yes_token: Answer token meaning success.
        no_token: Answer token meaning failure.
        batch_size: Clips per forward pass.
        threshold: Probability above which a clip counts as success.
        image_size: Resize frames to this square side (pixels) before the processor, or None.
        trust_remote_code: Passed to ``from_pretrained`` (models with custom code).
    """

    model: str
    device: str = "auto"
    dtype: str = "auto"
    n_context: int = 4
    prompt: str = DEFAULT_PROMPT
    yes_token: str = "1"
    no_token: str = "0"
    batch_size: int = 8
    threshold: float = 0.5
    image_size: int | None = None
    trust_remote_code: bool = False

    def __post_init__(self) -> None:
        if not self.model:
            raise ConfigError("generative judge needs a model", fix="pass a hub id or a folder")
        if "{instruction}" not in self.prompt:
            raise ConfigError(
                f"prompt {self.prompt!r} has no {{instruction}} field",
                fix="include 'Instruction: {instruction}' in the prompt",
            )
        check_clip_settings(self.n_context, self.batch_size, self.threshold)
        if self.yes_token == self.no_token or not self.yes_token or not self.no_token:
            raise ConfigError(
                f"yes/no tokens {self.yes_token!r}/{self.no_token!r} must differ and be non-empty"
            )
        if self.image_size is not None and self.image_size < 8:
            raise ConfigError(f"image_size must be >= 8 pixels, got {self.image_size}")
        if self.dtype not in ("auto", "bfloat16", "float16", "float32"):
            raise ConfigError(
                f"unknown dtype {self.dtype!r}", fix="use auto, bfloat16, float16 or float32"
            )

    @property
    def n_frames(self) -> int:
        """Frames per clip (``n_context + 1``)."""
        return self.n_context + 1
