"""Per-robot configuration: joints, kinematics, safety limits and the ROS interface.

A robot is described by one YAML file (see ``hardware/configs/sim_arm.yaml``)::

    name: sim_arm
    control_rate_hz: 20
    joints:
      - {name: pan, lower_rad: -2.5, upper_rad: 2.5, max_velocity_rad_s: 1.5}
    kinematics: {base_m: [0, 0, 0.1], links: [{axis: z, offset_m: [0, 0, 0.3]}]}
    safety: {max_step_rad: 0.1, stale_state_ms: 250, workspace: {low_m: [...], high_m: [...]}}
    ros: {url: "rosbridge://127.0.0.1:9090", command: {topic: /arm/command, ...}}

Every dataclass declares its checks with :mod:`embodied.config` (``checked`` fields and
``Rule`` objects) and validates itself in ``__post_init__`` under its dotted key in the file:
each value must be a finite number of the right type (``.inf`` would switch a safety rule off;
a bool is not a number), each name a non-empty string. Errors are
:class:`~embodied.errors.ConfigError` naming the full dotted key
(``joints[2].max_velocity_rad_s``, ``ros.link_timeout_ms``), the bad value and the fix.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import InitVar, dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar
from urllib.parse import urlparse

from embodied.config import Rule, checked, validate
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
_ROBOT = "robot config"


def _key(where: str, name: str) -> str:
    """Dotted key of field ``name`` inside the section at ``where`` (``""`` is the root)."""
    return f"{where}.{name}" if where else name


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


def _set(obj: object, name: str, value: object) -> None:
    """Store a normalised value on a frozen dataclass (e.g. a list as a tuple, an int as float)."""
    object.__setattr__(obj, name, value)


def _floats(obj: object, *names: str) -> None:
    """Store the (validated) numbers ``names`` of ``obj`` as floats, vectors as float tuples."""
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, tuple | list):
            _set(obj, name, tuple(float(x) for x in value))
        elif value is not None:
            _set(obj, name, float(value))


def _number(example: float, unit: str, rule: str = "") -> str:
    """The fix of a number field: what it takes, in ``unit``, and an example."""
    return f"set a finite number{' ' + rule if rule else ''} ({unit}), e.g. {example:g}"


def _vector(what: str, unit: str) -> str:
    """The fix of a vector field: how many entries of what, in ``unit``."""
    return f"write it as a list of finite numbers ({unit}): {what}"


def _trimmed(key: str) -> Rule:
    """The rule that the name ``key`` has no surrounding whitespace."""
    return Rule(
        key,
        lambda c: getattr(c, key) == getattr(c, key).strip(),
        "has surrounding whitespace",
        "write it without leading or trailing spaces",
    )


def _topic_type(name: str, allowed: tuple[str, ...]) -> Rule:
    """The rule that the topic ``name`` of a :class:`RosConfig` (if set) has an allowed type."""
    return Rule(
        f"{name}.type",
        lambda c: getattr(c, name) is None or getattr(c, name).type in allowed,
        "is not supported",
        f"use one of {list(allowed)}",
    )


def _url_ok(url: str) -> bool:
    """Whether ``url`` is ``rosbridge://host:port`` (or ``ws://host:port``)."""
    try:
        parsed = urlparse(url)
        scheme, host, port = parsed.scheme, parsed.hostname, parsed.port
    except ValueError:  # a malformed IPv6 host, a port that is not a number or out of range
        return False
    return scheme in ("rosbridge", "ws") and bool(host) and bool(port)


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

    config_name: ClassVar[str] = _ROBOT

    name: str = checked(min_len=1, fix="set it to a name, e.g. shoulder_pan")
    lower_rad: float = checked(fix=_number(-1.5, "rad"))
    upper_rad: float = checked(fix=_number(1.5, "rad"))
    max_velocity_rad_s: float = checked(1.0, gt=0, fix=_number(1.5, "rad/s", "> 0"))
    where: InitVar[str] = "joint"

    rules: ClassVar[tuple[Rule, ...]] = (
        _trimmed("name"),
        Rule(
            "lower_rad",
            lambda c: c.lower_rad < c.upper_rad,
            "is not below {_prefix}upper_rad={upper_rad!r} (joint {name!r})",
            "set lower_rad < upper_rad (rad)",
        ),
    )

    def __post_init__(self, where: str) -> None:
        validate(self, where)
        _floats(self, "lower_rad", "upper_rad", "max_velocity_rad_s")


