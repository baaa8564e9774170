"""A tiny first-order plant env used to test the loop's plumbing (no simulator needed)."""

from __future__ import annotations

from typing import Any

import numpy as np

from embodied.contracts import Env, Knob, KnobMixin, Policy
from embodied.specs import ObservationSpec, VectorSpec


class FirstOrderEnv(Env):
    """x' = (u - x) / tau, observed as state [x]; success when x >= goal."""

    env_id = "test:first_order"
    instruction = "drive x to the goal"
    control_rate_hz = 10.0
    max_episode_steps = 50

    def __init__(self, tau_s: float = 0.5, goal: float = 10.0) -> None:
        self.observation_spec = ObservationSpec(VectorSpec(("x",), (-1e9,), (1e9,), ("m",)))
        self.action_spec = VectorSpec(("u",), (-5.0,), (5.0,), ("m",))
        self.tau_s, self.goal = tau_s, goal
        self.x = 0.0

    def _obs(self) -> dict[str, Any]:
        return {"state": np.array([self.x], np.float32), "instruction": self.instruction}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.x = float((options or {}).get("x0", 0.0))
        return self._obs(), {"success": False, "ee_vel": np.zeros(3)}

    def step(self, action: np.ndarray):
        u = float(action[0])
        dx = (u - self.x) / self.tau_s * self.dt
        self.x += dx
        info = {"success": self.x >= self.goal, "ee_vel": np.array([dx / self.dt, 0, 0])}
        return self._obs(), 0.0, False, False, info


class GainPolicy(KnobMixin, Policy):
    """Outputs a constant chunk ``alpha``: the knob is the action itself."""

    action_dim = 1
    n_action_steps = 2

    def __init__(self) -> None:
        super().__init__()
        self._knobs = {"alpha": Knob.scalar("alpha", -5.0, 5.0, 0.0)}
        self.chunks = 0

    def reset(self) -> None:
        super().reset()
        self.reset_knobs()

    def predict_action_chunk(self, obs: dict[str, Any]) -> np.ndarray:
        self.chunks += 1
        return np.full((4, 1), float(self.get_knob("alpha")[0]))


class VelocityConcept:
    """dx/dt from info (units m/s)."""

    name = "velocity"
    units = "m/s"

    def reset(self) -> None:
        pass

    def measure(self, obs: dict[str, Any], info: dict[str, Any], dt: float) -> float:
        return float(info["ee_vel"][0])


class PController:
    """command = kp * (setpoint - measurement), clamped to +-5."""

    def __init__(self, kp: float) -> None:
        self.kp = kp

    def reset(self) -> None:
        pass

    def update(self, measurement: float, setpoint: float, dt: float) -> float:
        return max(-5.0, min(5.0, self.kp * (setpoint - measurement)))
