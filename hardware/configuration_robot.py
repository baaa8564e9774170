"""Per-robot configuration: joints, kinematics, safety limits and the ROS interface.

A robot is described by one YAML file (see ``hardware/configs/sim_arm.yaml``)::

    name: sim_arm
    control_rate_hz: 20
    joints:
      - {name: pan, lower_rad: -2.5, upper_rad: 2.5, max_velocity_rad_s: 1.5}
    kinematics: {base_m: [0, 0, 0.1], links: [{axis: z, offset_m: [0, 0, 0.3]}]}
    safety: {max_step_rad: 0.1, stale_state_ms: 250, workspace: {low_m: [...], high_m: [...]}}
    ros: {url: "rosbridge://127.0.0.1:9090", command: {topic: /arm/command, ...}}

Every dataclass validates itself in ``__post_init__``: each value must be a finite number of
the right type (``.inf`` would switch a safety rule off; a bool is not a number), each name a
non-empty string. Errors are :class:`~embodied.errors.ConfigError` naming the full dotted key
(``joints[2].max_velocity_rad_s``, ``ros.link_timeout_ms``), the bad value and the fix.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
from collections.abc import Mapping, Sequence
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

from embodied.errors import ConfigError

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
"""Folder of the robot configs shipped with the package."""

DEFAULT_CONFIG = CONFIG_DIR / "sim_arm.yaml"
"""The config used for ``--robot rosbridge://host:port`` and the ROS test graph."""

STATE_TYPES = ("sensor_msgs/JointState",)
COMMAND_TYPES = (
    "trajectory_msgs/JointTrajectory",
    "std_msgs/Float64MultiArray",
    "geometry_msgs/Twist",
)
CAMERA_TYPES = ("sensor_msgs/Image", "sensor_msgs/CompressedImage")
CAMERA_COMPRESSIONS = ("cbor", "cbor-raw", "none", "png")
"""Values of ``ros.camera_compression`` (the rosbridge subscribe op's ``compression``)."""
ESTOP_TYPES = ("std_msgs/Bool", "std_srvs/Trigger")
ESTOP_STATE_TYPES = ("std_msgs/Bool",)
ENABLE_TYPES = ("std_srvs/Trigger",)

_T = TypeVar("_T")

_EXAMPLE = "hardware/configs/sim_arm.yaml"


def _key(where: str, name: str) -> str:
    """Dotted key of field ``name`` inside the section at ``where`` (``""`` is the root)."""
    return f"{where}.{name}" if where else name


def _number(
    key: str,
    value: object,
    unit: str,
    example: float,
    *,
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
) -> float:
    """``value`` as a float after checking it is a finite real number within the bounds.

    A limit of ``.inf`` would silently switch its safety rule off, so non-finite values are
    refused everywhere, not only where a bound is given. ``bool`` is an ``int`` in Python but a
    YAML ``true`` here is a typo, so it is refused too.

    Args:
        key: Dotted key named in the error, e.g. ``joints[2].max_velocity_rad_s``.
        value: The value read from the config.
        unit: Unit named in the error, e.g. ``rad/s``.
        example: A valid value named in the fix.
        gt: Exclusive lower bound.
        ge: Inclusive lower bound.
        le: Inclusive upper bound.

    Raises:
        ConfigError: naming ``key``, ``value`` and the valid range.
    """
    rule = " and ".join(
        f"{op} {bound:g}" for op, bound in ((">", gt), (">=", ge), ("<=", le)) if bound is not None
    )
    want = f"a finite number{' ' + rule if rule else ''} ({unit}), e.g. {example:g}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(
            f"{key} {value!r} is not a number (got {type(value).__name__})",
            fix=f"set {key} to {want}",
        )
    try:
        number = float(value)
    except OverflowError:  # an int literal too large for a float
        number = math.inf
    if not math.isfinite(number):
        raise ConfigError(f"{key} {value!r} is not finite", fix=f"set {key} to {want}")
    if (
        (gt is not None and not number > gt)
        or (ge is not None and not number >= ge)
        or (le is not None and not number <= le)
    ):
        raise ConfigError(f"{key} {value!r} must be {rule} ({unit})", fix=f"set {key} to {want}")
    return number


