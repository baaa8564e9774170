"""Reward models: judges of task success from camera frames + an instruction, and Demo2Reward.

Judges (all implement :class:`embodied.contracts.Judge` plus a batched ``score_batch``):

* ``minijudge`` - the shipped small contrastive judge (MiniLM text tower + small CNN), trained
  on rendered MuJoCo frames with captions from sim state; runs on CPU.
* ``generative`` - any transformers image-text-to-text VLM; P("1") / (P("1") + P("0")).
* ``contrastive`` - any CLIP/SigLIP-style dual encoder with a calibrated threshold.
* ``oracle`` - success from simulator state (ground truth for calibration and agreement).
* ``critic`` - Demo2Reward's reference Critic: an image-text-to-text VLM with the reference
  prompts, greedy answer parsed as "1"/"0".
* ``critic-calibrated`` - the same prompts scored as P("1") / (P("1") + P("0")) at a
  calibrated threshold (the project's variant; report it apart from ``critic``).

``load_judge(spec)`` takes a registered name, ``generative:<hub id or folder>``,
``contrastive:<hub id or folder>``, ``critic:<...>``, ``critic-calibrated:<...>``, or a
checkpoint folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from embodied.errors import CheckpointError
from embodied.io import read_folder_config
from embodied.registry import Registry
from embodied.rewards.base import BaseJudge
from embodied.rewards.clips import (
    context_indices,
    episode_clips,
    format_instruction,
    validate_frames,
)
from embodied.rewards.contrastive import ContrastiveJudge, ContrastiveJudgeConfig
from embodied.rewards.generative import GenerativeJudge, GenerativeJudgeConfig
from embodied.rewards.oracle import SimOracle

JUDGES: Registry[BaseJudge] = Registry("judge")
"""Judge name -> factory(**kwargs) -> judge."""


def _minijudge(path: str | None = None, device: str = "auto", **kw: Any) -> BaseJudge:
    """The shipped small contrastive judge (MiniLM text tower + CNN image tower)."""
    # Local: its module imports torch (~2.5 s); `import embodied.rewards` stays torch-free.
    from embodied.rewards.minijudge import MiniJudge

    return MiniJudge.from_pretrained(path, device=device, **kw)


def _generative(model: str, **kw: Any) -> BaseJudge:
    """Generative VLM judge (model= hub id or folder of an image-text-to-text model)."""
    return GenerativeJudge(GenerativeJudgeConfig(model=model, **kw))


def _contrastive(model: str, **kw: Any) -> BaseJudge:
    """Contrastive CLIP/SigLIP judge (model= hub id or folder of a dual encoder)."""
    return ContrastiveJudge(ContrastiveJudgeConfig(model=model, **kw))


def _critic(model: str, real_robot: bool = False, **kw: Any) -> BaseJudge:
    """Demo2Reward's reference Critic (model= hub id or folder of an image-text-to-text model)."""
    from embodied.rewards.demo2reward.critic import ReferenceCritic, critic_config

    return ReferenceCritic(critic_config(model, **kw), real_robot=real_robot)


def _critic_calibrated(model: str, real_robot: bool = False, **kw: Any) -> BaseJudge:
    """The reference Critic's prompt at a calibrated threshold (the project's variant)."""
    from embodied.rewards.demo2reward.critic import CalibratedCritic, critic_config

    return CalibratedCritic(critic_config(model, **kw), real_robot=real_robot)


def _oracle(**kw: Any) -> BaseJudge:
    """Simulator oracle: success from info['success'] (feed it with oracle.observe)."""
    return SimOracle(**kw)


JUDGES.register("minijudge", _minijudge)
JUDGES.register("generative", _generative)
JUDGES.register("contrastive", _contrastive)
JUDGES.register("oracle", _oracle)
JUDGES.register("critic", _critic)
JUDGES.register("critic-calibrated", _critic_calibrated)

_DUAL_ENCODERS = ("CLIPModel", "SiglipModel", "Siglip2Model", "AltCLIPModel", "ChineseCLIPModel")


def load_judge(spec: str | os.PathLike[str] = "minijudge", **kwargs: Any) -> BaseJudge:
    """Build a judge from a name, ``backend:model``, or a checkpoint folder.

    A folder with ``config.json`` is a minijudge checkpoint (``judge_type``), a dual encoder
    (CLIP/SigLIP architectures) or else an image-text-to-text model.

    Raises:
        UnknownNameError: unknown judge name.
        CheckpointError: a folder that holds no loadable judge.
    """
    text = str(spec)
    backend, sep, model = text.partition(":")
    if sep and backend in ("generative", "contrastive", "critic", "critic-calibrated"):
        return JUDGES.make(backend, model=model, **kwargs)
    path = Path(text)
    if path.is_dir():
        cfg_path = path / "config.json"
        cfg = read_folder_config(
            path,
            what="judge",
            fix="restore the folder's config.json (re-save the model with save_pretrained)",
            missing_fix="pass a minijudge checkpoint or a transformers model folder",
        )
        if cfg.get("judge_type") == "minijudge":
            return JUDGES.make("minijudge", path=text, **kwargs)
        architectures = cfg.get("architectures") or []
        if not isinstance(architectures, list):
            raise CheckpointError(
                f"{str(cfg_path)!r}: 'architectures' is {architectures!r}, not a list of names",
                fix='write e.g. "architectures": ["CLIPModel"], or re-save the model',
            )
        if any(a in _DUAL_ENCODERS for a in architectures):
            return JUDGES.make("contrastive", model=text, **kwargs)
        return JUDGES.make("generative", model=text, **kwargs)
    return JUDGES.make(text, **kwargs)


__all__ = [
    "JUDGES",
    "BaseJudge",
    "context_indices",
    "episode_clips",
    "format_instruction",
    "load_judge",
    "validate_frames",
]
