"""Concept signals measured from the rollout every control step.

A concept turns the latest observation and env info into one scalar that a controller
tracks (``Steering(concept=..., controller=..., setpoint=...)``). The loop calls
``concept.measure(obs, info, dt)`` each step *before* acting, so a concept sees the state
that results from the previous action.

Registered concepts (``make_concept(name, **kw)``):

* ``ee_speed``: end-effector speed in m/s, ``|info["ee_vel"]|``, optional EMA filter.
* ``ee_height``: end-effector height in m, ``info["ee_pos"][2]``; optionally only while the
  fingertip is farther than ``cruise_radius_m`` horizontally from the target.
* ``smoothness``: jerk magnitude in m/s^3 from finite differences of ``info["ee_vel"]``
  (lower is smoother), optional EMA filter; or, with ``signal="action_change"``, the norm
  of the change between the last two executed actions fed by :meth:`Smoothness.record_action`
  (``rollout(..., callbacks=[lambda r: concept.record_action(r.action)])``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from embodied.contracts import Concept
from embodied.errors import ConfigError
from embodied.registry import Registry
from embodied.specs import Observation

CONCEPTS: Registry[Concept] = Registry("concept")
"""Name -> factory(**kwargs) -> Concept."""


def make_concept(name: str, **kwargs: Any) -> Concept:
    """Build the concept ``name`` (``ee_speed``, ``ee_height``, ``smoothness``)."""
    return CONCEPTS.make(name, **kwargs)


def _info_vector(info: Mapping[str, Any], key: str, size: int, concept: str) -> np.ndarray:
    if key not in info:
        raise ConfigError(
            f"concept {concept!r} needs info[{key!r}] but the env info has keys {sorted(info)}",
            fix="use an env that reports end-effector state (mujoco:arm_reach, robosuite, libero)",
        )
    vec = np.asarray(info[key], dtype=np.float64).ravel()
    if vec.size < size:
        raise ConfigError(f"concept {concept!r}: info[{key!r}] has {vec.size} values, need {size}")
    return vec


def _check_tau(tau_s: float, name: str) -> float:
    if not (isinstance(tau_s, (int, float)) and math.isfinite(tau_s) and tau_s >= 0):
        raise ConfigError(f"concept {name!r}: filter_tau_s must be >= 0 s, got {tau_s!r}")
    return float(tau_s)


class _EMA:
    """First-order low-pass with time constant ``tau_s`` (0 = pass-through), dt-aware."""

    def __init__(self, tau_s: float) -> None:
        self.tau_s = tau_s
        self.value = math.nan

    def reset(self) -> None:
        self.value = math.nan

    def __call__(self, x: float, dt: float) -> float:
        if self.tau_s == 0.0 or math.isnan(self.value):
            self.value = x
        else:
            a = dt / (self.tau_s + dt)
            self.value += a * (x - self.value)
        return self.value


class EESpeed:
    """End-effector speed ``|ee_vel|`` in m/s.

    Args:
        filter_tau_s: Time constant of an exponential moving average (s); 0 disables it.
        axes: Velocity components to include (default all three; ``(0, 1)`` = planar speed).
    """

    name = "ee_speed"
    units = "m/s"

    def __init__(self, filter_tau_s: float = 0.0, axes: tuple[int, ...] = (0, 1, 2)) -> None:
        self._ema = _EMA(_check_tau(filter_tau_s, self.name))
        if not axes or any(a not in (0, 1, 2) for a in axes):
            raise ConfigError(f"ee_speed axes must be a subset of (0, 1, 2), got {axes!r}")
        self.axes = tuple(axes)

    def reset(self) -> None:
        """Clear the filter."""
        self._ema.reset()

    def measure(self, obs: Observation, info: Mapping[str, Any], dt: float) -> float:
        """Speed (m/s) from ``info["ee_vel"]``."""
        vel = _info_vector(info, "ee_vel", 3, self.name)
        speed = math.sqrt(sum(float(vel[a]) ** 2 for a in self.axes))
        return self._ema(speed, dt)


class EEHeight:
    """End-effector height ``info["ee_pos"][2]`` in m (world frame).

    Args:
        cruise_radius_m: With > 0, the height is measured only while the fingertip is farther
            than this horizontally from the target (``info["target_dist_xy"]``, m); nearer, the
            arm descends onto the target and its height is the task's, not the concept's, so
            the measurement is NaN there (controllers hold their output on NaN, tracking
            figures leave those steps out). 0: always measured.
    """

    name = "ee_height"
    units = "m"

    def __init__(self, cruise_radius_m: float = 0.0) -> None:
        r = cruise_radius_m
        if not (isinstance(r, (int, float)) and math.isfinite(r) and r >= 0):
            raise ConfigError(
                f"concept {self.name!r}: cruise_radius_m must be >= 0 m, got {r!r}",
                fix="use e.g. 0.05, or 0 to measure the height everywhere",
            )
        self.cruise_radius_m = float(r)

    def reset(self) -> None:
        """Stateless."""

    def measure(self, obs: Observation, info: Mapping[str, Any], dt: float) -> float:
        """Height (m), or NaN within ``cruise_radius_m`` of the target."""
        if self.cruise_radius_m > 0:
            near = float(_info_vector(info, "target_dist_xy", 1, self.name)[0])
            if near < self.cruise_radius_m:
                return math.nan
        return float(_info_vector(info, "ee_pos", 3, self.name)[2])


class Smoothness:
    """Motion roughness: jerk magnitude (m/s^3) or action change norm; lower = smoother.

    Args:
        signal: ``"jerk"`` (``|d^2 ee_vel / dt^2|`` by finite differences, m/s^3),
            ``"accel"`` (``|d ee_vel / dt|``, m/s^2) or ``"action_change"``
            (``|a_{t-1} - a_{t-2}|`` of actions fed to :meth:`record_action`, action units).
        filter_tau_s: EMA time constant (s); 0 disables it.

    Until enough history exists (2 samples for accel, 3 for jerk and action change) the
    measurement is 0.
    """

    name = "smoothness"
    _SIGNALS = ("jerk", "accel", "action_change")

    def __init__(self, signal: str = "jerk", filter_tau_s: float = 0.0) -> None:
        if signal not in self._SIGNALS:
            raise ConfigError(f"smoothness signal {signal!r} is not one of {list(self._SIGNALS)}")
        self.signal = signal
        self.units = {"jerk": "m/s^3", "accel": "m/s^2", "action_change": "1"}[signal]
        self._ema = _EMA(_check_tau(filter_tau_s, self.name))
        self.reset()

    def reset(self) -> None:
        """Clear velocity/action history and the filter."""
        self._vel: list[np.ndarray] = []
        self._acc: np.ndarray | None = None
        self._actions: list[np.ndarray] = []
        self._ema.reset()

    def record_action(self, action: np.ndarray) -> None:
        """Feed the executed action (``signal="action_change"``); call once per step."""
        self._actions = [*self._actions[-1:], np.asarray(action, dtype=np.float64).copy()]

    def measure(self, obs: Observation, info: Mapping[str, Any], dt: float) -> float:
        """Roughness of the motion up to now."""
        if not dt > 0:
            raise ConfigError(f"concept {self.name!r} needs dt > 0 s, got {dt!r}")
        if self.signal == "action_change":
            if len(self._actions) < 2:
                return self._ema(0.0, dt)
            return self._ema(float(np.linalg.norm(self._actions[1] - self._actions[0])), dt)
        vel = _info_vector(info, "ee_vel", 3, self.name)[:3].copy()
        value = 0.0
        if self._vel:
            acc = (vel - self._vel[-1]) / dt
            if self.signal == "accel":
                value = float(np.linalg.norm(acc))
            elif self._acc is not None:
                value = float(np.linalg.norm((acc - self._acc) / dt))
            self._acc = acc
        self._vel = [vel]
        return self._ema(value, dt)


CONCEPTS.register("ee_speed", EESpeed, help="End-effector speed |ee_vel| (m/s), optional EMA.")
CONCEPTS.register(
    "ee_height",
    EEHeight,
    help="End-effector height ee_pos[2] (m), optionally away from the target.",
)
CONCEPTS.register(
    "smoothness", Smoothness, help="Jerk magnitude (m/s^3) or action change; lower = smoother."
)