def _integer(key: str, value: object, unit: str, example: int, *, gt: int) -> int:
    """``value`` checked to be an ``int`` (not a bool, not a float) greater than ``gt``."""
    want = f"a whole number > {gt} ({unit}), e.g. {example}"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigError(
            f"{key} {value!r} is not a whole number (got {type(value).__name__})",
            fix=f"set {key} to {want}",
        )
    number = int(value)
    if not number > gt:
        raise ConfigError(f"{key} {value!r} must be > {gt} ({unit})", fix=f"set {key} to {want}")
    return number


def _sequence(key: str, value: object, length: int | None, what: str) -> Sequence[Any]:
    """``value`` checked to be a list (of ``length`` entries when given); strings are refused."""
    size = "a list" if length is None else f"a list of {length} entries"
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
        raise ConfigError(
            f"{key} {value!r} is not a list (got {type(value).__name__})",
            fix=f"write {key} as {size}: {what}",
        )
    if length is not None and len(value) != length:
        raise ConfigError(
            f"{key} {list(value)!r} has {len(value)} entr{'y' if len(value) == 1 else 'ies'}, "
            f"not {length}",
            fix=f"write {key} as {size}: {what}",
        )
    return value


def _vector(key: str, value: object, length: int | None, unit: str, what: str) -> tuple[float, ...]:
    """``value`` as a tuple of finite floats (``length`` of them when given)."""
    items = _sequence(key, value, length, what)
    return tuple(_number(f"{key}[{i}]", x, unit, 0.0) for i, x in enumerate(items))


