"""Bring-up policies for a robot's first runs: ``hold`` and ``sine`` (joint-position targets).

Registered in :data:`policies.POLICIES`, so ``embodied deploy --policy sine`` works on any
robot env whose state starts with the joint positions (rad) and whose actions are joint
position targets (rad), e.g. :class:`hardware.env.RobotEnv`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from embodied.config import check_options
from embodied.contracts import Env, Policy
from embodied.errors import CompatibilityError, ConfigError
from embodied.specs import Observation
from policies import POLICIES


def _joint_env(env: Env | None, name: str) -> Env:
    if env is None:
        raise ConfigError(f"policy {name!r} needs env=", fix=f"policies.load({name!r}, env=env)")
    if any(u != "rad" for u in env.action_spec.units):
        raise CompatibilityError(
            f"policy {name!r} emits joint position targets (rad) but env {env.env_id!r} takes "
            f"{env.action_spec.units}",
            fix="use it on a robot env (hardware.env.RobotEnv)",
        )
    return env


class HoldPolicy(Policy):
    """Targets the joint positions measured at episode start (the robot stays still)."""

    def __init__(self, env: Env) -> None:
        super().__init__()
        self.action_dim = env.action_spec.dim
        self._hold: np.ndarray | None = None

    def reset(self) -> None:
        """Forget the hold position (re-read at the next step)."""
        super().reset()
        self._hold = None

    def predict_action_chunk(self, obs: Observation) -> np.ndarray:
        """One row: the held position (rad)."""
        if self._hold is None:
            self._hold = np.asarray(obs["state"], dtype=np.float64)[: self.action_dim].copy()
        return self._hold[None, :]


class SinePolicy(Policy):
    """Each joint oscillates around its start position: ``q0 + A sin(2 pi f t + j pi / 2)``.

    Args:
        env: The robot env (gives action dim and control rate).
        amplitude_rad: Oscillation amplitude A (rad).
        frequency_hz: Oscillation frequency f (Hz).
    """

    def __init__(self, env: Env, amplitude_rad: float = 0.2, frequency_hz: float = 0.5) -> None:
        super().__init__()
        if not amplitude_rad >= 0 or not frequency_hz > 0:
            raise ConfigError(
                f"sine policy: amplitude_rad {amplitude_rad} must be >= 0 and frequency_hz "
                f"{frequency_hz} > 0"
            )
        self.action_dim = env.action_spec.dim
        self.dt = env.dt
        self.amplitude_rad = float(amplitude_rad)
        self.frequency_hz = float(frequency_hz)
        self._center: np.ndarray | None = None
        self._t = 0

    def reset(self) -> None:
        """Restart the oscillation at the next observed position."""
        super().reset()
        self._center = None
        self._t = 0

    def predict_action_chunk(self, obs: Observation) -> np.ndarray:
        """One row of targets (rad)."""
        if self._center is None:
            self._center = np.asarray(obs["state"], dtype=np.float64)[: self.action_dim].copy()
        phase = np.arange(self.action_dim) * np.pi / 2
        self._t += 1
        t_s = self._t * self.dt
        wave = np.sin(2 * np.pi * self.frequency_hz * t_s + phase) - np.sin(phase)
        return (self._center + self.amplitude_rad * wave)[None, :]


@POLICIES.register("hold")
def make_hold(env: Env | None = None, **kwargs: Any) -> Policy:
    """Bring-up: hold the joint positions measured at episode start."""
    if kwargs:
        raise ConfigError(f"policy 'hold' takes no options, got {sorted(kwargs)}")
    return HoldPolicy(_joint_env(env, "hold"))


@POLICIES.register("sine")
def make_sine(env: Env | None = None, **kwargs: Any) -> Policy:
    """Bring-up: joints oscillate around their start position (amplitude_rad, frequency_hz)."""
    return SinePolicy(_joint_env(env, "sine"), **check_options(SinePolicy, kwargs, "policy 'sine'"))
