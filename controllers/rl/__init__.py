"""Reinforcement-learning steering controller (CTRL-STEER's RL variant).

* :class:`SteeringEnv` - gymnasium env over real steered rollouts: observation
  (error, integral, derivative, alpha_{t-1}, t/T), action delta-alpha, reward
  ``-|error| - lambda |delta-alpha| + beta success``.
* :func:`train_rl_controller` - PPO (stable-baselines3) on that env, exported to
* :class:`RLController` - the Controller contract; saved as safetensors + JSON.

Registered as controller ``rl``: ``controllers.make("rl", path="runs/rl_speed")``.
Importing this package is light (numpy, safetensors, gymnasium); torch and SB3 load on training.
"""

from __future__ import annotations

from typing import Any

from controllers import CONTROLLERS
from controllers.rl.configuration_rl import (
    OBS_NAMES,
    ObservationBuilder,
    PPOSettings,
    RLControllerConfig,
)
from controllers.rl.env import SteeringEnv
from controllers.rl.modeling_rl import MLPActor, RLController
from controllers.rl.training_rl import RLTrainSettings, train_rl_controller
from embodied.errors import ConfigError

__all__ = [
    "OBS_NAMES",
    "MLPActor",
    "ObservationBuilder",
    "PPOSettings",
    "RLController",
    "RLControllerConfig",
    "RLTrainSettings",
    "SteeringEnv",
    "train_rl_controller",
]


@CONTROLLERS.register("rl")
def make_rl(path: str | None = None, **overrides: Any) -> RLController:
    """Learned PPO controller loaded from a folder (model.safetensors + config.json)."""
    if path is None:
        raise ConfigError(
            "controller 'rl' needs path=<folder with model.safetensors and config.json>",
            fix="train one with controllers.rl.train_rl_controller(...) and save_pretrained",
        )
    return RLController.from_pretrained(path, **overrides)
