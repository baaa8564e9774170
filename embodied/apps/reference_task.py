"""The built-in steering task: ``mujoco:arm_reach`` driven by the speed-knob expert.

Glue shared by ``embodied tune``, ``embodied demo``, the lab's controller comparison and tests:
it joins an env (``sim``), the steerable plant (``policies.steerable_expert``) and the
``ee_speed`` concept, so it lives with the applications, above the components it joins.
:func:`pid_steered_rollout` is the PID-steered rollout of ``embodied demo`` on the setpoint
step :func:`step_setpoint`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

import controllers
import sim
from controllers.rl import RLController, RLControllerConfig, SteeringEnv
from controllers.rl.training_rl import CONTROLLER_PPO, RLTrainSettings, train_rl_controller
from embodied.concepts import make_concept
from embodied.contracts import Concept, Env
from embodied.loop import Episode, Steering, rollout
from policies.steerable_expert import SpeedKnobExpert

REFERENCE_ENV_ID = "mujoco:arm_reach"
"""Env of the built-in steering task."""

REFERENCE_PID: dict[str, Any] = {
    "kp": 2.0,
    "ki": 50.0,
    "kd": 0.0,
    "output_min": -1.0,
    "output_max": 1.0,
    "rate_limit": 10.0,
    "anti_windup": "clamping",
}
"""Tuned PID gains for the built-in task (ee_speed via alpha): on a 0.06 -> 0.15 m/s step,
rise time ~0.3 s, no overshoot; kp >= 5 with ki >= 80 oscillates (one-step delay, and the
plant gain grows as ``gain ** alpha``)."""

STEP_LOW_MPS, STEP_HIGH_MPS, STEP_TIME_S = 0.06, 0.15, 1.0
"""The setpoint step of the built-in task: ``STEP_LOW_MPS`` m/s until ``STEP_TIME_S`` s, then
``STEP_HIGH_MPS`` m/s (:func:`step_setpoint`)."""


@dataclass
class ReferenceTask:
    """The built-in steering task: env, steerable expert and concept, ready for ``rollout``.

    Attributes:
        env: ``mujoco:arm_reach`` (or the env asked for).
        policy: :class:`SpeedKnobExpert` with knob ``alpha``.
        concept: ``ee_speed`` (m/s).
        knob: ``"alpha"``.
        setpoint_range: Reachable speeds (m/s) for alpha in [-1, 1] (before the action bound).
    """

    env: Env
    policy: SpeedKnobExpert
    concept: Concept
    knob: str
    setpoint_range: tuple[float, float]


def reference_task(
    env_id: str = REFERENCE_ENV_ID,
    base_speed: float = 0.1,
    gain: float = 3.0,
    filter_tau_s: float = 0.0,
    **env_kwargs: Any,
) -> ReferenceTask:
    """Build the built-in steering task (used by ``embodied tune``, ``demo`` and tests).

    Args:
        env_id: Env with velocity actions and ``info["ee_vel"]``.
        base_speed: Expert speed at alpha = 0 (m/s).
        gain: Speed multiplier at alpha = 1.
        filter_tau_s: EMA time constant of the ``ee_speed`` concept (s).
        **env_kwargs: Passed to ``sim.make`` (e.g. ``camera=False``, ``max_episode_steps``).
    """
    env = sim.make(env_id, **env_kwargs)
    policy = SpeedKnobExpert(env, base_speed=base_speed, gain=gain)
    hi = min(
        policy.commanded_speed(1.0), float(np.max(env.action_spec.high_array[policy._vel_idx]))
    )
    return ReferenceTask(
        env=env,
        policy=policy,
        concept=make_concept("ee_speed", filter_tau_s=filter_tau_s),
        knob="alpha",
        setpoint_range=(policy.commanded_speed(-1.0), hi),
    )


def train_on_reference_task(
    total_timesteps: int = 20000,
    save_to: str | os.PathLike[str] | None = None,
    seed: int = 0,
    **config: Any,
) -> tuple[RLController, Any]:
    """Train the RL controller on the built-in task (arm_reach ee_speed via the speed knob).

    20000 steps take about a minute on one CPU core and track setpoints in 0.05-0.25 m/s
    about as well as the reference PID.

    Args:
        total_timesteps: PPO environment steps.
        save_to: Optional output folder (safetensors + JSON).
        seed: PPO and env seed.
        **config: :class:`RLControllerConfig` overrides.
    """
    task = reference_task(camera=False)
    params: dict[str, Any] = {
        "horizon_steps": task.env.max_episode_steps,
        "setpoint_low": 0.05,
        "setpoint_high": 0.25,
        "error_scale": 0.05,
        **config,
    }
    env = SteeringEnv(task.env, task.policy, task.concept, RLControllerConfig(**params))
    try:
        return train_rl_controller(
            env,
            RLTrainSettings(
                total_timesteps=total_timesteps,
                ppo=replace(CONTROLLER_PPO, n_steps=512, batch_size=128),
                seed=seed,
            ),
            save_to=save_to,
        )
    finally:
        env.close()


def step_setpoint(
    low: float = STEP_LOW_MPS, high: float = STEP_HIGH_MPS, at_s: float = STEP_TIME_S
) -> Callable[[float], float]:
    """Setpoint schedule: ``low`` m/s until ``at_s`` seconds, then ``high``."""

    def setpoint(t_s: float) -> float:
        return low if t_s < at_s else high

    return setpoint


def pid_steered_rollout(seed: int = 0, record_images: bool = True, **env_kwargs: Any) -> Episode:
    """One PID-steered rollout of the built-in task (ee_speed setpoint step via alpha).

    Args:
        seed: Reset seed.
        record_images: Keep the camera frames in the episode.
        **env_kwargs: Passed to :func:`reference_task` (e.g. ``camera=False``).
    """
    task = reference_task(**env_kwargs)
    steering = Steering(
        task.concept, controllers.make("pid", **REFERENCE_PID), task.knob, step_setpoint()
    )
    return rollout(task.env, task.policy, steering=steering, seed=seed, record_images=record_images)
