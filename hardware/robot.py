"""The robot contract: what a real (or simulated) robot offers the control loop.

A :class:`Robot` is a context manager::

    with make_robot(config) as robot:      # connect(); disconnect() -> stop() first
        state = robot.read()               # time-stamped RobotState
        sent = robot.send(target_rad)      # the action actually sent

Leaving the ``with`` block - normally, on an exception or on Ctrl-C - commands the robot to
stop (hold its measured position) before disconnecting.

Stale-command behaviour (robot side, documented here and implemented by the simulated robot and
the ROS sim node): a command older than ``RobotConfig.command_timeout_ms`` is stale; the robot
then holds its measured position with zero velocity until a fresh command arrives.
"""

from __future__ import annotations

import abc
import enum
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from types import TracebackType

import numpy as np

from embodied.errors import SafetyFault
from embodied.specs import ImageSpec, ObservationSpec, VectorSpec
from hardware.configuration_robot import RobotConfig
from hardware.kinematics import SerialChainFK

log = logging.getLogger("hardware.robot")


class LinkStatus(enum.Enum):
    """Connection state of a robot link."""

    DISCONNECTED = "disconnected"
    """Transport closed (or never opened): no commands are sent."""
    STALE = "stale"
    """Transport open but no fresh state within the link timeout: no commands are sent."""
    UP = "up"
    """Transport open and state fresh."""


@dataclass(frozen=True)
class RobotState:
    """One measured robot state.

    Attributes:
        position_rad: Joint positions (rad), in config joint order.
        velocity_rad_s: Joint velocities (rad/s).
        stamp_s: Robot-side measurement time (s; ROS time for ROS robots).
        received_s: Local ``time.monotonic()`` when the state arrived (s).
        images: Camera name -> uint8 (H, W, 3) image.
    """

    position_rad: np.ndarray
    velocity_rad_s: np.ndarray
    stamp_s: float
    received_s: float
    images: dict[str, np.ndarray] = field(default_factory=dict)


