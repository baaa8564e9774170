#!/usr/bin/env python3
"""A rospy sim-robot node (ROS 1) standing in for a real arm driver.

Runs under the system ``/usr/bin/python3`` (Debian's ``python3-rospy``), pure Python: no numpy,
no ``embodied`` imports. Behaviour:

* publishes ``sensor_msgs/JointState`` on the state topic at ``--rate-hz`` (100 Hz);
* takes joint position targets as ``trajectory_msgs/JointTrajectory`` (first point, joints by
  name) or ``std_msgs/Float64MultiArray`` (joint order) on the command topic, and moves each
  joint towards its target at up to its velocity limit, within its position limits;
* stale commands (older than ``command_timeout_ms``): holds position, velocity zero;
* a JointTrajectory whose ``header.stamp`` is older than ``command_timeout_ms`` when it
  arrives (held up in the network) is dropped unexecuted and logged ``expired``, as
  ros_control's trajectory controller drops trajectories that lie in the past;
* ``std_msgs/Bool`` e-stop topic (true latches a stop) or ``std_srvs/Trigger`` e-stop service,
  ``std_srvs/Trigger`` enable service (clears it); with ``ros.estop_state`` in the config it
  publishes whether its e-stop is latched (``std_msgs/Bool``, latched topic, at 10 Hz and at
  once on every change): the acknowledgement the driver waits for;
* ``--log FILE`` appends one JSON line per received command / e-stop / enable (wall time),
  so tests observe exactly what reached the ROS side;
* ``--bench``: targets are reached at once and a state is published right after each
  command, so the round trip command -> matching state can be timed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import socket
import struct
import sys
import threading
import time
import zlib

import rospy
import yaml
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import Bool, Float64MultiArray, UInt64
from std_srvs.srv import Trigger, TriggerResponse
from trajectory_msgs.msg import JointTrajectory


def pattern_rgb8(width: int, height: int) -> bytes:
    """The test pattern of ``sensor_msgs/Image`` frames: pixel (x, y) is
    (x mod 256, y mod 256, (x + 2 y) mod 256), rows packed (step = 3 width)."""
    rows = []
    for y in range(height):
        row = bytearray(3 * width)
        row[0::3] = bytes(x % 256 for x in range(width))
        row[1::3] = bytes([y % 256]) * width
        row[2::3] = bytes((x + 2 * y) % 256 for x in range(width))
        rows.append(bytes(row))
    return b"".join(rows)


def png_rgb(width: int, height: int, pixel) -> bytes:
    """A PNG (RGB, 8 bit) of ``pixel(x, y) -> (r, g, b)``, encoded with zlib only."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(
        b"\x00" + bytes(c for x in range(width) for c in pixel(x, y)) for y in range(height)
    )
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


class NoDelay(rospy.SubscribeListener):
    """Sets TCP_NODELAY on every subscriber connection of a publisher (issue 16).

    rospy lets the *subscriber's* connection header decide (``tcp_nodelay`` '0' or '1'), and
    ``Publisher(tcp_nodelay=True)`` is used only when that header is absent; rosbridge_server's
    subscribers always send '0'. Without this, the node's joint states to the server went out
    under Nagle: a state written while the previous one is unacknowledged waits for the
    server's delayed ACK (up to 40 ms). A real driver can do the same for its state topic.
    """

    def __init__(self) -> None:
        super().__init__()
        self.publisher: rospy.Publisher | None = None

    def peer_subscribe(self, topic_name, topic_publish, peer_publish) -> None:
        impl = getattr(self.publisher, "impl", None)
        for conn in list(getattr(impl, "connections", None) or []):
            sock = getattr(conn, "socket", None)
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def wait_tick(next_t: float, period: float) -> float:
    """Sleep until ``period`` seconds after the tick ``next_t`` (monotonic s); return that tick.

    A late loop restarts its schedule from now instead of publishing a burst to catch up.
    (The same pacing as ``embodied.loop``'s, written here because this node imports nothing
    of ``embodied``.)
    """
    next_t += period
    delay = next_t - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    else:
        next_t = time.monotonic()
    return next_t


def nodelay_publisher(topic: str, data_class: type, **kwargs: object) -> rospy.Publisher:
    """A rospy publisher whose connections all have TCP_NODELAY (see :class:`NoDelay`)."""
    listener = NoDelay()
    pub = rospy.Publisher(topic, data_class, subscriber_listener=listener, **kwargs)
    listener.publisher = pub
    return pub


