"""The ROS bridge against real ROS 1 processes: rosmaster, the rospy sim robot node and the
upstream rosbridge_server (rosbridge_suite 0.11.17, from ``../shared``), driven by the
production client (roslibpy). No mocks.

Fault tests: rosbridge_server killed mid-run, robot node killed, malformed and out-of-limit commands,
a 1000-message burst, Ctrl-C during ``embodied deploy``, an e-stop fired while the bridge is down.

Timing bounds come from the robot config and the link's settings (``link_timeout_ms``,
``connect_timeout_s``, ``reconnect_max_s``, the websocket ping), never from how fast this
machine happens to be.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from embodied.apps.deploy import DeployConfig, DeployResult, deploy
from embodied.errors import ActionError, SafetyFault
from hardware import DEFAULT_CONFIG, RobotEnv
from hardware.configuration_robot import RobotConfig
from hardware.robot import LinkStatus
from hardware.ros import messages
from hardware.ros.robot import RosRobot
from hardware.ros.testing import RosTestGraph, ros_available

pytestmark = pytest.mark.ros


@pytest.fixture(scope="module")
def ros_ok() -> None:
    why = ros_available()
    if why is not None:
        pytest.fail(f"{why}; or deselect these tests with -m 'not ros'")


@pytest.fixture()
def graph(ros_ok, tmp_path):
    g = RosTestGraph(DEFAULT_CONFIG, workdir=tmp_path / "graph")
    g.start()
    yield g
    for name in ("bridge", "sim_robot"):  # shown by pytest when the test failed
        print(f"--- {name}.log ---\n{g.log_tail(name)}")
    g.stop()


def wait_for(predicate, timeout_s: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def commands(graph: RosTestGraph, kind: str = "command") -> list[dict]:
    return [c for c in graph.commands() if c["kind"] == kind]


def within_s(config: RobotConfig) -> float:
    """What the driver promises to get done in (s): reconnect (backoff capped at
    ``reconnect_max_s``), then ``connect_timeout_s`` for the robot's side to answer."""
    return config.ros.reconnect_max_s + config.ros.connect_timeout_s


def send(robot: RosRobot, target: np.ndarray) -> np.ndarray:
    """``robot.send``, waiting out a stale link: on a loaded machine the state stream can pause
    longer than ``link_timeout_ms``, and then the driver refuses (and sends nothing)."""
    deadline = time.monotonic() + within_s(robot.config)
    while True:
        try:
            return robot.send(target)
        except SafetyFault:
            if robot.link_status is LinkStatus.UP or time.monotonic() > deadline:
                raise
            time.sleep(0.005)


def run_deploy_in_thread(graph, robot, out, seconds, stop_event=None):
    result: dict[str, DeployResult | BaseException] = {}

    def target() -> None:
        try:
            result["r"] = deploy(
                graph.robot_config(),
                DeployConfig("sine", max_seconds=seconds, policy_kwargs={"amplitude_rad": 0.3}),
                out,
                robot=robot,
                stop_event=stop_event,
            )
        except BaseException as exc:
            result["error"] = exc
            raise

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, result


def test_commands_state_enable_and_estop_through_the_bridge(graph):
    robot = RosRobot(graph.robot_config())
    with robot:
        assert not commands(graph, "enable")  # a latched e-stop is never cleared implicitly
        robot.enable()  # std_srvs/Trigger through call_service
        assert commands(graph, "enable")
        state = robot.read()
        np.testing.assert_allclose(state.position_rad, [0.0, -0.3, 0.6, 0.0])
        target = state.position_rad + np.array([0.05, 0.0, -0.05, 0.0])

        def reached() -> bool:  # keep commanding: commands go stale after 200 ms on the robot
            send(robot, target)
            return bool(np.allclose(robot.read().position_rad, target, atol=1e-9))

        wait_for(reached, within_s(robot.config), "the node to reach the target")
        np.testing.assert_allclose(commands(graph)[-1]["positions"], target)

        env = RobotEnv(robot)
        safety = env.safety_filter()
        safety.estop("operator test")  # latches and triggers the robot's e-stop topic
        bound_s = within_s(robot.config)
        wait_for(lambda: commands(graph, "estop"), bound_s, "the e-stop on the ROS side")
        wait_for(lambda: robot.estop_acknowledged, bound_s, "the node to acknowledge the e-stop")
        wait_for(
            lambda: send(robot, target + 0.01) is not None and commands(graph, "ignored_estop"),
            bound_s,
            "the node to ignore commands",
        )
        robot.enable()
        assert not robot.estop_latched
        send(robot, target)
        assert safety.estopped  # the filter stays latched until cleared explicitly
    final = commands(graph)[-1]["positions"]
    assert robot.last_sent is not None
    np.testing.assert_allclose(final, robot.last_sent)  # the stop on disconnect reached ROS


