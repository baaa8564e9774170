"""The options of ``embodied train vla`` (:class:`TinyVLAConfig`), apart from the training code
so that the command line is built without importing torch.

The lab's steering experiment config (:class:`embodied.apps.lab.config_steer.SteerExperimentConfig`)
extends this one: the tiny VLA's fields and their defaults are declared here only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from embodied.config import Rule, checked, validate

TINY_MAX_IMAGE = 128
"""Largest side (px) the tiny VLA takes: 8 px patches, 256 image positions."""


@dataclass(frozen=True)
class TinyVLAConfig:
    """The env and size of the tiny VLA (:func:`embodied.apps.training.training_vla.train_tiny_on_env`).

    Args:
        env_id: Env id (mujoco:* records fresh expert demonstrations; libero:... on a GPU).
        layout: arm_reach cube layout: fixed | jittered | random.
        jitter: layout jittered: the largest move of each cube per axis (m; the success radius
            is 0.025).
        image_size: Camera size in pixels (mujoco envs); the tiny model sees the frames at this
            size (a multiple of 8, at most 128): more pixels per patch of the workspace
            localise a moved cube better.
        llm_layers: Tiny model: Llama decoder layers.
        demonstration_episodes: Tiny model: demonstration episodes per (level, target) (4 and
            2000 steps: 30/30 unsteered successes; 2 and 500 steps: about 20 %).
        action_bounds: Tiny model: how actions map onto its 256 bins: q99 (OpenVLA's default:
            the 1st-99th percentiles, so the fastest demonstrations' actions clip) or minmax
            (OpenVLA's BOUNDS: none clip).
    """

    env_id: str = "mujoco:arm_reach"
    layout: str = "fixed"
    jitter: float = checked(0.025, ge=0.0, le=0.05, fix="use a jitter between 0 and 0.05 m")
    image_size: int = checked(
        64, ge=8, le=TINY_MAX_IMAGE, fix=f"use a multiple of 8 up to {TINY_MAX_IMAGE}, e.g. 64"
    )
    llm_layers: int = 4
    demonstration_episodes: int = 4
    action_bounds: str = checked("q99", choices=("q99", "minmax"), fix="use q99 or minmax")

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "image_size",
            lambda c: c.image_size % 8 == 0,
            "is not a multiple of the tiny model's 8 px patch",
            "use a multiple of 8, e.g. 64 or 96",
        ),
    )

    def __post_init__(self) -> None:
        validate(self)
