"""Train an RL steering controller with stable-baselines3 PPO on steered rollouts."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from controllers.rl.configuration_rl import PPOSettings
from controllers.rl.env import SteeringEnv
from controllers.rl.modeling_rl import MLPActor, RLController, actor_state_from_sb3
from embodied.config import Rule, checked, validate

CONTROLLER_PPO = PPOSettings(n_steps=256, gamma=0.98)
"""PPO settings of the RL steering controller's training: short rollouts (episodes are a few
seconds of control), otherwise stable-baselines3's defaults."""


@dataclass
class RLTrainSettings:
    """How :func:`train_rl_controller` trains (small defaults: a few thousand steps train in
    minutes on a CPU).

    Args:
        total_timesteps: Environment steps (= inner control steps).
        ppo: PPO hyperparameters (one env: ``ppo.batch_size <= ppo.n_steps``).
        log_std_init: Initial log standard deviation of the Gaussian policy.
        seed: RNG seed (torch, numpy, env).
        tensorboard_log: Folder for TensorBoard logs, or None.
        extra: More keyword arguments for ``stable_baselines3.PPO``.
    """

    config_name: ClassVar[str] = "RL training"

    total_timesteps: int = checked(4096, ge=1, fix="use e.g. 100000")
    ppo: PPOSettings = CONTROLLER_PPO
    log_std_init: float = -0.5
    seed: int = 0
    tensorboard_log: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "ppo.batch_size",
            lambda c: c.ppo.batch_size <= c.ppo.n_steps,
            "> n_steps {ppo.n_steps}",
            "use batch_size <= n_steps",
        ),
    )

    def __post_init__(self) -> None:
        validate(self)


def quiet_logger(model: Any) -> Any:
    """Give an SB3 model a logger with no outputs; returns the model.

    Without a log folder SB3 still creates an empty ``$TMPDIR/SB3-<time>`` folder per
    ``learn()`` call; a logger with no outputs keeps the disk clean.
    """
    from stable_baselines3.common.logger import Logger

    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


def build_ppo(env: SteeringEnv, settings: RLTrainSettings | None = None) -> Any:
    """A PPO model with a tanh MlpPolicy of the env config's hidden sizes (CPU)."""
    import torch
    from stable_baselines3 import PPO

    s = settings or RLTrainSettings()
    hidden = list(env.config.hidden_sizes)
    model = PPO(
        "MlpPolicy",
        env,
        **s.ppo.sb3_kwargs(),
        seed=s.seed,
        device="cpu",
        verbose=0,
        tensorboard_log=s.tensorboard_log,
        policy_kwargs={
            "net_arch": {"pi": hidden, "vf": hidden},
            "activation_fn": torch.nn.Tanh,
            "log_std_init": s.log_std_init,
        },
        **s.extra,
    )
    if s.tensorboard_log is None:
        quiet_logger(model)
    return model


def controller_from_ppo(
    model: Any, env: SteeringEnv, meta: dict[str, Any] | None = None
) -> RLController:
    """Export the PPO model's deterministic actor as an :class:`RLController`."""
    n_obs = len(env.config.obs_names())
    return RLController(env.config, MLPActor(actor_state_from_sb3(model, n_obs), n_obs), meta=meta)


def train_rl_controller(
    env: SteeringEnv,
    settings: RLTrainSettings | None = None,
    save_to: str | os.PathLike[str] | None = None,
) -> tuple[RLController, Any]:
    """Train PPO on ``env`` and export the controller.

    Args:
        env: The steering env (inner env, frozen steerable policy, concept, setpoint range).
        settings: Training steps, seed and PPO hyperparameters.
        save_to: Optional folder for ``save_pretrained``.

    Returns:
        The controller and the SB3 model (for further training or inspection).
    """
    from stable_baselines3.common.monitor import Monitor

    s = settings or RLTrainSettings()
    monitored = Monitor(env)
    model = build_ppo(env, s)
    model.set_env(monitored)
    t0 = time.perf_counter()
    model.learn(total_timesteps=s.total_timesteps, progress_bar=False)
    returns = [float(r) for r in monitored.get_episode_rewards()]
    meta = {
        "env_id": getattr(env.inner_env, "env_id", ""),
        "concept": getattr(env.concept, "name", ""),
        "knob": env.knob,
        "algorithm": "PPO (stable-baselines3)",
        "total_timesteps": s.total_timesteps,
        "seed": s.seed,
        "log_std_init": s.log_std_init,
        # the exploration noise PPO ended with (its deterministic actor, exported, has none)
        "log_std_final": float(model.policy.log_std.detach().mean()),
        "train_seconds": round(time.perf_counter() - t0, 2),
        "episodes": len(returns),
        "mean_return_first": float(np.mean(returns[:5])) if returns else None,
        "mean_return_last": float(np.mean(returns[-5:])) if returns else None,
    }
    controller = controller_from_ppo(model, env, meta=meta)
    if save_to is not None:
        controller.save_pretrained(save_to)
    return controller, model
