"""RobotEnv: a :class:`Robot` seen through the :class:`embodied.contracts.Env` contract.

``embodied.loop.rollout(RobotEnv(robot), policy, safety=env.safety_filter(), pace=True)``
runs a real robot with the same loop as the simulator. Observations are
``{"state": [q (rad), qd (rad/s), ee (m)], "image.<cam>": ..., "instruction": str}``; actions
are joint position targets (rad).

Link loss: while the link is not up, :meth:`RobotEnv.step` sends nothing (the robot's own
stale-command stop takes over), reports ``info["link"]`` and ``info["sent"] = False``, and
raises :class:`SafetyFault` once the link has been down longer than ``ros.reconnect_grace_s``.
When the link comes back the episode resumes with fresh state.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from embodied.contracts import Env
from embodied.errors import SafetyFault
from embodied.specs import Observation
from hardware.robot import LinkStatus, Robot, RobotState
from hardware.safety import SafetyFilter

log = logging.getLogger("hardware.env")


class RobotEnv(Env):
    """Adapter making a connected :class:`Robot` an :class:`Env`.

    Args:
        robot: The robot (connected by the caller, or on first ``reset``).
        instruction: Task instruction passed to language-conditioned policies.
        control_rate_hz: Loop rate (Hz); default ``robot.config.control_rate_hz``.
        max_episode_steps: Episode length in steps (e.g. ``max_seconds * rate``).
    """

    def __init__(
        self,
        robot: Robot,
        instruction: str = "",
        control_rate_hz: float | None = None,
        max_episode_steps: int = 1_000_000,
    ) -> None:
        self.robot = robot
        self.instruction = instruction
        self.control_rate_hz = float(control_rate_hz or robot.config.control_rate_hz)
        self.max_episode_steps = int(max_episode_steps)
        self.env_id = f"robot:{robot.config.name}"
        self.observation_spec = robot.observation_spec
        self.action_spec = robot.action_spec
        self.grace_s = robot.config.ros.reconnect_grace_s
        self.steps_without_command = 0
        self.link_losses = 0
        self._down_since: float | None = None
        self._last_status = LinkStatus.UP

    def safety_filter(self, **kwargs: Any) -> SafetyFilter:
        """The robot's :class:`SafetyFilter`, wired to its watchdog clock and e-stop."""
        return SafetyFilter(
            self.robot.config,
            fk=self.robot.fk,
            state_age_s=self.robot.state_age_s,
            control_rate_hz=self.control_rate_hz,
            on_estop=self.robot.estop,
            **kwargs,
        )

    def _observe(self, state: RobotState) -> tuple[Observation, dict[str, Any]]:
        q, qd = state.position_rad, state.velocity_rad_s
        parts = [q, qd]
        info: dict[str, Any] = {"success": False, "stamp_s": state.stamp_s}
        ee = self.robot.ee_position(q)
        if ee is not None:
            eps = 1e-4  # numerical Jacobian-vector product: ee velocity = J(q) qd
            ee_vel = (self.robot.ee_position(q + eps * qd) - ee) / eps  # type: ignore[operator]
            parts.append(ee)
            info["ee_pos"] = ee
            info["ee_vel"] = ee_vel
        obs: Observation = {
            "state": np.concatenate(parts).astype(np.float32),
            "instruction": self.instruction,
        }
        for cam in self.observation_spec.cameras:
            if cam in state.images:
                obs[f"image.{cam}"] = state.images[cam]
        return obs, info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Connect if needed and observe. A real robot is not moved on reset."""
        super().reset(seed=seed)
        self.robot.connect()
        self.steps_without_command = 0
        self._down_since = None
        obs, info = self._observe(self.robot.read())
        info["link"] = self.robot.link_status.value
        return obs, info

    def step(self, action: np.ndarray) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Send ``action`` if the link is up; observe the latest state."""
        status = self.robot.link_status
        sent = False
        if status is LinkStatus.UP:
            try:
                self.robot.send(action)
                sent = True
            except SafetyFault as exc:  # the link dropped between the check and the send
                log.warning("command not sent: %s", exc)
                status = self.robot.link_status
        now = time.monotonic()
        if sent:
            if self._down_since is not None:
                log.warning("link back after %.2f s; resuming", now - self._down_since)
            self._down_since = None
        else:
            self.steps_without_command += 1
            if self._down_since is None:
                self._down_since = now
                self.link_losses += 1
                log.warning("link %s: holding (no commands sent)", status.value)
            elif now - self._down_since > self.grace_s:
                raise SafetyFault(
                    f"robot {self.robot.config.name!r} link {status.value} for "
                    f"{now - self._down_since:.1f} s (grace {self.grace_s} s)",
                    fix="check the rosbridge server and the network; raise ros.reconnect_grace_s",
                )
        obs, info = self._observe(self.robot.read())
        info["link"] = status.value
        info["sent"] = sent
        age = self.robot.state_age_s()
        info["state_age_ms"] = float("nan") if age is None else age * 1e3
        return obs, 0.0, False, False, info

    def render(self) -> np.ndarray | None:  # type: ignore[override]
        """The first camera's latest image, or None without a camera."""
        state = self.robot.read()
        return next(iter(state.images.values()), None)
