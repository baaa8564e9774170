"""A reference steerable plant: a scripted expert whose speed is set by a knob ``alpha``.

:class:`SpeedKnobExpert` wraps a task's scripted expert (``policies.load("expert", env=env)``)
and scales the velocity dims of its actions (those whose action-spec unit is ``m/s``) by a
speed multiplier ``gain ** alpha``. It is the built-in steering task of ``embodied tune``,
``embodied demo`` and the controller tests: concept ``ee_speed`` tracks a setpoint while a
controller sets ``alpha`` in ``[-1, 1]`` every control step. The plant is real: the commanded
velocity goes through the simulated arm's dynamics, so the measured end-effector speed lags
the command, saturates at the action bounds, and drops as the arm slows on its final approach.

Registered as policy ``expert_speed_knob``::

    env = sim.make("mujoco:arm_reach")
    policy = policies.load("expert_speed_knob", env=env, base_speed=0.1)
    policy.set_knob("alpha", 0.5)   # 0.1 m/s * 3 ** 0.5
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from embodied.contracts import Concept, Env, Knob, KnobMixin, Policy
from embodied.errors import ConfigError, UnknownNameError
from embodied.specs import Observation


def _build_expert(env: Env, base_speed: float, expert_kwargs: dict[str, Any]) -> Policy:
    import policies

    try:
        return policies.load("expert", env=env, speed=base_speed, **expert_kwargs)
    except UnknownNameError:
        make = getattr(env.unwrapped, "expert", None)  # envs that carry their own expert
        if make is None:
            raise
        return make(speed=base_speed, **expert_kwargs)  # type: ignore[no-any-return]


class SpeedKnobExpert(KnobMixin, Policy):
    """Scripted expert with a speed knob ``alpha``: velocity actions times ``gain ** alpha``.

    Args:
        env: The env (its scripted expert is built from it).
        base_speed: Expert cruise speed at ``alpha = 0`` in m/s.
        gain: Speed multiplier at ``alpha = 1`` (and ``1 / gain`` at ``alpha = -1``), > 1.
        expert: An already-built velocity-commanding expert to wrap instead.
        **expert_kwargs: Extra arguments of the task's expert (e.g. ``route``).
    """

    def __init__(
        self,
        env: Env,
        base_speed: float = 0.1,
        gain: float = 3.0,
        expert: Policy | None = None,
        **expert_kwargs: Any,
    ) -> None:
        super().__init__()
        if not (isinstance(base_speed, (int, float)) and base_speed > 0):
            raise ConfigError(f"base_speed must be > 0 m/s, got {base_speed!r}")
        if not (isinstance(gain, (int, float)) and math.isfinite(gain) and gain > 1):
            raise ConfigError(
                f"gain must be > 1 (speed multiplier at alpha = 1), got {gain!r}",
                fix="use e.g. gain=3 for speeds from base/3 to 3*base",
            )
        units = env.action_spec.units
        self._vel_idx = np.asarray([i for i, u in enumerate(units) if u == "m/s"], dtype=int)
        if self._vel_idx.size == 0:
            raise ConfigError(
                f"env {env.env_id!r} has no velocity (m/s) action dims: units {units}",
                fix="use a task whose actions are end-effector velocities (mujoco:arm_reach)",
            )
        self.env = env
        self.base_speed = float(base_speed)
        self.gain = float(gain)
        self.expert = (
            expert if expert is not None else _build_expert(env, self.base_speed, expert_kwargs)
        )
        self.action_dim = env.action_spec.dim
        self.n_action_steps = 1
        self._low, self._high = env.action_spec.low_array, env.action_spec.high_array
        self._knobs = {
            "alpha": Knob.scalar(
                "alpha",
                -1.0,
                1.0,
                0.0,
                description=f"speed multiplier {self.gain:g}**alpha on {self.base_speed:g} m/s",
            )
        }

    def multiplier(self, alpha: float | None = None) -> float:
        """Speed multiplier for ``alpha`` (default: the current knob value)."""
        a = float(self.get_knob("alpha")[0]) if alpha is None else float(alpha)
        return float(self.gain**a)

    def commanded_speed(self, alpha: float | None = None) -> float:
        """Cruise speed (m/s) the expert is commanded at ``alpha``."""
        return self.base_speed * self.multiplier(alpha)

    def reset(self) -> None:
        """Reset the expert and the queue; ``alpha`` returns to 0."""
        super().reset()
        self.expert.reset()
        self.reset_knobs()

    def predict_action_chunk(self, obs: Observation) -> np.ndarray:
        """The expert's next action with its velocity dims scaled by the multiplier."""
        chunk = np.array(self.expert.predict_action_chunk(obs), dtype=np.float64)[:1]
        chunk[:, self._vel_idx] *= self.multiplier()
        return np.clip(chunk, self._low, self._high)


def make_speed_knob_expert(env: Env | None = None, **kwargs: Any) -> SpeedKnobExpert:
    """Scripted expert with a speed knob alpha in [-1, 1] (reference steering task)."""
    if env is None:
        raise ConfigError(
            "expert_speed_knob needs the env it runs on",
            fix='policies.load("expert_speed_knob", env=env)',
        )
    return SpeedKnobExpert(env, **kwargs)


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
    import sim
    from embodied.concepts import make_concept

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


def _register() -> None:
    from policies import POLICIES

    POLICIES.register("expert_speed_knob", make_speed_knob_expert)


_register()

__all__: Sequence[str] = (
    "REFERENCE_PID",
    "ReferenceTask",
    "SpeedKnobExpert",
    "make_speed_knob_expert",
    "reference_task",
)