def _name(key: str, value: object, example: str) -> str:
    """``value`` checked to be a non-empty string without surrounding whitespace."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(
            f"{key} {value!r} is not a non-empty string (got {type(value).__name__})",
            fix=f"set {key} to a name, e.g. {example}",
        )
    if value != value.strip():
        raise ConfigError(
            f"{key} {value!r} has surrounding whitespace", fix=f"write it as {value.strip()!r}"
        )
    return value


def _flag(key: str, value: object) -> bool:
    """``value`` checked to be a YAML boolean (``true``/``false``), not ``1`` or ``"yes"``."""
    if not isinstance(value, bool):
        raise ConfigError(
            f"{key} {value!r} is not a boolean (got {type(value).__name__})",
            fix=f"set {key} to true or false",
        )
    return value


def _section(key: str, value: object, cls: type) -> None:
    """Check that a nested section was built as ``cls`` (direct construction skips ``_build``)."""
    if not isinstance(value, cls):
        raise ConfigError(
            f"{key} {value!r} is not a {cls.__name__}",
            fix=f"give {key} as a mapping of its keys, as in {_EXAMPLE}",
        )


def _set(obj: object, name: str, value: object) -> None:
    """Store a normalised value on a frozen dataclass (e.g. a list as a tuple, an int as float)."""
    object.__setattr__(obj, name, value)


@dataclass(frozen=True)
class JointConfig:
    """One actuated joint.

    Args:
        name: Joint name as it appears in ``sensor_msgs/JointState.name``.
        lower_rad: Lower position limit (rad), finite.
        upper_rad: Upper position limit (rad), finite, above ``lower_rad``.
        max_velocity_rad_s: Velocity limit (rad/s), finite and > 0, applied to the velocity a
            target implies.
        where: Dotted key of this joint in the robot config (``joints[2]``), used in errors.
    """

    name: str
    lower_rad: float
    upper_rad: float
    max_velocity_rad_s: float = 1.0
    where: InitVar[str] = "joint"

    def __post_init__(self, where: str) -> None:
        _name(_key(where, "name"), self.name, "shoulder_pan")
        lower = _number(_key(where, "lower_rad"), self.lower_rad, "rad", -1.5)
        upper = _number(_key(where, "upper_rad"), self.upper_rad, "rad", 1.5)
        if not lower < upper:
            raise ConfigError(
                f"{_key(where, 'lower_rad')} {self.lower_rad!r} >= upper_rad {self.upper_rad!r} "
                f"(joint {self.name!r})",
                fix=f"set {_key(where, 'lower_rad')} < {_key(where, 'upper_rad')} (rad)",
            )
        velocity = _number(
            _key(where, "max_velocity_rad_s"), self.max_velocity_rad_s, "rad/s", 1.5, gt=0
        )
        _set(self, "lower_rad", lower)
        _set(self, "upper_rad", upper)
        _set(self, "max_velocity_rad_s", velocity)


@dataclass(frozen=True)
class LinkConfig:
    """One revolute joint of a serial chain: rotate about ``axis``, then translate ``offset_m``.

    Args:
        axis: Rotation axis in the link frame, ``"x"``, ``"y"`` or ``"z"``.
        offset_m: Translation (m) from this joint to the next (or to the end effector).
        where: Dotted key of this link in the robot config (``kinematics.links[1]``).
    """

    axis: str
    offset_m: tuple[float, float, float]
    where: InitVar[str] = "link"

    def __post_init__(self, where: str) -> None:
        if not isinstance(self.axis, str) or self.axis not in ("x", "y", "z"):
            raise ConfigError(
                f"{_key(where, 'axis')} {self.axis!r} is not one of x, y, z",
                fix=f"set {_key(where, 'axis')} to x, y or z",
            )
        _set(self, "offset_m", _vector(_key(where, "offset_m"), self.offset_m, 3, "m", "[x, y, z]"))


@dataclass(frozen=True)
class KinematicsConfig:
    """Forward kinematics of a serial chain (one link per joint, in joint order).

    Args:
        base_m: Position (m) of the first joint in the world frame.
        links: One :class:`LinkConfig` per joint.
        where: Dotted key of this section in the robot config.
    """

    base_m: tuple[float, float, float] = (0.0, 0.0, 0.0)
    links: tuple[LinkConfig, ...] = ()
    where: InitVar[str] = "kinematics"

    def __post_init__(self, where: str) -> None:
        _set(self, "base_m", _vector(_key(where, "base_m"), self.base_m, 3, "m", "[x, y, z]"))
        key = _key(where, "links")
        links = tuple(_sequence(key, self.links, None, "one {axis, offset_m} per joint"))
        for i, link in enumerate(links):
            _section(f"{key}[{i}]", link, LinkConfig)
        _set(self, "links", links)


@dataclass(frozen=True)
class WorkspaceConfig:
    """Axis-aligned box (m, world frame) the end effector must stay inside.

    Args:
        low_m: Lower corner (min x, y, z) (m), finite.
        high_m: Upper corner (max x, y, z) (m), finite, above ``low_m`` on every axis.
        where: Dotted key of this section in the robot config.
    """

    low_m: tuple[float, float, float]
    high_m: tuple[float, float, float]
    where: InitVar[str] = "safety.workspace"

    def __post_init__(self, where: str) -> None:
        low = _vector(_key(where, "low_m"), self.low_m, 3, "m", "[min x, min y, min z]")
        high = _vector(_key(where, "high_m"), self.high_m, 3, "m", "[max x, max y, max z]")
        if any(lo >= hi for lo, hi in zip(low, high, strict=True)):
            raise ConfigError(
                f"{_key(where, 'low_m')} {low!r} is not below {_key(where, 'high_m')} {high!r} "
                "on every axis",
                fix="give the box corners as low (min x, y, z) and high (max x, y, z)",
            )
        _set(self, "low_m", low)
        _set(self, "high_m", high)


@dataclass(frozen=True)
class SafetyConfig:
    """Rules of :class:`hardware.safety.SafetyFilter`.

    Every limit must be finite: ``.inf`` would switch its rule off.

    Args:
        max_step_rad: Largest change of a joint target relative to the measured position per
            control step (rad), > 0. Larger steps are clipped.
        stale_state_ms: State older than this (ms, > 0) while the link is up stops commanding
            and raises ``SafetyFault``.
        workspace: Optional end-effector box; needs ``kinematics`` in the robot config.
        velocity_margin: Fraction (0, 1] of each joint's ``max_velocity_rad_s`` allowed.
        where: Dotted key of this section in the robot config.
    """

    max_step_rad: float = 0.2
    stale_state_ms: float = 250.0
    workspace: WorkspaceConfig | None = None
    velocity_margin: float = 1.0
    where: InitVar[str] = "safety"

    def __post_init__(self, where: str) -> None:
        _set(
            self,
            "max_step_rad",
            _number(_key(where, "max_step_rad"), self.max_step_rad, "rad", 0.15, gt=0),
        )
        _set(
            self,
            "stale_state_ms",
            _number(_key(where, "stale_state_ms"), self.stale_state_ms, "ms", 250, gt=0),
        )
        if self.workspace is not None:
            _section(_key(where, "workspace"), self.workspace, WorkspaceConfig)
        _set(
            self,
            "velocity_margin",
            _number(
                _key(where, "velocity_margin"), self.velocity_margin, "fraction", 1, gt=0, le=1
            ),
        )


@dataclass(frozen=True)
class TopicConfig:
    """A ROS topic (or service, for ``std_srvs/Trigger``) and its message type.

    Args:
        topic: Absolute ROS name, e.g. ``/arm/command``.
        type: Message (or service) type ``package/Type``.
        where: Dotted key of this section in the robot config (``ros.command``).
    """

    topic: str
    type: str
    where: InitVar[str] = "topic"

    def __post_init__(self, where: str) -> None:
        key = _key(where, "topic")
        _name(key, self.topic, "/arm/command")
        if not self.topic.startswith("/") or self.topic == "/":
            raise ConfigError(
                f"{key} {self.topic!r}: ROS name is not absolute",
                fix=f"write it as '/{self.topic.lstrip('/') or 'name'}'",
            )
        key = _key(where, "type")
        _name(key, self.type, "package/Type")
        if self.type.count("/") != 1 or not all(self.type.split("/")):
            raise ConfigError(
                f"{key} {self.type!r}: ROS type is not 'package/Type'",
                fix="e.g. sensor_msgs/JointState",
            )

    def check_type(self, allowed: Sequence[str], what: str) -> None:
        """Raise unless :attr:`type` is one of ``allowed``; ``what`` is the section's dotted key."""
        if self.type not in allowed:
            raise ConfigError(
                f"{what}.type {self.type!r} is not supported", fix=f"use one of {list(allowed)}"
            )


