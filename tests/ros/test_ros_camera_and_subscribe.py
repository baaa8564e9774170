"""Camera frames, subscribe options, fragments and service timeouts against the real
rosbridge_server 0.11.17 (issue 16): the rospy sim node publishes 640x480 rgb8
``sensor_msgs/Image`` frames (a known pattern) at 30 Hz and joint states at 100 Hz.

Rate and age bounds are wide on purpose (2 shared cores): they separate "the option took
effect" from "it did not" by a factor of several, not this machine's speed.
"""

from __future__ import annotations

import dataclasses
import math
import re
import struct
import threading
import time
from typing import Any

import numpy as np
import pytest

from embodied.errors import ConfigError, SafetyFault
from hardware import DEFAULT_CONFIG
from hardware.configuration_robot import RosConfig, TopicConfig
from hardware.ros import messages
from hardware.ros.client import COMPRESSIONS, RosbridgeLink
from hardware.ros.robot import RosRobot
from hardware.ros.testing import RosTestGraph, pattern_rgb8, ros_available

pytestmark = pytest.mark.ros

CAMERA = "/camera/image_raw"
WIDTH, HEIGHT = 640, 480


@pytest.fixture(scope="module")
def cam_graph(tmp_path_factory):
    why = ros_available()
    if why is not None:
        pytest.fail(f"{why}; or deselect these tests with -m 'not ros'")
    g = RosTestGraph(
        DEFAULT_CONFIG,
        workdir=tmp_path_factory.mktemp("camgraph"),
        camera_hz=30.0,
        camera_topic=CAMERA,
        camera_size=(WIDTH, HEIGHT),
    )
    g.start()
    yield g
    for name in ("bridge", "sim_robot"):  # shown by pytest when a test failed
        print(f"--- {name}.log ---\n{g.log_tail(name, 4000)}")
    g.stop()


def wait_server_idle(graph: RosTestGraph, timeout_s: float = 10.0) -> None:
    """Wait until the server has handled every client's disconnect (its log says "0 clients
    total"): it shares one ROS subscriber per topic among clients, and a test's subscription
    must not meet the previous test's lingering one (a typed and a ``cbor-raw`` one exclude
    each other; see test_cbor_raw_and_typed_subscriptions_exclude_each_other)."""
    deadline = time.monotonic() + timeout_s
    while True:
        totals = re.findall(r"(\d+) clients total", graph.log_tail("bridge", 4000))
        if not totals or totals[-1] == "0":
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"rosbridge_server still has {totals[-1]} clients")
        time.sleep(0.02)


@pytest.fixture()
def link(cam_graph):
    links: list[RosbridgeLink] = []
    wait_server_idle(cam_graph)

    def make() -> RosbridgeLink:
        lk = RosbridgeLink("127.0.0.1", cam_graph.bridge_port).open()
        links.append(lk)
        return lk

    yield make
    for lk in links:
        lk.close()
    wait_server_idle(cam_graph)


class Collector:
    """Thread-safe list of (receive wall time s, message)."""

    def __init__(self) -> None:
        self.items: list[tuple[float, dict[str, Any]]] = []
        self.lock = threading.Lock()

    def __call__(self, msg: dict[str, Any]) -> None:
        with self.lock:
            self.items.append((time.time(), msg))

    def wait(self, n: int, timeout_s: float = 15.0) -> list[tuple[float, dict[str, Any]]]:
        deadline = time.monotonic() + timeout_s
        while len(self.items) < n:
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(self.items)} of {n} messages within {timeout_s} s")
            time.sleep(0.01)
        with self.lock:
            return list(self.items)


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_camera_frame_arrives_pixel_identical(link, compression):
    frames = Collector()
    lk = link()
    lk.subscribe(CAMERA, "sensor_msgs/Image", frames, compression=compression)
    _, msg = frames.wait(2)[-1]
    if compression == "cbor-raw":  # the ROS 1 wire form, parsed here
        assert set(msg) == {"secs", "nsecs", "bytes"}
        parsed = messages.parse_raw("sensor_msgs/Image", msg["bytes"])
    else:
        parsed = msg
        assert isinstance(msg["data"], str if compression in ("none", "png") else bytes)
    assert (parsed["width"], parsed["height"], parsed["encoding"]) == (WIDTH, HEIGHT, "rgb8")
    assert parsed["step"] == 3 * WIDTH
    image = messages.decode_image(msg)
    assert image.shape == (HEIGHT, WIDTH, 3) and image.dtype == np.uint8
    np.testing.assert_array_equal(image, pattern_rgb8(WIDTH, HEIGHT))
    assert 0 < time.time() - messages.image_stamp(msg) < 10
    assert lk.stats.undecodable == 0


