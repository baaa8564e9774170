"""The shared judge base: validation, clip resampling and batching.

Every judge implements the :class:`embodied.contracts.Judge` contract
(``score(frames, instruction) -> probability``) plus :meth:`BaseJudge.score_batch`, which
scores many clips in batches. Subclasses implement :meth:`BaseJudge._score_clips` only.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from embodied.errors import CheckpointError, ConfigError
from embodied.io import (
    check_config_counts,
    check_declared_size,
    check_safetensors_file,
    module_bytes,
    read_json_file,
)
from embodied.rewards.clips import resample_clip, validate_frames, validate_instruction

Clip = Sequence[np.ndarray] | np.ndarray


def resolve_device(device: str) -> str:
    """``"auto"`` -> ``"cuda"`` when a GPU is present, else ``"cpu"``; others are checked."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"device {device!r} requested but no CUDA GPU is visible",
            fix="use device='cpu' or 'auto'",
        )
    if not (device == "cpu" or device.startswith(("cuda", "mps"))):
        raise ConfigError(f"unknown device {device!r}", fix="use 'auto', 'cpu' or 'cuda[:N]'")
    return device


def resolve_dtype(dtype: str, device: str) -> Any:
    """``"auto"`` -> bfloat16 on GPU, float32 on CPU; else the named torch dtype."""
    import torch

    names = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    if dtype not in names:
        raise ConfigError(f"unknown dtype {dtype!r}", fix=f"use 'auto' or one of {sorted(names)}")
    return names[dtype]


class BaseJudge(abc.ABC):
    """A judge: probability that a clip shows the instruction accomplished.

    Attributes:
        n_frames: Frames the model sees per clip (longer/shorter clips are resampled evenly,
            always keeping the last frame).
        threshold: Probability above which :meth:`predict` says success (calibrated).
        batch_size: Clips per forward pass in :meth:`score_batch`.
        name: Short backend name for reports and benchmarks.
    """

    n_frames: int = 5
    threshold: float = 0.5
    batch_size: int = 16
    name: str = "judge"

    def _configure(self, config: Any) -> None:
        """Take the settings every transformers-backed judge config shares.

        Sets ``config``, ``n_frames``, ``threshold``, ``batch_size``, ``device`` and ``dtype``.
        """
        self.config = config
        self.n_frames = config.n_frames
        self.threshold = config.threshold
        self.batch_size = config.batch_size
        self.device = resolve_device(config.device)
        self.dtype = resolve_dtype(config.dtype, self.device)

    def _load_pretrained(
        self,
        model: Any,
        processor: Any,
        load: Callable[[], tuple[Any, Any]],
        what: str,
        fix: str,
        auto_class: Any = None,
        trust_remote_code: bool = False,
    ) -> tuple[Any, Any]:
        """``(model, processor)``: the preloaded pair, or ``load()`` of ``config.model``.

        A local folder's ``config.json`` is first built as ``auto_class`` (a transformers
        ``Auto*`` class) on the ``meta`` device and refused if it declares far more than its
        weights hold, so a damaged config cannot make ``load()`` allocate terabytes.

        Raises:
            CheckpointError: loading failed (``what`` names the model kind, ``fix`` the remedy).
            ConfigError: a preloaded model came without its processor.
        """
        if model is None:
            from huggingface_hub.errors import StrictDataclassError
            from safetensors import SafetensorError

            errors: tuple[type[Exception], ...] = (OSError, ValueError, KeyError, TypeError)
            errors += (AttributeError, IndexError, ArithmeticError, RuntimeError)
            errors += (SafetensorError, StrictDataclassError)
            folder = Path(self.config.model)
            if auto_class is not None and folder.is_dir():
                try:
                    _check_config_size(folder, auto_class, what, fix, trust_remote_code)
                except errors as exc:  # the config does not build a model
                    _name_damaged_file(self.config.model, what)
                    raise CheckpointError(
                        f"{str(folder / 'config.json')!r} does not describe a {what}: "
                        f"{type(exc).__name__}: {exc}",
                        fix=fix,
                    ) from exc
            try:
                model, processor = load()
            except errors as exc:
                _name_damaged_file(self.config.model, what)
                where = "its config.json and weights" if folder.is_dir() else "it"
                raise CheckpointError(
                    f"cannot load {what} {self.config.model!r} from {where}: "
                    f"{type(exc).__name__}: {exc}",
                    fix=fix,
                ) from exc
        if processor is None:
            raise ConfigError("a preloaded model needs its processor", fix="pass processor=...")
        return model, processor

    def score(self, frames: Clip, instruction: str) -> float:
        """Probability in [0, 1] that ``frames`` (uint8 (T, H, W, 3)) show ``instruction`` done."""
        return float(self.score_batch([frames], instruction)[0])

    def score_batch(
        self,
        clips: Sequence[Clip] | np.ndarray,
        instructions: str | Sequence[str],
        batch_size: int | None = None,
    ) -> np.ndarray:
        """Score many clips; ``instructions`` is one string for all or one per clip.

        Args:
            clips: Clips, each uint8 (T, H, W, 3) (or an array (B, T, H, W, 3)).
            instructions: The instruction(s).
            batch_size: Clips per forward pass (default :attr:`batch_size`).

        Returns:
            (B,) float64 probabilities.

        Raises:
            ConfigError: no clips, a bad clip (empty, wrong shape or dtype), or a
                number of instructions that does not match the clips.
        """
        checked, texts = self.prepare(clips, instructions)
        bs = int(batch_size or self.batch_size)
        if bs < 1:
            raise ConfigError(f"batch_size must be >= 1, got {bs}")
        out = np.empty(len(checked), dtype=np.float64)
        for start in range(0, len(checked), bs):
            part = self._score_clips(checked[start : start + bs], texts[start : start + bs])
            out[start : start + bs] = np.asarray(part, dtype=np.float64).reshape(-1)
        return np.clip(out, 0.0, 1.0)

    def prepare(
        self, clips: Sequence[Clip] | np.ndarray, instructions: str | Sequence[str]
    ) -> tuple[list[np.ndarray], list[str]]:
        """Validate clips and instructions; resample clips to :attr:`n_frames`.

        Raises:
            ConfigError: no clips, a bad clip (empty, wrong shape or dtype), an empty
                instruction, or a number of instructions that does not match the clips.
        """
        clips = list(clips)
        if not clips:
            raise ConfigError("score_batch got no clips", fix="pass at least one clip")
        if isinstance(instructions, str):
            texts = [validate_instruction(instructions)] * len(clips)
        else:
            texts = [validate_instruction(t) for t in instructions]
            if len(texts) != len(clips):
                raise ConfigError(
                    f"{len(texts)} instructions for {len(clips)} clips",
                    fix="pass one instruction string for all clips or one per clip",
                )
        checked = [
            resample_clip(validate_frames(c, what=f"clip {i}"), self.n_frames)
            for i, c in enumerate(clips)
        ]
        return checked, texts

    def predict(
        self, clips: Sequence[Clip] | np.ndarray, instructions: str | Sequence[str]
    ) -> np.ndarray:
        """Boolean success decisions at :attr:`threshold`."""
        return self.score_batch(clips, instructions) >= self.threshold

    @abc.abstractmethod
    def _score_clips(self, clips: list[np.ndarray], instructions: list[str]) -> np.ndarray:
        """Probabilities for validated clips, each uint8 (n_frames, H, W, 3); one batch."""

    def describe(self) -> dict[str, Any]:
        """JSON-serialisable summary (backend, frames per clip, threshold)."""
        return {"backend": self.name, "n_frames": self.n_frames, "threshold": self.threshold}