@dataclass(frozen=True)
class RosConfig:
    """How to reach the robot through rosbridge (v2 protocol).

    Every duration must be finite and > 0.

    Args:
        url: ``rosbridge://host:port`` (or ``ws://host:port``).
        ros_version: 1 or 2 (stamps as ``secs/nsecs`` or ``sec/nanosec``).
        state: Joint state topic.
        command: Command topic; the action space follows its type.
        camera: Optional camera topic (``sensor_msgs/Image`` with an 8-bit ``rgb8``, ``bgr8``,
            ``rgba8``, ``bgra8`` or ``mono8`` encoding, or ``sensor_msgs/CompressedImage``),
            observed as ``image.<name>``.
        camera_name: Name of that camera in observations.
        camera_size: (height, width) the camera images are resized to (pixels, > 0).
        camera_compression: How rosbridge_server sends the camera topic (the subscribe op's
            ``compression``): ``cbor`` (default; binary frame, image bytes as they are),
            ``cbor-raw`` (binary frame, the ROS 1 serialized message; ROS 1 only: a ROS 2
            server sends CDR, not parsed here), ``none`` (JSON, image bytes as base64) or
            ``png`` (the JSON packed in a PNG). 640x480 rgb8 at 30 Hz with rosbridge_server
            0.11.17 (``embodied bench ros``): cbor-raw and cbor 30 frames/s at 3-4 ms (p50;
            200-360 frames/s when the node publishes flat out), none 30 frames/s at 16 ms
            (~60 frames/s at most), png ~20 frames/s at ~90 ms. ``cbor`` is the default, not
            the marginally faster ``cbor-raw``: the server shares one ROS subscriber per topic
            among its clients, and a ``cbor-raw`` one and a typed one (any other mode, e.g. a
            web viewer's JSON) exclude each other - whichever subscribes second gets no frames.
        camera_throttle_rate_ms: The server sends at most one camera frame per this many ms
            (whole number >= 0; 0: every frame).
        camera_queue_length: Camera frames the server buffers while throttling (whole number
            >= 0; 0: drop). It sends the oldest buffered frame next, so keep 1 (the newest)
            for a control loop.
        estop: Optional e-stop: a ``std_msgs/Bool`` topic or a ``std_srvs/Trigger`` service.
        estop_state: Optional ``std_msgs/Bool`` topic on which the robot reports its e-stop
            (true while latched): it acknowledges our e-stop, which is re-sent until it does.
        enable: Optional ``std_srvs/Trigger`` service that clears a latched robot e-stop
            (``embodied deploy --clear-estop``, :meth:`Robot.enable`).
        enable_on_connect: Call ``enable`` on every connect. Off by default: an e-stop stays
            latched until an operator clears it explicitly.
        link_timeout_ms: No state for this long (ms) marks the link stale: commands stop.
        connect_timeout_s: How long :meth:`connect` waits for the first state (s).
        resend_window_s: How long (s) the driver re-sends the newest target until a joint
            state confirms it (a ROS 1 subscriber connects some time after ``advertise`` and
            misses what came before). Also the longest a hung control loop keeps the robot
            heading for its last target before the robot's stale-command stop applies.
        reconnect_initial_s: First reconnect delay (s), at most ``reconnect_max_s``; grows by
            ``reconnect_factor``.
        reconnect_max_s: Largest reconnect delay (s).
        reconnect_factor: Backoff growth per failed attempt (>= 1).
        reconnect_grace_s: A disconnect longer than this (s) ends the episode with a fault.
        where: Dotted key of this section in the robot config.
    """

    url: str = "rosbridge://127.0.0.1:9090"
    ros_version: int = 1
    state: TopicConfig = TopicConfig("/joint_states", "sensor_msgs/JointState", "ros.state")
    command: TopicConfig = TopicConfig(
        "/arm/command", "trajectory_msgs/JointTrajectory", "ros.command"
    )
    camera: TopicConfig | None = None
    camera_name: str = "wrist"
    camera_size: tuple[int, int] = (96, 96)
    camera_compression: str = "cbor"
    camera_throttle_rate_ms: int = 0
    camera_queue_length: int = 1
    estop: TopicConfig | None = None
    estop_state: TopicConfig | None = None
    enable: TopicConfig | None = None
    enable_on_connect: bool = False
    link_timeout_ms: float = 100.0
    connect_timeout_s: float = 10.0
    resend_window_s: float = 2.0
    reconnect_initial_s: float = 0.1
    reconnect_max_s: float = 2.0
    reconnect_factor: float = 2.0
    reconnect_grace_s: float = 10.0
    where: InitVar[str] = "ros"

    def __post_init__(self, where: str) -> None:
        _name(_key(where, "url"), self.url, "rosbridge://127.0.0.1:9090")
        self.host_port()  # validates the url
        key = _key(where, "ros_version")
        # 1.0 == 1 and True == 1 in Python, but a version is a whole number
        version = self.ros_version
        if (
            isinstance(version, bool)
            or not isinstance(version, numbers.Integral)
            or version not in (1, 2)
        ):
            raise ConfigError(f"{key} {version!r} must be 1 or 2", fix=f"set {key}: 1 or 2")
        _set(self, "ros_version", int(version))
        for name, allowed, optional in (
            ("state", STATE_TYPES, False),
            ("command", COMMAND_TYPES, False),
            ("camera", CAMERA_TYPES, True),
            ("estop", ESTOP_TYPES, True),
            ("estop_state", ESTOP_STATE_TYPES, True),
            ("enable", ENABLE_TYPES, True),
        ):
            topic = getattr(self, name)
            if topic is None and optional:
                continue
            _section(_key(where, name), topic, TopicConfig)
            topic.check_type(allowed, _key(where, name))
        _name(_key(where, "camera_name"), self.camera_name, "wrist")
        key = _key(where, "camera_size")
        size = _sequence(key, self.camera_size, 2, "[height, width] in pixels")
        _set(
            self,
            "camera_size",
            tuple(_integer(f"{key}[{i}]", x, "pixels", 96, gt=0) for i, x in enumerate(size)),
        )
        key = _key(where, "camera_compression")
        if self.camera_compression not in CAMERA_COMPRESSIONS:
            raise ConfigError(
                f"{key} {self.camera_compression!r} is not supported",
                fix=f"use one of {list(CAMERA_COMPRESSIONS)}",
            )
        if self.camera_compression == "cbor-raw" and self.ros_version != 1:
            raise ConfigError(
                f"{key} 'cbor-raw' carries the ROS 1 wire form; ros_version is 2",
                fix=f"set {key}: cbor",
            )
        for name, unit, example in (
            ("camera_throttle_rate_ms", "ms", 100),
            ("camera_queue_length", "frames", 1),
        ):
            _set(self, name, _integer(_key(where, name), getattr(self, name), unit, example, gt=-1))
        _flag(_key(where, "enable_on_connect"), self.enable_on_connect)
        for name, unit, example in (
            ("link_timeout_ms", "ms", 100),
            ("connect_timeout_s", "s", 10),
            ("resend_window_s", "s", 2),
            ("reconnect_initial_s", "s", 0.1),
            ("reconnect_max_s", "s", 1),
            ("reconnect_grace_s", "s", 10),
        ):
            _set(self, name, _number(_key(where, name), getattr(self, name), unit, example, gt=0))
        _set(
            self,
            "reconnect_factor",
            _number(_key(where, "reconnect_factor"), self.reconnect_factor, "factor", 2, ge=1),
        )
        if self.reconnect_initial_s > self.reconnect_max_s:
            raise ConfigError(
                f"{_key(where, 'reconnect_initial_s')} {self.reconnect_initial_s!r} is above "
                f"{_key(where, 'reconnect_max_s')} {self.reconnect_max_s!r}",
                fix="the first reconnect delay must not exceed the largest one (s)",
            )

    def host_port(self) -> tuple[str, int]:
        """(host, port) parsed from :attr:`url`."""
        try:
            parsed = urlparse(self.url)
            scheme, host, port = parsed.scheme, parsed.hostname, parsed.port
        except ValueError:  # a malformed IPv6 host, a port that is not a number or out of range
            scheme, host, port = "", None, None
        if scheme not in ("rosbridge", "ws") or not host or not port:
            raise ConfigError(
                f"ros.url {self.url!r} is not rosbridge://host:port",
                fix="e.g. rosbridge://127.0.0.1:9090",
            )
        return host, port


