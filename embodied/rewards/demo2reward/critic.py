"""The Demo2Reward Critic: a transformers image-text-to-text model with the reference prompts.

Two named variants share the reference's chat (``utils/critic.py: eval_single``: system
prompt ``CRITIC_TEMPLATE``; user turn = the clip's frames as images, then ``_CRITIC_USER``
with the instruction):

* :class:`ReferenceCritic` (judge ``critic``) - the reference: greedy generation of at most
  5 tokens, the answer parsed as one character "1"/"0" (:func:`parse_binary`); anything else
  is invalid and counts as wrong in Demo2Reward's rates, as in the reference. It sees a clip
  with fewer frames than ``n_frames`` as it is (the reference's first samples have 2-4
  frames); longer clips are resampled to ``n_frames`` like every judge's.
* :class:`CalibratedCritic` (judge ``critic-calibrated``) - the project's variant: the same
  prompt scored as P("1") / (P("1") + P("0")) of the next token and decided at a calibrated
  threshold (like :class:`~embodied.rewards.generative.GenerativeJudge`). Report its results
  separately from the reference critic's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from embodied.rewards.clips import validate_frames
from embodied.rewards.demo2reward.prompts import (
    CRITIC_SAMPLING,
    CRITIC_USER,
    critic_system_prompt,
    parse_binary,
    parse_critic_output,
)
from embodied.rewards.generative import GenerativeJudge, GenerativeJudgeConfig


def critic_config(model: str, **kwargs: Any) -> GenerativeJudgeConfig:
    """A judge config whose user prompt is the reference Critic's (``_CRITIC_USER``)."""
    kwargs.setdefault("prompt", CRITIC_USER)
    return GenerativeJudgeConfig(model=model, **kwargs)


class CriticPrompt(GenerativeJudge):
    """A generative judge with the reference Critic's chat (system prompt + frames + text).

    Args:
        config: Judge settings (:func:`critic_config`).
        model: A loaded model (skips loading; e.g. shared with the Meta-Critic).
        processor: Its processor.
        real_robot: "a robot" instead of "a simulated robot" in the system prompt.
    """

    def __init__(
        self,
        config: GenerativeJudgeConfig,
        model: Any = None,
        processor: Any = None,
        real_robot: bool = False,
    ) -> None:
        super().__init__(config, model, processor)
        self.system_prompt = critic_system_prompt(real_robot)
        self.real_robot = real_robot

    def messages(
        self, instruction: str, images: list[Any] | None = None, n_images: int | None = None
    ) -> list[dict[str, Any]]:
        """The reference chat (utils/critic.py: eval_single): system, then frames + text.

        Args:
            instruction: The instruction.
            images: The frames (default: ``n_images`` image placeholders).
            n_images: Placeholders without ``images`` (default :attr:`n_frames`).
        """
        if images is not None:
            frames = list(images)
        else:
            frames = [None] * (self.n_frames if n_images is None else n_images)
        content: list[dict[str, Any]] = [
            {"type": "image", "image": im} if im is not None else {"type": "image"} for im in frames
        ]
        user = self.config.prompt.format(instruction=instruction, n_frames=len(frames))
        content.append({"type": "text", "text": user})
        return [
            {"role": "system", "content": [{"type": "text", "text": self.system_prompt}]},
            {"role": "user", "content": content},
        ]

    def prompt_text(self, instruction: str, n_images: int | None = None) -> str:
        """The chat-formatted prompt for one clip of ``n_images`` frames (default
        :attr:`n_frames`; images as placeholders)."""
        return str(
            self.processor.apply_chat_template(
                self.messages(instruction, n_images=n_images),
                add_generation_prompt=True,
                tokenize=False,
            )
        )

    def describe(self) -> dict[str, Any]:
        """Backend summary (the variant's name is the backend)."""
        return {**super().describe(), "real_robot": self.real_robot}