@dataclass(frozen=True)
class LinkConfig:
    """One revolute joint of a serial chain: rotate about ``axis``, then translate ``offset_m``.

    Args:
        axis: Rotation axis in the link frame, ``"x"``, ``"y"`` or ``"z"``.
        offset_m: Translation (m) from this joint to the next (or to the end effector).
        where: Dotted key of this link in the robot config (``kinematics.links[1]``).
    """

    config_name: ClassVar[str] = _ROBOT

    axis: str = checked(choices=("x", "y", "z"), fix="set it to x, y or z")
    offset_m: tuple[float, float, float] = checked(
        min_len=3, max_len=3, fix=_vector("[x, y, z]", "m")
    )
    where: InitVar[str] = "link"

    def __post_init__(self, where: str) -> None:
        validate(self, where)
        _floats(self, "offset_m")


@dataclass(frozen=True)
class KinematicsConfig:
    """Forward kinematics of a serial chain (one link per joint, in joint order).

    Args:
        base_m: Position (m) of the first joint in the world frame.
        links: One :class:`LinkConfig` per joint.
        where: Dotted key of this section in the robot config.
    """

    config_name: ClassVar[str] = _ROBOT

    base_m: tuple[float, float, float] = checked(
        (0.0, 0.0, 0.0), min_len=3, max_len=3, fix=_vector("[x, y, z]", "m")
    )
    links: tuple[LinkConfig, ...] = checked(
        (), fix=f"give one {{axis, offset_m}} per joint, as in {_EXAMPLE}"
    )
    where: InitVar[str] = "kinematics"

    def __post_init__(self, where: str) -> None:
        validate(self, where)
        _floats(self, "base_m")
        _set(self, "links", tuple(self.links))


@dataclass(frozen=True)
class WorkspaceConfig:
    """Axis-aligned box (m, world frame) the end effector must stay inside.

    Args:
        low_m: Lower corner (min x, y, z) (m), finite.
        high_m: Upper corner (max x, y, z) (m), finite, above ``low_m`` on every axis.
        where: Dotted key of this section in the robot config.
    """

    config_name: ClassVar[str] = _ROBOT

    low_m: tuple[float, float, float] = checked(
        min_len=3, max_len=3, fix=_vector("[min x, min y, min z]", "m")
    )
    high_m: tuple[float, float, float] = checked(
        min_len=3, max_len=3, fix=_vector("[max x, max y, max z]", "m")
    )
    where: InitVar[str] = "safety.workspace"

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "low_m",
            lambda c: all(lo < hi for lo, hi in zip(c.low_m, c.high_m, strict=True)),
            "is not below high_m={high_m!r} on every axis",
            "give the box corners as low (min x, y, z) and high (max x, y, z)",
        ),
    )

    def __post_init__(self, where: str) -> None:
        validate(self, where)
        _floats(self, "low_m", "high_m")


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

    config_name: ClassVar[str] = _ROBOT

    max_step_rad: float = checked(0.2, gt=0, fix=_number(0.15, "rad", "> 0"))
    stale_state_ms: float = checked(250.0, gt=0, fix=_number(250, "ms", "> 0"))
    workspace: WorkspaceConfig | None = checked(
        None, fix=f"give it as a mapping of its keys, as in {_EXAMPLE}"
    )
    velocity_margin: float = checked(1.0, gt=0, le=1, fix=_number(1, "fraction", "> 0 and <= 1"))
    where: InitVar[str] = "safety"

    def __post_init__(self, where: str) -> None:
        validate(self, where)
        _floats(self, "max_step_rad", "stale_state_ms", "velocity_margin")