@dataclass(frozen=True)
class RobotConfig:
    """One robot: joints with limits, optional kinematics, safety rules and ROS interface.

    Args:
        name: Robot name (used as env id ``robot:<name>``).
        joints: Actuated joints in action order (at least one, unique names).
        control_rate_hz: Default control rate (Hz, > 0) of the deploy loop.
        kinematics: Optional forward kinematics (needed by the workspace box).
        safety: Safety filter rules.
        ros: ROS interface (ignored by the simulated robot).
        home_rad: Initial joint positions (rad) of the simulated robot; default mid-range.
        command_timeout_ms: Robot-side behaviour (documented, and what the simulated robot and
            the ROS sim node do): commands older than this (ms, > 0) are stale and the robot
            holds its measured position with zero velocity.
        where: Dotted key of the robot in its file; ``""`` (keys are named from the root).
    """

    name: str
    joints: tuple[JointConfig, ...]
    control_rate_hz: float = 20.0
    kinematics: KinematicsConfig | None = None
    safety: SafetyConfig = field(default_factory=SafetyConfig)
    ros: RosConfig = field(default_factory=RosConfig)
    home_rad: tuple[float, ...] | None = None
    command_timeout_ms: float = 200.0
    where: InitVar[str] = ""

    def __post_init__(self, where: str) -> None:
        _name(_key(where, "name"), self.name, "sim_arm")
        key = _key(where, "joints")
        joints = tuple(
            _sequence(key, self.joints, None, "one {name, lower_rad, upper_rad, ...} per joint")
        )
        if not joints:
            raise ConfigError(
                f"{key} [] of robot {self.name!r} is empty",
                fix=f"list the joints, as in {_EXAMPLE}",
            )
        for i, joint in enumerate(joints):
            _section(f"{key}[{i}]", joint, JointConfig)
        _set(self, "joints", joints)
        names = [j.name for j in joints]
        if len(set(names)) != len(names):
            raise ConfigError(
                f"{key} of robot {self.name!r} has duplicate names {names}",
                fix="give every joint its own JointState name",
            )
        _set(
            self,
            "control_rate_hz",
            _number(_key(where, "control_rate_hz"), self.control_rate_hz, "Hz", 20, gt=0),
        )
        if self.kinematics is not None:
            _section(_key(where, "kinematics"), self.kinematics, KinematicsConfig)
            if len(self.kinematics.links) != len(joints):
                raise ConfigError(
                    f"{_key(where, 'kinematics.links')} has {len(self.kinematics.links)} links "
                    f"but the robot has {len(joints)} joints",
                    fix="give one link per joint, in joint order",
                )
        _section(_key(where, "safety"), self.safety, SafetyConfig)
        _section(_key(where, "ros"), self.ros, RosConfig)
        if self.safety.workspace is not None and self.kinematics is None:
            raise ConfigError(
                f"{_key(where, 'safety.workspace')} needs forward kinematics",
                fix="add a kinematics: section (or drop safety.workspace)",
            )
        key = _key(where, "home_rad")
        if self.home_rad is None:
            home = tuple((j.lower_rad + j.upper_rad) / 2 for j in joints)
        else:
            home = _vector(key, self.home_rad, len(joints), "rad", "one position per joint")
        for i, (j, q) in enumerate(zip(joints, home, strict=True)):
            if not j.lower_rad <= q <= j.upper_rad:
                raise ConfigError(
                    f"{key}[{i}] {q!r} of joint {j.name!r} is outside its limits "
                    f"[{j.lower_rad:g}, {j.upper_rad:g}] rad",
                    fix=f"set {key}[{i}] within the joint's limits",
                )
        _set(self, "home_rad", home)
        _set(
            self,
            "command_timeout_ms",
            _number(_key(where, "command_timeout_ms"), self.command_timeout_ms, "ms", 200, gt=0),
        )
        if self.ros.command.type == "geometry_msgs/Twist":
            raise ConfigError(
                f"{_key(where, 'ros.command.type')} 'geometry_msgs/Twist': Twist commands drive a "
                f"mobile base, not this joint-space robot {self.name!r}",
                fix="use trajectory_msgs/JointTrajectory or std_msgs/Float64MultiArray here",
            )

    @property
    def joint_names(self) -> tuple[str, ...]:
        """Joint names in action order."""
        return tuple(j.name for j in self.joints)

    def with_url(self, url: str) -> RobotConfig:
        """A copy whose ROS interface points at ``url`` (``rosbridge://host:port``)."""
        return dataclasses.replace(self, ros=dataclasses.replace(self.ros, url=url))