class ReferenceCritic(CriticPrompt):
    """The reference Critic: generate, then parse a single binary character.

    ``score`` is 1.0 for "1" and 0.0 for "0" or an invalid answer (so a reward never fires
    on gibberish); :meth:`critique` keeps invalid answers apart (NaN) with the raw outputs,
    which Demo2Reward's evaluation uses (invalid = wrong, the reference rule) and shows to
    the Meta-Critic with each failure clip.

    Clips shorter than ``n_frames`` are shown as they are (:meth:`prepare`), as the reference
    shows its first samples of an episode (2-4 frames).

    Args:
        config: Judge settings (:func:`critic_config`); ``batch_size`` 1 is the reference's
            one video per call, larger batches left-pad.
        model, processor, real_robot: As :class:`CriticPrompt`.
    """

    name = "critic"

    def prepare(
        self, clips: Sequence[Any] | np.ndarray, instructions: str | Sequence[str]
    ) -> tuple[list[np.ndarray], list[str]]:
        """As every judge's, except that a clip with fewer frames than :attr:`n_frames` is
        kept as it is: the reference Critic sees the clip it is given (its first samples of
        an episode hold 2-4 frames, ``demonstrations.sample_indices``); longer clips are
        resampled to :attr:`n_frames`."""
        clips = list(clips)
        checked, texts = super().prepare(clips, instructions)
        for i, clip in enumerate(clips):
            frames = validate_frames(clip, what=f"clip {i}")
            if len(frames) < self.n_frames:
                checked[i] = frames
        return checked, texts

    def _inputs(self, clips: list[np.ndarray], instructions: list[str]) -> dict[str, Any]:
        texts = [self.prompt_text(t, len(c)) for t, c in zip(instructions, clips, strict=True)]
        images = [self._images(c) for c in clips]
        inputs = self.processor(text=texts, images=images, return_tensors="pt", padding=True)
        return {
            k: (v.to(self.device, dtype=self.dtype) if v.is_floating_point() else v.to(self.device))
            if hasattr(v, "to")
            else v
            for k, v in inputs.items()
        }

    def generate_answers(self, clips: list[np.ndarray], instructions: list[str]) -> list[str]:
        """Raw Critic answers (new tokens only) for validated clips, with the reference
        sampling (``CRITIC_SAMPLING``: greedy, 5 new tokens)."""
        torch = self._torch
        inputs = self._inputs(clips, instructions)
        tok = self.tokenizer
        eos = tok.eos_token_id
        pad = tok.pad_token_id if tok.pad_token_id is not None else eos
        with torch.inference_mode():
            out = self.model.generate(
                **inputs, eos_token_id=eos, pad_token_id=pad, use_cache=True, **CRITIC_SAMPLING
            )
        new = out[:, inputs["input_ids"].shape[1] :]
        return [str(tok.decode(row, skip_special_tokens=True)) for row in new]

    def critique(self, clips: Any, instructions: str | list[str]) -> tuple[np.ndarray, list[str]]:
        """Decisions and outputs for many clips.

        Returns:
            ``(values, outputs)``: (B,) float64, 1.0 / 0.0 for the answers "1" / "0" and NaN
            for an invalid answer; and the Critic output per clip as the reference shows it
            to the Meta-Critic (``_parse_critic_output``).
        """
        checked, texts = self.prepare(clips, instructions)
        values: list[float] = []
        outputs: list[str] = []
        bs = int(self.batch_size)
        for start in range(0, len(checked), bs):
            for raw in self.generate_answers(
                checked[start : start + bs], texts[start : start + bs]
            ):
                v = parse_binary(raw)
                values.append(float(v) if v >= 0 else float("nan"))
                outputs.append(parse_critic_output(raw))
        return np.asarray(values, dtype=np.float64), outputs

    def _score_clips(self, clips: list[np.ndarray], instructions: list[str]) -> np.ndarray:
        raw = self.generate_answers(clips, instructions)
        return np.array([1.0 if parse_binary(r) == 1 else 0.0 for r in raw], dtype=np.float64)


class CalibratedCritic(CriticPrompt):
    """The calibrated-threshold variant: the reference Critic's prompt, scored as
    P("1") / (P("1") + P("0")) of the next token and decided at :attr:`threshold`.

    Not the reference (which samples an answer and parses it); name it as this variant in
    reports. Has no :meth:`critique`, so Demo2Reward decides at the threshold and shows the
    decision ("1"/"0") with failure clips.
    """

    name = "critic-calibrated"
