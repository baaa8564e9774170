"""Configuration of the generative VLM judge."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from embodied.config import Rule, checked, validate

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

    config_name: ClassVar[str] = "generative judge"

    model: str = checked(min_len=1, fix="pass a hub id or a folder")
    device: str = "auto"
    dtype: str = checked(
        "auto",
        choices=("auto", "bfloat16", "float16", "float32"),
        fix="use auto, bfloat16, float16 or float32",
    )
    n_context: int = checked(4, ge=0, fix="use n_context >= 0 earlier frames")
    prompt: str = DEFAULT_PROMPT
    yes_token: str = checked("1", min_len=1, fix="give the answer token meaning success")
    no_token: str = checked("0", min_len=1, fix="give the answer token meaning failure")
    batch_size: int = checked(8, ge=1, fix="use e.g. 8")
    threshold: float = checked(0.5, gt=0, lt=1, fix="use a probability in (0, 1), e.g. 0.5")
    image_size: int | None = checked(None, ge=8, fix="use >= 8 pixels, or None")
    trust_remote_code: bool = False

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "prompt",
            lambda c: "{instruction}" in c.prompt,
            "has no {{instruction}} field",
            "include 'Instruction: {instruction}' in the prompt",
        ),
        Rule(
            "yes_token",
            lambda c: c.yes_token != c.no_token,
            "must differ from no_token={no_token!r}",
            "use two different answer tokens, e.g. '1' and '0'",
        ),
    )

    def __post_init__(self) -> None:
        validate(self)

    @property
    def n_frames(self) -> int:
        """Frames per clip (``n_context + 1``)."""
        return self.n_context + 1