_SECTIONS: dict[str, type] = {
    "workspace": WorkspaceConfig,
    "safety": SafetyConfig,
    "ros": RosConfig,
    "kinematics": KinematicsConfig,
    "state": TopicConfig,
    "command": TopicConfig,
    "camera": TopicConfig,
    "estop": TopicConfig,
    "estop_state": TopicConfig,
    "enable": TopicConfig,
}
"""Keys whose value is a nested section, and the dataclass it is built as."""

_ITEMS: dict[str, type] = {"joints": JointConfig, "links": LinkConfig}
"""Keys whose value is a list of sections, and the dataclass each item is built as."""


def _build(cls: type[_T], data: Any, where: str) -> _T:
    """Build dataclass ``cls`` from a mapping at dotted key ``where`` (``""`` is the root).

    Unknown and missing keys and malformed sections are reported here; the values are then
    checked by the dataclass itself, which names them under ``where``.
    """
    if isinstance(data, cls):
        return data
    what = where or "robot config"
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{what} {data!r} is not a mapping (got {type(data).__name__})",
            fix=f"write {what} as key: value pairs, as in {_EXAMPLE}",
        )
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(map(str, set(data) - set(fields)))
    if unknown:
        raise ConfigError(
            f"{what}: unknown key(s) {unknown}", fix=f"valid keys are {sorted(fields)}"
        )
    missing = sorted(
        name
        for name, f in fields.items()
        if name not in data
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    )
    if missing:
        raise ConfigError(f"{what}: missing key(s) {missing}", fix=f"add them, as in {_EXAMPLE}")
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        sub = _key(where, key)
        if key in _SECTIONS:
            # only optional sections (default None) may be null; `safety:` left empty is a typo
            if value is None and fields[key].default is not None:
                raise ConfigError(
                    f"{sub} None is empty (YAML null), not a mapping",
                    fix=f"give {sub} its keys, or delete the line for the defaults",
                )
            kwargs[key] = None if value is None else _build(_SECTIONS[key], value, sub)
        elif key in _ITEMS:
            items = _sequence(sub, value, None, f"one mapping per item, as in {_EXAMPLE}")
            kwargs[key] = tuple(
                _build(_ITEMS[key], item, f"{sub}[{i}]") for i, item in enumerate(items)
            )
        else:
            kwargs[key] = value
    kwargs["where"] = where
    return cls(**kwargs)


