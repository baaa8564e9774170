"""MCAP recordings (``--record``) and bag import (``embodied datasets import``).

Recordings are read back with the MCAP project's own reader and ROS 2 decoder
(``mcap``, ``mcap-ros2-support``) and with ``rosbags``; a recording cut off by SIGKILL reads
up to its last chunk; a rosbag1 file written by ``rosbags`` imports through a mapping; bad
bags and mappings exit 2 naming the topic or field.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from embodied.apps.cli import app
from embodied.datasets import Dataset
from embodied.datasets.bags import BagMapping, Stream, import_bag, load_mapping, read_recording
from embodied.errors import ConfigError, DatasetError
from embodied.recording import McapRecorder
from tests.conftest import cli_exit2, require

ROOT = Path(__file__).resolve().parents[2]


_exit2 = cli_exit2


def _eval_record(tmp_path: Path, name: str = "run.mcap") -> tuple[Path, dict[str, Any]]:
    """``embodied eval --record`` of two arm_reach expert episodes with two cameras."""
    import json

    path = tmp_path / name
    args = ["eval", "--env", "mujoco:arm_reach", "--policy", "expert", "--episodes", "2"]
    args += ["--workers", "0", "--max-steps", "25", "--env-arg", "camera=front,top"]
    args += ["--env-arg", "image_size=48", "--record", str(path), "--out", str(tmp_path / "ev")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return path, json.loads((tmp_path / "ev" / "results.json").read_text())


def test_eval_recording_opens_with_mcap_and_rosbags_and_imports(tmp_path: Path) -> None:
    path, results = _eval_record(tmp_path)
    require("mcap_ros2")
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    # the MCAP project's reader (indexed: the summary section was written) and ROS 2 decoder
    with path.open("rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        summary = reader.get_summary()
        assert summary is not None and summary.statistics is not None
        topics = {c.topic for c in summary.channels.values()}
        decoded: dict[str, list[Any]] = {}
        for _schema, channel, _msg, ros in reader.iter_decoded_messages():
            decoded.setdefault(channel.topic, []).append(ros)
    assert {
        "/embodied/state",
        "/embodied/action",
        "/embodied/raw_action",
        "/embodied/camera/front/compressed",
        "/embodied/camera/top/compressed",
        "/embodied/instruction",
        "/embodied/step",
        "/embodied/episode",
    } <= topics
    steps = sum(e["steps"] for e in results["episodes"])
    assert len(decoded["/embodied/action"]) == len(decoded["/embodied/step"]) == steps
    assert decoded["/embodied/state"][0].name[0] == "q_yaw"  # the env's state entry names
    assert decoded["/embodied/camera/front/compressed"][0].format == "jpeg"
    starts = [e for e in decoded["/embodied/episode"] if e.event == "start"]
    assert [e.seed for e in starts] == [e["spec"]["seed"] for e in results["episodes"]]

    # rosbags reads the same file (every channel is a ROS 2 message with its schema)
    from rosbags.highlevel import AnyReader

    with AnyReader([path]) as reader:
        conns = [c for c in reader.connections if c.topic == "/embodied/action"]
        first = next(reader.messages(connections=conns))
        msg = reader.deserialize(first[2], conns[0].msgtype)
    np.testing.assert_array_equal(
        msg.points[0].positions, decoded["/embodied/action"][0].points[0].positions
    )

    # our recordings import without a mapping; a policy trains on them
    out = tmp_path / "data"
    result = CliRunner().invoke(app, ["datasets", "import", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    ds = Dataset(out)
    assert [len(e) for e in ds] == [e["steps"] for e in results["episodes"]]
    assert [e.attrs["success"] for e in ds] == [e["success"] for e in results["episodes"]]
    actions = np.concatenate([e.actions for e in ds])
    recorded = np.array([m.points[0].positions for m in decoded["/embodied/action"]])
    np.testing.assert_array_equal(actions, recorded)
    assert ds[0].obs["image.front"].shape[1:] == (48, 48, 3)
    # ... exports as a LeRobot v3 dataset through the existing export
    lerobot_dir = tmp_path / "lerobot"
    result = CliRunner().invoke(
        app, ["datasets", "export", str(out), "--out", str(lerobot_dir), "--format", "lerobot"]
    )
    assert result.exit_code == 0, result.output
    assert (lerobot_dir / "meta" / "info.json").exists()
    from policies.diffusion.training_pdp import train_pdp
    from tests.diffusion.conftest import tiny_config

    train_pdp(out, tmp_path / "policy", tiny_config(steps=2, batch_size=4, z_dim=0), progress=False,
              tensorboard=False)  # fmt: skip
    assert (tmp_path / "policy" / "model.safetensors").exists()


def test_recording_equals_the_episode_and_is_never_overwritten(tmp_path: Path) -> None:
    import sim
    from embodied.loop import rollout

    env = sim.make("mujoco:reach_around")
    policy = __import__("policies").load("expert", env=env)
    path = tmp_path / "r.mcap"
    with McapRecorder(path, env.describe()) as rec:
        rec.start_episode(seed=5)
        ep = rollout(env, policy, seed=5, callbacks=[rec], max_steps=30)
        rec.end_episode(success=ep.success, reason=ep.meta["reason"])
    import_bag(path, tmp_path / "d")
    (got,) = Dataset(tmp_path / "d")
    np.testing.assert_array_equal(got.actions, ep.actions)
    np.testing.assert_array_equal(got.obs["state"], ep.observations["state"])
    assert got.instruction == ep.instruction and got.attrs["success"] == ep.success
    with pytest.raises(ConfigError, match="never overwritten"):
        McapRecorder(path, env.describe())
    with pytest.raises(ConfigError, match="not an .mcap file"):
        McapRecorder(tmp_path / "r.bag", env.describe())


RECORDER = textwrap.dedent(
    """
    import sys, time
    import sim, policies
    from embodied.loop import rollout
    from embodied.recording import McapRecorder

    env = sim.make("mujoco:reach_around")
    policy = policies.load("expert", env=env)
    rec = McapRecorder(sys.argv[1], env.describe(), flush_every_s=0.05)
    for seed in range(1000):
        rec.start_episode(seed=seed)
        ep = rollout(env, policy, seed=seed, callbacks=[rec], max_steps=40)
        rec.end_episode(success=ep.success)
        print("episode", seed, flush=True)
    """
)


def test_a_recording_killed_by_sigkill_reads_up_to_its_last_chunk(tmp_path: Path) -> None:
    path = tmp_path / "killed.mcap"
    script = tmp_path / "record.py"
    script.write_text(RECORDER)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, str(script), str(path)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout is not None
        for _ in range(2):  # two whole episodes on disk, then kill in the third
            assert proc.stdout.readline().startswith("episode"), proc.stdout.read()
        time.sleep(0.3)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    recording = read_recording(path)
    assert recording.truncated  # no summary, maybe half a chunk: read to the last whole chunk
    starts = [m for m in recording.messages["/embodied/episode"] if m.msg.event == "start"]
    assert len(starts) >= 3
    result = import_bag(path, tmp_path / "d")
    assert result.truncated and result.episodes >= 2
    ds = Dataset(tmp_path / "d")
    assert all(len(e) >= 2 for e in ds)


def _write_rosbag1(path: Path, *, jump_back: bool = False) -> dict[str, np.ndarray]:
    """A rosbag1 file (written by rosbags) of a 20 Hz arm: joint states at 50 Hz, commands at
    20 Hz, two stretches 3 s apart, a compressed camera at 20 Hz; ``jump_back``: the joint
    states' header clock steps back by 100 s halfway."""
    import io

    from PIL import Image
    from rosbags.rosbag1 import Writer
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS1_NOETIC)
    t = store.types
    names = ["j0", "j1", "j2"]
    t0 = 1_700_000_000 * 10**9
    cmd_times = [t0 + k * 50_000_000 for k in range(20)] + [
        t0 + 4 * 10**9 + k * 50_000_000 for k in range(20)
    ]
    state_times = [t0 - 10**8 + k * 20_000_000 for k in range(300)]
    buf = io.BytesIO()
    Image.fromarray(np.full((24, 32, 3), 200, np.uint8)).save(buf, format="PNG")
    png = np.frombuffer(buf.getvalue(), dtype=np.uint8)

    def header(ns: int) -> Any:
        return t["std_msgs/msg/Header"](
            seq=0, stamp=t["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9),
            frame_id="",
        )  # fmt: skip

    truth: dict[str, list[Any]] = {"cmd": [], "state": []}
    with Writer(path) as writer:
        js = writer.add_connection("/joint_states", "sensor_msgs/msg/JointState", typestore=store)
        cmd = writer.add_connection(
            "/arm/command", "trajectory_msgs/msg/JointTrajectory", typestore=store
        )
        cam = writer.add_connection(
            "/cam/compressed", "sensor_msgs/msg/CompressedImage", typestore=store
        )
        events = [(ns, "state", k) for k, ns in enumerate(state_times)]
        events += [(ns, "cmd", k) for k, ns in enumerate(cmd_times)]
        for ns, kind, k in sorted(events, key=lambda e: (e[0], e[1])):
            if kind == "state":
                q = np.array([0.01 * k, -0.02 * k, 0.5])
                truth["state"].append(q)
                # jump_back: the robot's clock resets by 100 s mid-recording (log time goes on)
                stamp = ns - 100 * 10**9 if jump_back and k >= 150 else ns
                msg = t["sensor_msgs/msg/JointState"](
                    header=header(stamp), name=names, position=q, velocity=np.zeros(3),
                    effort=np.zeros(0),
                )  # fmt: skip
                writer.write(js, ns, store.serialize_ros1(msg, "sensor_msgs/msg/JointState"))
            else:
                target = np.array([0.1 * k, 0.2, -0.1 * k])
                truth["cmd"].append(target)
                point = t["trajectory_msgs/msg/JointTrajectoryPoint"](
                    positions=target, velocities=np.zeros(0), accelerations=np.zeros(0),
                    effort=np.zeros(0),
                    time_from_start=t["builtin_interfaces/msg/Duration"](sec=0, nanosec=0),
                )  # fmt: skip
                msg = t["trajectory_msgs/msg/JointTrajectory"](
                    header=header(ns), joint_names=names, points=[point]
                )
                writer.write(
                    cmd, ns, store.serialize_ros1(msg, "trajectory_msgs/msg/JointTrajectory")
                )
                img = t["sensor_msgs/msg/CompressedImage"](
                    header=header(ns), format="png", data=png
                )
                writer.write(cam, ns, store.serialize_ros1(img, "sensor_msgs/msg/CompressedImage"))
    return {k: np.array(v) for k, v in truth.items()}


MAPPING = """
clock: /arm/command
max_skew_s: 0.05
state: {topic: /joint_states, field: position, align: previous}
action: {topic: /arm/command, field: "points[0].positions", align: nearest}
cameras:
  wrist: {topic: /cam/compressed, align: nearest}
instruction: {text: wave the arm}
episodes: {split: gap, gap_s: 1.0}
"""


def test_rosbag1_imports_through_a_mapping(tmp_path: Path) -> None:
    bag = tmp_path / "arm.bag"
    truth = _write_rosbag1(bag)
    mapping = tmp_path / "map.yaml"
    mapping.write_text(MAPPING)
    result = import_bag(bag, tmp_path / "d", load_mapping(mapping))
    assert (result.episodes, result.steps, result.dropped_ticks) == (2, 40, 0)
    ds = Dataset(tmp_path / "d")
    np.testing.assert_array_equal(np.concatenate([e.actions for e in ds]), truth["cmd"])
    # each state is the newest joint state at or before its command (50 Hz states, 20 ms apart)
    states = np.concatenate([e.obs["state"] for e in ds])
    assert all(any(np.array_equal(s, q) for q in truth["state"]) for s in states)
    assert ds[0].obs["image.wrist"].shape == (20, 24, 32, 3) and ds[0].instruction == "wave the arm"
    assert ds.env_args["observation"]["state"]["names"] == ["j0", "j1", "j2"]
    assert ds.env_args["control_rate_hz"] == pytest.approx(20.0)

    # the same bag ticked at 20 Hz by the previous rule: the newest command at each tick
    rated = BagMapping(
        state=Stream("/joint_states", "position"),
        action=Stream("/arm/command", "points[0].positions", "previous"),
        rate_hz=20.0,
        max_skew_s=0.049,
        gap_s=1.0,
    )
    again = import_bag(bag, tmp_path / "d2", rated)
    assert again.steps == 40 and again.dropped_ticks > 0  # ticks inside the 3 s gap


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        ("s|/arm/command|/arm/commandz|", "topic /arm/commandz is not in"),
        ("s|points\\[0\\].positions|points[0].positionz|", "has no field 'points[0].positionz'"),
        ('s|field: position,|field: "velocity[7]",|', "index 7 out of range"),
        ("s|align: previous|align: later|", "state.align='later' must be one of"),
        ("s|clock: /arm/command|clock: /arm/command\\nrate_hz: 20|", "give exactly one"),
        ("s|episodes:|episodez:|", "unknown keys ['episodez']"),
    ],
)
def test_bad_mappings_exit_2_naming_the_topic_or_field(
    tmp_path: Path,
    edit: str,
    expected: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bag = tmp_path / "arm.bag"
    _write_rosbag1(bag)
    mapping = tmp_path / "map.yaml"
    mapping.write_text(MAPPING)
    subprocess.run(["sed", "-i", edit, str(mapping)], check=True)
    err = _exit2(
        monkeypatch, capsys, "datasets", "import", str(bag), "--map", str(mapping),
        "--out", str(tmp_path / "d"),
    )  # fmt: skip
    assert expected in err and "fix:" in err


def test_bad_bags_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    mapping = tmp_path / "map.yaml"
    mapping.write_text(MAPPING)
    bag = tmp_path / "arm.bag"
    _write_rosbag1(bag)
    cases = {
        "truncated.bag": (bag.read_bytes()[: bag.stat().st_size // 2], "cannot be read"),
        "junk.mcap": (b"not an mcap file at all", "is not an MCAP file"),
        "empty.mcap": (b"", "is empty (0 bytes)"),
    }
    for name, (data, expected) in cases.items():
        (tmp_path / name).write_bytes(data)
        args = ["datasets", "import", str(tmp_path / name), "--map", str(mapping)]
        err = _exit2(monkeypatch, capsys, *args, "--out", str(tmp_path / f"out_{name}"))
        assert expected in err, (name, err)
    jumped = tmp_path / "jump.bag"
    _write_rosbag1(jumped, jump_back=True)
    with pytest.raises(DatasetError, match="topic /joint_states: the clock jumps back by"):
        import_bag(jumped, tmp_path / "dj", load_mapping(mapping))
    # not one of our recordings and no mapping
    err = _exit2(monkeypatch, capsys, "datasets", "import", str(bag), "--out", str(tmp_path / "x"))
    assert "pass --map" in err


def test_bench_record_reports_overhead_size_and_import_speed() -> None:
    from embodied.apps.bench import run_area

    res = run_area("record", quick=True)
    assert res["steps_recorded"] > 20
    assert 0 < res["record_ms_per_step_p50"] <= res["record_ms_per_step_p99"]
    assert res["overhead_pct_of_period"] == pytest.approx(
        100 * res["record_ms_per_step_mean"] / 50.0
    )
    assert res["file_mb_per_minute"] > 0 and res["import_frames_per_s"] > 0
    assert res["import_vs_raw_read_time_ratio"] == pytest.approx(
        res["import_s"] / res["rosbags_raw_read_s"]
    )


def test_live_view_streams_cameras_and_joint_states_to_a_foxglove_client() -> None:
    """A client speaking Foxglove's websocket protocol (subprotocol foxglove.sdk.v1) subscribes to
    the live view of a running session and decodes its joint-state and camera messages."""
    import json
    import struct
    import threading

    require("foxglove")
    from websockets.sync.client import connect

    import sim
    from embodied.loop import rollout
    from embodied.recording import LiveView, typestore

    env = sim.make("mujoco:arm_reach", camera=["front"], image_size=64)
    policy = __import__("policies").load("expert", env=env)
    live = LiveView(port=0)
    assert live.host == "127.0.0.1"  # loopback unless asked otherwise
    recorder = McapRecorder(None, env.describe(), live=live)
    stop = threading.Event()

    def session() -> None:
        seed = 0
        while not stop.is_set():
            recorder.start_episode(seed=seed)
            rollout(env, policy, seed=seed, callbacks=[recorder], max_steps=20, pace=True)
            seed += 1

    thread = threading.Thread(target=session, daemon=True)
    thread.start()
    wanted = {"/embodied/state": "sensor_msgs/msg/JointState",
              "/embodied/camera/front/compressed": "sensor_msgs/msg/CompressedImage"}  # fmt: skip
    got: dict[str, bytes] = {}
    try:
        with connect(live.url, subprotocols=["foxglove.sdk.v1"], open_timeout=10) as ws:  # type: ignore[list-item]
            channels: dict[str, dict[str, Any]] = {}
            deadline = time.monotonic() + 120  # generous: a loaded CI machine
            while set(wanted) - set(channels) and time.monotonic() < deadline:
                frame = ws.recv(timeout=10)
                if isinstance(frame, str) and json.loads(frame)["op"] == "advertise":
                    for ch in json.loads(frame)["channels"]:
                        channels[ch["topic"]] = ch
            subs = [{"id": i, "channelId": channels[t]["id"]} for i, t in enumerate(wanted)]
            ws.send(json.dumps({"op": "subscribe", "subscriptions": subs}))
            by_sub = dict(enumerate(wanted))
            while set(wanted) - set(got) and time.monotonic() < deadline:
                frame = ws.recv(timeout=10)
                if isinstance(frame, bytes) and frame[0] == 0x01:  # message data
                    sub, _log_time = struct.unpack_from("<IQ", frame, 1)
                    got.setdefault(by_sub[sub], frame[13:])
    finally:
        stop.set()
        thread.join(timeout=30)
        recorder.close()
    assert set(got) == set(wanted), (sorted(channels), sorted(got))
    for topic, typename in wanted.items():
        assert channels[topic]["encoding"] == "cdr" and channels[topic]["schemaName"] == typename
    store = typestore()
    state = store.deserialize_cdr(got["/embodied/state"], wanted["/embodied/state"])
    assert list(state.name) == list(env.observation_spec.state.names)
    image = store.deserialize_cdr(got["/embodied/camera/front/compressed"],
                                  wanted["/embodied/camera/front/compressed"])  # fmt: skip
    import simplejpeg

    assert simplejpeg.decode_jpeg(bytes(image.data)).shape == (64, 64, 3)


def test_deploy_records_safety_events_and_serves_the_live_view(tmp_path: Path) -> None:
    """``deploy --record --foxglove 0`` on the dry-run robot with a policy the safety filter
    must clip: the recording holds every clip, the action after and before the filter."""
    import json

    require("foxglove")
    from embodied.apps.deploy import DeployConfig, deploy
    from hardware.configuration_robot import DEFAULT_CONFIG, load_robot_config

    config = DeployConfig(
        "sine",
        dry_run=True,
        max_seconds=1.0,
        policy_kwargs={"amplitude_rad": 3.0},  # far past the joint limits and step limit
        record=str(tmp_path / "deploy.mcap"),
        foxglove=0,
    )
    result = deploy(load_robot_config(DEFAULT_CONFIG), config, tmp_path / "out")
    assert result.reason == "max_steps"
    events = json.loads((tmp_path / "out" / "safety_events.json").read_text())
    assert events, "the policy was meant to be clipped"
    recording = read_recording(tmp_path / "deploy.mcap")
    recorded = recording.messages["/embodied/safety"]
    assert [(m.msg.step, m.msg.rule) for m in recorded] == [(e["step"], e["rule"]) for e in events]
    raw = np.array([m.msg.points[0].positions for m in recording.messages["/embodied/raw_action"]])
    sent = np.array([m.msg.points[0].positions for m in recording.messages["/embodied/action"]])
    (episode,) = Dataset(tmp_path / "out" / "episodes")
    np.testing.assert_array_equal(sent, episode.actions)
    assert not np.array_equal(raw, sent)  # the filter changed what the policy asked for
    assert np.abs(raw).max() > np.abs(sent).max()
    # a robot session's outcome is unknown: imported without one, it trains as a demonstration
    import_bag(tmp_path / "deploy.mcap", tmp_path / "data")
    (imported,) = Dataset(tmp_path / "data")
    assert "success" not in imported.attrs
    np.testing.assert_array_equal(imported.actions, episode.actions)


def test_ros1_mcap_decodes_with_mcap_ros1_support_and_imports(tmp_path: Path) -> None:
    """An MCAP file in the ROS 1 profile (ros1msg schemas, ros1 encoding) decodes with the
    MCAP project's ROS 1 decoder and imports through a mapping."""
    require("mcap_ros1")
    from mcap.reader import make_reader
    from mcap.writer import Writer
    from mcap_ros1.decoder import DecoderFactory
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS1_NOETIC)
    t = store.types
    path = tmp_path / "ros1.mcap"
    with path.open("wb") as f:
        writer = Writer(f)
        writer.start(profile="ros1", library="test")
        ids = {}
        for topic, typename in (("/joint_states", "sensor_msgs/msg/JointState"),
                                ("/cmd", "trajectory_msgs/msg/JointTrajectory")):  # fmt: skip
            msgdef, _ = store.generate_msgdef(typename, ros_version=1)
            schema = writer.register_schema(typename.replace("/msg/", "/"), "ros1msg",
                                            msgdef.encode())  # fmt: skip
            ids[topic] = writer.register_channel(topic, "ros1", schema)
        t0 = 1_700_000_000 * 10**9
        for k in range(30):
            ns = t0 + k * 50_000_000
            stamp = t["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9)
            header = t["std_msgs/msg/Header"](seq=k, stamp=stamp, frame_id="")
            js = t["sensor_msgs/msg/JointState"](
                header=header, name=["a", "b"], position=np.array([k, -k], float),
                velocity=np.zeros(0), effort=np.zeros(0),
            )  # fmt: skip
            point = t["trajectory_msgs/msg/JointTrajectoryPoint"](
                positions=np.array([0.1 * k, 0.2]), velocities=np.zeros(0),
                accelerations=np.zeros(0), effort=np.zeros(0),
                time_from_start=t["builtin_interfaces/msg/Duration"](sec=0, nanosec=0),
            )  # fmt: skip
            cmd = t["trajectory_msgs/msg/JointTrajectory"](
                header=header, joint_names=["a", "b"], points=[point]
            )
            for topic, msg, typename in (
                ("/joint_states", js, "sensor_msgs/msg/JointState"),
                ("/cmd", cmd, "trajectory_msgs/msg/JointTrajectory"),
            ):
                data = bytes(store.serialize_ros1(msg, typename))
                writer.add_message(ids[topic], log_time=ns + 1, data=data, publish_time=ns)
        writer.finish()
    with path.open("rb") as f:
        decoded = [
            ros.position
            for _s, channel, _m, ros in make_reader(
                f, decoder_factories=[DecoderFactory()]
            ).iter_decoded_messages(topics=["/joint_states"])
        ]
    assert len(decoded) == 30 and list(decoded[3]) == [3.0, -3.0]
    mapping = BagMapping(
        state=Stream("/joint_states", "position"),
        action=Stream("/cmd", "points[0].positions", "nearest"),
        clock="/cmd",
        max_skew_s=0.01,
    )
    result = import_bag(path, tmp_path / "d", mapping)
    (ep,) = Dataset(tmp_path / "d")
    assert result.steps == 30 and ep.obs["state"][3].tolist() == [3.0, -3.0]
    assert ep.actions[5].tolist() == pytest.approx([0.5, 0.2])


def test_tune_records_its_episodes_with_knob_measurement_and_setpoint(tmp_path: Path) -> None:
    from embodied.apps.tune import TuneConfig, TuneSession
    from embodied.apps.tune.task import build_task

    cfg = TuneConfig(pace=False, out_dir=tmp_path / "tune", record=str(tmp_path / "t.mcap"))
    session = TuneSession(build_task(cfg, camera=False), cfg)
    ep = session.run_episode(seed=2)
    session.close()
    steps = [m.msg for m in read_recording(tmp_path / "t.mcap").messages["/embodied/step"]]
    assert len(steps) == len(ep.actions) > 10
    assert [s.knob_names for s in steps[:1]] == [["alpha"]]
    np.testing.assert_allclose([s.knob_values[0] for s in steps], ep.knobs["alpha"][:, 0])
    np.testing.assert_allclose([s.measurement for s in steps], ep.measurements)
    assert all(s.setpoint == cfg.setpoint for s in steps)


def test_rosbag2_sqlite_imports_through_a_mapping(tmp_path: Path) -> None:
    from rosbags.rosbag2 import Writer
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    t = store.types
    bag = tmp_path / "arm2"
    with Writer(bag, version=8) as writer:
        js = writer.add_connection("/joint_states", "sensor_msgs/msg/JointState", typestore=store)
        cmd = writer.add_connection("/cmd", "trajectory_msgs/msg/JointTrajectory", typestore=store)
        for k in range(12):
            ns = 10**18 + k * 50_000_000
            header = t["std_msgs/msg/Header"](
                stamp=t["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9),
                frame_id="",
            )
            state = t["sensor_msgs/msg/JointState"](
                header=header, name=["a"], position=np.array([float(k)]), velocity=np.zeros(0),
                effort=np.zeros(0),
            )  # fmt: skip
            point = t["trajectory_msgs/msg/JointTrajectoryPoint"](
                positions=np.array([-float(k)]), velocities=np.zeros(0), accelerations=np.zeros(0),
                effort=np.zeros(0),
                time_from_start=t["builtin_interfaces/msg/Duration"](sec=0, nanosec=0),
            )  # fmt: skip
            command = t["trajectory_msgs/msg/JointTrajectory"](
                header=header, joint_names=["a"], points=[point]
            )
            writer.write(js, ns, store.serialize_cdr(state, "sensor_msgs/msg/JointState"))
            writer.write(
                cmd, ns + 1000, store.serialize_cdr(command, "trajectory_msgs/msg/JointTrajectory")
            )
    assert (bag / "metadata.yaml").exists() and list(bag.glob("*.db3"))
    mapping = BagMapping(
        state=Stream("/joint_states", "position"),
        action=Stream("/cmd", "points[0].positions", "nearest"),
        clock="/cmd",
        max_skew_s=0.01,
        success=True,
    )
    import_bag(bag, tmp_path / "d", mapping)
    (ep,) = Dataset(tmp_path / "d")
    assert ep.obs["state"][:, 0].tolist() == [float(k) for k in range(12)]
    assert ep.actions[:, 0].tolist() == [-float(k) for k in range(12)]
    assert ep.attrs["success"] is True or ep.attrs["success"] == 1