def test_endpoint_killed_mid_run_no_commands_while_down_then_resume(graph, tmp_path):
    config = graph.robot_config()
    robot = RosRobot(config)
    states_rx: list[float] = []  # monotonic receive time (s) of every joint state
    robot.state_listeners.append(lambda state: states_rx.append(state.received_s))
    stop = threading.Event()  # the run ends when the test has seen the resume, not on a clock
    thread, result = run_deploy_in_thread(graph, robot, tmp_path / "run", 600, stop)
    wait_for(lambda: robot.commands_sent >= 10 or not thread.is_alive(), 30, "the deploy")
    assert thread.is_alive(), result
    t_kill = time.monotonic()
    graph.kill_endpoint()
    time.sleep(1.0)
    t_restart_wall = time.time()
    graph.start_endpoint()
    wait_for(
        lambda: any(c["t"] > t_restart_wall for c in commands(graph)) or not thread.is_alive(),
        within_s(config),
        "commands to reach ROS after the restart",
    )
    stop.set()
    thread.join(60)
    r = result["r"]
    assert r.reason == "stopped", r.fault  # no fault: the outage was within the grace
    downs = [t for t, up in robot.link_changes if not up]
    ups = [t for t, up in robot.link_changes if up and downs and t > downs[0]]
    assert downs and ups, robot.link_changes
    link = robot.last_link
    assert link is not None
    # a crashed server is seen through the TCP close; a hung one by the ping timeout at worst
    assert downs[0] - t_kill < link.dead_peer_timeout_s
    # whatever the detection took: every command handed over after the kill was backed by a
    # joint state younger than link_timeout_ms (plus one control period from the check to the
    # log entry), so nothing went out on a dead link in between
    fresh_s = config.ros.link_timeout_ms / 1e3 + 1.0 / config.control_rate_hz
    for t, _ in robot.sent_log:
        if t_kill < t < ups[0]:
            assert any(t - fresh_s <= rx <= t for rx in states_rx), t - t_kill
    sent_while_down = [t for t, _ in robot.sent_log if downs[0] < t < ups[0]]
    assert sent_while_down == []
    assert any(t > ups[0] for t, _ in robot.sent_log)  # resumed after the reconnect
    assert any(c["t"] > t_restart_wall for c in commands(graph))  # ... and reached ROS
    assert r.summary["link_losses"] >= 1 and r.summary["link"]["connects"] == 2
    assert r.summary["steps_without_command"] >= 5


def test_reopened_link_is_reconnecting_until_the_state_stream_is_back(graph):
    """After a bridge restart the websocket opens before the bridge's new ROS subscription
    delivers a joint state (ROS 1 connects asynchronously; a slow machine takes seconds). That
    is a reconnect in progress - no commands, no watchdog fault - for up to connect_timeout_s,
    the allowance of the first connect; only then is the silent robot stale."""
    config = graph.robot_config()
    config = dataclasses.replace(config, ros=dataclasses.replace(config.ros, connect_timeout_s=3.0))
    robot = RosRobot(config)
    with robot:
        link = robot.link
        assert link is not None
        graph.kill_node()  # no joint states after the reopen until it is restarted
        graph.kill_endpoint()
        wait_for(
            lambda: robot.link_status is LinkStatus.DISCONNECTED,
            link.dead_peer_timeout_s,
            "the link to drop",
        )
        graph.start_endpoint()
        wait_for(lambda: link.connected, within_s(config), "the websocket to reopen")
        reconnecting_s = config.ros.connect_timeout_s / 2  # well inside the allowance
        while time.monotonic() - link.opened_s < reconnecting_s:
            assert robot.link_status is LinkStatus.DISCONNECTED
            assert robot.state_age_s() is None  # the watchdog waits, the reconnect grace runs
            time.sleep(0.02)
        wait_for(
            lambda: robot.link_status is LinkStatus.STALE,
            config.ros.connect_timeout_s,
            "the silent robot to count as stale",
        )
        age_s = robot.state_age_s()  # now the watchdog fires
        assert age_s is not None and age_s * 1e3 > config.safety.stale_state_ms
        graph.start_node()
        wait_for(lambda: robot.link_status is LinkStatus.UP, within_s(config), "fresh state")