def test_robot_camera_observation_is_the_published_image(cam_graph):
    wait_server_idle(cam_graph)
    base = cam_graph.robot_config()
    ros = dataclasses.replace(
        base.ros,
        camera=TopicConfig(CAMERA, "sensor_msgs/Image", "ros.camera"),
        camera_size=(HEIGHT, WIDTH),
    )
    assert ros.camera_compression == "cbor"  # the fastest mode that coexists (bench ros)
    robot = RosRobot(dataclasses.replace(base, ros=ros))
    try:
        robot.connect()
    except SafetyFault as exc:
        raise AssertionError(f"{exc}\n--- bridge.log ---\n{cam_graph.log_tail('bridge')}") from exc
    with robot:
        image = robot.read().images["wrist"]
        np.testing.assert_array_equal(image, pattern_rgb8(WIDTH, HEIGHT))
        assert robot.bad_images == 0
    wait_server_idle(cam_graph)
    small = dataclasses.replace(ros, camera_size=(48, 64), camera_compression="cbor-raw")
    robot = RosRobot(dataclasses.replace(base, ros=small))
    with robot:
        assert robot.read().images["wrist"].shape == (48, 64, 3)


def test_robot_camera_with_unsupported_encoding_fails_clearly(cam_graph, link):
    """A 32FC1 depth image (published through the bridge by another link) reaches the robot,
    which refuses to connect, naming the encoding."""
    import base64

    lk = link()
    lk.advertise("/camera/depth", "sensor_msgs/Image")
    depth = {
        "header": messages.header(),
        "height": 2,
        "width": 2,
        "encoding": "32FC1",
        "is_bigendian": 0,
        "step": 8,
        "data": base64.b64encode(bytes(16)).decode(),
    }
    stop = threading.Event()

    def publish() -> None:
        while not stop.wait(0.05):
            lk.publish("/camera/depth", depth)

    thread = threading.Thread(target=publish, daemon=True)
    thread.start()
    base = cam_graph.robot_config()
    ros = dataclasses.replace(
        base.ros,
        camera=TopicConfig("/camera/depth", "sensor_msgs/Image", "ros.camera"),
        connect_timeout_s=3.0,
    )
    robot = RosRobot(dataclasses.replace(base, ros=ros))
    try:
        with pytest.raises(SafetyFault, match=r"could not be decoded.*encoding '32FC1'"):
            robot.connect()
    finally:
        stop.set()
        thread.join()
    assert robot.bad_images > 0


def _image(encoding: str, width: int = 4, height: int = 2, step: int | None = None) -> dict:
    channels = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}.get(encoding, 4)
    step = step if step is not None else width * channels
    data = bytes(range(height * step))
    return {
        "header": {"seq": 1, "stamp": {"secs": 1, "nsecs": 0}, "frame_id": ""},
        "height": height,
        "width": width,
        "encoding": encoding,
        "is_bigendian": 0,
        "step": step,
        "data": data,
    }


