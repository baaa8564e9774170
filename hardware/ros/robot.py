"""RosRobot: the :class:`hardware.robot.Robot` contract over rosbridge (roslibpy).

State comes from a ``sensor_msgs/JointState`` topic (plus an optional ``sensor_msgs/Image``
or ``sensor_msgs/CompressedImage`` camera, subscribed with ``ros.camera_compression``,
``cbor`` by default: binary frames, the fastest mode that coexists with other clients); commands go out as ``trajectory_msgs/JointTrajectory``
or ``std_msgs/Float64MultiArray`` joint position targets; the e-stop is a ``std_msgs/Bool``
topic or a ``std_srvs/Trigger`` service and ``enable`` a ``std_srvs/Trigger`` service.

Link status: ``DISCONNECTED`` while the websocket is closed, and after a reopen until the
first joint state of the new session arrives (the server re-subscribes to ROS asynchronously;
like the first connect this may take up to ``ros.connect_timeout_s``, and it is a reconnect in
progress, not a stale robot); ``STALE`` while it is open but no joint state arrived within
``ros.link_timeout_ms`` (100 ms by default), or none at all within ``connect_timeout_s`` of the
reopen - both stop commanding at once - else ``UP``.

Delivery. Commands are latest-wins (never queued), and a ROS 1 subscriber connects to the
bridge's publisher some time after ``advertise``: what is published before that is lost. A
keeper thread therefore re-publishes, at the control rate, the newest target while the link is
``UP`` until a joint state received after it shows it in effect (the robot at the target within
:attr:`RosRobot.target_tolerance_rad`, at rest), a newer target replaces it, the link drops (a
target is never re-sent after an outage: it would be stale) or ``ros.resend_window_s`` (2 s by
default) has passed (then the robot's own stale-command stop applies). Re-sends repeat the same message
(same header stamp) and are counted in ``link.stats.resent`` and :attr:`commands_resent`.

E-stop. :meth:`RosRobot.estop` latches: the e-stop is sent at once when the link is up, again
at once after every reconnect, and every :attr:`RosRobot.estop_resend_s` until the robot
acknowledges it - ``ros.estop_state`` (a ``std_msgs/Bool`` the robot publishes) reads true, or,
without it, the ``std_srvs/Trigger`` e-stop service answered success. A ``std_msgs/Bool`` e-stop
without ``ros.estop_state`` cannot be acknowledged and is re-sent until :meth:`enable`. Only
:meth:`RosRobot.enable` (an operator action) clears the latch. The log says what happened:
published, acknowledged, or not sent because the link is down.
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
from hardware.ros.client import RosbridgeLink, in_reactor_thread

log = logging.getLogger("hardware.ros")

STAMP_RESET_S = 5.0
"""A state older than the last one by more than this is a robot clock that restarted (sim
time, a rebooted controller), read as new; by less, a stale copy, dropped."""


@dataclasses.dataclass
class _Newest:
    """The newest joint target handed to the link, kept until the robot's state confirms it."""

    target: np.ndarray
    msg: dict[str, Any]
    first_s: float
    """Monotonic time (s) it was first published."""
    last_s: float
    """Monotonic time (s) it was last (re)published."""
    confirmed: bool = False
    expired: bool = False


