"""SafetyFilter: one test per rule, plus the robot config validation."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest

from embodied.errors import ConfigError, SafetyFault
from hardware import DEFAULT_CONFIG, SafetyFilter, load_robot_config, robot_config_from_dict
from hardware.configuration_robot import SafetyConfig, WorkspaceConfig
from hardware.kinematics import SerialChainFK


@pytest.fixture()
def config():
    return load_robot_config(DEFAULT_CONFIG)


def obs_at(q):
    n = len(q)
    return {"state": np.concatenate([np.asarray(q, dtype=np.float64), np.zeros(n)])}


def no_box(config):
    return dataclasses.replace(config, safety=dataclasses.replace(config.safety, workspace=None))


def home(config):
    return np.asarray(config.home_rad, dtype=np.float64)


def test_in_limit_action_passes_unchanged(config):
    f = SafetyFilter(config, fk=SerialChainFK(config.kinematics))
    q = home(config)
    target = q + 0.01
    out = f(target, obs_at(q))
    np.testing.assert_array_equal(out, target)
    assert not f.events


def test_joint_limits_clip_and_log_before_after(config, caplog):
    cfg = dataclasses.replace(no_box(config), safety=SafetyConfig(max_step_rad=10.0))
    f = SafetyFilter(cfg, control_rate_hz=0.01)  # long period: velocity rule inactive
    q = np.array([2.45, 0.0, 0.0, 0.0])
    with caplog.at_level(logging.WARNING, logger="hardware.safety"):
        out = f(np.array([3.5, 0.0, 0.0, 0.0]), obs_at(q))
    assert out[0] == pytest.approx(2.5)  # upper limit of shoulder_pan
    event = f.events[-1]
    assert event.rule == "joint_limits"
    assert event.before[0] == pytest.approx(3.5) and event.after[0] == pytest.approx(2.5)
    assert "joint_limits" in caplog.text and "3.5" in caplog.text and "2.5" in caplog.text


def test_max_step_clips_relative_to_measured_position(config):
    cfg = dataclasses.replace(
        no_box(config), safety=SafetyConfig(max_step_rad=0.05, velocity_margin=1.0)
    )
    f = SafetyFilter(cfg, control_rate_hz=0.01)
    q = home(config)
    out = f(q + np.array([0.3, -0.3, 0.01, 0.0]), obs_at(q))
    np.testing.assert_allclose(out - q, [0.05, -0.05, 0.01, 0.0])
    assert [e.rule for e in f.events] == ["max_step"]


def test_velocity_limit_bounds_the_implied_speed(config):
    cfg = dataclasses.replace(no_box(config), safety=SafetyConfig(max_step_rad=10.0))
    f = SafetyFilter(cfg, control_rate_hz=20.0)  # 50 ms period
    q = home(config)
    out = f(q + 1.0, obs_at(q))
    vmax = np.array([j.max_velocity_rad_s for j in config.joints])
    np.testing.assert_allclose(out - q, vmax * 0.05)
    assert f.counts["velocity"] == 1
    half = SafetyFilter(
        dataclasses.replace(cfg, safety=SafetyConfig(max_step_rad=10.0, velocity_margin=0.5)),
        control_rate_hz=20.0,
    )
    np.testing.assert_allclose(half(q + 1.0, obs_at(q)) - q, vmax * 0.025)


def test_workspace_box_shortens_the_step_to_stay_inside(config):
    fk = SerialChainFK(config.kinematics)
    box = WorkspaceConfig(low_m=(-0.7, -0.7, 0.25), high_m=(0.7, 0.7, 0.9))
    cfg = dataclasses.replace(config, safety=SafetyConfig(max_step_rad=10.0, workspace=box))
    f = SafetyFilter(cfg, fk=fk, control_rate_hz=0.01)
    q = home(config)  # ee at z = 0.30 m
    target = q + np.array([0.0, 0.5, 0.0, 0.0])  # lift joint pitches the arm down, below 0.25
    assert fk(target)[2] < 0.25
    out = f(target, obs_at(q))
    assert f.events[-1].rule == "workspace"
    ee = fk(out)
    assert 0.25 - 1e-3 <= ee[2] < 0.30
    assert np.all(np.abs(out - q) <= np.abs(target - q) + 1e-12)


def test_workspace_outside_box_holds_unless_moving_back(config):
    fk = SerialChainFK(config.kinematics)
    box = WorkspaceConfig(low_m=(-0.7, -0.7, 0.35), high_m=(0.7, 0.7, 0.9))  # home z=0.30
    cfg = dataclasses.replace(config, safety=SafetyConfig(max_step_rad=10.0, workspace=box))
    f = SafetyFilter(cfg, fk=fk, control_rate_hz=0.01)
    q = home(config)
    down = q + np.array([0.0, 0.2, 0.0, 0.0])
    np.testing.assert_allclose(f(down, obs_at(q)), q)  # further out: hold
    up = q + np.array([0.0, -0.2, 0.0, 0.0])
    np.testing.assert_allclose(f(up, obs_at(q)), up)  # back towards the box: allowed


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_action_is_refused_and_latches(config, bad):
    f = SafetyFilter(no_box(config))
    q = home(config)
    action = q.copy()
    action[2] = bad
    with pytest.raises(SafetyFault, match="non-finite target for joints \\['elbow'\\]"):
        f(action, obs_at(q))
    assert f.estopped and f.events[-1].after is None
    with pytest.raises(SafetyFault, match="e-stop is latched"):
        f(q, obs_at(q))


def test_non_finite_state_is_refused(config):
    f = SafetyFilter(no_box(config))
    q = home(config)
    with pytest.raises(SafetyFault, match="non-finite measured state"):
        f(q, obs_at([np.nan, 0, 0, 0]))


def test_stale_state_watchdog(config):
    age = {"s": 0.01}
    f = SafetyFilter(no_box(config), state_age_s=lambda: age["s"])
    q = home(config)
    f(q, obs_at(q))
    age["s"] = None  # transport disconnected: the robot env's reconnect grace decides
    f(q, obs_at(q))
    age["s"] = config.safety.stale_state_ms / 1e3 + 0.05
    with pytest.raises(SafetyFault, match="state is 300 ms old \\(limit 250 ms\\)"):
        f(q, obs_at(q))
    assert f.events[-1].rule == "stale_state"
    assert f.estopped


def test_estop_latches_across_reset_until_cleared(config):
    calls = []
    f = SafetyFilter(no_box(config), on_estop=lambda: calls.append(1))
    q = home(config)
    f.estop("operator")
    f.estop("again")  # latched once
    assert calls == [1]
    f.reset()  # a new episode does not clear it
    with pytest.raises(SafetyFault, match="operator"):
        f(q, obs_at(q))
    f.clear_estop()
    np.testing.assert_array_equal(f(q, obs_at(q)), q)


def test_faults_can_be_configured_not_to_latch(config):
    f = SafetyFilter(no_box(config), latch_faults=False)
    q = home(config)
    with pytest.raises(SafetyFault):
        f(np.full(4, np.nan), obs_at(q))
    assert not f.estopped
    f(q, obs_at(q))


def test_workspace_needs_kinematics(config):
    data = {
        "name": "x",
        "joints": [{"name": "a", "lower_rad": -1, "upper_rad": 1}],
        "safety": {"workspace": {"low_m": [0, 0, 0], "high_m": [1, 1, 1]}},
    }
    with pytest.raises(ConfigError, match="safety.workspace needs forward kinematics"):
        robot_config_from_dict(data)
    with pytest.raises(ConfigError, match="needs an fk function"):
        SafetyFilter(config)


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        (
            {"joints": [{"name": "a", "lower_rad": 1, "upper_rad": -1}]},
            r"joints\[0\].lower_rad=1 is not below joints\[0\].upper_rad=-1",
        ),
        (
            {"joints": [{"name": "a", "lower_rad": -1, "upper_rad": 1, "speed": 2}]},
            "unknown key\\(s\\) \\['speed'\\]",
        ),
        ({"ros": {"url": "http://x:1"}}, "is not rosbridge://host:port"),
        (
            {"ros": {"command": {"topic": "/c", "type": "std_msgs/String"}}},
            "ros.command.type='std_msgs/String' is not supported",
        ),
        (
            {"ros": {"state": {"topic": "joint_states", "type": "sensor_msgs/JointState"}}},
            "is not absolute",
        ),
        ({"safety": {"max_step_rad": 0}}, "max_step_rad=0 must be > 0"),
        ({"control_rate_hz": -5}, "control_rate_hz=-5 must be > 0"),
        ({"home_rad": [5.0]}, "outside its limits"),
    ],
)
def test_config_validation_names_the_bad_value(patch, message):
    data = {"name": "x", "joints": [{"name": "a", "lower_rad": -1, "upper_rad": 1}], **patch}
    with pytest.raises(ConfigError, match=message):
        robot_config_from_dict(data)


def test_config_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_robot_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_robot_config(bad)