class CameraNode(threading.Thread):
    """Publishes ``sensor_msgs/Image`` frames (rgb8 :func:`pattern_rgb8`) at ``rate_hz`` on a
    thread of its own; ``header.seq`` counts frames and ``header.stamp`` is the publish time."""

    def __init__(self, topic: str, width: int, height: int, rate_hz: float) -> None:
        super().__init__(name="camera", daemon=True)
        self.pub = nodelay_publisher(topic, Image, queue_size=1)
        self.msg = Image(height=height, width=width, encoding="rgb8", is_bigendian=0)
        self.msg.step = 3 * width
        self.msg.data = pattern_rgb8(width, height)
        self.rate_hz = rate_hz

    def run(self) -> None:
        period = 1.0 / self.rate_hz
        next_t = time.monotonic()
        seq = 0
        while not rospy.is_shutdown():
            seq += 1
            self.msg.header.seq = seq
            self.msg.header.stamp = rospy.Time.now()
            self.pub.publish(self.msg)
            next_t = wait_tick(next_t, period)


class SimRobotNode:
    """Integrates joint position commands and publishes joint states."""

    def __init__(
        self,
        cfg: dict,
        rate_hz: float,
        log_path: str | None,
        bench: bool,
        log_states: bool = False,
    ) -> None:
        self.log_states = log_states  # every published joint state into the log too
        joints = cfg["joints"]
        self.names = [j["name"] for j in joints]
        self.lower = [float(j["lower_rad"]) for j in joints]
        self.upper = [float(j["upper_rad"]) for j in joints]
        self.vmax = [float(j.get("max_velocity_rad_s", 1.0)) for j in joints]
        home = cfg.get("home_rad") or [
            (lo + hi) / 2 for lo, hi in zip(self.lower, self.upper, strict=False)
        ]
        self.q = [float(x) for x in home]
        self.qd = [0.0] * len(self.q)
        self.target: list[float] | None = None
        self.t_cmd = -1e9
        self.timeout_s = float(cfg.get("command_timeout_ms", 200.0)) / 1e3
        self.rate_hz = rate_hz
        self.bench = bench
        self.estopped = False
        self.received = 0
        self.rejected = 0
        self.lock = threading.Lock()
        self.log = open(log_path, "a", buffering=1) if log_path else None  # noqa: SIM115
        ros = cfg.get("ros", {})
        state = ros.get("state", {"topic": "/joint_states"})
        command = ros.get(
            "command", {"topic": "/arm/command", "type": "trajectory_msgs/JointTrajectory"}
        )
        # commands in, states out: both directions with TCP_NODELAY. Our subscribers ask the
        # server's publishers for it (tcp_nodelay=True in the connection header); our state
        # publisher sets it itself, since the server's subscribers ask for Nagle.
        self.pub = nodelay_publisher(state["topic"], JointState, queue_size=1)
        self.count_pub = rospy.Publisher("/sim_robot/commands_received", UInt64, queue_size=1)
        if command["type"] == "std_msgs/Float64MultiArray":
            rospy.Subscriber(
                command["topic"], Float64MultiArray, self.on_array, queue_size=1, tcp_nodelay=True
            )
        else:
            rospy.Subscriber(
                command["topic"],
                JointTrajectory,
                self.on_trajectory,
                queue_size=1,
                tcp_nodelay=True,
            )
        estop = ros.get("estop")
        if estop and estop.get("type") == "std_msgs/Bool":
            rospy.Subscriber(estop["topic"], Bool, self.on_estop, queue_size=10, tcp_nodelay=True)
        elif estop:
            rospy.Service(estop["topic"], Trigger, self.on_estop_service)
        camera = ros.get("camera")
        self.camera_pub = None
        if camera and camera.get("type") != "sensor_msgs/Image":  # Image: --camera-hz
            self.camera_pub = rospy.Publisher(camera["topic"], CompressedImage, queue_size=1)
        # a service that never answers (service timeouts through the bridge)
        rospy.Service("/sim_robot/hang", Trigger, self.on_hang)
        self.frame = 0
        enable = ros.get("enable")
        if enable:
            rospy.Service(enable["topic"], Trigger, self.on_enable)
        estop_state = ros.get("estop_state")
        self.estop_state_pub = None
        if estop_state:
            self.estop_state_pub = nodelay_publisher(
                estop_state["topic"], Bool, queue_size=1, latch=True
            )

    def record(self, kind: str, **data: object) -> None:
        if self.log is not None:
            self.log.write(json.dumps({"t": time.time(), "kind": kind, **data}) + "\n")

    # ---------------------------------------------------------------- commands
    def apply(self, positions: list[float], source: str) -> None:
        bad = len(positions) != len(self.q) or not all(math.isfinite(p) for p in positions)
        with self.lock:
            if bad:
                self.rejected += 1
                self.record("rejected", source=source, positions=list(positions))
                return
            self.received += 1
            if self.estopped:
                self.record("ignored_estop", positions=list(positions))
                return
            self.target = list(positions)
            self.t_cmd = time.monotonic()
            self.record("command", positions=list(positions))
            if self.bench:
                self.q = [
                    min(max(p, lo), hi)
                    for p, lo, hi in zip(positions, self.lower, self.upper, strict=False)
                ]
        if self.bench:
            self.publish()

    def on_trajectory(self, msg: JointTrajectory) -> None:
        stamp = msg.header.stamp
        if not stamp.is_zero():  # zero: "now", as ROS drivers read it
            age_s = (rospy.Time.now() - stamp).to_sec()
            if age_s > self.timeout_s:  # delivered late (a stalled network): its time is gone
                positions = list(msg.points[0].positions) if msg.points else []
                with self.lock:
                    self.record("expired", age_ms=round(age_s * 1e3, 1), positions=positions)
                return
        if not msg.points:
            self.apply([], "trajectory")
            return
        index = {n: i for i, n in enumerate(msg.joint_names)}
        if any(n not in index for n in self.names):
            self.apply([], "trajectory")
            return
        pts = msg.points[0].positions
        self.apply([pts[index[n]] for n in self.names], "trajectory")

    def on_array(self, msg: Float64MultiArray) -> None:
        self.apply(list(msg.data), "array")

    def on_estop(self, msg: Bool) -> None:
        if msg.data:
            with self.lock:
                self.estopped = True
                self.target = None
                self.record("estop")
            self.publish_estop_state()

    def on_estop_service(self, _req: object) -> TriggerResponse:
        self.on_estop(Bool(data=True))
        return TriggerResponse(success=True, message="e-stop latched")

    def on_hang(self, _req: object) -> TriggerResponse:
        self.record("hang")
        time.sleep(3600)
        return TriggerResponse(success=False, message="woke up")

    def on_enable(self, _req: object) -> TriggerResponse:
        with self.lock:
            self.estopped = False
            self.record("enable")
        self.publish_estop_state()
        return TriggerResponse(success=True, message="enabled")

    def publish_estop_state(self) -> None:
        if self.estop_state_pub is not None:
            with self.lock:
                estopped = self.estopped
            self.estop_state_pub.publish(Bool(data=estopped))

    # ---------------------------------------------------------------- loop
    def step(self, dt: float) -> None:
        with self.lock:
            fresh = (
                self.target is not None
                and not self.estopped
                and time.monotonic() - self.t_cmd <= self.timeout_s
            )
            for i in range(len(self.q)):
                if fresh and self.target is not None:
                    err = self.target[i] - self.q[i]
                    move = max(-self.vmax[i] * dt, min(self.vmax[i] * dt, err))
                    q = min(max(self.q[i] + move, self.lower[i]), self.upper[i])
                    self.qd[i] = (q - self.q[i]) / dt
                    self.q[i] = q
                else:
                    self.qd[i] = 0.0  # stale command: hold position, zero velocity

    def publish(self) -> None:
        msg = JointState()
        msg.header.stamp = rospy.Time.now()
        with self.lock:
            msg.name = list(self.names)
            msg.position = list(self.q)
            msg.velocity = list(self.qd)
        self.pub.publish(msg)
        if self.log_states:
            self.record("state", position=list(msg.position), stamp=msg.header.stamp.to_nsec())

    def publish_image(self) -> None:
        """A 32x32 test image whose red channel follows joint 0 (so it changes with motion)."""
        if self.camera_pub is None:
            return
        red = int(127 + 120 * math.tanh(self.q[0]))
        msg = CompressedImage(format="png")
        msg.header.stamp = rospy.Time.now()
        msg.data = png_rgb(32, 32, lambda x, y: (red, 8 * x, 8 * y))
        self.camera_pub.publish(msg)

    def spin(self) -> None:
        period = 1.0 / self.rate_hz
        next_t = time.monotonic()
        last_count = 0.0
        while not rospy.is_shutdown():
            self.step(period)
            self.publish()
            now = time.monotonic()
            if now - last_count > 0.1:  # 10 Hz: command counter and camera
                self.count_pub.publish(UInt64(data=self.received))
                self.publish_estop_state()
                self.publish_image()
                last_count = now
            next_t = wait_tick(next_t, period)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="robot config YAML")
    parser.add_argument("--rate-hz", type=float, default=100.0)
    parser.add_argument("--log", default=None, help="JSONL file of received commands")
    parser.add_argument("--bench", action="store_true", help="reach targets at once, echo state")
    parser.add_argument(
        "--camera-hz",
        type=float,
        default=0.0,
        help="publish sensor_msgs/Image frames at this rate (0: none)",
    )
    parser.add_argument("--camera-topic", default="/camera/image_raw")
    parser.add_argument(
        "--log-states", action="store_true", help="also log every published joint state"
    )
    parser.add_argument("--camera-size", default="640x480", help="WIDTHxHEIGHT")
    args = parser.parse_args(argv)
    with open(args.config) as f:
        cfg = yaml.safe_load(f)
    rospy.init_node("sim_robot", anonymous=False, disable_signals=False)
    node = SimRobotNode(cfg, args.rate_hz, args.log, args.bench, args.log_states)
    if args.camera_hz > 0:
        width, height = (int(v) for v in args.camera_size.split("x"))
        CameraNode(args.camera_topic, width, height, args.camera_hz).start()
    print("READY sim_robot", flush=True)
    node.spin()


if __name__ == "__main__":
    main(sys.argv[1:])