@dataclass(frozen=True)
class TopicConfig:
    """A ROS topic (or service, for ``std_srvs/Trigger``) and its message type.

    Args:
        topic: Absolute ROS name, e.g. ``/arm/command``.
        type: Message (or service) type ``package/Type``.
        where: Dotted key of this section in the robot config (``ros.command``).
    """

    config_name: ClassVar[str] = _ROBOT

    topic: str = checked(min_len=1, fix="set it to an absolute ROS name, e.g. /arm/command")
    type: str = checked(min_len=1, fix="set it to a ROS type, e.g. sensor_msgs/JointState")
    where: InitVar[str] = "topic"

    rules: ClassVar[tuple[Rule, ...]] = (
        _trimmed("topic"),
        Rule(
            "topic",
            lambda c: c.topic.startswith("/") and c.topic != "/",
            "is not absolute (a ROS name starts with '/')",
            lambda c: f"write it as '/{c.topic.lstrip('/') or 'name'}'",
        ),
        _trimmed("type"),
        Rule(
            "type",
            lambda c: c.type.count("/") == 1 and all(c.type.split("/")),
            "is not a ROS type 'package/Type'",
            "e.g. sensor_msgs/JointState",
        ),
    )

    def __post_init__(self, where: str) -> None:
        validate(self, where)

    def check_type(self, allowed: Sequence[str], what: str) -> None:
        """Raise unless :attr:`type` is one of ``allowed``; ``what`` is the section's dotted key."""
        if self.type not in allowed:
            raise ConfigError(
                f"{what}.type {self.type!r} is not supported", fix=f"use one of {list(allowed)}"
            )