def test_robot_node_killed_watchdog_stops_the_loop(graph, tmp_path):
    robot = RosRobot(graph.robot_config())
    thread, result = run_deploy_in_thread(graph, robot, tmp_path / "run", seconds=20)
    wait_for(lambda: robot.commands_sent >= 10 or not thread.is_alive(), 30, "the deploy")
    assert thread.is_alive(), result
    graph.kill_node()
    thread.join(30)
    r = result["r"]
    assert r.reason == "fault" and "ms old" in (r.fault or ""), r.fault
    assert r.summary["safety"]["estop"] is not None  # the fault latched the e-stop
    last_state = robot._latest()
    assert last_state is not None
    # a command decided while the state was fresh is logged at most one control period later
    timeout_s = robot.config.ros.link_timeout_ms / 1e3 + 1.0 / robot.config.control_rate_hz
    late = [q for t, q in robot.sent_log if t > last_state.received_s + timeout_s]
    assert late, "the stop command is sent after the fault"
    for target in late:  # once the state went stale: nothing but stop (hold) commands
        np.testing.assert_allclose(target, last_state.position_rad)


def test_malformed_and_out_of_limit_commands_rejected_before_sending(graph, monkeypatch):
    """Client-side validation is the only guard: rosbridge_server answers a malformed publish
    with nothing the client can act on (see the next test). So a bad command must be refused
    before a single byte of it is written to the websocket."""
    robot = RosRobot(graph.robot_config())
    with robot:
        link = robot.link
        assert link is not None
        good = messages.joint_command(
            "trajectory_msgs/JointTrajectory", robot.config.joint_names, robot.read().position_rad
        )
        bad_msgs = []
        for mutate in (
            lambda m: m.__setitem__("speed", 1.0),
            lambda m: m["points"][0]["positions"].__setitem__(1, float("nan")),
            lambda m: m["points"][0]["positions"].__setitem__(1, "0.3"),
            lambda m: m["header"]["stamp"].pop("nsecs"),
        ):
            msg = json.loads(json.dumps(good))
            mutate(msg)
            bad_msgs.append(msg)

        # spy on every websocket message the client writes (all go through sendMessage)
        proto_cls = type(link._proto)
        real_send = proto_cls.sendMessage
        frames: list[dict] = []

        def spy(self, payload, *args, **kwargs):
            frames.append(json.loads(payload))
            return real_send(self, payload, *args, **kwargs)

        monkeypatch.setattr(proto_cls, "sendMessage", spy)
        connects, sent_before = link.stats.connects, link.stats.sent
        for msg in bad_msgs:
            with pytest.raises(messages.MessageError):
                robot.publish_raw(msg)
        with pytest.raises(ActionError, match="non-finite"):
            robot.send(np.array([0.0, np.nan, 0.0, 0.0]))
        assert link.stats.rejected_invalid == 4 and link.stats.sent == sent_before
        # the spy sees real traffic: a valid message right after is written, and only it
        assert robot.publish_raw(good)
        wait_for(lambda: link.stats.sent > sent_before, 5, "the valid message to be written")
        monkeypatch.undo()
        assert link.stats.connects == connects  # one connection throughout: the spy saw it all
        published = [f for f in frames if f.get("op") == "publish"]
        assert [f["msg"] for f in published] == [good], frames

        # out of limit: the safety filter clips, the robot clips again; ROS sees in-limit only
        env = RobotEnv(robot)
        obs, _ = env.reset()
        safety = env.safety_filter()
        wild = np.array([9.0, -9.0, 9.0, -9.0])
        filtered = safety(wild, obs)
        assert {e.rule for e in safety.events} >= {"joint_limits", "max_step", "velocity"}

        def delivered() -> bool:  # sent once: the driver re-sends until the robot has it
            cmds = commands(graph)
            return bool(cmds) and np.allclose(cmds[-1]["positions"], sent)

        sent = send(robot, wild)
        np.testing.assert_allclose(sent, [2.5, -1.5, 2.0, -3.0])
        wait_for(delivered, within_s(robot.config), "the clipped command on the ROS side")
        assert np.all(np.abs(filtered - obs["state"][:4]) <= 0.15 + 1e-6)
    assert not commands(graph, "rejected")  # no malformed command ever reached the node


