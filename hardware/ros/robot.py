"""RosRobot: the :class:`hardware.robot.Robot` contract over rosbridge (roslibpy).

State comes from a ``sensor_msgs/JointState`` topic (plus an optional
``sensor_msgs/CompressedImage`` camera); commands go out as ``trajectory_msgs/JointTrajectory``
or ``std_msgs/Float64MultiArray`` joint position targets; the e-stop is a ``std_msgs/Bool``
topic or a ``std_srvs/Trigger`` service and ``enable`` a ``std_srvs/Trigger`` service.

Link status: ``DISCONNECTED`` while the websocket is closed, ``STALE`` while it is open but no
joint state arrived within ``ros.link_timeout_ms`` (100 ms by default) - both stop commanding
at once - else ``UP``.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from embodied.errors import SafetyFault
from embodied.specs import ImageSpec
from hardware.configuration_robot import RobotConfig
from hardware.robot import LinkStatus, Robot, RobotState
from hardware.ros import messages
from hardware.ros.client import RosbridgeLink

log = logging.getLogger("hardware.ros")


class RosRobot(Robot):
    """A robot reached through a rosbridge v2 server.

    Args:
        config: Robot config; ``config.ros`` names the server, topics and types.
    """

    def __init__(self, config: RobotConfig) -> None:
        super().__init__(config)
        self.ros = config.ros
        self.link: RosbridgeLink | None = None
        self.last_link: RosbridgeLink | None = None
        """The link of the last session, kept after disconnect for its statistics."""
        self._state: RobotState | None = None
        self._image: np.ndarray | None = None
        self._state_lock = threading.Lock()
        self.bad_states = 0
        self.state_listeners: list[Callable[[RobotState], None]] = []
        """Called (on the reactor thread) with every new state; keep them short."""
        self.link_changes: list[tuple[float, bool]] = []
        """(monotonic time s, up?) of every link open/close, for reports and tests."""

    @property
    def cameras(self) -> dict[str, ImageSpec]:
        if self.ros.camera is None:
            return {}
        return {self.ros.camera_name: ImageSpec(*self.ros.camera_size)}

    # ------------------------------------------------------------ callbacks
    def _on_state(self, msg: dict[str, Any]) -> None:  # reactor thread
        try:
            pos, vel, stamp = messages.parse_joint_state(msg, self.config.joint_names)
        except messages.MessageError as exc:
            self.bad_states += 1
            if self.bad_states <= 3:
                log.error("bad joint state ignored: %s", exc)
            return
        state = RobotState(pos, vel, stamp, time.monotonic())
        with self._state_lock:
            self._state = state
        for listener in self.state_listeners:
            listener(state)

    def _on_image(self, msg: dict[str, Any]) -> None:  # reactor thread
        try:
            self._image = messages.decode_compressed_image(msg, self.ros.camera_size)
        except Exception as exc:
            log.error("bad camera image ignored: %s", exc)

    def _on_link(self, up: bool) -> None:  # reactor thread
        now = time.monotonic()
        self.link_changes.append((now, up))
        if up:
            self.link_opened_s = now

    # ------------------------------------------------------------ contract
    @property
    def link_status(self) -> LinkStatus:
        link = self.link
        if link is None or not link.connected:
            return LinkStatus.DISCONNECTED
        last = max(link.last_rx_s(self.ros.state.topic), link.opened_s)
        if time.monotonic() - last > self.ros.link_timeout_ms / 1e3:
            return LinkStatus.STALE
        return LinkStatus.UP

    def _connect(self) -> None:
        host, port = self.ros.host_port()
        link = RosbridgeLink(
            host,
            port,
            ros_version=self.ros.ros_version,
            reconnect_initial_s=self.ros.reconnect_initial_s,
            reconnect_max_s=self.ros.reconnect_max_s,
            reconnect_factor=self.ros.reconnect_factor,
            on_change=self._on_link,
        )
        link.open(timeout_s=self.ros.connect_timeout_s)
        self.link = link
        self.link_opened_s = time.monotonic()
        link.subscribe(self.ros.state.topic, self.ros.state.type, self._on_state)
        if self.ros.camera is not None:
            link.subscribe(self.ros.camera.topic, self.ros.camera.type, self._on_image)
        link.advertise(self.ros.command.topic, self.ros.command.type)
        if self.ros.estop is not None and self.ros.estop.type == "std_msgs/Bool":
            link.advertise(self.ros.estop.topic, self.ros.estop.type, latch=True)
        deadline = time.monotonic() + self.ros.connect_timeout_s
        while self._state is None or (self.ros.camera is not None and self._image is None):
            if time.monotonic() > deadline:
                link.close()
                self.link = None
                what = self.ros.state if self._state is None else self.ros.camera
                assert what is not None
                raise SafetyFault(
                    f"no {what.type} on {what.topic} within "
                    f"{self.ros.connect_timeout_s} s (rosbridge ws://{host}:{port} is up)",
                    fix="check the topic name/type in the robot config and the robot driver",
                )
            time.sleep(0.005)
        if self.ros.enable is not None and self.ros.enable_on_connect:
            self.enable()

    def _disconnect(self) -> None:
        if self.link is not None:
            self.link.close()
            self.last_link = self.link
        self.link = None

    def _latest(self) -> RobotState | None:
        with self._state_lock:
            state, image = self._state, self._image
        if state is not None and image is not None:
            state = dataclasses.replace(state, images={self.ros.camera_name: image})
        return state

    def _publish(self, target_rad: np.ndarray) -> None:
        assert self.link is not None
        msg = messages.joint_command(
            self.ros.command.type,
            self.config.joint_names,
            target_rad,
            self.ros.ros_version,
            time_from_start_s=1.0 / self.config.control_rate_hz,
        )
        if not self.link.publish(self.ros.command.topic, msg):
            raise SafetyFault(
                f"command not sent: rosbridge link to {self.ros.url} is down",
                fix="RobotEnv holds and resumes after the reconnect",
            )

    def publish_raw(self, msg: dict[str, Any]) -> bool:
        """Publish a hand-built command message (validated first). For tests and tools."""
        self._require_connected("publish_raw")
        assert self.link is not None
        return self.link.publish(self.ros.command.topic, msg)

    def enable(self) -> dict[str, Any]:
        """Call the ``enable`` Trigger service: clears a latched robot-side e-stop.

        Raises:
            SafetyFault: no ``ros.enable`` service configured, link down, or the robot refused.
        """
        if self.ros.enable is None:
            raise SafetyFault(
                f"robot {self.config.name!r} has no enable service configured",
                fix="add ros.enable: {topic: /..., type: std_srvs/Trigger} to the robot config",
            )
        if self.link is None:
            raise SafetyFault("enable() before connect()", fix="connect the robot first")
        result = self.link.call_service(self.ros.enable.topic, self.ros.enable.type)
        if not result.get("success", False):
            raise SafetyFault(
                f"{self.ros.enable.topic} refused to enable: {result}",
                fix="clear the fault on the robot first",
            )
        return result

    def estop(self) -> None:
        """Trigger the robot's e-stop (Bool topic or Trigger service) and hold."""
        cfg = self.ros.estop
        if cfg is not None and self.link is not None:
            try:
                if cfg.type == "std_msgs/Bool":
                    self.link.publish(cfg.topic, {"data": True})
                else:
                    self.link.call_service(cfg.topic, cfg.type)
                log.error("robot e-stop sent on %s", cfg.topic)
            except Exception as exc:
                log.error("robot e-stop on %s failed: %s", cfg.topic, exc)
        try:
            self.stop()
        except Exception as exc:
            log.error("hold after e-stop failed: %s", exc)
