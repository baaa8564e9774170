"""Forward kinematics of a serial chain of revolute joints (for the workspace box)."""

from __future__ import annotations

import numpy as np

from hardware.configuration_robot import KinematicsConfig

_AXES = {"x": 0, "y": 1, "z": 2}


def _rotation(axis: str, angle_rad: float) -> np.ndarray:
    c, s = np.cos(angle_rad), np.sin(angle_rad)
    i = _AXES[axis]
    j, k = (i + 1) % 3, (i + 2) % 3
    r = np.eye(3)
    r[j, j], r[j, k], r[k, j], r[k, k] = c, -s, s, c
    return r


class SerialChainFK:
    """End-effector position (m, world frame) of a chain described by :class:`KinematicsConfig`.

    Each link rotates about its axis by its joint angle (rad), then translates by its offset (m).
    """

    def __init__(self, config: KinematicsConfig) -> None:
        self.config = config
        self._offsets = [np.asarray(link.offset_m, dtype=np.float64) for link in config.links]
        self._base = np.asarray(config.base_m, dtype=np.float64)

    def __call__(self, q_rad: np.ndarray) -> np.ndarray:
        """End-effector position (3,) in m for joint positions ``q_rad``."""
        rot = np.eye(3)
        pos = self._base.copy()
        for link, offset, q in zip(
            self.config.links, self._offsets, np.asarray(q_rad), strict=True
        ):
            rot = rot @ _rotation(link.axis, float(q))
            pos = pos + rot @ offset
        return pos
