"""Train an RL steering controller with stable-baselines3 PPO on steered rollouts."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from controllers.rl.env import SteeringEnv
from controllers.rl.modeling_rl import MLPActor, RLController, actor_state_from_sb3
from embodied.errors import ConfigError


@dataclass
class PPOSettings:
    """PPO hyperparameters (small defaults: a few thousand steps train in minutes on a CPU).

    Args:
        total_timesteps: Environment steps (= inner control steps).
        n_steps: Rollout length per update.
        batch_size: Minibatch size.
        n_epochs: Optimisation epochs per update.
        learning_rate: Adam step size.
        gamma: Discount.
        gae_lambda: GAE parameter.
        ent_coef: Entropy bonus.
        log_std_init: Initial log standard deviation of the Gaussian policy.
        seed: RNG seed (torch, numpy, env).
        tensorboard_log: Folder for TensorBoard logs, or None.
        extra: More keyword arguments for ``stable_baselines3.PPO``.
    """

    total_timesteps: int = 4096
    n_steps: int = 256
    batch_size: int = 64
    n_epochs: int = 10
    learning_rate: float = 3e-4
    gamma: float = 0.98
    gae_lambda: float = 0.95
    ent_coef: float = 0.0
    log_std_init: float = -0.5
    seed: int = 0
    tensorboard_log: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("total_timesteps", "n_steps", "batch_size", "n_epochs"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"PPO {name} must be a positive int, got {v!r}")
        if self.batch_size > self.n_steps:
            raise ConfigError(
                f"PPO batch_size {self.batch_size} > n_steps {self.n_steps}",
                fix="use batch_size <= n_steps",
            )
        if not 0 < self.gamma <= 1 or not 0 < self.gae_lambda <= 1:
            raise ConfigError(
                f"PPO gamma/gae_lambda must be in (0, 1]: {self.gamma}, {self.gae_lambda}"
            )
        if not self.learning_rate > 0:
            raise ConfigError(f"PPO learning_rate must be > 0, got {self.learning_rate}")


def build_ppo(env: SteeringEnv, settings: PPOSettings | None = None) -> Any:
    """A PPO model with a tanh MlpPolicy of the env config's hidden sizes (CPU)."""
    import torch
    from stable_baselines3 import PPO

    s = settings or PPOSettings()
    hidden = list(env.config.hidden_sizes)
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=s.n_steps,
        batch_size=s.batch_size,
        n_epochs=s.n_epochs,
        learning_rate=s.learning_rate,
        gamma=s.gamma,
        gae_lambda=s.gae_lambda,
        ent_coef=s.ent_coef,
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
        # Without a log folder SB3 still creates an empty $TMPDIR/SB3-<time> folder per
        # learn() call; a logger with no outputs keeps the disk clean.
        from stable_baselines3.common.logger import Logger

        model.set_logger(Logger(folder=None, output_formats=[]))
    return model


def controller_from_ppo(
    model: Any, env: SteeringEnv, meta: dict[str, Any] | None = None
) -> RLController:
    """Export the PPO model's deterministic actor as an :class:`RLController`."""
    return RLController(env.config, MLPActor(actor_state_from_sb3(model)), meta=meta)


def train_rl_controller(
    env: SteeringEnv,
    settings: PPOSettings | None = None,
    save_to: str | os.PathLike[str] | None = None,
) -> tuple[RLController, Any]:
    """Train PPO on ``env`` and export the controller.

    Args:
        env: The steering env (inner env, frozen steerable policy, concept, setpoint range).
        settings: PPO hyperparameters.
        save_to: Optional folder for ``save_pretrained``.

    Returns:
        The controller and the SB3 model (for further training or inspection).
    """
    from stable_baselines3.common.monitor import Monitor

    s = settings or PPOSettings()
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
        "train_seconds": round(time.perf_counter() - t0, 2),
        "episodes": len(returns),
        "mean_return_first": float(np.mean(returns[:5])) if returns else None,
        "mean_return_last": float(np.mean(returns[-5:])) if returns else None,
    }
    controller = controller_from_ppo(model, env, meta=meta)
    if save_to is not None:
        controller.save_pretrained(save_to)
    return controller, model
