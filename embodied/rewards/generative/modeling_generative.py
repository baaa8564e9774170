"""Generative VLM judge: P("1") / (P("1") + P("0")) from the next-token logits.

Works with any transformers image-text-to-text model that ships a processor with a chat
template (Qwen2-VL/Qwen2.5-VL, SmolVLM/Idefics3, LLaVA, ...). The prompt holds the clip's
frames as images followed by the instruction; one forward pass per batch, left padding so the
last position is every row's next token; bfloat16 on GPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from embodied.errors import CheckpointError, ConfigError
from embodied.rewards.base import BaseJudge
from embodied.rewards.generative.configuration_generative import GenerativeJudgeConfig


def _answer_ids(tokenizer: Any, token: str) -> list[int]:
    """Vocabulary ids that spell ``token`` as one token (bare and with a leading space)."""
    ids: set[int] = set()
    for text in (token, " " + token):
        enc = tokenizer.encode(text, add_special_tokens=False)
        if len(enc) == 1:
            ids.add(int(enc[0]))
        elif len(enc) == 2 and tokenizer.decode(enc[:1]).strip() == "":
            ids.add(int(enc[1]))
    unk = getattr(tokenizer, "unk_token_id", None)
    ids.discard(unk) if unk is not None else None
    if not ids:
        raise ConfigError(
            f"answer token {token!r} is not a single token of this tokenizer",
            fix="pick yes/no answer tokens the tokenizer encodes as one token (e.g. '1'/'0')",
        )
    return sorted(ids)


class GenerativeJudge(BaseJudge):
    """Judge from a transformers image-text-to-text model.

    Args:
        config: The judge configuration (model id/folder, device, prompt, ...).
        model: An already loaded model (skips loading; tests and servers).
        processor: Its processor (required with ``model``).
    """

    name = "generative"

    def __init__(
        self, config: GenerativeJudgeConfig, model: Any = None, processor: Any = None
    ) -> None:
        import torch
        from transformers import AutoModelForImageTextToText, AutoProcessor

        self._configure(config)
        remote = config.trust_remote_code
        model, processor = self._load_pretrained(
            model,
            processor,
            lambda: (
                AutoModelForImageTextToText.from_pretrained(
                    config.model, dtype=self.dtype, trust_remote_code=remote
                ),
                AutoProcessor.from_pretrained(config.model, trust_remote_code=remote),
            ),
            "image-text-to-text model",
            "pass a local folder with config.json + weights + processor files, or a hub id "
            "already in the local cache (no downloads at run time)",
            auto_class=AutoModelForImageTextToText,
            trust_remote_code=remote,
        )
        self.model = model.to(device=self.device, dtype=self.dtype).eval()
        self.processor = processor
        self.tokenizer = getattr(processor, "tokenizer", processor)
        self.tokenizer.padding_side = "left"
        if (
            getattr(processor, "chat_template", None) is None
            and getattr(self.tokenizer, "chat_template", None) is None
        ):
            raise CheckpointError(
                f"processor of {config.model!r} has no chat template",
                fix="use an instruction-tuned model whose processor ships a chat_template",
            )
        self.yes_ids = torch.tensor(_answer_ids(self.tokenizer, config.yes_token))
        self.no_ids = torch.tensor(_answer_ids(self.tokenizer, config.no_token))
        self._torch = torch

    def prompt_text(self, instruction: str) -> str:
        """The chat-formatted prompt text for one clip (images as placeholders)."""
        user = self.config.prompt.format(instruction=instruction, n_frames=self.n_frames)
        content: list[dict[str, str]] = [{"type": "image"} for _ in range(self.n_frames)]
        content.append({"type": "text", "text": user})
        messages = [{"role": "user", "content": content}]
        return str(
            self.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        )

    def _images(self, clip: np.ndarray) -> list[Any]:
        from PIL import Image

        size = self.config.image_size
        imgs = [Image.fromarray(f) for f in clip]
        if size is not None:
            imgs = [im.resize((size, size), Image.Resampling.BILINEAR) for im in imgs]
        return imgs

    def _score_clips(self, clips: list[np.ndarray], instructions: list[str]) -> np.ndarray:
        torch = self._torch
        texts = [self.prompt_text(t) for t in instructions]
        images = [self._images(c) for c in clips]
        inputs = self.processor(text=texts, images=images, return_tensors="pt", padding=True)
        inputs = {
            k: (v.to(self.device, dtype=self.dtype) if v.is_floating_point() else v.to(self.device))
            if hasattr(v, "to")
            else v
            for k, v in inputs.items()
        }
        with torch.inference_mode():
            try:
                logits = self.model(**inputs, logits_to_keep=1).logits[:, -1]
            except TypeError:  # models without logits_to_keep
                logits = self.model(**inputs).logits[:, -1]
        logp = torch.log_softmax(logits.float(), dim=-1)
        lp_yes = torch.logsumexp(logp[:, self.yes_ids.to(logp.device)], dim=-1)
        lp_no = torch.logsumexp(logp[:, self.no_ids.to(logp.device)], dim=-1)
        return torch.sigmoid(lp_yes - lp_no).cpu().numpy().astype(np.float64)

    def describe(self) -> dict[str, Any]:
        """Backend summary including the model and device."""
        return {
            **super().describe(),
            "model": self.config.model,
            "device": self.device,
            "dtype": str(self.dtype).removeprefix("torch."),
        }