def test_image_decoding_encodings_and_errors():
    rgb = messages.decode_image(_image("rgb8"))
    np.testing.assert_array_equal(messages.decode_image(_image("bgr8")), rgb[:, :, ::-1])
    rgba = np.frombuffer(bytes(range(32)), np.uint8).reshape(2, 4, 4)
    np.testing.assert_array_equal(messages.decode_image(_image("rgba8")), rgba[:, :, :3])
    np.testing.assert_array_equal(messages.decode_image(_image("bgra8")), rgba[:, :, 2::-1])
    mono = messages.decode_image(_image("mono8"))
    assert mono.shape == (2, 4, 3) and (mono[..., 0] == mono[..., 2]).all()
    padded = messages.decode_image(_image("rgb8", step=16))  # row padding is skipped
    assert padded.shape == (2, 4, 3) and padded[1, 0, 0] == 16
    for encoding in ("32FC1", "16UC1", "bayer_rggb8", "yuv422"):
        with pytest.raises(messages.MessageError, match=f"encoding '{encoding}' is not supported"):
            messages.decode_image(_image(encoding))
    bad = _image("rgb8")
    bad["data"] = bad["data"][:-1]
    with pytest.raises(messages.MessageError, match="do not match"):
        messages.decode_image(bad)
    # cbor-raw: the ROS 1 wire form, and a truncated one
    img = _image("rgb8")
    wire = struct.pack("<III", 1, 5, 7) + struct.pack("<I", 0)
    wire += struct.pack("<II", 2, 4) + struct.pack("<I", 4) + b"rgb8" + b"\x00"
    wire += struct.pack("<II", 12, 24) + img["data"]
    np.testing.assert_array_equal(messages.decode_image({"bytes": wire}), rgb)
    assert messages.image_stamp({"bytes": wire}) == pytest.approx(5 + 7e-9)
    with pytest.raises(messages.MessageError, match="truncated|data bytes"):
        messages.decode_image({"bytes": wire[:30]})


def test_subscribe_and_config_options_are_validated():
    lk = RosbridgeLink("127.0.0.1", 1)
    for kwargs in (
        {"compression": "jpeg"},
        {"throttle_rate_ms": -1},
        {"throttle_rate_ms": 0.5},
        {"queue_length": -1},
        {"fragment_size": 0},
    ):
        with pytest.raises(ConfigError):
            lk.subscribe("/x", "std_msgs/Bool", **kwargs)
    for field, value in (
        ("camera_compression", "jpeg"),
        ("camera_throttle_rate_ms", -5),
        ("camera_throttle_rate_ms", 2.5),
        ("camera_queue_length", True),
    ):
        bad: dict[str, Any] = {field: value}
        with pytest.raises(ConfigError, match=f"ros.{field}"):
            RosConfig(**bad)
    with pytest.raises(ConfigError, match="cbor-raw.*ROS 1 wire form"):
        RosConfig(ros_version=2, camera_compression="cbor-raw")
    assert RosConfig(camera_throttle_rate_ms=100).camera_throttle_rate_ms == 100


def test_throttle_rate_and_queue_length_are_honoured_by_the_server(link):
    """100 Hz joint states: throttle_rate 100 ms -> ~10 Hz; with a throttle the server sends
    its OLDEST buffered message, so queue_length 20 delivers messages ~200 ms old (and skips
    the rest: the queue is bounded), queue_length 1 the newest."""
    runs = {
        "all": {},
        "throttle_100": {"throttle_rate_ms": 100, "queue_length": 0},
        "q1": {"throttle_rate_ms": 250, "queue_length": 1},
        "q20": {"throttle_rate_ms": 250, "queue_length": 20},
    }
    got = {}
    for name, kwargs in runs.items():
        got[name] = Collector()
        link().subscribe("/joint_states", "sensor_msgs/JointState", got[name], **kwargs)
    for c in got.values():
        c.wait(3)
    t0 = time.time()
    time.sleep(3.0)
    window = {n: [(t, m) for t, m in c.items if t >= t0] for n, c in got.items()}
    rate = {n: len(w) / 3.0 for n, w in window.items()}
    assert rate["all"] > 40, rate  # the node publishes at 100 Hz
    assert 5 <= rate["throttle_100"] <= 11, rate
    assert rate["throttle_100"] < rate["all"] / 3, rate
    assert 2 <= rate["q1"] <= 4.5 and 2 <= rate["q20"] <= 4.5, rate

    def ages(name: str) -> list[float]:
        return [t - messages.from_stamp(m["header"]["stamp"]) for t, m in window[name]]

    age1, age20 = np.median(ages("q1")), np.median(ages("q20"))
    assert age20 > 0.12 and age20 - age1 > 0.08, (age1, age20)
    assert max(ages("q20")) < 0.6, ages("q20")  # bounded: it does not fall further behind
    seqs = [m["header"]["seq"] for _, m in window["q20"]]
    assert np.mean(np.diff(seqs)) > 10, seqs  # older messages were dropped, not queued