class Robot(abc.ABC):
    """A robot with joint-position targets as actions.

    Subclasses implement :meth:`_connect`, :meth:`_disconnect`, :meth:`_latest`,
    :meth:`_publish` and :attr:`link_status`; this base class does validation, the
    stop-on-exit guarantee and bookkeeping.

    Args:
        config: The robot's config (joints, limits, kinematics, ROS interface).
    """

    def __init__(self, config: RobotConfig) -> None:
        self.config = config
        self.fk = SerialChainFK(config.kinematics) if config.kinematics is not None else None
        self.connected = False
        self.commands_sent = 0
        self.commands_refused = 0
        self.last_sent: np.ndarray | None = None
        self.sent_log: deque[tuple[float, np.ndarray]] = deque(maxlen=10_000)
        """(monotonic time s, target rad) of the latest commands handed to the transport."""
        self.link_opened_s = time.monotonic()
        """Monotonic time (s) the transport last (re)opened; subclasses update it."""

    # ------------------------------------------------------------------ specs
    @property
    def action_spec(self) -> VectorSpec:
        """Joint position targets (rad) with the joint limits as bounds."""
        j = self.config.joints
        return VectorSpec(
            tuple(f"{x.name}.target" for x in j),
            tuple(x.lower_rad for x in j),
            tuple(x.upper_rad for x in j),
            ("rad",) * len(j),
        )

    @property
    def state_spec(self) -> VectorSpec:
        """Observed state: joint positions (rad), velocities (rad/s), then ee position (m)."""
        j = self.config.joints
        names = [f"{x.name}.pos" for x in j] + [f"{x.name}.vel" for x in j]
        low = [x.lower_rad for x in j] + [-np.inf] * len(j)
        high = [x.upper_rad for x in j] + [np.inf] * len(j)
        units = ["rad"] * len(j) + ["rad/s"] * len(j)
        if self.fk is not None:
            names += ["ee.x", "ee.y", "ee.z"]
            low += [-np.inf] * 3
            high += [np.inf] * 3
            units += ["m"] * 3
        return VectorSpec(tuple(names), tuple(low), tuple(high), tuple(units))

    @property
    def cameras(self) -> dict[str, ImageSpec]:
        """Camera name -> image spec (empty without a camera)."""
        return {}

    @property
    def observation_spec(self) -> ObservationSpec:
        """Observation spec of the :class:`hardware.env.RobotEnv` around this robot."""
        return ObservationSpec(self.state_spec, dict(self.cameras))

    # -------------------------------------------------------------- lifecycle
    def connect(self) -> Robot:
        """Open the link and wait for the first state. Returns ``self``."""
        if not self.connected:
            self._connect()
            self.connected = True
        return self

    def disconnect(self) -> None:
        """Command a stop (hold position) if possible, then close the link."""
        if not self.connected:
            return
        try:
            self.stop()
        except Exception as exc:  # the link may be down; closing must still happen
            log.warning("stop before disconnect failed: %s", exc)
        finally:
            self.connected = False
            self._disconnect()

    def __enter__(self) -> Robot:
        return self.connect()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.disconnect()

    # ------------------------------------------------------------- interface
    def read(self) -> RobotState:
        """The latest state.

        Raises:
            SafetyFault: not connected or no state received yet.
        """
        self._require_connected("read")
        state = self._latest()
        if state is None:
            raise SafetyFault(
                f"robot {self.config.name!r} has not reported any state yet",
                fix="check that the robot publishes its joint states",
            )
        return state

    def send(self, action: np.ndarray) -> np.ndarray:
        """Send joint position targets (rad). Returns the action actually sent.

        The action is checked for shape, finiteness and joint limits (clipped) here, and the
        message against its ROS type by the transport, before anything leaves the process.

        Raises:
            ActionError: wrong shape or non-finite values.
            SafetyFault: the link is not up (nothing is sent; commands are never queued).
        """
        self._require_connected("send")
        target = self.action_spec.validate(action, what="robot command")
        target = self.action_spec.clip(target)
        status = self.link_status
        if status is not LinkStatus.UP:
            self.commands_refused += 1
            raise SafetyFault(
                f"robot {self.config.name!r} link is {status.value}; command not sent",
                fix="wait for the link to come back (RobotEnv holds and retries)",
            )
        self._publish(target)
        self.commands_sent += 1
        self.last_sent = target
        self.sent_log.append((time.monotonic(), target))
        return target

    def stop(self) -> np.ndarray | None:
        """Command the robot to hold its latest measured position. Returns the target sent."""
        state = self._latest()
        if state is None or self.link_status is LinkStatus.DISCONNECTED:
            log.warning(
                "stop: link %s, no state; robot falls back to its stale-command stop",
                self.link_status.value,
            )
            return None
        hold = self.action_spec.clip(np.asarray(state.position_rad, dtype=np.float64))
        self._publish(hold)
        self.commands_sent += 1
        self.last_sent = hold
        self.sent_log.append((time.monotonic(), hold))
        log.info("stop: hold at %s rad", np.round(hold, 4).tolist())
        return hold

    def estop(self) -> None:
        """Trigger the robot's e-stop if it has one, and hold position."""
        self.stop()

    def enable(self) -> object:
        """Clear a latched robot-side e-stop (an explicit operator action)."""
        return None

    def state_age_s(self) -> float | None:
        """Seconds since the freshest state (or since the link reopened, if later).

        None while the transport is disconnected: then staleness is the robot env's reconnect
        grace, not the watchdog's business.
        """
        if self.link_status is LinkStatus.DISCONNECTED:
            return None
        state = self._latest()
        ref = self.link_opened_s if state is None else max(state.received_s, self.link_opened_s)
        return time.monotonic() - ref

    def ee_position(self, position_rad: np.ndarray) -> np.ndarray | None:
        """End-effector position (m) for ``position_rad``, or None without kinematics."""
        return None if self.fk is None else self.fk(position_rad)

    def _require_connected(self, what: str) -> None:
        if not self.connected:
            raise SafetyFault(
                f"{what} on robot {self.config.name!r} before connect()",
                fix="use the robot as a context manager: `with robot: ...`",
            )

    # ------------------------------------------------------- for subclasses
    @property
    @abc.abstractmethod
    def link_status(self) -> LinkStatus:
        """Current link status."""

    @abc.abstractmethod
    def _connect(self) -> None:
        """Open the transport and wait for the first state."""

    @abc.abstractmethod
    def _disconnect(self) -> None:
        """Close the transport."""

    @abc.abstractmethod
    def _latest(self) -> RobotState | None:
        """Latest received state, or None."""

    @abc.abstractmethod
    def _publish(self, target_rad: np.ndarray) -> None:
        """Transmit a validated, clipped joint target (rad)."""
