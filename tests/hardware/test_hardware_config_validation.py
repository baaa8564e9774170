"""Robot config validation: every field refuses non-finite, wrong-type and out-of-range values.

Each error is a ``ConfigError`` naming the full dotted key, the bad value and the fix; the
CLI turns it into exit code 2 before anything runs.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from embodied.errors import ConfigError
from hardware import DEFAULT_CONFIG, load_robot_config, robot_config_from_dict
from hardware.configuration_robot import (
    JointConfig,
    KinematicsConfig,
    LinkConfig,
    RobotConfig,
    RosConfig,
    SafetyConfig,
    TopicConfig,
    WorkspaceConfig,
)

INF = float("inf")
NAN = float("nan")


def shipped() -> dict[str, Any]:
    """The shipped sim_arm config as plain data, plus a camera so its fields are covered."""
    data = yaml.safe_load(DEFAULT_CONFIG.read_text())
    data["ros"]["camera"] = {"topic": "/wrist/image", "type": "sensor_msgs/CompressedImage"}
    data["ros"]["camera_name"] = "wrist"
    data["ros"]["camera_size"] = [96, 96]
    return data


def set_key(data: dict[str, Any], path: str, value: Any) -> None:
    """Set ``value`` at a dotted path with list indices, e.g. ``joints[2].max_velocity_rad_s``."""
    parts = re.findall(r"[^.\[\]]+|\[\d+\]", path)
    node: Any = data
    for part in parts[:-1]:
        node = node[int(part[1:-1])] if part.startswith("[") else node[part]
    last = parts[-1]
    if last.startswith("["):
        node[int(last[1:-1])] = value
    else:
        node[last] = value


# (dotted path to set, bad value, text the error must contain besides the path and "fix:")
CASES: list[tuple[str, Any, str]] = [
    # ---- top level
    ("name", "", "''"),
    ("name", 5, "5"),
    ("name", None, "None"),
    ("joints", 5, "5"),
    ("joints", None, "None"),
    ("joints", [], "()"),
    ("joints", "shoulder", "'shoulder'"),
    ("joints[0]", 5, "5"),
    ("control_rate_hz", "fast", "'fast'"),
    ("control_rate_hz", INF, "inf"),
    ("control_rate_hz", NAN, "nan"),
    ("control_rate_hz", 0, "0"),
    ("control_rate_hz", True, "True"),
    ("command_timeout_ms", INF, "inf"),
    ("command_timeout_ms", -1, "-1"),
    ("command_timeout_ms", "200", "'200'"),
    ("home_rad", [0.0, 0.0, 0.0], "[0.0, 0.0, 0.0]"),
    ("home_rad", 0.0, "0.0"),
    ("home_rad[1]", NAN, "nan"),
    ("home_rad[1]", "x", "'x'"),
    ("home_rad[0]", 3.0, "3.0"),
    # ---- joints
    ("joints[2].name", 5, "5"),
    ("joints[2].name", "", "''"),
    ("joints[2].name", None, "None"),
    ("joints[2].lower_rad", -INF, "-inf"),
    ("joints[2].lower_rad", "low", "'low'"),
    ("joints[2].lower_rad", 2.5, "2.5"),
    ("joints[2].upper_rad", INF, "inf"),
    ("joints[2].upper_rad", [1.0], "[1.0]"),
    ("joints[2].upper_rad", -2.5, "-2.5"),
    ("joints[2].max_velocity_rad_s", INF, "inf"),
    ("joints[2].max_velocity_rad_s", NAN, "nan"),
    ("joints[2].max_velocity_rad_s", 0, "0"),
    ("joints[2].max_velocity_rad_s", False, "False"),
    # ---- kinematics
    ("kinematics", 5, "5"),
    ("kinematics.base_m", [0.0, 0.0], "[0.0, 0.0]"),
    ("kinematics.base_m[2]", INF, "inf"),
    ("kinematics.base_m[2]", "up", "'up'"),
    ("kinematics.links", 5, "5"),
    ("kinematics.links", None, "None"),
    ("kinematics.links[1].axis", "w", "'w'"),
    ("kinematics.links[1].axis", 5, "5"),
    ("kinematics.links[1].offset_m", [0.3, 0.0], "[0.3, 0.0]"),
    ("kinematics.links[1].offset_m[0]", NAN, "nan"),
    ("kinematics.links[1].offset_m", 0.3, "0.3"),
    # ---- safety
    ("safety", None, "None"),
    ("safety", 5, "5"),
    ("safety.max_step_rad", INF, "inf"),
    ("safety.max_step_rad", -0.1, "-0.1"),
    ("safety.max_step_rad", "0.15", "'0.15'"),
    ("safety.stale_state_ms", INF, "inf"),
    ("safety.stale_state_ms", 0, "0"),
    ("safety.stale_state_ms", None, "None"),
    ("safety.velocity_margin", 1.5, "1.5"),
    ("safety.velocity_margin", NAN, "nan"),
    ("safety.velocity_margin", True, "True"),
    ("safety.workspace", 5, "5"),
    ("safety.workspace.low_m[0]", -INF, "-inf"),
    ("safety.workspace.low_m", [0.0, 0.0], "[0.0, 0.0]"),
    ("safety.workspace.low_m[2]", 1.0, "1.0"),
    ("safety.workspace.high_m[1]", INF, "inf"),
    ("safety.workspace.high_m", "big", "'big'"),
    # ---- ros
    ("ros", None, "None"),
    ("ros.url", "http://x:1", "'http://x:1'"),
    ("ros.url", 9090, "9090"),
    ("ros.ros_version", 3, "3"),
    ("ros.ros_version", True, "True"),
    ("ros.ros_version", 1.0, "1.0"),
    ("ros.state", None, "None"),
    ("ros.state.topic", "joint_states", "'joint_states'"),
    ("ros.state.topic", 5, "5"),
    ("ros.state.type", "std_msgs/String", "'std_msgs/String'"),
    ("ros.command.topic", "", "''"),
    ("ros.command.type", 5, "5"),
    ("ros.command.type", "geometry_msgs/Twist", "'geometry_msgs/Twist'"),
    ("ros.camera", 5, "5"),
    ("ros.camera.topic", "wrist/image", "'wrist/image'"),
    ("ros.camera.type", "sensor_msgs/Imag", "'sensor_msgs/Imag'"),
    ("ros.camera.type", "sensor_msgs/PointCloud2", "'sensor_msgs/PointCloud2'"),
    ("ros.camera_name", "", "''"),
    ("ros.camera_name", 5, "5"),
    ("ros.camera_size", [0, 0], "0"),
    ("ros.camera_size", [96], "[96]"),
    ("ros.camera_size", [96.5, 96], "96.5"),
    ("ros.camera_size", [96, True], "True"),
    ("ros.camera_size", 96, "96"),
    ("ros.camera_compression", "jpeg", "'jpeg'"),
    ("ros.camera_compression", None, "None"),
    ("ros.camera_throttle_rate_ms", -1, "-1"),
    ("ros.camera_throttle_rate_ms", 2.5, "2.5"),
    ("ros.camera_queue_length", True, "True"),
    ("ros.camera_queue_length", -3, "-3"),
    ("ros.estop.topic", "arm/estop", "'arm/estop'"),
    ("ros.estop.type", "std_msgs/String", "'std_msgs/String'"),
    ("ros.estop.type", None, "None"),
    ("ros.estop_state.topic", "arm/estopped", "'arm/estopped'"),
    ("ros.estop_state.type", "std_srvs/Trigger", "'std_srvs/Trigger'"),
    ("ros.enable.topic", 5, "5"),
    ("ros.enable.type", "std_msgs/Bool", "'std_msgs/Bool'"),
    ("ros.enable_on_connect", "yes", "'yes'"),
    ("ros.enable_on_connect", 1, "1"),
    ("ros.link_timeout_ms", INF, "inf"),
    ("ros.link_timeout_ms", 0, "0"),
    ("ros.link_timeout_ms", "100", "'100'"),
    ("ros.connect_timeout_s", INF, "inf"),
    ("ros.connect_timeout_s", -1, "-1"),
    ("ros.resend_window_s", INF, "inf"),
    ("ros.resend_window_s", 0, "0"),
    ("ros.reconnect_initial_s", NAN, "nan"),
    ("ros.reconnect_initial_s", 0, "0"),
    ("ros.reconnect_initial_s", 5.0, "5.0"),  # above reconnect_max_s 1.0
    ("ros.reconnect_max_s", INF, "inf"),
    ("ros.reconnect_max_s", 0, "0"),
    ("ros.reconnect_factor", INF, "inf"),
    ("ros.reconnect_factor", 0.5, "0.5"),
    ("ros.reconnect_factor", None, "None"),
    ("ros.reconnect_grace_s", INF, "inf"),
    ("ros.reconnect_grace_s", 0, "0"),
]


def _case_id(case: tuple[str, Any, str]) -> str:
    return f"{case[0]}={case[1]!r}"


@pytest.mark.parametrize(("path", "value", "shown"), CASES, ids=[_case_id(c) for c in CASES])
def test_each_field_rejects_bad_values_naming_key_value_and_fix(
    path: str, value: Any, shown: str
) -> None:
    data = shipped()
    set_key(data, path, value)
    with pytest.raises(ConfigError) as info:
        robot_config_from_dict(data)
    message = str(info.value)
    key = re.sub(r"\[\d+\]$", "", path)  # an element's error may name the list or the element
    assert key in message, message
    assert shown in message, message
    assert info.value.fix, message


def _field_paths(cls: type, prefix: str) -> set[str]:
    """Dotted paths of every leaf field of a config dataclass (list items as ``[]``)."""
    sections: dict[str, type] = {
        "kinematics": KinematicsConfig,
        "safety": SafetyConfig,
        "workspace": WorkspaceConfig,
        "ros": RosConfig,
        "state": TopicConfig,
        "command": TopicConfig,
        "camera": TopicConfig,
        "estop": TopicConfig,
        "estop_state": TopicConfig,
        "enable": TopicConfig,
    }
    items: dict[str, type] = {"joints": JointConfig, "links": LinkConfig}
    paths: set[str] = set()
    for f in dataclasses.fields(cls):
        path = f"{prefix}.{f.name}" if prefix else f.name
        if f.name in sections:
            paths |= _field_paths(sections[f.name], path)
        elif f.name in items:
            paths |= _field_paths(items[f.name], f"{path}[]")
        else:
            paths.add(path)
    return paths


def test_every_field_is_covered_by_the_table() -> None:
    """A new config field must get rows in CASES."""
    covered = {re.sub(r"\[\d+\]", "[]", path) for path, _, _ in CASES}
    covered |= {p.rsplit("[]", 1)[0] for p in covered if p.endswith("[]")}
    missing = _field_paths(RobotConfig, "") - covered
    assert not missing, f"config fields without a validation case: {sorted(missing)}"


def test_shipped_config_loads_and_numbers_are_floats() -> None:
    config = load_robot_config(DEFAULT_CONFIG)
    assert isinstance(config.control_rate_hz, float) and config.control_rate_hz == 20.0
    assert isinstance(config.safety.stale_state_ms, float)
    assert all(isinstance(x, float) for x in config.kinematics.base_m)  # type: ignore[union-attr]
    assert config.ros.camera_size == (96, 96)
    assert all(isinstance(x, float) for x in config.home_rad or ())


@pytest.mark.parametrize(
    ("build", "key", "shown"),
    [
        (lambda: SafetyConfig(max_step_rad=INF), "safety.max_step_rad", "inf"),
        (lambda: SafetyConfig(stale_state_ms=INF), "safety.stale_state_ms", "inf"),
        (lambda: JointConfig("a", -1.0, 1.0, max_velocity_rad_s=INF), "max_velocity_rad_s", "inf"),
        (lambda: JointConfig(5, -1.0, 1.0), "name", "5"),  # type: ignore[arg-type]
        (lambda: JointConfig("a", -INF, 1.0), "lower_rad", "-inf"),
        (lambda: LinkConfig("z", (0.0, 0.0, NAN)), "offset_m[2]", "nan"),
        (lambda: WorkspaceConfig((0.0, 0.0, 0.0), (1.0, 1.0, INF)), "high_m[2]", "inf"),
        (lambda: RosConfig(camera_size=(0, 0)), "ros.camera_size", "0"),
        (lambda: RosConfig(link_timeout_ms=INF), "ros.link_timeout_ms", "inf"),
        (lambda: TopicConfig(5, "std_msgs/Bool"), "topic", "5"),  # type: ignore[arg-type]
    ],
)
def test_direct_construction_is_validated_too(build: Any, key: str, shown: str) -> None:
    with pytest.raises(ConfigError) as info:
        build()
    assert key in str(info.value) and shown in str(info.value) and info.value.fix


def test_valid_edits_are_accepted() -> None:
    data = shipped()
    data["control_rate_hz"] = 50  # an int where a float is meant is fine
    data["ros"]["ros_version"] = 2
    data["ros"]["camera_size"] = [48, 64]
    data["ros"]["enable_on_connect"] = True
    data["safety"]["velocity_margin"] = 0.5
    config = robot_config_from_dict(copy.deepcopy(data))
    assert config.control_rate_hz == 50.0 and config.ros.camera_size == (48, 64)
    assert math.isclose(config.safety.velocity_margin, 0.5)
    assert config.ros.enable_on_connect is True


def test_cli_deploy_refuses_infinite_max_step(tmp_path: Path) -> None:
    text = DEFAULT_CONFIG.read_text()
    assert "max_step_rad: 0.15" in text
    robot = tmp_path / "inf_step.yaml"
    robot.write_text(text.replace("max_step_rad: 0.15", "max_step_rad: .inf"))
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "embodied",
            "deploy",
            "--robot",
            str(robot),
            "--policy",
            "hold",
            "--dry-run",
            "--max-seconds",
            "0.5",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "safety.max_step_rad=inf" in proc.stderr and "fix:" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (out / "episodes").exists()  # refused before anything ran


def test_a_config_without_home_rad_homes_mid_range_not_to_zeros() -> None:
    """The stated default: each joint's mid-range (a zero home can sit on a joint limit)."""
    data = shipped()
    data.pop("home_rad", None)
    data["joints"][0]["lower_rad"], data["joints"][0]["upper_rad"] = 0.5, 1.5
    config = robot_config_from_dict(data)
    expected = [(j.lower_rad + j.upper_rad) / 2 for j in config.joints]
    assert config.home_rad == pytest.approx(expected)
    assert config.home_rad[0] == pytest.approx(1.0)
