"""A reference steerable plant: a scripted expert whose speed is set by a knob ``alpha``.

:class:`SpeedKnobExpert` wraps a task's scripted expert (``policies.load("expert", env=env)``)
and scales the velocity dims of its actions (those whose action-spec unit is ``m/s``) by a
speed multiplier ``gain ** alpha``. It is the plant of the built-in steering task
(:mod:`embodied.apps.reference_task`, used by ``embodied tune``, ``embodied demo`` and the
controller tests): concept ``ee_speed`` tracks a setpoint while a controller sets
``alpha`` in ``[-1, 1]`` every control step. The plant is real: the commanded velocity goes
through the simulated arm's dynamics, so the measured end-effector speed lags
the command, saturates at the action bounds, and drops as the arm slows on its final approach.

Registered as policy ``expert_speed_knob``::

    env = sim.make("mujoco:arm_reach")
    policy = policies.load("expert_speed_knob", env=env, base_speed=0.1)
    policy.set_knob("alpha", 0.5)   # 0.1 m/s * 3 ** 0.5
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from embodied.config import check_options
from embodied.contracts import Env, Knob, KnobMixin, Policy
from embodied.errors import ConfigError, UnknownNameError
from embodied.specs import Observation
from policies import POLICIES
from policies import load as load_policy


def _build_expert(env: Env, base_speed: float, expert_kwargs: dict[str, Any]) -> Policy:
    try:
        return load_policy("expert", env=env, speed=base_speed, **expert_kwargs)
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

    privileged = True  # wraps a scripted expert, which reads the simulator's state

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
    return SpeedKnobExpert(
        env, **check_options(SpeedKnobExpert, kwargs, "policy 'expert_speed_knob'")
    )


POLICIES.register("expert_speed_knob", make_speed_knob_expert)

__all__: Sequence[str] = ("SpeedKnobExpert", "make_speed_knob_expert")
