"""Robot contract (simulated robot), RobotEnv under rollout, dry-run deploy and ROS messages."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import policies
from embodied.apps.deploy import DeployConfig, deploy
from embodied.datasets import Dataset
from embodied.errors import ActionError, SafetyFault
from embodied.loop import rollout
from hardware import DEFAULT_CONFIG, RobotEnv, SimRobot, load_robot_config
from hardware.ros import messages


@pytest.fixture()
def config():
    return load_robot_config(DEFAULT_CONFIG)


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_sim_robot_tracks_targets_at_velocity_limit_and_holds_when_stale(config):
    clock = FakeClock()
    robot = SimRobot(config, clock=clock)
    with robot:
        q0 = robot.read().position_rad.copy()
        robot.send(q0 + np.array([1.0, 0, 0, 0]))
        clock.t += 0.1
        state = robot.read()
        assert state.position_rad[0] == pytest.approx(q0[0] + 0.15)  # 1.5 rad/s * 0.1 s
        assert state.velocity_rad_s[0] == pytest.approx(1.5)
        clock.t += 1.0  # the command is now 1.1 s old (> 200 ms timeout): hold, zero velocity
        state = robot.read()
        assert state.position_rad[0] == pytest.approx(q0[0] + 1.5 * 0.2)
        assert state.velocity_rad_s[0] == 0.0


def test_robot_context_manager_commands_stop_on_exit_and_on_exception(config):
    robot = SimRobot(config)
    with pytest.raises(RuntimeError, match="boom"), robot:
        q = robot.read().position_rad
        robot.send(q + 0.5)
        time.sleep(0.02)
        raise RuntimeError("boom")
    assert not robot.connected
    _last_t, last_target = robot.history[-1]
    assert len(robot.history) == 2
    # the final command is a hold at the measured position, not the 0.5 rad step
    assert np.all(np.abs(last_target - q) < 0.3) and np.all(last_target > q)
    np.testing.assert_allclose(last_target, robot.last_sent)


def test_robot_refuses_before_connect_and_bad_actions(config):
    robot = SimRobot(config)
    with pytest.raises(SafetyFault, match="before connect"):
        robot.send(np.zeros(4))
    with robot:
        with pytest.raises(ActionError, match="shape"):
            robot.send(np.zeros(3))
        with pytest.raises(ActionError, match="non-finite"):
            robot.send(np.array([0, np.nan, 0, 0]))
        sent = robot.send(np.array([9.0, 0, 0, 0]))  # clipped into the joint limits
        assert sent[0] == 2.5
    assert robot.commands_sent == 2  # the clipped command and the stop


def test_robot_env_runs_under_the_one_loop(config):
    with SimRobot(config) as robot:
        env = RobotEnv(robot, max_episode_steps=15, control_rate_hz=50)
        policy = policies.load("sine", env=env, amplitude_rad=0.3)
        safety = env.safety_filter()
        steps = []
        episode = rollout(env, policy, safety=safety, pace=True, callbacks=[steps.append])
    assert len(episode) == 15 and len(steps) == 15
    assert episode.observations["state"].shape == (15, 11)  # q, qd, ee xyz
    assert episode.meta["env_id"] == "robot:sim_arm"
    assert "ee_pos" in episode.final_info and "ee_vel" in episode.final_info
    # the filter limited at least one step (0.3 rad amplitude at 50 Hz beats 1.5 rad/s)
    assert np.any(episode.actions != episode.raw_actions)
    moved = episode.observations["state"][-1, :4] - episode.observations["state"][0, :4]
    assert np.abs(moved).max() > 0.01


def test_hold_policy_keeps_the_start_position(config):
    with SimRobot(config) as robot:
        env = RobotEnv(robot, max_episode_steps=5)
        episode = rollout(env, policies.load("hold", env=env), safety=env.safety_filter())
    np.testing.assert_allclose(episode.actions, np.tile(config.home_rad, (5, 1)), atol=1e-6)


def test_bringup_policy_refuses_non_joint_env():
    with pytest.raises(Exception, match="needs env="):
        policies.load("sine")


def test_dry_run_deploy_logs_a_readable_dataset(config, tmp_path):
    result = deploy(
        config, DeployConfig("sine", dry_run=True, rate_hz=50, max_seconds=0.4), tmp_path
    )
    assert result.reason == "max_steps"
    assert 10 <= result.steps <= 20
    data = Dataset(tmp_path / "episodes")
    assert len(data) == 1 and data[0].actions.shape == (result.steps, 4)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["stop_command_rad"] is not None and summary["dry_run"] is True


def test_deploy_stop_event_and_fault_leave_robot_stopped(config, tmp_path):
    stop = threading.Event()
    robot = SimRobot(config)
    timer = threading.Timer(0.3, stop.set)
    timer.start()
    run = DeployConfig("sine", max_seconds=10)
    result = deploy(config, run, tmp_path / "a", robot=robot, stop_event=stop)
    assert result.reason == "stopped" and result.steps < 50
    np.testing.assert_allclose(robot.history[-1][1], robot.last_sent)

    class FreezingRobot(SimRobot):
        """Its state stops updating after 3 commands (a dead driver)."""

        def state_age_s(self):
            return 1.0 if self.commands_sent >= 3 else 0.0

    robot = FreezingRobot(config)
    result = deploy(config, DeployConfig("sine", max_seconds=5), tmp_path / "b", robot=robot)
    assert result.reason == "fault" and "state is 1000 ms old" in (result.fault or "")
    assert result.steps == 3 and not robot.connected
    assert len(Dataset(tmp_path / "b" / "episodes")[0]) == 3  # the partial episode is kept
    events = json.loads((tmp_path / "b" / "safety_events.json").read_text())
    assert events[-1]["rule"] == "stale_state" and events[-1]["after"] is None


def test_keyboard_interrupt_mid_rollout_sends_stop(config, tmp_path):
    robot = SimRobot(config)

    class Boom:
        n = 0

        def __call__(self):
            self.n += 1
            if self.n == 5:
                raise KeyboardInterrupt
            return False

    import embodied.apps.deploy as dep

    real = dep.rollout

    def interrupting(*args, **kwargs):
        kwargs["should_stop"] = Boom()
        return real(*args, **kwargs)

    dep.rollout = interrupting
    try:
        with pytest.raises(KeyboardInterrupt):
            deploy(config, DeployConfig("sine", max_seconds=5), tmp_path, robot=robot)
    finally:
        dep.rollout = real
    assert not robot.connected
    assert len(robot.history) == 5  # 4 steps + the stop
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["reason"] == "stopped"


def test_cli_dry_run(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "embodied",
            "deploy",
            "--robot",
            str(DEFAULT_CONFIG),
            "--policy",
            "hold",
            "--dry-run",
            "--max-seconds",
            "0.5",
            "--rate",
            "20",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert '"reason": "max_steps"' in proc.stdout
    assert (out / "episodes" / "episode_000000.hdf5").exists()
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "embodied",
            "deploy",
            "--robot",
            "nope.yaml",
            "--policy",
            "hold",
            "--dry-run",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "robot config 'nope.yaml' does not exist" in bad.stderr


# ------------------------------------------------------------------ messages
def test_joint_trajectory_validates_in_both_ros_versions():
    for version in (1, 2):
        msg = messages.joint_command(
            "trajectory_msgs/JointTrajectory", ["a", "b"], np.array([0.1, 0.2]), version, 0.05
        )
        messages.validate("trajectory_msgs/JointTrajectory", msg, version)
    ros1 = messages.joint_command("trajectory_msgs/JointTrajectory", ["a"], np.array([0.1]), 1)
    with pytest.raises(messages.MessageError, match="unknown field\\(s\\) \\['seq'\\]"):
        messages.validate("trajectory_msgs/JointTrajectory", ros1, 2)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda m: m["points"][0]["positions"].__setitem__(0, float("nan")), "is nan"),
        (lambda m: m["points"][0]["positions"].__setitem__(0, "1.0"), "must be a number"),
        (lambda m: m.__setitem__("extra", 1), "unknown field"),
        (lambda m: m.pop("joint_names"), "missing field\\(s\\) \\['joint_names'\\]"),
        (lambda m: m["header"].__setitem__("seq", -1), "uint32"),
        (lambda m: m["header"]["stamp"].__setitem__("nsecs", 1.5), "int32"),
        (lambda m: m.__setitem__("points", {}), "must be a list"),
    ],
)
def test_malformed_messages_are_named(mutate, message):
    msg = messages.joint_command("trajectory_msgs/JointTrajectory", ["a"], np.array([0.1]), 1)
    mutate(msg)
    with pytest.raises(messages.MessageError, match=message):
        messages.validate("trajectory_msgs/JointTrajectory", msg, 1)


def test_other_message_types():
    arr = messages.joint_command("std_msgs/Float64MultiArray", ["a", "b"], np.array([1.0, 2.0]))
    messages.validate("std_msgs/Float64MultiArray", arr)
    messages.validate("geometry_msgs/Twist", messages.twist([0.1, 0, 0], [0, 0, 0.5]))
    messages.validate("std_msgs/Bool", {"data": True})
    with pytest.raises(messages.MessageError, match="true/false"):
        messages.validate("std_msgs/Bool", {"data": 1})
    with pytest.raises(messages.MessageError, match="no schema"):
        messages.validate("std_msgs/Nope", {})


def test_stamps_and_joint_state_parsing():
    assert messages.to_stamp(12.5, 1) == {"secs": 12, "nsecs": 500_000_000}
    assert messages.to_stamp(12.5, 2) == {"sec": 12, "nanosec": 500_000_000}
    assert messages.from_stamp({"sec": 3, "nanosec": 250_000_000}) == pytest.approx(3.25)
    assert messages.from_stamp({"secs": 3, "nsecs": 250_000_000}) == pytest.approx(3.25)
    msg = {
        "header": {"stamp": {"sec": 1, "nanosec": 0}, "frame_id": ""},
        "name": ["extra", "b", "a"],
        "position": [9.0, 2.0, 1.0],
        "velocity": [0, 0.2, 0.1],
        "effort": [],
    }
    pos, vel, stamp = messages.parse_joint_state(msg, ["a", "b"])
    np.testing.assert_allclose(pos, [1.0, 2.0])
    np.testing.assert_allclose(vel, [0.1, 0.2])
    assert stamp == 1.0
    with pytest.raises(messages.MessageError, match="lacks joints \\['c'\\]"):
        messages.parse_joint_state(msg, ["a", "c"])


def test_controller_file_needs_meta_and_a_steerable_policy(config, tmp_path):
    from embodied.errors import CompatibilityError, ConfigError

    gains = tmp_path / "gains.yaml"
    gains.write_text("type: pid\nkp: 0.5\n")
    with pytest.raises(ConfigError, match="lacks meta \\['concept', 'setpoint'\\]"):
        deploy(config, DeployConfig("hold", dry_run=True, controller=gains), tmp_path / "a")
    gains.write_text("type: pid\nkp: 0.5\nmeta: {concept: ee_speed, setpoint: 0.05}\n")
    robot = SimRobot(config)
    with pytest.raises(CompatibilityError, match="steering needs a Steerable policy"):
        deploy(config, DeployConfig("hold", controller=gains), tmp_path / "b", robot=robot)
    assert not robot.connected and robot.history  # refused before the first step, stopped


def test_ros_robot_without_a_server_fails_fast_with_the_fix(config):
    import dataclasses

    from hardware.ros.robot import RosRobot
    from hardware.ros.testing import free_port

    url = f"rosbridge://127.0.0.1:{free_port()}"
    cfg = config.with_url(url)
    cfg = dataclasses.replace(cfg, ros=dataclasses.replace(cfg.ros, connect_timeout_s=1.0))
    robot = RosRobot(cfg)
    with pytest.raises(SafetyFault, match="no rosbridge server answered at ws://127.0.0.1"):
        robot.connect()
    assert not robot.connected
    with pytest.raises(SafetyFault, match="before connect"):
        robot.send(np.zeros(4))
