"""A kinematic simulated robot implementing the :class:`Robot` contract (``deploy --dry-run``).

Each joint tracks its last position target at up to ``max_velocity_rad_s``; the model is
advanced on every ``read``/``send`` by the elapsed wall time (exactly: the target is constant
between commands), so it runs in
real time like hardware. Commands older than ``command_timeout_ms`` are stale: the joints hold
their position with zero velocity (the documented robot-side behaviour).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

from hardware.configuration_robot import RobotConfig
from hardware.robot import LinkStatus, Robot, RobotState


def track(q: np.ndarray, target: np.ndarray, vmax: np.ndarray, dt: float) -> np.ndarray:
    """Move ``q`` towards ``target`` by at most ``vmax * dt`` per joint (rad)."""
    return q + np.clip(target - q, -vmax * dt, vmax * dt)


class SimRobot(Robot):
    """Kinematic stand-in for the real robot, same config, same limits.

    Args:
        config: Robot config; ``home_rad`` is the initial position.
        clock: Monotonic clock (s); injectable for tests.
    """

    def __init__(self, config: RobotConfig, clock: Callable[[], float] | None = None) -> None:
        super().__init__(config)
        self._clock = clock or time.monotonic
        self._lock = threading.Lock()
        self.vmax = np.array([j.max_velocity_rad_s for j in config.joints])
        self.q = np.asarray(config.home_rad, dtype=np.float64).copy()
        self.qd = np.zeros_like(self.q)
        self.target: np.ndarray | None = None
        self.t_command = -np.inf
        self.t_model = self._clock()
        self.estopped = False
        self.history: list[tuple[float, np.ndarray]] = []
        """(time s, target rad) of every command received (for tests)."""

    @property
    def link_status(self) -> LinkStatus:
        return LinkStatus.UP if self.connected else LinkStatus.DISCONNECTED

    def _advance(self) -> None:
        now = self._clock()
        q0 = self.q.copy()
        stale_after = self.t_command + self.config.command_timeout_ms / 1e3
        active = max(0.0, min(now, stale_after) - self.t_model)  # constant target: closed form
        if self.target is not None and not self.estopped and active > 0:
            self.q = track(self.q, self.target, self.vmax, active)
        elapsed = now - self.t_model
        self.qd = (self.q - q0) / elapsed if elapsed > 0 else np.zeros_like(self.q)
        if now >= stale_after or self.estopped:
            self.qd = np.zeros_like(self.q)
        self.t_model = now

    def _connect(self) -> None:
        with self._lock:
            self.t_model = self._clock()
            self.link_opened_s = time.monotonic()

    def _disconnect(self) -> None:
        pass

    def _latest(self) -> RobotState:
        with self._lock:
            self._advance()
            now = time.monotonic()
            return RobotState(self.q.copy(), self.qd.copy(), self.t_model, now)

    def _publish(self, target_rad: np.ndarray) -> None:
        with self._lock:
            self._advance()
            self.target = np.asarray(target_rad, dtype=np.float64).copy()
            self.t_command = self.t_model
            self.history.append((self.t_model, self.target.copy()))

    def estop(self) -> None:
        """Latch the simulated e-stop: joints hold until :meth:`enable`."""
        with self._lock:
            self._advance()
            self.estopped = True

    def enable(self) -> None:  # type: ignore[override]
        """Clear the simulated e-stop."""
        with self._lock:
            self.estopped = False