def test_real_server_only_logs_a_malformed_publish_and_keeps_serving(graph):
    """What rosbridge_server (0.11.17) does with a malformed publish that does reach it: it
    logs an error on its side and drops the message - no ``status`` to the client, nothing on
    ROS - and keeps serving the connection. Why the client must validate before sending."""
    robot = RosRobot(graph.robot_config())
    with robot:
        link = robot.link
        assert link is not None
        topic = robot.config.ros.command.topic
        raw = {"op": "publish", "topic": topic, "msg": {"points": "not a list"}}
        link._proto.send_message(json.dumps(raw).encode("utf8"))  # bypasses validation
        logged = f"publish: {robot.config.ros.command.type} message requires"  # its ERROR line
        wait_for(
            lambda: logged in graph.log_tail("bridge", 20000),
            within_s(robot.config),
            "the server to log the malformed publish",
        )
        # the server survived and still serves this connection: state in, commands out
        target = robot.read().position_rad + np.array([0.03, 0.0, 0.0, 0.0])

        def reached() -> bool:
            send(robot, target)
            return bool(np.allclose(robot.read().position_rad, target, atol=1e-9))

        wait_for(reached, within_s(robot.config), "a valid command after the malformed one")
        assert graph.procs["bridge"].poll() is None
        assert link.stats.connects == 1 and link.stats.disconnects == 0
        # rosbridge 0.11.17 only logs: the client was told nothing it could act on
        assert link.stats.server_errors == []
    assert not commands(graph, "rejected")  # the node never saw the malformed message


def test_burst_of_1000_commands_is_latest_wins_and_bounded(graph):
    robot = RosRobot(graph.robot_config())
    with robot:
        link = robot.link
        assert link is not None
        home = robot.read().position_rad.copy()
        # rosbridge 0.11.17 replays to a subscriber that connects within 1 s of the topic's
        # publisher being created everything published in that second, after the live
        # messages it already got (PublisherConsistencyListener): a reordering on the server
        # that no client can prevent. The burst starts once the node is connected and that
        # window is over, so what the node receives shows the order our link wrote.
        # the node's subscriber connects to the bridge's new publisher asynchronously (ROS 1):
        # the driver re-sends this first target until the robot's state shows it
        send(robot, home + np.array([0.0, 1e-4, 0.0, 0.0]))
        wait_for(lambda: bool(commands(graph)), within_s(robot.config), "the first command")
        time.sleep(1.1)
        n_before = len(commands(graph))
        sent_before = link.stats.sent
        max_pending = 0
        targets = [home + np.array([1e-4 * k, 0.0, 0.0, 0.0]) for k in range(1, 1001)]
        for target in targets:
            send(robot, target)
            max_pending = max(max_pending, link.pending_count)
        stats = link.stats
        assert max_pending <= 1  # one slot per topic, never a queue
        assert stats.published == 1001 and robot.commands_sent == 1001

        def newest_arrived() -> bool:
            got = commands(graph)  # empty until the first command reached the node
            return bool(got) and np.allclose(got[-1]["positions"], targets[-1])

        wait_for(newest_arrived, within_s(robot.config), "the newest command to arrive")
        wait_for(
            lambda: np.allclose(robot.read().position_rad, targets[-1], atol=1e-9),
            within_s(robot.config),
            "the robot to reach the newest target",
        )
        wait_for(
            lambda: stats.sent + stats.superseded == stats.published + stats.resent,
            within_s(robot.config),
            "the flush",
        )
        received = commands(graph)[n_before:]
        sent = stats.sent - sent_before  # read after: it only grows
        assert stats.resent == robot.commands_resent
        # every command the node got was written to the websocket: superseded ones never were
        assert len(received) <= sent
        # ... in order, never an older target after a newer one (latest-wins, not a queue)
        steps = [round((c["positions"][0] - home[0]) / 1e-4) for c in received]
        assert steps == sorted(steps) and steps[-1] == 1000, steps
        assert link.latest(robot.config.ros.state.topic) is not None