def _check_config_size(
    folder: Path, auto_class: Any, what: str, fix: str, trust_remote_code: bool
) -> None:
    """Build ``folder``'s config as ``auto_class`` on the meta device; refuse it when it
    declares far more bytes than the folder's safetensors hold."""
    import torch
    from transformers import AutoConfig

    stored = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    if not stored:
        return  # no safetensors: transformers names what is missing
    raw = read_json_file(folder / "config.json", what=f"{what} config", fix=fix)
    check_config_counts(raw, folder / "config.json", what=f"{what} config", fix=fix)
    config = AutoConfig.from_pretrained(folder, trust_remote_code=trust_remote_code)
    with torch.device("meta"):
        skeleton = auto_class.from_config(config, trust_remote_code=trust_remote_code)
    check_declared_size(module_bytes(skeleton), stored, folder / "config.json", what=what, fix=fix)


def _name_damaged_file(model: str, what: str) -> None:
    """Raise ``CheckpointError`` naming the first damaged file of a local model folder.

    transformers' loading errors name neither the file nor the remedy; this checks the JSON
    files and safetensors headers of ``model`` (a folder; hub ids are skipped) so the user
    learns which file to restore. Returns if every file reads.
    """
    folder = Path(model)
    if not folder.is_dir():
        return
    fix = "restore this file, or re-save/re-download the model folder"
    for path in sorted(folder.glob("*.json")):
        read_json_file(path, what=f"{what} file", fix=fix, expect=None)
    for path in sorted(folder.glob("*.safetensors")):
        check_safetensors_file(path, what=f"{what} weights", fix=fix)
