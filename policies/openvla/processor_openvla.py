"""OpenVLA's input/output interface: prompt, image preprocessing, action tokens, statistics.

* Prompt: ``"In: What action should the robot take to {instruction}?\\nOut:"``.
* Images: optional center crop (area fraction, LIBERO checkpoints), bicubic resize to the
  model's square size, normalised once per backbone (DINOv2, SigLIP) and stacked
  channel-wise into ``(B, 6, H, W)``.
* Actions: clipped to [-1, 1], digitised into ``n_bins`` uniform edges and mapped onto the
  last ids of the text vocabulary (``token = vocab_size - bin``); decoding returns bin
  centers. Un-normalisation maps [-1, 1] onto [q01, q99] where ``mask`` is True and leaves
  the other dims (the gripper) untouched.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image

from embodied.errors import ConfigError
from policies.openvla.configuration_openvla import OpenVLAConfig

PROMPT_TEMPLATE = "In: What action should the robot take to {instruction}?\nOut:"


def build_prompt(instruction: str) -> str:
    """OpenVLA's prompt for ``instruction`` (lower-cased, as in OpenVLA's evaluation code)."""
    text = instruction.strip().lower()
    if not text:
        raise ConfigError(
            "empty instruction", fix="pass the task instruction, e.g. 'pick up the cube'"
        )
    return PROMPT_TEMPLATE.format(instruction=text)


class ActionTokenizer:
    """Uniform binning of normalised actions onto the last ``n_bins`` text-vocabulary ids.

    Args:
        vocab_size: Text vocabulary size without padding rows (Llama-2: 32000).
        n_bins: Number of bin edges on [min_action, max_action] (OpenVLA: 256).
        min_action: Lower clip bound of normalised actions.
        max_action: Upper clip bound.
    """

    def __init__(
        self, vocab_size: int, n_bins: int = 256, min_action: float = -1.0, max_action: float = 1.0
    ) -> None:
        if vocab_size <= n_bins:
            raise ConfigError(f"vocab_size {vocab_size} must exceed n_bins {n_bins}")
        self.vocab_size = int(vocab_size)
        self.n_bins = int(n_bins)
        self.min_action, self.max_action = float(min_action), float(max_action)
        self.bins = np.linspace(min_action, max_action, self.n_bins)
        self.bin_centers = (self.bins[:-1] + self.bins[1:]) / 2.0

    @property
    def first_id(self) -> int:
        """Smallest action token id (``vocab_size - n_bins``)."""
        return self.vocab_size - self.n_bins

    def encode(self, actions: np.ndarray) -> np.ndarray:
        """Normalised actions (..., D) in [-1, 1] -> token ids (..., D) (int64)."""
        a = np.clip(np.asarray(actions, dtype=np.float64), self.min_action, self.max_action)
        return (self.vocab_size - np.digitize(a, self.bins)).astype(np.int64)

    def decode(self, token_ids: np.ndarray) -> np.ndarray:
        """Token ids (..., D) -> normalised actions (bin centers), clipping stray ids into range."""
        d = self.vocab_size - np.asarray(token_ids, dtype=np.int64)
        d = np.clip(d - 1, 0, self.bin_centers.shape[0] - 1)
        return self.bin_centers[d]

    def is_action_token(self, token_ids: np.ndarray) -> np.ndarray:
        """Mask of ids inside the action range."""
        ids = np.asarray(token_ids)
        return (ids >= self.first_id) & (ids < self.vocab_size)


def action_stats(config: OpenVLAConfig, unnorm_key: str | None) -> dict[str, np.ndarray]:
    """q01, q99 and mask (float64/bool arrays) of dataset ``unnorm_key``."""
    key = config.resolve_unnorm_key(unnorm_key)
    st = config.norm_stats[key]["action"]
    q01 = np.asarray(st["q01"], dtype=np.float64)
    q99 = np.asarray(st["q99"], dtype=np.float64)
    mask = np.asarray(st.get("mask", np.ones_like(q01, dtype=bool)), dtype=bool)
    return {"q01": q01, "q99": q99, "mask": mask}


def unnormalize(actions: np.ndarray, stats: dict[str, np.ndarray]) -> np.ndarray:
    """[-1, 1] -> env units: ``0.5 (a + 1)(q99 - q01) + q01`` where ``mask``, else unchanged."""
    a = np.asarray(actions, dtype=np.float64)
    lo, hi = stats["q01"], stats["q99"]
    return np.where(stats["mask"], 0.5 * (a + 1.0) * (hi - lo) + lo, a)


def normalize(actions: np.ndarray, stats: dict[str, np.ndarray]) -> np.ndarray:
    """Env units -> [-1, 1] (inverse of :func:`unnormalize`, clipped), masked dims unchanged."""
    a = np.asarray(actions, dtype=np.float64)
    lo, hi = stats["q01"], stats["q99"]
    span = np.where(hi - lo > 1e-8, hi - lo, 1.0)
    return np.where(stats["mask"], np.clip(2.0 * (a - lo) / span - 1.0, -1.0, 1.0), a)


def compute_norm_stats(actions: np.ndarray, mask: Sequence[bool] | None = None) -> dict[str, Any]:
    """OpenVLA-style statistics of (N, D) actions: mean, std, min, max, q01, q99, mask."""
    a = np.asarray(actions, dtype=np.float64)
    if a.ndim != 2 or len(a) == 0:
        raise ConfigError(f"need (N, D) actions with N > 0, got shape {a.shape}")
    m = np.ones(a.shape[1], dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    return {
        "action": {
            "mean": a.mean(0).tolist(),
            "std": a.std(0).tolist(),
            "min": a.min(0).tolist(),
            "max": a.max(0).tolist(),
            "q01": np.quantile(a, 0.01, axis=0).tolist(),
            "q99": np.quantile(a, 0.99, axis=0).tolist(),
            "mask": m.tolist(),
        },
        "num_transitions": len(a),
    }


class ImageProcessor:
    """Center crop (optional) + bicubic resize + per-backbone normalisation.

    Args:
        config: Supplies ``image_size``, ``center_crop``, ``crop_area``, means and stds.
    """

    def __init__(self, config: OpenVLAConfig) -> None:
        self.size = config.image_size
        self.center_crop = config.center_crop
        self.crop_area = config.crop_area
        self.means = [np.asarray(m, dtype=np.float32) for m in config.image_means]
        self.stds = [np.asarray(s, dtype=np.float32) for s in config.image_stds]

    def prepare(self, image: np.ndarray) -> np.ndarray:
        """uint8 (H, W, 3) -> uint8 (size, size, 3) after the optional crop and the resize."""
        img = np.asarray(image)
        if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8:
            raise ConfigError(
                f"image must be uint8 (H, W, 3), got {img.dtype}{img.shape}",
                fix="pass the camera frame from the observation dict",
            )
        pil = Image.fromarray(img)
        if self.center_crop:
            # OpenVLA's LIBERO eval: resize to size, crop sqrt(area) of each side, resize back.
            pil = pil.resize((self.size, self.size), Image.Resampling.BICUBIC)
            scale = math.sqrt(self.crop_area)
            side = self.size * scale
            off = (self.size - side) / 2.0
            pil = pil.crop((off, off, off + side, off + side))
        if pil.size != (self.size, self.size):
            pil = pil.resize((self.size, self.size), Image.Resampling.BICUBIC)
        return np.asarray(pil, dtype=np.uint8)

    def __call__(self, images: Sequence[np.ndarray] | np.ndarray) -> torch.Tensor:
        """uint8 images (B, H, W, 3) or a list -> float32 pixel values (B, 6, size, size)."""
        if isinstance(images, np.ndarray) and images.ndim == 3:
            images = [images]
        arr = np.stack([self.prepare(im) for im in images]).astype(np.float32) / 255.0
        parts = [(arr - m) / s for m, s in zip(self.means, self.stds, strict=True)]
        stacked = np.concatenate(parts, axis=-1)  # (B, H, W, 6)
        return torch.from_numpy(np.ascontiguousarray(stacked.transpose(0, 3, 1, 2)))


class OpenVLAProcessor:
    """Prompt tokenisation + image preprocessing + action (de)tokenisation for one model.

    Args:
        config: The model configuration.
        tokenizer: A transformers tokenizer that adds BOS (Llama-2's, or :func:`build_tiny_tokenizer`).
    """

    def __init__(self, config: OpenVLAConfig, tokenizer: Any) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.images = ImageProcessor(config)
        self.actions = ActionTokenizer(config.text_vocab_size, config.n_action_bins)
        bos = getattr(tokenizer, "bos_token_id", None)
        if bos is None:
            raise ConfigError("tokenizer has no BOS token; OpenVLA inputs start with [BOS]")
        self.bos_id = int(bos)
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_id = int(pad) if pad is not None else config.text_vocab_size

    def prompt_ids(self, instruction: str) -> list[int]:
        """Token ids of the prompt, starting with BOS (+ the action prefix token if configured)."""
        ids = list(self.tokenizer(build_prompt(instruction))["input_ids"])
        if not ids or ids[0] != self.bos_id:
            ids = [self.bos_id, *ids]
        prefix = self.config.action_prefix_token_id
        if prefix is not None and ids[-1] != prefix:
            ids.append(int(prefix))
        return ids

    def encode_prompts(
        self, instructions: Sequence[str], suffixes: Sequence[Sequence[int]] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-padded ``input_ids`` and ``attention_mask`` (B, T); optional per-row suffix ids."""
        rows = [self.prompt_ids(s) for s in instructions]
        if suffixes is not None:
            rows = [r + [int(t) for t in suf] for r, suf in zip(rows, suffixes, strict=True)]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
            mask[i, width - len(r) :] = 1
        return ids, mask


TINY_WORDS = [
    "in",
    "out",
    "what",
    "action",
    "should",
    "the",
    "robot",
    "take",
    "to",
    "?",
    ":",
    ".",
    ",",
    "\n",
    "move",
    "reach",
    "go",
    "push",
    "pick",
    "place",
    "put",
    "lift",
    "touch",
    "point",
    "at",
    "on",
    "of",
    "a",
    "an",
    "and",
    "with",
    "toward",
    "towards",
    "slowly",
    "quickly",
    "fast",
    "slow",
    "carefully",
    "gently",
    "normally",
    "speed",
    "red",
    "green",
    "blue",
    "yellow",
    "orange",
    "purple",
    "white",
    "black",
    "cyan",
    "magenta",
    "pink",
    "gray",
    "grey",
    "target",
    "goal",
    "cube",
    "ball",
    "sphere",
    "block",
    "box",
    "marker",
    "object",
    "button",
    "left",
    "right",
    "front",
    "back",
    "up",
    "down",
    "top",
    "bottom",
    "center",
    "middle",
    "near",
    "far",
    "table",
    "arm",
    "gripper",
    "end",
    "effector",
    "hand",
]


def build_tiny_tokenizer(extra_words: Sequence[str] = (), vocab_size: int = 384) -> Any:
    """A word-level ``PreTrainedTokenizerFast`` built in code (no downloads).

    Ids: ``<unk>``=0, ``<s>``=1 (BOS, added to every encoding), ``</s>``=2, then the words,
    then ``<act_i>`` fillers so that the vocabulary has exactly ``vocab_size`` entries (the
    last 256 of which carry actions, as in OpenVLA), then ``<PAD>`` = ``vocab_size``.

    Args:
        extra_words: More words to give ids (e.g. from the training instructions).
        vocab_size: Text vocabulary size without the pad token.
    """
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words: list[str] = []
    for w in [*TINY_WORDS, *(x.lower() for x in extra_words)]:
        w = w.strip()
        if w and w not in words:
            words.append(w)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for w in words:
        vocab.setdefault(w, len(vocab))
    if len(vocab) > vocab_size - 256:
        raise ConfigError(
            f"{len(vocab)} words leave no room for 256 action tokens in vocab_size {vocab_size}",
            fix="raise vocab_size",
        )
    i = 0
    while len(vocab) < vocab_size:
        vocab[f"<act_{i}>"] = len(vocab)
        i += 1
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", 1)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    fast.add_special_tokens({"pad_token": "<PAD>"})
    return fast


def tokenizer_words(instructions: Sequence[str]) -> list[str]:
    """Words of ``instructions`` split like the tiny tokenizer splits them."""
    from tokenizers import pre_tokenizers

    pre = pre_tokenizers.Whitespace()
    out: list[str] = []
    for s in instructions:
        for w, _ in pre.pre_tokenize_str(s.lower()):
            if w not in out:
                out.append(w)
    return out
