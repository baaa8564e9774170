"""A local ROS 1 test graph: rosmaster, the sim robot node and the real rosbridge_server.

Try ``embodied deploy`` without a robot::

    python -m hardware.ros.testing          # prints rosbridge://127.0.0.1:PORT, Ctrl-C stops
    embodied deploy --robot rosbridge://127.0.0.1:PORT --policy sine --out runs/x

The bridge is upstream ``rosbridge_server`` (rosbridge_suite 0.11.17, unmodified, from
``../shared/rosbridge_suite``; see :mod:`hardware.ros.testing.rosbridge_server`). Needs
Debian's :data:`APT_PACKAGES` (the ROS processes run under ``/usr/bin/python3``; override with
``ROS_PYTHON``). Every process binds 127.0.0.1 (``ROS_IP``), uses a free port, runs in its own
process group and is stopped by the graph that started it, and only by it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from embodied.errors import ConfigError
from embodied.io import free_port
from hardware.configuration_robot import DEFAULT_CONFIG, RobotConfig, load_robot_config
from hardware.ros.testing import rosbridge_server

HERE = Path(__file__).resolve().parent
ROS_PYTHON = os.environ.get("ROS_PYTHON", "/usr/bin/python3")
APT_PACKAGES = (
    "ros-core python3-rospy python3-sensor-msgs python3-trajectory-msgs "
    "python3-geometry-msgs python3-std-msgs python3-std-srvs " + rosbridge_server.APT_PACKAGES
)


def pattern_rgb8(width: int, height: int) -> Any:
    """The node's camera test pattern as a uint8 (height, width, 3) array: pixel (x, y) is
    (x mod 256, y mod 256, (x + 2 y) mod 256)."""
    import numpy as np

    x = np.arange(width)[None, :]
    y = np.arange(height)[:, None]
    return np.stack(np.broadcast_arrays(x % 256, y % 256, (x + 2 * y) % 256), axis=-1).astype(
        np.uint8
    )


def ros_available() -> str | None:
    """None if the test graph can start here, else why not (with the fix)."""
    if shutil.which("rosmaster") is None:
        return f"rosmaster not found (fix: apt-get install -y {APT_PACKAGES})"
    if not Path(ROS_PYTHON).exists():
        return f"{ROS_PYTHON} not found (fix: set ROS_PYTHON to a python with rospy)"
    probe = subprocess.run(
        [
            ROS_PYTHON,
            "-c",
            "import rospy, std_srvs.srv, trajectory_msgs.msg, sensor_msgs.msg, "
            + rosbridge_server.SERVER_MODULES,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        return f"{ROS_PYTHON} lacks ROS modules: {last} (fix: apt-get install -y {APT_PACKAGES})"
    return rosbridge_server.missing()


def _wait_port(port: int, proc: subprocess.Popen[Any], what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ConfigError(f"{what} exited with code {proc.returncode} during start-up")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise ConfigError(f"{what} did not listen on 127.0.0.1:{port} within {timeout_s} s")


class RosTestGraph:
    """Starts and stops rosmaster, the sim robot node and rosbridge_server (``bridge``).

    Args:
        config: Robot config file the sim node reads (joints, limits, topics).
        bench: Start the node in bench mode (targets reached at once, state echoed).
        workdir: Folder for logs and the node's command log (default: a temp folder).
        node_rate_hz: Joint state rate (Hz) of the node.
        camera_hz: The node also publishes ``sensor_msgs/Image`` frames (rgb8, the pattern
            of :func:`pattern_rgb8`) on ``camera_topic`` at this rate (0: no camera).
        camera_topic: Topic of those frames.
        camera_size: (width, height) of those frames (pixels).
        log_states: The node also logs every joint state it publishes (kind ``state``).
    """

    def __init__(
        self,
        config: str | os.PathLike[str] = DEFAULT_CONFIG,
        bench: bool = False,
        workdir: str | os.PathLike[str] | None = None,
        node_rate_hz: float = 100.0,
        camera_hz: float = 0.0,
        camera_topic: str = "/camera/image_raw",
        camera_size: tuple[int, int] = (640, 480),
        log_states: bool = False,
    ) -> None:
        self.config_path = Path(config)
        self.log_states = log_states
        self.bench = bench
        self.node_rate_hz = node_rate_hz
        self.camera = (camera_hz, camera_topic, camera_size)
        self._tmp = None if workdir else tempfile.TemporaryDirectory(prefix="rosgraph-")
        self.workdir = Path(workdir) if workdir else Path(self._tmp.name)  # type: ignore[union-attr]
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.command_log = self.workdir / "commands.jsonl"
        self.master_port = 0
        self.bridge_port = 0
        self.procs: dict[str, subprocess.Popen[Any]] = {}
        self.env = dict(os.environ)
        self._rosbridge: rosbridge_server.RosbridgeSetup | None = None

    # ---------------------------------------------------------------- processes
    def _spawn(
        self, name: str, argv: list[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen[Any]:
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - owned by the process
        proc = subprocess.Popen(
            argv,
            env=self.env if env is None else env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # own process group: we stop exactly what we started
        )
        log.close()
        self.procs[name] = proc
        return proc

    def _kill(self, name: str, sig: int = signal.SIGKILL, timeout_s: float = 5) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)

    def start(self) -> RosTestGraph:
        """Start rosmaster, the node and rosbridge_server; return when all are reachable."""
        why = ros_available()
        if why is not None:
            raise ConfigError(f"cannot start the ROS test graph: {why}")
        self.master_port = free_port()
        self.env.update(
            {
                "ROS_MASTER_URI": f"http://127.0.0.1:{self.master_port}",
                "ROS_IP": "127.0.0.1",
                "ROS_HOME": str(self.workdir / "ros_home"),
                "ROS_LOG_DIR": str(self.workdir / "ros_log"),
                "PYTHONUNBUFFERED": "1",
            }
        )
        self.env.pop("ROS_HOSTNAME", None)
        self.env.pop("PYTHONPATH", None)  # the ROS processes use Debian's python, not our venv
        try:
            self._rosbridge = rosbridge_server.prepare(self.workdir / "rosbridge", ROS_PYTHON)
            master = self._spawn("rosmaster", ["rosmaster", "--core", "-p", str(self.master_port)])
            _wait_port(self.master_port, master, "rosmaster", 30)
            self.start_node()
            self.bridge_port = free_port()
            self.start_endpoint()
        except BaseException:
            self.stop()
            raise
        return self

    def start_node(self, timeout_s: float = 60) -> None:
        """(Re)start the sim robot node; return once it has its publishers up."""
        argv = [
            ROS_PYTHON,
            str(HERE / "sim_robot_node.py"),
            "--config",
            str(self.config_path),
            "--rate-hz",
            str(self.node_rate_hz),
            "--log",
            str(self.command_log),
        ]
        if self.bench:
            argv.append("--bench")
        if self.log_states:
            argv.append("--log-states")
        camera_hz, camera_topic, (width, height) = self.camera
        if camera_hz > 0:
            argv += ["--camera-hz", str(camera_hz), "--camera-topic", camera_topic]
            argv += ["--camera-size", f"{width}x{height}"]
        log = self.workdir / "sim_robot.log"
        offset = log.stat().st_size if log.exists() else 0
        proc = self._spawn("sim_robot", argv)
        deadline = time.monotonic() + timeout_s
        while b"READY sim_robot" not in log.read_bytes()[offset:]:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise ConfigError(
                    f"the sim robot node did not start (log {log}):\n{self.log_tail('sim_robot')}"
                )
            time.sleep(0.05)

    def record_bag(self, path: str | os.PathLike[str], topics: list[str]) -> None:
        """Start ROS 1's own ``rosbag record -O PATH TOPICS...`` on this graph; return once it
        has written the first messages (it has subscribed). :meth:`stop_bag` closes it."""
        path = Path(path)
        self._spawn("rosbag", ["rosbag", "record", "--tcpnodelay", "-O", str(path), *topics])
        active = path.with_name(path.name + ".active")
        deadline = time.monotonic() + 60
        while not (active.exists() and active.stat().st_size > 8192):
            proc = self.procs["rosbag"]
            if proc.poll() is not None or time.monotonic() > deadline:
                raise ConfigError(f"rosbag record did not start:\n{self.log_tail('rosbag')}")
            time.sleep(0.05)

    def stop_bag(self) -> None:
        """Stop ``rosbag record`` with SIGINT (it closes and indexes the bag)."""
        self._kill("rosbag", signal.SIGINT, timeout_s=30)

    def log_tail(self, name: str, chars: int = 2000) -> str:
        """The end of process ``name``'s log (``bridge``, ``sim_robot``, ``rosmaster``)."""
        log = self.workdir / f"{name}.log"
        return log.read_text(errors="replace")[-chars:] if log.exists() else ""

    def start_endpoint(self, timeout_s: float = 60) -> None:
        """(Re)start rosbridge_server on :attr:`bridge_port`; return once its websocket accepts."""
        if self._rosbridge is None:
            raise ConfigError("start() the graph before its rosbridge_server")
        proc = self._spawn(
            "bridge",
            self._rosbridge.argv(self.bridge_port),
            env=self._rosbridge.env(self.env),
        )
        try:
            rosbridge_server.wait_websocket(self.bridge_port, proc, timeout_s)
        except ConfigError as exc:
            raise ConfigError(f"{exc}; its log:\n{self.log_tail('bridge')}") from None

    def kill_endpoint(self) -> None:
        """SIGKILL rosbridge_server (a crash, not a clean shutdown)."""
        self._kill("bridge")

    def kill_node(self) -> None:
        """SIGKILL the sim robot node."""
        self._kill("sim_robot")

    def stop(self) -> None:
        """Stop every process this graph started (SIGTERM to all, then SIGKILL stragglers)."""
        self.stop_bag()
        procs = [
            (n, self.procs.pop(n)) for n in ("bridge", "sim_robot", "rosmaster") if n in self.procs
        ]
        for _name, proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for _name, proc in procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> RosTestGraph:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---------------------------------------------------------------- views
    @property
    def url(self) -> str:
        """``rosbridge://127.0.0.1:PORT`` of the rosbridge_server."""
        return f"rosbridge://127.0.0.1:{self.bridge_port}"

    def robot_config(self) -> RobotConfig:
        """The robot config pointing at this graph's rosbridge_server."""
        return load_robot_config(self.config_path).with_url(self.url)

    def commands(self) -> list[dict[str, Any]]:
        """Entries of the node's command log (``t`` is wall time, s)."""
        import json

        if not self.command_log.exists():
            return []
        lines = self.command_log.read_text().splitlines()
        return [json.loads(x) for x in lines if x.strip()]


def main() -> None:
    """``python -m hardware.ros.testing [config.yaml]``: run the graph until Ctrl-C."""
    config = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_CONFIG
    with RosTestGraph(config, workdir=tempfile.mkdtemp(prefix="rosgraph-")) as graph:
        print(
            f"ROS test graph up: {graph.url}  (logs in {graph.workdir}; Ctrl-C stops)", flush=True
        )
        with contextlib.suppress(KeyboardInterrupt):
            while all(p.poll() is None for p in graph.procs.values()):
                time.sleep(0.5)
