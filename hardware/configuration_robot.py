"""Per-robot configuration: joints, kinematics, safety limits and the ROS interface.

A robot is described by one YAML file (see ``hardware/configs/sim_arm.yaml``)::

    name: sim_arm
    control_rate_hz: 20
    joints:
      - {name: pan, lower_rad: -2.5, upper_rad: 2.5, max_velocity_rad_s: 1.5}
    kinematics: {base_m: [0, 0, 0.1], links: [{axis: z, offset_m: [0, 0, 0.3]}]}
    safety: {max_step_rad: 0.1, stale_state_ms: 250, workspace: {low_m: [...], high_m: [...]}}
    ros: {url: "rosbridge://127.0.0.1:9090", command: {topic: /arm/command, ...}}

Every dataclass validates itself in ``__post_init__``; errors name the bad field and the fix.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
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
CAMERA_TYPES = ("sensor_msgs/CompressedImage",)
ESTOP_TYPES = ("std_msgs/Bool", "std_srvs/Trigger")
ENABLE_TYPES = ("std_srvs/Trigger",)

_T = TypeVar("_T")


@dataclass(frozen=True)
class JointConfig:
    """One actuated joint.

    Args:
        name: Joint name as it appears in ``sensor_msgs/JointState.name``.
        lower_rad: Lower position limit (rad).
        upper_rad: Upper position limit (rad).
        max_velocity_rad_s: Velocity limit (rad/s), applied to the velocity a target implies.
    """

    name: str
    lower_rad: float
    upper_rad: float
    max_velocity_rad_s: float = 1.0

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError(
                "joint with an empty name", fix="give every joint its JointState name"
            )
        if not self.lower_rad < self.upper_rad:
            raise ConfigError(
                f"joint {self.name!r}: lower_rad {self.lower_rad} >= upper_rad {self.upper_rad}",
                fix="set lower_rad < upper_rad",
            )
        if not self.max_velocity_rad_s > 0:
            raise ConfigError(
                f"joint {self.name!r}: max_velocity_rad_s {self.max_velocity_rad_s} must be > 0"
            )


@dataclass(frozen=True)
class LinkConfig:
    """One revolute joint of a serial chain: rotate about ``axis``, then translate ``offset_m``.

    Args:
        axis: Rotation axis in the link frame, ``"x"``, ``"y"`` or ``"z"``.
        offset_m: Translation (m) from this joint to the next (or to the end effector).
    """

    axis: str
    offset_m: tuple[float, float, float]

    def __post_init__(self) -> None:
        if self.axis not in ("x", "y", "z"):
            raise ConfigError(f"link axis {self.axis!r} is not one of x, y, z")
        if len(self.offset_m) != 3:
            raise ConfigError(f"link offset_m {self.offset_m!r} must have 3 entries (m)")


@dataclass(frozen=True)
class KinematicsConfig:
    """Forward kinematics of a serial chain (one link per joint, in joint order).

    Args:
        base_m: Position (m) of the first joint in the world frame.
        links: One :class:`LinkConfig` per joint.
    """

    base_m: tuple[float, float, float] = (0.0, 0.0, 0.0)
    links: tuple[LinkConfig, ...] = ()

    def __post_init__(self) -> None:
        if len(self.base_m) != 3:
            raise ConfigError(f"kinematics base_m {self.base_m!r} must have 3 entries (m)")


@dataclass(frozen=True)
class WorkspaceConfig:
    """Axis-aligned box (m, world frame) the end effector must stay inside."""

    low_m: tuple[float, float, float]
    high_m: tuple[float, float, float]

    def __post_init__(self) -> None:
        if len(self.low_m) != 3 or len(self.high_m) != 3:
            raise ConfigError(
                f"workspace low_m/high_m need 3 entries each, got {self.low_m!r} {self.high_m!r}"
            )
        if any(lo >= hi for lo, hi in zip(self.low_m, self.high_m, strict=False)):
            raise ConfigError(
                f"workspace low_m {self.low_m!r} is not below high_m {self.high_m!r}",
                fix="give the box corners as low (min x, y, z) and high (max x, y, z)",
            )


@dataclass(frozen=True)
class SafetyConfig:
    """Rules of :class:`hardware.safety.SafetyFilter`.

    Args:
        max_step_rad: Largest change of a joint target relative to the measured position per
            control step (rad). Larger steps are clipped.
        stale_state_ms: State older than this (ms) while the link is up stops commanding and
            raises ``SafetyFault``.
        workspace: Optional end-effector box; needs ``kinematics`` in the robot config.
        velocity_margin: Fraction (0, 1] of each joint's ``max_velocity_rad_s`` allowed.
    """

    max_step_rad: float = 0.2
    stale_state_ms: float = 250.0
    workspace: WorkspaceConfig | None = None
    velocity_margin: float = 1.0

    def __post_init__(self) -> None:
        if not self.max_step_rad > 0:
            raise ConfigError(f"safety.max_step_rad {self.max_step_rad} must be > 0 (rad)")
        if not self.stale_state_ms > 0:
            raise ConfigError(f"safety.stale_state_ms {self.stale_state_ms} must be > 0 (ms)")
        if not 0 < self.velocity_margin <= 1:
            raise ConfigError(f"safety.velocity_margin {self.velocity_margin} must be in (0, 1]")


@dataclass(frozen=True)
class TopicConfig:
    """A ROS topic (or service, for ``std_srvs/Trigger``) and its message type."""

    topic: str
    type: str

    def __post_init__(self) -> None:
        if not self.topic.startswith("/"):
            raise ConfigError(
                f"ROS name {self.topic!r} is not absolute", fix=f"write it as '/{self.topic}'"
            )
        if self.type.count("/") != 1:
            raise ConfigError(
                f"ROS type {self.type!r} is not 'package/Type'", fix="e.g. sensor_msgs/JointState"
            )

    def check_type(self, allowed: Sequence[str], what: str) -> None:
        """Raise unless :attr:`type` is one of ``allowed``."""
        if self.type not in allowed:
            raise ConfigError(
                f"ros.{what}.type {self.type!r} is not supported", fix=f"use one of {list(allowed)}"
            )


@dataclass(frozen=True)
class RosConfig:
    """How to reach the robot through rosbridge (v2 protocol).

    Args:
        url: ``rosbridge://host:port`` (or ``ws://host:port``).
        ros_version: 1 or 2 (stamps as ``secs/nsecs`` or ``sec/nanosec``).
        state: Joint state topic.
        command: Command topic; the action space follows its type.
        camera: Optional camera topic (``sensor_msgs/CompressedImage``), observed as ``image.<name>``.
        camera_name: Name of that camera in observations.
        camera_size: (height, width) the camera images are resized to (pixels).
        estop: Optional e-stop: a ``std_msgs/Bool`` topic or a ``std_srvs/Trigger`` service.
        enable: Optional ``std_srvs/Trigger`` service that clears a latched robot e-stop
            (``embodied deploy --clear-estop``, :meth:`Robot.enable`).
        enable_on_connect: Call ``enable`` on every connect. Off by default: an e-stop stays
            latched until an operator clears it explicitly.
        link_timeout_ms: No state for this long (ms) marks the link stale: commands stop.
        connect_timeout_s: How long :meth:`connect` waits for the first state (s).
        reconnect_initial_s: First reconnect delay (s); grows by ``reconnect_factor``.
        reconnect_max_s: Largest reconnect delay (s).
        reconnect_factor: Backoff growth per failed attempt.
        reconnect_grace_s: A disconnect longer than this (s) ends the episode with a fault.
    """

    url: str = "rosbridge://127.0.0.1:9090"
    ros_version: int = 1
    state: TopicConfig = TopicConfig("/joint_states", "sensor_msgs/JointState")
    command: TopicConfig = TopicConfig("/arm/command", "trajectory_msgs/JointTrajectory")
    camera: TopicConfig | None = None
    camera_name: str = "wrist"
    camera_size: tuple[int, int] = (96, 96)
    estop: TopicConfig | None = None
    enable: TopicConfig | None = None
    enable_on_connect: bool = False
    link_timeout_ms: float = 100.0
    connect_timeout_s: float = 10.0
    reconnect_initial_s: float = 0.1
    reconnect_max_s: float = 2.0
    reconnect_factor: float = 2.0
    reconnect_grace_s: float = 10.0

    def __post_init__(self) -> None:
        self.host_port()  # validates the url
        if self.ros_version not in (1, 2):
            raise ConfigError(f"ros.ros_version {self.ros_version!r} must be 1 or 2")
        self.state.check_type(STATE_TYPES, "state")
        self.command.check_type(COMMAND_TYPES, "command")
        if self.camera is not None:
            self.camera.check_type(CAMERA_TYPES, "camera")
        if self.estop is not None:
            self.estop.check_type(ESTOP_TYPES, "estop")
        if self.enable is not None:
            self.enable.check_type(ENABLE_TYPES, "enable")
        for name in (
            "link_timeout_ms",
            "connect_timeout_s",
            "reconnect_initial_s",
            "reconnect_max_s",
            "reconnect_grace_s",
        ):
            if not getattr(self, name) > 0:
                raise ConfigError(f"ros.{name} {getattr(self, name)} must be > 0")
        if self.reconnect_factor < 1:
            raise ConfigError(f"ros.reconnect_factor {self.reconnect_factor} must be >= 1")

    def host_port(self) -> tuple[str, int]:
        """(host, port) parsed from :attr:`url`."""
        parsed = urlparse(self.url)
        if parsed.scheme not in ("rosbridge", "ws") or not parsed.hostname or not parsed.port:
            raise ConfigError(
                f"ros.url {self.url!r} is not rosbridge://host:port",
                fix="e.g. rosbridge://127.0.0.1:9090",
            )
        return parsed.hostname, parsed.port


@dataclass(frozen=True)
class RobotConfig:
    """One robot: joints with limits, optional kinematics, safety rules and ROS interface.

    Args:
        name: Robot name (used as env id ``robot:<name>``).
        joints: Actuated joints in action order.
        control_rate_hz: Default control rate (Hz) of the deploy loop.
        kinematics: Optional forward kinematics (needed by the workspace box).
        safety: Safety filter rules.
        ros: ROS interface (ignored by the simulated robot).
        home_rad: Initial joint positions (rad) of the simulated robot; default mid-range.
        command_timeout_ms: Robot-side behaviour (documented, and what the simulated robot and
            the ROS sim node do): commands older than this (ms) are stale and the robot holds
            its measured position with zero velocity.
    """

    name: str
    joints: tuple[JointConfig, ...]
    control_rate_hz: float = 20.0
    kinematics: KinematicsConfig | None = None
    safety: SafetyConfig = field(default_factory=SafetyConfig)
    ros: RosConfig = field(default_factory=RosConfig)
    home_rad: tuple[float, ...] | None = None
    command_timeout_ms: float = 200.0

    def __post_init__(self) -> None:
        if not self.joints:
            raise ConfigError(
                f"robot {self.name!r} has no joints", fix="list joints: in the config"
            )
        names = [j.name for j in self.joints]
        if len(set(names)) != len(names):
            raise ConfigError(f"robot {self.name!r} has duplicate joint names {names}")
        if not self.control_rate_hz > 0:
            raise ConfigError(f"control_rate_hz {self.control_rate_hz} must be > 0 (Hz)")
        if self.kinematics is not None and len(self.kinematics.links) != len(self.joints):
            raise ConfigError(
                f"kinematics has {len(self.kinematics.links)} links but the robot has "
                f"{len(self.joints)} joints",
                fix="give one link per joint, in joint order",
            )
        if self.safety.workspace is not None and self.kinematics is None:
            raise ConfigError(
                "safety.workspace needs forward kinematics",
                fix="add a kinematics: section (or drop safety.workspace)",
            )
        if self.home_rad is None:
            mid = tuple((j.lower_rad + j.upper_rad) / 2 for j in self.joints)
            object.__setattr__(self, "home_rad", mid)
        assert self.home_rad is not None
        if len(self.home_rad) != len(self.joints):
            raise ConfigError(f"home_rad {self.home_rad!r} needs {len(self.joints)} entries")
        for j, q in zip(self.joints, self.home_rad, strict=False):
            if not j.lower_rad <= q <= j.upper_rad:
                raise ConfigError(f"home_rad {q} of joint {j.name!r} is outside its limits")
        if not self.command_timeout_ms > 0:
            raise ConfigError(f"command_timeout_ms {self.command_timeout_ms} must be > 0 (ms)")
        if self.ros.command.type == "geometry_msgs/Twist":
            raise ConfigError(
                "geometry_msgs/Twist commands drive a mobile base, not this joint-space robot "
                f"{self.name!r}",
                fix="use trajectory_msgs/JointTrajectory or std_msgs/Float64MultiArray here",
            )

    @property
    def joint_names(self) -> tuple[str, ...]:
        """Joint names in action order."""
        return tuple(j.name for j in self.joints)

    def with_url(self, url: str) -> RobotConfig:
        """A copy whose ROS interface points at ``url`` (``rosbridge://host:port``)."""
        return dataclasses.replace(self, ros=dataclasses.replace(self.ros, url=url))


def _build(cls: type[_T], data: Any, where: str) -> _T:
    """Build dataclass ``cls`` from a mapping, naming unknown keys and nested sections."""
    if isinstance(data, cls):
        return data
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where} must be a mapping, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {unknown}", fix=f"valid keys are {sorted(fields)}"
        )
    nested: dict[str, type] = {
        "workspace": WorkspaceConfig,
        "safety": SafetyConfig,
        "ros": RosConfig,
        "kinematics": KinematicsConfig,
        "state": TopicConfig,
        "command": TopicConfig,
        "camera": TopicConfig,
        "estop": TopicConfig,
        "enable": TopicConfig,
    }
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        sub = f"{where}.{key}"
        if key in nested and value is not None:
            kwargs[key] = _build(nested[key], value, sub)
        elif key == "joints":
            kwargs[key] = tuple(_build(JointConfig, j, f"{sub}[{i}]") for i, j in enumerate(value))
        elif key == "links":
            kwargs[key] = tuple(_build(LinkConfig, x, f"{sub}[{i}]") for i, x in enumerate(value))
        elif isinstance(value, list):
            kwargs[key] = tuple(value)
        else:
            kwargs[key] = value
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"{where}: {exc}", fix="see hardware/configs/sim_arm.yaml") from exc


def robot_config_from_dict(data: Mapping[str, Any]) -> RobotConfig:
    """Build and validate a :class:`RobotConfig` from a plain mapping (parsed YAML)."""
    return _build(RobotConfig, data, "robot")


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
    except yaml.YAMLError as exc:
        raise ConfigError(f"robot config {str(p)!r} is not valid YAML: {exc}") from exc
    return robot_config_from_dict(data)


def resolve_robot(spec: str) -> RobotConfig:
    """A config from a YAML path or ``rosbridge://host:port`` (default config, that URL)."""
    if spec.startswith(("rosbridge://", "ws://")):
        return load_robot_config(DEFAULT_CONFIG).with_url(spec)
    return load_robot_config(spec)