def robot_config_from_dict(data: Mapping[str, Any]) -> RobotConfig:
    """Build and validate a :class:`RobotConfig` from a plain mapping (parsed YAML)."""
    return _build(RobotConfig, data, "")


def load_robot_config(path: str | os.PathLike[str]) -> RobotConfig:
    """Load a robot config YAML file.

    Raises:
        ConfigError: the file is missing, not YAML, or a value is invalid (naming it).
    """
    import yaml

    p = Path(path)
    if not p.is_file():
        raise ConfigError(
            f"robot config {str(p)!r} does not exist",
            fix=f"pass a YAML file like {DEFAULT_CONFIG} or rosbridge://host:port",
        )
    try:
        data = yaml.safe_load(p.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"robot config {str(p)!r} is not valid YAML: {exc}",
            fix="fix the file (compare hardware/configs/sim_arm.yaml)",
        ) from exc
    try:
        return robot_config_from_dict(data)
    except ConfigError as exc:  # name the file: the key alone does not say which robot
        raise exc.in_file(p, "robot config") from None


def resolve_robot(spec: str) -> RobotConfig:
    """A config from a YAML path or ``rosbridge://host:port`` (default config, that URL)."""
    if spec.startswith(("rosbridge://", "ws://")):
        return load_robot_config(DEFAULT_CONFIG).with_url(spec)
    return load_robot_config(spec)