class RosRobot(Robot):
    """A robot reached through a rosbridge v2 server.

    Args:
        config: Robot config; ``config.ros`` names the server, topics and types.
    """

    target_tolerance_rad: float = 1e-3
    """A state within this distance (rad, every joint) of the newest target confirms it."""
    rest_tolerance_rad_s: float = 1e-2
    """... if every joint is also slower than this (rad/s): the target is in effect, not
    passed through on the way to an older one."""
    estop_resend_s: float = 0.25
    """Period (s) of e-stop re-sends while it is latched and not acknowledged."""

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
        self.out_of_order_states = 0
        """States dropped for being older than the one already read (duplicated or reordered
        above TCP)."""
        self.bad_images = 0
        """Camera messages that could not be decoded (ignored; the first three are logged)."""
        self.image_error = ""
        """Why the last camera message could not be decoded (empty: none failed)."""
        self.state_listeners: list[Callable[[RobotState], None]] = []
        """Called (on the reactor thread) with every new state; keep them short."""
        self.link_changes: list[tuple[float, bool]] = []
        """(monotonic time s, up?) of every link open/close, for reports and tests."""
        self.commands_resent = 0
        """Re-publications of the newest target by the keeper (not in :attr:`commands_sent`)."""
        self.estop_log: list[tuple[float, str]] = []
        """(monotonic time s, outcome) of every e-stop send: ``published``, ``acknowledged``,
        ``refused``, ``failed`` or ``down`` (not sent), for reports and tests."""
        self._cmd_lock = threading.Lock()
        self._newest: _Newest | None = None
        self._estop_lock = threading.Lock()
        self._estop_latched = False
        self._estop_due = ""
        """Why the keeper must re-send the e-stop at once (empty: only periodically)."""
        self._estop_last_s = -1e9
        self._estop_trigger_ok = False
        self._estop_reported = ""
        self._robot_estopped: bool | None = None
        self._wake = threading.Event()
        self._keeper_stop = threading.Event()
        self._keeper: threading.Thread | None = None

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
            last = self._state
            if last is not None and 0 < last.stamp_s - stamp <= STAMP_RESET_S:
                # an older state after a newer one (a frame duplicated or reordered above
                # TCP): the robot is where the newer one says
                self.out_of_order_states += 1
                return
            self._state = state
        with self._cmd_lock:
            newest = self._newest
            if (
                newest is not None
                and not newest.confirmed
                and state.received_s > newest.first_s
                and np.all(np.abs(pos - newest.target) <= self.target_tolerance_rad)
                and np.all(np.abs(vel) <= self.rest_tolerance_rad_s)
            ):
                newest.confirmed = True
        for listener in self.state_listeners:
            listener(state)

    def _on_image(self, msg: dict[str, Any]) -> None:  # reactor thread
        assert self.ros.camera is not None
        try:
            if self.ros.camera.type == "sensor_msgs/Image":
                image = messages.decode_image(msg, self.ros.camera_size)
            else:
                image = messages.decode_compressed_image(msg, self.ros.camera_size)
        except Exception as exc:
            self.bad_images += 1
            self.image_error = f"{type(exc).__name__}: {exc}"
            if self.bad_images <= 3:
                log.error("bad camera image on %s ignored: %s", self.ros.camera.topic, exc)
            return
        self._image = image

    def _on_estop_state(self, msg: dict[str, Any]) -> None:  # reactor thread
        data = msg.get("data")
        if not isinstance(data, bool):
            log.error("bad e-stop state ignored: %r", msg)
            return
        before, self._robot_estopped = self._robot_estopped, data
        if not self._estop_latched or data is before:
            return
        assert self.ros.estop_state is not None
        if data:
            log.warning("robot e-stop acknowledged: %s reports true", self.ros.estop_state.topic)
        else:
            log.error(
                "%s reports the robot e-stop released while ours is latched; re-sending it",
                self.ros.estop_state.topic,
            )
            self._estop_trigger_ok = False  # whatever the service said before, it is off now
            self._estop_due = "re-sent: the robot reported it released"
            self._wake.set()

    def _on_link(self, up: bool) -> None:  # reactor thread
        now = time.monotonic()
        self.link_changes.append((now, up))
        if up:
            self.link_opened_s = now
            if self._estop_latched:  # re-send at once: a new server may have lost it
                self._estop_due = "re-sent after reconnect"
                self._wake.set()
        else:
            with self._cmd_lock:
                self._newest = None  # never re-sent after an outage: it would be stale
            self._robot_estopped = None  # only a state from the next session counts

    # ------------------------------------------------------------ contract
    @property
    def link_status(self) -> LinkStatus:
        link = self.link
        if link is None or not link.connected:
            return LinkStatus.DISCONNECTED
        now, opened_s = time.monotonic(), link.opened_s
        last_rx_s = link.last_rx_s(self.ros.state.topic)
        if last_rx_s < opened_s:  # reopened, the state stream not back yet
            if now - opened_s <= self.ros.connect_timeout_s:
                return LinkStatus.DISCONNECTED
            return LinkStatus.STALE
        if now - last_rx_s > self.ros.link_timeout_ms / 1e3:
            return LinkStatus.STALE
        return LinkStatus.UP

    def _connect(self) -> None:
        host, port = self.ros.host_port()
        with self._state_lock:  # a new session waits for its own first state, not the last one
            self._state, self._image = None, None
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
            link.subscribe(
                self.ros.camera.topic,
                self.ros.camera.type,
                self._on_image,
                throttle_rate_ms=self.ros.camera_throttle_rate_ms,
                queue_length=self.ros.camera_queue_length,
                compression=self.ros.camera_compression,
            )
        if self.ros.estop_state is not None:
            link.subscribe(
                self.ros.estop_state.topic, self.ros.estop_state.type, self._on_estop_state
            )
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
                if what is self.ros.camera and self.image_error:
                    raise SafetyFault(
                        f"no usable {what.type} on {what.topic} within "
                        f"{self.ros.connect_timeout_s} s: {self.bad_images} could not be "
                        f"decoded, the last: {self.image_error}",
                        fix="publish a supported image (see ros.camera in the robot config)",
                    )
                raise SafetyFault(
                    f"no {what.type} on {what.topic} within "
                    f"{self.ros.connect_timeout_s} s (rosbridge ws://{host}:{port} is up)",
                    fix="check the topic name/type in the robot config and the robot driver",
                )
            time.sleep(0.005)
        self._keeper_stop.clear()
        self._keeper = threading.Thread(
            target=self._keep, args=(link,), name=f"ros-keeper-{self.config.name}", daemon=True
        )
        self._keeper.start()
        if self.ros.enable is not None and self.ros.enable_on_connect:
            self.enable()

    def _disconnect(self) -> None:
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            self._keeper_stop.set()
            self._wake.set()
            keeper.join(timeout=5.0)
        if self._estop_latched and not self.estop_acknowledged:
            log.error(
                "closing the link to %s with the robot e-stop latched but NOT acknowledged "
                "by the robot",
                self.ros.url,
            )
        if self.link is not None:
            self.link.close()
            self.last_link = self.link
        self.link = None
        with self._cmd_lock:
            self._newest = None

    # ------------------------------------------------------------ keeper
    def _keep(self, link: RosbridgeLink) -> None:
        """Keeper thread: re-sends the latched e-stop and the unconfirmed newest target."""
        period_s = 1.0 / self.config.control_rate_hz
        while not self._keeper_stop.is_set():
            self._wake.wait(period_s)
            self._wake.clear()
            if self._keeper_stop.is_set():
                return
            try:
                self._keep_estop(link)
                self._keep_command(link, period_s)
            except Exception:  # the keeper must outlive one bad round
                log.exception("ROS keeper round failed")

    def _keep_command(self, link: RosbridgeLink, period_s: float) -> None:
        window_s = self.ros.resend_window_s
        with self._cmd_lock:  # held across publish: a newer target cannot slip in before it
            newest = self._newest
            if newest is None or newest.confirmed or newest.expired:
                return
            now = time.monotonic()
            if now - newest.first_s > window_s:
                newest.expired = True
                log.warning(
                    "no joint state confirmed the newest target %s rad within %.1f s "
                    "(ros.resend_window_s); re-sending stops, the robot's stale-command "
                    "stop applies",
                    np.round(newest.target, 4).tolist(),
                    window_s,
                )
                return
            if now - newest.last_s < period_s or self.link_status is not LinkStatus.UP:
                return
            if link.publish(self.ros.command.topic, newest.msg, resend=True):
                newest.last_s = now
                self.commands_resent += 1

    def _keep_estop(self, link: RosbridgeLink) -> None:
        with self._estop_lock:
            if not self._estop_latched or self.estop_acknowledged:
                return
            due, self._estop_due = self._estop_due, ""
            if not due and time.monotonic() - self._estop_last_s < self.estop_resend_s:
                return
            self._send_estop(link, due or "re-sent")

    # ------------------------------------------------------------ e-stop
    @property
    def estop_latched(self) -> bool:
        """Whether :meth:`estop` was called and not cleared by :meth:`enable`."""
        return self._estop_latched

    @property
    def estop_acknowledged(self) -> bool:
        """Whether the robot confirmed the latched e-stop: ``ros.estop_state`` reads true, or
        the Trigger e-stop service answered success (and ``ros.estop_state`` has not reported
        it released since). Always False for a Bool e-stop without ``ros.estop_state``."""
        if not self._estop_latched:
            return False
        return self._estop_trigger_ok or self._robot_estopped is True

    def _send_estop(self, link: RosbridgeLink, why: str) -> str:
        """Send the e-stop once (caller holds ``_estop_lock``); log and return the outcome."""
        cfg = self.ros.estop
        assert cfg is not None
        self._estop_last_s = time.monotonic()
        detail = ""
        if not link.connected:
            outcome = "down"
        elif cfg.type == "std_msgs/Bool":
            sent = link.publish(cfg.topic, {"data": True}, resend=why != "fired")
            outcome = "published" if sent else "down"
        else:
            try:
                result = link.call_service(cfg.topic, cfg.type)
            except SafetyFault as exc:
                outcome, detail = "failed", str(exc)
            else:
                ok = result.get("success") is True
                self._estop_trigger_ok = ok
                outcome, detail = ("acknowledged" if ok else "refused"), str(result)
        self.estop_log.append((time.monotonic(), outcome))
        if why == "re-sent" and outcome == self._estop_reported:
            return outcome  # periodic re-send, nothing new to say
        self._estop_reported = outcome
        state = self.ros.estop_state
        if outcome == "down":
            log.error(
                "robot e-stop NOT sent (%s): rosbridge link to %s is down; latched, re-sent "
                "on reconnect until acknowledged",
                why,
                self.ros.url,
            )
        elif outcome == "published":
            log.error(
                "robot e-stop published on %s (%s); %s",
                cfg.topic,
                why,
                f"waiting for {state.topic} to report it"
                if state is not None
                else "no ros.estop_state to acknowledge it: re-sent every "
                f"{self.estop_resend_s} s until enable()",
            )
        elif outcome == "acknowledged":
            log.error("robot e-stop acknowledged by service %s (%s): %s", cfg.topic, why, detail)
        else:
            log.error(
                "robot e-stop service %s %s (%s): %s; latched, retried every %s s",
                cfg.topic,
                outcome,
                why,
                detail,
                self.estop_resend_s,
            )
        return outcome

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
        # a caller sending faster than the link writes waits (<= 2 ms) for the previous
        # command to go out instead of superseding it; outside _cmd_lock, which _on_state takes
        self.link.wait_flushed(self.ros.command.topic)
        with self._cmd_lock:
            sent = self.link.publish(self.ros.command.topic, msg)
            if sent:
                now = time.monotonic()
                self._newest = _Newest(np.array(target_rad, dtype=np.float64), msg, now, now)
        if not sent:
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
        """Call the ``enable`` Trigger service: clears a latched robot-side e-stop, and ours.

        Our latch is released first (so no re-send can race the enable) and restored if the
        robot does not enable. A ``std_msgs/Bool`` e-stop is set to false first: the server
        keeps the latched true for subscribers that connect later.

        Raises:
            SafetyFault: no ``ros.enable`` service configured, link down, or the robot refused.
        """
        if self.ros.enable is None:
            raise SafetyFault(
                f"robot {self.config.name!r} has no enable service configured",
                fix="add ros.enable: {topic: /..., type: std_srvs/Trigger} to the robot config",
            )
        link = self.link
        if link is None:
            raise SafetyFault("enable() before connect()", fix="connect the robot first")
        estop = self.ros.estop
        with self._estop_lock:
            was_latched, self._estop_latched = self._estop_latched, False
            try:
                if estop is not None and estop.type == "std_msgs/Bool":
                    link.publish(estop.topic, {"data": False})
                result = link.call_service(self.ros.enable.topic, self.ros.enable.type)
                if not result.get("success", False):
                    raise SafetyFault(
                        f"{self.ros.enable.topic} refused to enable: {result}",
                        fix="clear the fault on the robot first",
                    )
            except BaseException:
                if was_latched:
                    self._estop_latched, self._estop_due = True, "re-latched: enable failed"
                    self._wake.set()
                raise
            self._estop_trigger_ok = False
            self._estop_reported = ""
        if was_latched:
            log.warning("robot e-stop cleared by %s: %s", self.ros.enable.topic, result)
        return result

    def estop(self) -> None:
        """Latch the robot's e-stop (Bool topic or Trigger service), send it now, and hold.

        The e-stop stays latched, and is re-sent (at once after every reconnect, else every
        :attr:`estop_resend_s`), until the robot acknowledges it; only :meth:`enable` clears it.
        """
        cfg = self.ros.estop
        if cfg is None:
            log.error(
                "robot %r has no e-stop configured (ros.estop): holding position only",
                self.config.name,
            )
        else:
            with self._estop_lock:
                self._estop_latched = True
                self._estop_trigger_ok = False
                link = self.link
                if link is None:
                    log.error("robot e-stop latched but NOT sent: not connected; sent on connect")
                elif cfg.type != "std_msgs/Bool" and in_reactor_thread():
                    self._estop_due = "fired"  # a service call here would deadlock: keeper's job
                    self._wake.set()
                else:
                    try:
                        self._send_estop(link, "fired")
                    except Exception as exc:  # latched all the same; the keeper retries
                        log.error("robot e-stop on %s failed: %s; latched", cfg.topic, exc)
        try:
            self.stop()
        except Exception as exc:
            log.error("hold after e-stop failed: %s", exc)
