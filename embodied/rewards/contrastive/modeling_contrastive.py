"""Contrastive judge: image-text cosine similarity mapped to a calibrated probability."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from embodied.errors import CheckpointError, ConfigError
from embodied.rewards.base import BaseJudge, Clip
from embodied.rewards.calibration import best_threshold, fit_platt
from embodied.rewards.contrastive.configuration_contrastive import ContrastiveJudgeConfig


def _features(out: Any) -> Any:
    """Embedding tensor from ``get_*_features`` (a tensor, or an output with pooler_output)."""
    return out if hasattr(out, "norm") else out.pooler_output


class ContrastiveJudge(BaseJudge):
    """CLIP/SigLIP-style judge from any transformers dual encoder.

    Args:
        config: Model, frames mode and calibration.
        model: An already loaded model (skips loading).
        processor: Its processor (required with ``model``).
    """

    name = "contrastive"

    def __init__(
        self, config: ContrastiveJudgeConfig, model: Any = None, processor: Any = None
    ) -> None:
        import torch
        from transformers import AutoModel, AutoProcessor

        self._configure(config)
        model, processor = self._load_pretrained(
            model,
            processor,
            lambda: (
                AutoModel.from_pretrained(config.model, dtype=self.dtype),
                AutoProcessor.from_pretrained(config.model),
            ),
            "dual encoder",
            "pass a local CLIP/SigLIP folder (config.json, weights, processor files)",
            auto_class=AutoModel,
        )
        if not (hasattr(model, "get_image_features") and hasattr(model, "get_text_features")):
            raise CheckpointError(
                f"{type(model).__name__} has no get_image_features/get_text_features",
                fix="use a dual encoder such as CLIPModel or SiglipModel",
            )
        self.model = model.to(device=self.device, dtype=self.dtype).eval()
        self.processor = processor
        self._text_cache: dict[str, Any] = {}
        self._torch = torch

    def _text(self, instructions: list[str]) -> Any:
        torch = self._torch
        todo = sorted({t for t in instructions if t not in self._text_cache})
        if todo:
            tok = self.processor.tokenizer(
                todo,
                padding="max_length",
                truncation=True,
                max_length=self._max_text_len(),
                return_tensors="pt",
            )
            with torch.inference_mode():
                emb = _features(self.model.get_text_features(**tok.to(self.device))).float()
            emb = torch.nn.functional.normalize(emb, dim=-1)
            self._text_cache.update(zip(todo, emb, strict=False))
        return torch.stack([self._text_cache[t] for t in instructions])

    def _max_text_len(self) -> int:
        cfg = getattr(self.model.config, "text_config", self.model.config)
        return int(getattr(cfg, "max_position_embeddings", 64))

    def _images(self, clips: list[np.ndarray]) -> Any:
        torch = self._torch
        frames = [c[-1:] if self.config.frames == "current" else c for c in clips]
        flat = [f for c in frames for f in c]
        pix = self.processor.image_processor(images=flat, return_tensors="pt")["pixel_values"]
        with torch.inference_mode():
            emb = _features(
                self.model.get_image_features(pixel_values=pix.to(self.device, self.dtype))
            ).float()
        emb = torch.nn.functional.normalize(emb, dim=-1)
        emb = emb.reshape(len(clips), -1, emb.shape[-1]).mean(dim=1)
        return torch.nn.functional.normalize(emb, dim=-1)

    def cosine(self, clips: list[np.ndarray], instructions: list[str]) -> np.ndarray:
        """Raw image-text cosine similarities of validated clips."""
        sim = (self._images(clips) * self._text(instructions)).sum(-1)
        return sim.cpu().numpy().astype(np.float64)

    def _score_clips(self, clips: list[np.ndarray], instructions: list[str]) -> np.ndarray:
        cos = self.cosine(clips, instructions)
        return 1.0 / (1.0 + np.exp(-self.config.scale * (cos - self.config.offset)))

    def calibrate(
        self,
        clips: Sequence[Clip],
        labels: Sequence[bool] | np.ndarray,
        instructions: str | Sequence[str],
    ) -> dict[str, float]:
        """Fit scale/offset (Platt) and the decision threshold on labelled clips.

        Returns:
            The new ``{"scale", "offset", "threshold"}``.
        """
        checked, texts = self.prepare(clips, instructions)
        bs = self.batch_size
        cos = np.concatenate(
            [self.cosine(checked[i : i + bs], texts[i : i + bs]) for i in range(0, len(texts), bs)]
        )
        a, b = fit_platt(cos, labels)
        if a <= 0:
            raise ConfigError(
                "image-text similarity is anti-correlated with success on these clips",
                fix="check the labels, or use another model/instruction",
            )
        self.config.scale, self.config.offset = a, -b / a
        probs = self.score_batch(clips, instructions)
        self.threshold = self.config.threshold = float(
            np.clip(best_threshold(probs, labels), 1e-3, 1 - 1e-3)
        )
        return {"scale": a, "offset": -b / a, "threshold": self.threshold}