def test_large_message_arrives_whole_through_server_fragments(link):
    """fragment_size 100000 splits each ~1.2 MB JSON frame into 13 ``fragment`` ops; the
    link reassembles them (roslibpy has no handler for the op)."""
    lk = link()
    frames = Collector()
    lk.subscribe(CAMERA, "sensor_msgs/Image", frames, fragment_size=100_000)
    _, msg = frames.wait(2)[-1]
    np.testing.assert_array_equal(messages.decode_image(msg), pattern_rgb8(WIDTH, HEIGHT))
    per_frame = math.ceil(len(msg["data"]) / 100_000)
    assert lk.stats.fragments >= 2 * per_frame, lk.stats
    assert lk.stats.undecodable == 0


def test_fragment_size_breaks_cbor_frames_on_the_same_connection(link):
    """Real behaviour of rosbridge_server 0.11.17, documented in hardware/README.md:
    ``fragment_size`` applies to the whole connection, and a binary (cbor) message longer than
    it makes the server's send fail (it tries to fragment the bytes as JSON), so no frame
    arrives. Small JSON messages on the same connection are unaffected."""
    lk = link()
    frames, states = Collector(), Collector()
    lk.subscribe("/joint_states", "sensor_msgs/JointState", states, fragment_size=100_000)
    lk.subscribe(CAMERA, "sensor_msgs/Image", frames, compression="cbor")
    states.wait(20)
    time.sleep(1.5)  # ~45 frames published meanwhile
    assert not frames.items
    other = Collector()  # another connection (no fragment_size) gets them
    link().subscribe(CAMERA, "sensor_msgs/Image", other, compression="cbor")
    other.wait(2)


def test_cbor_raw_and_typed_subscriptions_exclude_each_other(link):
    """Real behaviour of rosbridge_server 0.11.17, documented in hardware/README.md (and the
    reason ``ros.camera_compression`` defaults to ``cbor``): one ROS subscriber per topic is
    shared by all clients, typed or raw (``__AnyMsg``) by whoever came first. A ``cbor-raw``
    client after a typed one gets nothing (the server fails on each message: no ``_buff``); a
    typed one after a ``cbor-raw`` one is refused (type conflict). Neither hears about it."""
    typed, raw = Collector(), Collector()
    link().subscribe(CAMERA, "sensor_msgs/Image", typed, compression="cbor")
    typed.wait(2)
    link().subscribe(CAMERA, "sensor_msgs/Image", raw, compression="cbor-raw")
    n = len(typed.items)
    time.sleep(1.5)
    assert len(typed.items) - n > 10 and not raw.items


def test_service_that_never_answers_times_out_naming_it(link, cam_graph):
    lk = link()
    t0 = time.monotonic()
    with pytest.raises(SafetyFault, match=r"service /sim_robot/hang .*did not answer within 1.0 s"):
        lk.call_service("/sim_robot/hang", "std_srvs/Trigger", timeout_s=1.0)
    assert 0.9 <= time.monotonic() - t0 < 3.0
    assert [c for c in cam_graph.commands() if c["kind"] == "hang"]  # it did reach the node
    t0 = time.monotonic()
    with pytest.raises(SafetyFault, match=r"service /no/such/service .*failed"):
        lk.call_service("/no/such/service", "std_srvs/Trigger", timeout_s=5.0)
    assert time.monotonic() - t0 < 3.0  # answered by the server, not timed out
    assert lk.call_service("/arm/enable", "std_srvs/Trigger")["success"] is True  # link fine
    for bad in (0, -1.0, math.inf, math.nan):
        with pytest.raises(ConfigError, match="timeout_s"):
            lk.call_service("/arm/enable", "std_srvs/Trigger", timeout_s=bad)
