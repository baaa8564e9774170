"""``embodied bench ros``: command round trip and command throughput through rosbridge.

Starts the local ROS 1 test graph itself (rosmaster, the sim robot node in bench mode, the
upstream rosbridge_server 0.11.17; all on 127.0.0.1) and drives it with the production client
(:class:`hardware.ros.robot.RosRobot`, roslibpy):

* ``rtt_ms_p50`` / ``rtt_ms_p99``: a joint target goes out (validated JointTrajectory over the
  websocket, relayed to ROS), the node applies it, and the first ``JointState`` carrying exactly
  that target comes back through the bridge; the time in between, in ms.
* ``commands_per_s``: commands per second that reach the ROS node while the client sends as
  fast as it can (latest-wins: superseded commands are not counted as delivered).
* ``disconnect_detect_ms_max``: from SIGKILL of rosbridge_server to the client's link-down event.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from embodied.errors import SafetyFault
from hardware.configuration_robot import DEFAULT_CONFIG
from hardware.robot import LinkStatus, RobotState
from hardware.ros.robot import RosRobot
from hardware.ros.testing import RosTestGraph


def wait_until(predicate: Callable[[], bool], timeout_s: float) -> None:
    """Poll ``predicate`` every 1 ms until it holds (TimeoutError after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout_s} s")
        time.sleep(0.001)


def run(quick: bool = False) -> dict[str, Any]:
    """Run the benchmark; returns the JSON object."""
    n_rtt = 60 if quick else 400
    window_s = 1.0 if quick else 3.0
    with RosTestGraph(DEFAULT_CONFIG, bench=True) as graph:
        robot = RosRobot(graph.robot_config())
        with robot:
            assert robot.link is not None
            counts: list[int] = []
            robot.link.subscribe(
                "/sim_robot/commands_received",
                "std_msgs/UInt64",
                lambda m: counts.append(int(m["data"])),
            )
            home = robot.read().position_rad.copy()
            want: dict[str, Any] = {"q0": None}
            arrived = threading.Event()

            def on_state(state: RobotState) -> None:
                q0 = want["q0"]
                if q0 is not None and abs(state.position_rad[0] - q0) < 1e-12:
                    want["t"] = time.perf_counter()
                    arrived.set()

            robot.state_listeners.append(on_state)
            rtts: list[float] = []
            timeouts = stale = 0
            for k in range(n_rtt + 20):
                target = home.copy()
                target[0] = home[0] + 1e-4 * ((k % 500) + 1) * (1 if k % 2 else -1)
                arrived.clear()
                want["q0"] = float(target[0])
                wait_until(lambda: robot.link_status is LinkStatus.UP, 10)
                t_send = time.perf_counter()
                try:
                    robot.send(target)
                except SafetyFault:  # the state stream paused > link timeout (loaded machine)
                    stale += 1
                    continue
                if arrived.wait(1.0):
                    if k >= 20:  # warm-up excluded
                        rtts.append((want["t"] - t_send) * 1e3)
                elif k >= 20:
                    timeouts += 1
                want["q0"] = None
                time.sleep(0.002)
            robot.state_listeners.clear()

            time.sleep(0.3)
            c0 = counts[-1] if counts else 0
            sent = 0
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < window_s:
                target = home.copy()
                target[1] = home[1] + 1e-5 * (sent % 1000)
                try:
                    robot.send(target)
                except SafetyFault:
                    stale += 1
                    time.sleep(0.001)
                    continue
                sent += 1
            elapsed = time.perf_counter() - t0
            time.sleep(0.5)  # let the last commands arrive and the counter publish
            delivered = (counts[-1] if counts else 0) - c0
            stats = robot.link.stats

            detect_ms: list[float] = []
            for rep in range(1 if quick else 3):
                if rep:
                    graph.start_endpoint()
                    wait_until(lambda: robot.link_status is LinkStatus.UP, 30)
                n_changes = len(robot.link_changes)
                t_kill = time.monotonic()
                graph.kill_endpoint()

                def changed(n: int = n_changes) -> bool:
                    return len(robot.link_changes) > n

                wait_until(changed, 5)
                detect_ms.append((robot.link_changes[n_changes][0] - t_kill) * 1e3)
    arr = np.asarray(rtts)
    return {
        "rtt_ms_p50": float(np.percentile(arr, 50)) if len(arr) else float("nan"),
        "rtt_ms_p99": float(np.percentile(arr, 99)) if len(arr) else float("nan"),
        "rtt_ms_mean": float(arr.mean()) if len(arr) else float("nan"),
        "rtt_samples": len(arr),
        "rtt_timeouts": timeouts,
        "sends_refused_link_stale": stale,
        "commands_per_s": delivered / elapsed,
        "commands_accepted_per_s": sent / elapsed,
        "commands_superseded": int(stats.superseded),
        "disconnect_detect_ms_max": max(detect_ms),
        "transport": "roslibpy (twisted) -> rosbridge_server 0.11.17 (autobahn) -> rospy, loopback",
    }
