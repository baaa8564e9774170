"""The options of ``embodied train vla`` (:class:`TinyVLAConfig`), apart from the training code
so that the command line is built without importing torch.

The lab's steering experiment config (:class:`embodied.apps.lab.config_steer.SteerExperimentConfig`)
extends this one: the tiny VLA's fields and their defaults are declared here only.
"""

from __future__ import annotations

from dataclasses import dataclass

from embodied.config import checked, validate


@dataclass(frozen=True)
class TinyVLAConfig:
    """The env and size of the tiny VLA (:func:`embodied.apps.training.training_vla.train_tiny_on_env`).

    Args:
        env_id: Env id (mujoco:* records fresh expert demonstrations; libero:... on a GPU).
        layout: arm_reach cube layout: fixed | jittered | random.
        jitter: layout jittered: the largest move of each cube per axis (m; the success radius
            is 0.025).
        image_size: Camera size in pixels (mujoco envs).
        llm_layers: Tiny model: Llama decoder layers.
        demonstration_episodes: Tiny model: demonstration episodes per (level, target) (4 and
            2000 steps: 30/30 unsteered successes; 2 and 500 steps: about 20 %).
    """

    env_id: str = "mujoco:arm_reach"
    layout: str = "fixed"
    jitter: float = checked(0.025, ge=0.0, le=0.05, fix="use a jitter between 0 and 0.05 m")
    image_size: int = 64
    llm_layers: int = 4
    demonstration_episodes: int = 4

    def __post_init__(self) -> None:
        validate(self)