def test_ctrl_c_during_deploy_sends_stop_command(graph, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "embodied",
            "deploy",
            "--robot",
            graph.url,
            "--policy",
            "sine",
            "--max-seconds",
            "60",
            "--out",
            str(out),
            "--policy-arg",
            "amplitude_rad=0.3",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(
            lambda: len(commands(graph)) >= 10 or proc.poll() is not None,
            60,
            "deploy to send commands",
        )
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
        assert '"reason": "stopped"' in stdout
    finally:
        if proc.poll() is None:
            proc.kill()
            print(proc.communicate())
    assert proc.returncode == 130, stderr
    assert "SIGINT: stopping" in stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["reason"] == "stopped"
    stop = summary["stop_command_rad"]
    wait_for(  # the stop left before the close frame; the node logs it when it arrives
        lambda: np.allclose(commands(graph)[-1]["positions"], stop, atol=1e-12),
        within_s(graph.robot_config()),
        "the stop command on the ROS side",
    )
    with RosRobot(graph.robot_config()) as observer:  # the robot holds at the stop position
        np.testing.assert_allclose(observer.read().position_rad, stop, atol=1e-6)
    assert (out / "episodes" / "episode_000000.hdf5").exists()


def test_float64_array_commands_trigger_estop_and_camera(ros_ok, tmp_path):
    import yaml

    data = yaml.safe_load(DEFAULT_CONFIG.read_text())
    data["ros"]["command"] = {"topic": "/arm/position_cmd", "type": "std_msgs/Float64MultiArray"}
    data["ros"]["estop"] = {"topic": "/arm/estop_srv", "type": "std_srvs/Trigger"}
    data["ros"]["camera"] = {
        "topic": "/wrist/image/compressed",
        "type": "sensor_msgs/CompressedImage",
    }
    data["ros"]["camera_size"] = [48, 64]
    path = tmp_path / "variant.yaml"
    path.write_text(yaml.safe_dump(data))
    with RosTestGraph(path, workdir=tmp_path / "graph") as graph:
        robot = RosRobot(graph.robot_config())
        with robot:
            env = RobotEnv(robot)
            obs, _ = env.reset()
            env.observation_spec.validate(obs)
            image = obs["image.wrist"]
            assert image.shape == (48, 64, 3) and image.dtype == np.uint8
            assert image[..., 2].max() > image[..., 2].min()  # the node's gradient came through
            target = obs["state"][:4].astype(np.float64) + 0.02

            def arrived() -> bool:
                send(robot, target)
                cmds = commands(graph)
                return bool(cmds) and np.allclose(cmds[-1]["positions"], target)

            wait_for(arrived, within_s(robot.config), "a Float64MultiArray command at ROS")
            robot.estop()  # std_srvs/Trigger service through call_service
            wait_for(lambda: commands(graph, "estop"), within_s(robot.config), "the Trigger e-stop")
            wait_for(lambda: robot.estop_acknowledged, within_s(robot.config), "the service ack")


@pytest.mark.parametrize("estop", ["topic", "service"])
def test_estop_fired_while_bridge_down_is_latched_and_delivered_after_restart(
    ros_ok, tmp_path, caplog, estop
):
    """The e-stop is latched: fired while the bridge is dead, it reaches the robot node once the
    bridge is back, is re-sent until the robot acknowledges it, and the log says what happened.
    ``topic``: std_msgs/Bool acknowledged on ros.estop_state; ``service``: std_srvs/Trigger."""
    import yaml

    data = yaml.safe_load(DEFAULT_CONFIG.read_text())
    if estop == "service":
        data["ros"]["estop"] = {"topic": "/arm/estop_srv", "type": "std_srvs/Trigger"}
        data["ros"].pop("estop_state", None)
    path = tmp_path / "robot.yaml"
    path.write_text(yaml.safe_dump(data))
    with RosTestGraph(path, workdir=tmp_path / "graph") as graph:
        config = graph.robot_config()
        bound_s = within_s(config)
        robot = RosRobot(config)
        with robot:
            link = robot.link
            assert link is not None
            graph.kill_endpoint()
            wait_for(
                lambda: robot.link_status is LinkStatus.DISCONNECTED,
                link.dead_peer_timeout_s,
                "the link to drop",
            )
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="hardware.ros"):
                robot.estop()
            fired_log = caplog.text
            assert not commands(graph, "estop")

            graph.start_endpoint()
            wait_for(lambda: commands(graph, "estop"), bound_s, "the e-stop at the robot node")
            # the log never claimed a delivery that did not happen
            assert "NOT sent" in fired_log and "published" not in fired_log, fired_log
            assert robot.estop_latched
            wait_for(lambda: robot.estop_acknowledged, bound_s, "the robot to acknowledge it")
            assert robot.estop_log[0][1] == "down"
            assert "acknowledged" in caplog.text, caplog.text

            # acknowledged: no more re-sends; the node ignores commands until enable()
            time.sleep(robot.estop_resend_s)  # a send decided just before the ack may land
            received = len(commands(graph, "estop"))
            time.sleep(4 * robot.estop_resend_s)
            assert len(commands(graph, "estop")) == received
            target = robot.read().position_rad + np.array([0.02, 0.0, 0.0, 0.0])
            wait_for(
                lambda: send(robot, target) is not None and commands(graph, "ignored_estop"),
                bound_s,
                "the node to ignore commands while e-stopped",
            )
            robot.enable()
            assert not robot.estop_latched and not robot.estop_acknowledged

            def reached() -> bool:
                send(robot, target)
                return bool(np.allclose(robot.read().position_rad, target, atol=1e-9))

            wait_for(reached, bound_s, "the node to move again after enable()")
            time.sleep(4 * robot.estop_resend_s)  # nothing re-sends the cleared e-stop
            assert commands(graph, "enable")[-1]["t"] > commands(graph, "estop")[-1]["t"]