_SECONDS = "> 0"
_TOPIC_FIX = f"give it as a mapping {{topic, type}}, as in {_EXAMPLE}"


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

    config_name: ClassVar[str] = _ROBOT

    url: str = checked(
        "rosbridge://127.0.0.1:9090", min_len=1, fix="e.g. rosbridge://127.0.0.1:9090"
    )
    ros_version: int = checked(1, choices=(1, 2), fix="set ros_version: 1 or 2")
    state: TopicConfig = checked(
        default_factory=lambda: TopicConfig("/joint_states", "sensor_msgs/JointState", "ros.state"),
        fix=_TOPIC_FIX,
    )
    command: TopicConfig = checked(
        default_factory=lambda: TopicConfig(
            "/arm/command", "trajectory_msgs/JointTrajectory", "ros.command"
        ),
        fix=_TOPIC_FIX,
    )
    camera: TopicConfig | None = checked(None, fix=_TOPIC_FIX)
    camera_name: str = checked("wrist", min_len=1, fix="set it to a name, e.g. wrist")
    camera_size: tuple[int, int] = checked(
        (96, 96),
        gt=0,
        min_len=2,
        max_len=2,
        fix="write it as [height, width] in pixels, e.g. [96, 96]",
    )
    camera_compression: str = checked(
        "cbor", choices=CAMERA_COMPRESSIONS, fix=f"use one of {list(CAMERA_COMPRESSIONS)}"
    )
    camera_throttle_rate_ms: int = checked(0, ge=0, fix="set a whole number >= 0 (ms), e.g. 100")
    camera_queue_length: int = checked(1, ge=0, fix="set a whole number >= 0 (frames), e.g. 1")
    estop: TopicConfig | None = checked(None, fix=_TOPIC_FIX)
    estop_state: TopicConfig | None = checked(None, fix=_TOPIC_FIX)
    enable: TopicConfig | None = checked(None, fix=_TOPIC_FIX)
    enable_on_connect: bool = checked(False, fix="set it to true or false")
    link_timeout_ms: float = checked(100.0, gt=0, fix=_number(100, "ms", _SECONDS))
    connect_timeout_s: float = checked(10.0, gt=0, fix=_number(10, "s", _SECONDS))
    resend_window_s: float = checked(2.0, gt=0, fix=_number(2, "s", _SECONDS))
    reconnect_initial_s: float = checked(0.1, gt=0, fix=_number(0.1, "s", _SECONDS))
    reconnect_max_s: float = checked(2.0, gt=0, fix=_number(1, "s", _SECONDS))
    reconnect_factor: float = checked(2.0, ge=1, fix=_number(2, "factor", ">= 1"))
    reconnect_grace_s: float = checked(10.0, gt=0, fix=_number(10, "s", _SECONDS))
    where: InitVar[str] = "ros"

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "url",
            lambda c: _url_ok(c.url),
            "is not rosbridge://host:port",
            "e.g. rosbridge://127.0.0.1:9090",
        ),
        _trimmed("url"),
        _topic_type("state", STATE_TYPES),
        _topic_type("command", COMMAND_TYPES),
        _topic_type("camera", CAMERA_TYPES),
        _topic_type("estop", ESTOP_TYPES),
        _topic_type("estop_state", ESTOP_STATE_TYPES),
        _topic_type("enable", ENABLE_TYPES),
        _trimmed("camera_name"),
        Rule(
            "camera_compression",
            lambda c: c.camera_compression != "cbor-raw" or c.ros_version == 1,
            "carries the ROS 1 wire form; ros_version is 2",
            "set camera_compression: cbor",
        ),
        Rule(
            "reconnect_initial_s",
            lambda c: c.reconnect_initial_s <= c.reconnect_max_s,
            "is above reconnect_max_s={reconnect_max_s!r}",
            "the first reconnect delay must not exceed the largest one (s)",
        ),
    )

    def __post_init__(self, where: str) -> None:
        validate(self, where)
        _set(self, "ros_version", int(self.ros_version))
        _set(self, "camera_size", tuple(int(x) for x in self.camera_size))
        _floats(
            self,
            "link_timeout_ms",
            "connect_timeout_s",
            "resend_window_s",
            "reconnect_initial_s",
            "reconnect_max_s",
            "reconnect_factor",
            "reconnect_grace_s",
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

    config_name: ClassVar[str] = _ROBOT

    name: str = checked(min_len=1, fix="set it to a name, e.g. sim_arm")
    joints: tuple[JointConfig, ...] = checked(
        min_len=1,
        fix=f"list the joints, one {{name, lower_rad, upper_rad, ...}} each, as in {_EXAMPLE}",
    )
    control_rate_hz: float = checked(20.0, gt=0, fix=_number(20, "Hz", "> 0"))
    kinematics: KinematicsConfig | None = checked(
        None, fix=f"give it as a mapping of its keys, as in {_EXAMPLE}"
    )
    safety: SafetyConfig = checked(
        default_factory=SafetyConfig, fix=f"give it as a mapping of its keys, as in {_EXAMPLE}"
    )
    ros: RosConfig = checked(
        default_factory=RosConfig, fix=f"give it as a mapping of its keys, as in {_EXAMPLE}"
    )
    home_rad: tuple[float, ...] | None = checked(
        None, fix="write it as a list of finite numbers (rad): one position per joint"
    )
    command_timeout_ms: float = checked(200.0, gt=0, fix=_number(200, "ms", "> 0"))
    where: InitVar[str] = ""

    rules: ClassVar[tuple[Rule, ...]] = (
        _trimmed("name"),
        Rule(
            "joints",
            lambda c: len({j.name for j in c.joints}) == len(c.joints),
            lambda c: f"of robot {c.name!r} has duplicate names {[j.name for j in c.joints]}",
            "give every joint its own JointState name",
        ),
        Rule(
            "kinematics.links",
            lambda c: c.kinematics is None or len(c.kinematics.links) == len(c.joints),
            lambda c: (
                f"has {len(c.kinematics.links)} links but the robot has {len(c.joints)} joints"
            ),
            "give one link per joint, in joint order",
        ),
        Rule(
            "safety.workspace",
            lambda c: c.safety.workspace is None or c.kinematics is not None,
            "needs forward kinematics",
            "add a kinematics: section (or drop safety.workspace)",
            show_value=False,
        ),
        Rule(
            "home_rad",
            lambda c: c.home_rad is None or len(c.home_rad) == len(c.joints),
            lambda c: f"has {len(c.home_rad)} entries, not one per joint ({len(c.joints)})",
            "write it as a list of finite numbers (rad): one position per joint",
        ),
        Rule(
            "home_rad",
            lambda c: (
                c.home_rad is None
                or all(
                    j.lower_rad <= q <= j.upper_rad
                    for j, q in zip(c.joints, c.home_rad, strict=True)
                )
            ),
            lambda c: (
                "puts a joint outside its limits: "
                + ", ".join(
                    f"home_rad[{i}] ({j.name!r}: [{j.lower_rad:g}, {j.upper_rad:g}] rad)"
                    for i, (j, q) in enumerate(zip(c.joints, c.home_rad, strict=True))
                    if not j.lower_rad <= q <= j.upper_rad
                )
            ),
            "set each position within its joint's limits",
        ),
        Rule(
            "ros.command.type",
            lambda c: c.ros.command.type != "geometry_msgs/Twist",
            lambda c: f"drives a mobile base, not this joint-space robot {c.name!r}",
            "use trajectory_msgs/JointTrajectory or std_msgs/Float64MultiArray here",
        ),
    )

    def __post_init__(self, where: str) -> None:
        validate(self, where)
        _set(self, "joints", tuple(self.joints))
        if self.home_rad is None:
            _set(self, "home_rad", tuple((j.lower_rad + j.upper_rad) / 2 for j in self.joints))
        _floats(self, "home_rad", "control_rate_hz", "command_timeout_ms")

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
