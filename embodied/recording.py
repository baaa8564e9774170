"""MCAP recordings of control sessions (``--record FILE.mcap`` on ``deploy``, ``eval``, ``tune``).

Every control step becomes typed, timestamped messages on these channels:

* ``/embodied/state`` (``sensor_msgs/msg/JointState``): the observation's state vector,
  ``name`` its entries and ``position`` their values (a robot's joint angles in rad);
* ``/embodied/action`` and ``/embodied/raw_action`` (``trajectory_msgs/msg/JointTrajectory``,
  one point, ``positions`` = the values): the action sent after the safety filter, and the
  policy's action before it;
* ``/embodied/camera/<name>/compressed`` (``sensor_msgs/msg/CompressedImage``, JPEG): each
  camera;
* ``/embodied/instruction`` (``std_msgs/msg/String``): the observation's instruction, at the
  first step of an episode and whenever it changes;
* ``/embodied/step`` (``embodied_msgs/msg/Step``): episode, step, reward, success, knob values,
  measurement and setpoint (NaN without steering) and the loop's stage timings (ms);
* ``/embodied/safety`` (``embodied_msgs/msg/SafetyEvent``): clips, refusals, e-stop, watchdog;
* ``/embodied/episode`` (``embodied_msgs/msg/EpisodeEvent``): start (seed) and end (success,
  reason).

The last three are our own ROS 2 message definitions (:data:`MESSAGE_DEFINITIONS`), embedded in
the file like every schema, not JSON channels: ``rosbags`` (0.11) refuses an MCAP file holding
any ``jsonschema`` channel, and a typed message plots in Foxglove like the ROS ones.

ROS messages are ROS 2 CDR with schemas from ``rosbags``' type store (Humble), so Foxglove,
``mcap``'s readers with ``mcap-ros2-support`` and ``rosbags`` decode them; units and entry names
are in the file's ``embodied.env`` metadata record (the env's :meth:`describe`). Crash safety:
the writer closes a chunk and flushes it to the operating system at least every
``flush_every_s`` seconds, so a killed process leaves a file that reads up to that chunk
(:func:`embodied.datasets.bags.read_recording` reads such a file; the summary section is only
written by :meth:`McapRecorder.close`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from embodied.errors import ConfigError
from embodied.io import json_default
from embodied.loop import StepRecord

TOPIC_STATE = "/embodied/state"
TOPIC_ACTION = "/embodied/action"
TOPIC_RAW_ACTION = "/embodied/raw_action"
TOPIC_INSTRUCTION = "/embodied/instruction"
TOPIC_STEP = "/embodied/step"
TOPIC_SAFETY = "/embodied/safety"
TOPIC_EPISODE = "/embodied/episode"
CAMERA_TOPIC = "/embodied/camera/{}/compressed"
METADATA_NAME = "embodied.env"
FORMAT_VERSION = 1

JOINT_STATE = "sensor_msgs/msg/JointState"
JOINT_TRAJECTORY = "trajectory_msgs/msg/JointTrajectory"
COMPRESSED_IMAGE = "sensor_msgs/msg/CompressedImage"
STRING = "std_msgs/msg/String"

STEP = "embodied_msgs/msg/Step"
SAFETY_EVENT = "embodied_msgs/msg/SafetyEvent"
EPISODE_EVENT = "embodied_msgs/msg/EpisodeEvent"
MESSAGE_DEFINITIONS: dict[str, str] = {
    STEP: """std_msgs/Header header
int32 episode
int32 t
float64 reward
bool success
float64 measurement
float64 setpoint
string[] knob_names
uint32[] knob_sizes
float64[] knob_values
string[] timing_names
float64[] timing_ms
""",
    SAFETY_EVENT: """std_msgs/Header header
int32 episode
int32 step
string rule
float64[] before
float64[] after
bool refused
string message
""",
    EPISODE_EVENT: """std_msgs/Header header
string event
int32 episode
bool has_seed
int64 seed
string outcome
string reason
string meta_json
""",
}
"""Our ROS 2 message definitions (``.msg`` syntax) of the step, safety and episode channels."""


def typestore() -> Any:
    """``rosbags``' ROS 2 Humble type store with :data:`MESSAGE_DEFINITIONS` registered."""
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    for name, text in MESSAGE_DEFINITIONS.items():
        store.register(get_types_from_msg(text, name))
    return store


def check_record_path(path: str | os.PathLike[str]) -> Path:
    """``path`` as a new recording's path (checked before any work starts).

    Raises:
        ConfigError: not ``.mcap``, or the file exists (a recording is never overwritten).
    """
    out = Path(path)
    if out.suffix != ".mcap":
        raise ConfigError(f"record {str(out)!r} is not an .mcap file", fix="e.g. --record run.mcap")
    if out.exists():
        raise ConfigError(
            f"record {str(out)!r} exists; a recording is never overwritten",
            fix="pass a new file name to --record, or move the old recording away",
        )
    return out


class LiveView:
    """A live Foxglove view of a control session: a ``foxglove-sdk`` websocket server whose
    channels carry the same ROS 2 messages as a recording (``--foxglove PORT``).

    Args:
        port: TCP port (0: a free one; 8765 is Foxglove's default).
        host: Interface to bind; loopback unless the user says otherwise.

    Raises:
        ConfigError: foxglove-sdk is not installed, or the port cannot be bound.
    """

    def __init__(self, port: int = 8765, host: str = "127.0.0.1") -> None:
        try:
            import foxglove
        except ImportError as exc:
            raise ConfigError(
                f"--foxglove needs foxglove-sdk ({exc})",
                fix="pip install -e '.[ros]' (or foxglove-sdk)",
            ) from exc
        self._foxglove = foxglove
        self._context = foxglove.Context()  # our channels only, not the SDK's global ones
        try:
            self.server = foxglove.start_server(
                name="embodied", host=host, port=port, context=self._context
            )
        except Exception as exc:  # the SDK raises its own error types for bind failures
            raise ConfigError(
                f"live view on {host}:{port} cannot start: {exc}",
                fix="pass another --foxglove port (0 picks a free one)",
            ) from exc
        self.host, self.port = host, int(self.server.port)
        self._channels: dict[str, Any] = {}

    @property
    def url(self) -> str:
        """``ws://HOST:PORT`` for Foxglove's "Open connection"."""
        return f"ws://{self.host}:{self.port}"

    def advertise(self, topic: str, typename: str, msgdef: str) -> Any:
        """The channel of ``topic`` (created with its schema on first use)."""
        channel = self._channels.get(topic)
        if channel is None:
            schema = self._foxglove.Schema(name=typename, encoding="ros2msg", data=msgdef.encode())
            channel = self._channels[topic] = self._foxglove.Channel(
                topic, schema=schema, message_encoding="cdr", context=self._context
            )
        return channel

    def log(self, topic: str, typename: str, msgdef: str, data: bytes, stamp_ns: int) -> None:
        """Publish one CDR message on ``topic``."""
        self.advertise(topic, typename, msgdef).log(data, log_time=stamp_ns)

    def close(self) -> None:
        """Stop the server."""
        self.server.stop()


class McapRecorder:
    """Records a control session step by step (a :func:`rollout` callback) to an MCAP file, a
    live Foxglove view, or both.

    Args:
        path: The ``.mcap`` file to create (None: no file); never overwritten.
        env_description: The env's :meth:`~embodied.contracts.Env.describe` (its state and
            action entry names and units, cameras, control rate), stored as metadata.
        flush_every_s: Close the open chunk and hand it to the operating system at least this
            often (s of wall time): what a killed process can lose at most.
        jpeg_quality: JPEG quality of the camera channels (1-100).
        clock_ns: Wall clock in ns since the epoch (tests pass a fake one).
        live: A :class:`LiveView` that gets every message too (closed with the recorder).

    Raises:
        ConfigError: the path exists or is not ``.mcap``; neither a path nor a live view.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None,
        env_description: Mapping[str, Any],
        *,
        flush_every_s: float = 1.0,
        jpeg_quality: int = 90,
        clock_ns: Callable[[], int] = time.time_ns,
        live: LiveView | None = None,
    ) -> None:
        from mcap.writer import CompressionType, Writer

        if path is None and live is None:
            raise ConfigError(
                "a recorder needs a file or a live view", fix="pass --record FILE.mcap"
            )
        self.path = None if path is None else check_record_path(path)
        if not 0 < flush_every_s < float("inf"):
            raise ConfigError(
                f"flush_every_s {flush_every_s!r} must be > 0 and finite (s)",
                fix="e.g. 1.0",
            )
        if not 1 <= jpeg_quality <= 100:
            raise ConfigError(f"jpeg_quality {jpeg_quality!r} outside 1..100", fix="e.g. 90")
        self.env = dict(env_description)
        obs = self.env.get("observation", {})
        act = self.env.get("action", {})
        self.state_names = [str(n) for n in obs.get("state", {}).get("names", [])]
        self.action_names = [str(n) for n in act.get("names", [])]
        self.control_dt = 1.0 / float(self.env.get("control_rate_hz") or 1.0)
        self.flush_every_s = float(flush_every_s)
        self.jpeg_quality = int(jpeg_quality)
        self.clock_ns = clock_ns
        self.live = live
        self._store = typestore()
        self._file: Any = None
        self._writer: Any = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # 'x': fail if another process created the file since the check above
            self._file = open(self.path, "xb")  # noqa: SIM115 - closed in close()
            self._writer = Writer(
                self._file, chunk_size=4 * 1024 * 1024, compression=CompressionType.ZSTD
            )
            self._writer.start(profile="ros2", library="embodied")
            self._writer.add_metadata(
                METADATA_NAME,
                {"format_version": str(FORMAT_VERSION), "env": json.dumps(self.env, default=str)},
            )
        self._msgdefs: dict[str, str] = {}
        if live is not None:
            # every channel before the first client: a channel created while a client is
            # subscribing can be refused as unknown by the SDK's server (seen with 0.30)
            cameras = sorted(obs.get("cameras", {}))
            for topic, typename in [
                (TOPIC_STATE, JOINT_STATE),
                (TOPIC_ACTION, JOINT_TRAJECTORY),
                (TOPIC_RAW_ACTION, JOINT_TRAJECTORY),
                (TOPIC_INSTRUCTION, STRING),
                (TOPIC_STEP, STEP),
                (TOPIC_SAFETY, SAFETY_EVENT),
                (TOPIC_EPISODE, EPISODE_EVENT),
                *((CAMERA_TOPIC.format(c), COMPRESSED_IMAGE) for c in cameras),
            ]:
                live.advertise(topic, typename, self._msgdef(typename))
        self._schemas: dict[str, int] = {}
        self._channels: dict[str, int] = {}
        self._last_flush = time.monotonic()
        self.episode = -1
        self._instruction: str | None = None
        self.messages = 0
        self.closed = False

    # ---- channels --------------------------------------------------------------------------
    def _msgdef(self, typename: str) -> str:
        if typename not in self._msgdefs:
            self._msgdefs[typename] = self._store.generate_msgdef(typename, ros_version=2)[0]
        return self._msgdefs[typename]

    def _ros_channel(self, topic: str, typename: str) -> int:
        if topic not in self._channels:
            if typename not in self._schemas:
                self._schemas[typename] = self._writer.register_schema(
                    typename, "ros2msg", self._msgdef(typename).encode()
                )
            self._channels[topic] = self._writer.register_channel(
                topic, "cdr", self._schemas[typename]
            )
        return self._channels[topic]

    def _emit(self, topic: str, typename: str, data: bytes, stamp_ns: int) -> None:
        if self._writer is not None:
            channel = self._ros_channel(topic, typename)
            self._writer.add_message(channel, log_time=stamp_ns, data=data, publish_time=stamp_ns)
        if self.live is not None:
            self.live.log(topic, typename, self._msgdef(typename), data, stamp_ns)
        self.messages += 1

    def _header(self, stamp_ns: int, frame_id: str = "") -> Any:
        t = self._store.types
        stamp = t["builtin_interfaces/msg/Time"](sec=stamp_ns // 10**9, nanosec=stamp_ns % 10**9)
        return t["std_msgs/msg/Header"](stamp=stamp, frame_id=frame_id)

    def _ros(self, topic: str, typename: str, msg: Any, stamp_ns: int) -> None:
        self._emit(topic, typename, bytes(self._store.serialize_cdr(msg, typename)), stamp_ns)

    # ---- what the loop and the apps call ---------------------------------------------------
    def start_episode(self, *, seed: int | None = None, meta: Mapping[str, Any] = {}) -> None:
        """Mark an episode start (its reset seed and anything else worth keeping)."""
        self._check_open()
        self.episode += 1
        self._instruction = None
        self._episode_event(self.clock_ns(), "start", seed=seed, meta=meta)

    def __call__(self, record: StepRecord) -> None:
        """Record one :class:`~embodied.loop.StepRecord` (use as a ``rollout`` callback)."""
        self._check_open()
        if self.episode < 0:
            self.start_episode()
        now = self.clock_ns()
        t = self._store.types
        obs = record.obs
        instruction = record.instruction
        if instruction != self._instruction:
            self._ros(TOPIC_INSTRUCTION, STRING, t[STRING](data=instruction), now)
            self._instruction = instruction
        if "state" in obs:
            state = np.asarray(obs["state"], dtype=np.float64).ravel()
            names = self.state_names if len(self.state_names) == state.size else []
            msg = t[JOINT_STATE](
                header=self._header(now),
                name=names or [f"s{i}" for i in range(state.size)],
                position=state,
                velocity=np.zeros(0),
                effort=np.zeros(0),
            )
            self._ros(TOPIC_STATE, JOINT_STATE, msg, now)
        for topic, action in ((TOPIC_ACTION, record.action), (TOPIC_RAW_ACTION, record.raw_action)):
            self._ros(topic, JOINT_TRAJECTORY, self._trajectory(action, now), now)
        for key, value in obs.items():
            if key.startswith("image."):
                self._image(key.removeprefix("image."), np.asarray(value), now)
        knobs = {k: np.asarray(v, dtype=np.float64).ravel() for k, v in record.knobs.items()}
        step = t[STEP](
            header=self._header(now),
            episode=self.episode,
            t=int(record.t),
            reward=float(record.reward),
            success=bool(record.success),
            measurement=float(record.measurement),
            setpoint=float(record.setpoint),
            knob_names=list(knobs),
            knob_sizes=np.array([v.size for v in knobs.values()], dtype=np.uint32),
            knob_values=np.concatenate([*knobs.values(), np.zeros(0)]),
            timing_names=list(record.timing_ms),
            timing_ms=np.array([float(v) for v in record.timing_ms.values()], dtype=np.float64),
        )
        self._ros(TOPIC_STEP, STEP, step, now)
        self._maybe_flush()

    def safety_events(self, events: Sequence[Mapping[str, Any]]) -> None:
        """Record safety events (:meth:`hardware.safety.SafetyEvent.to_dict` dicts)."""
        self._check_open()
        now = self.clock_ns()
        for event in events:
            after = event.get("after")
            msg = self._store.types[SAFETY_EVENT](
                header=self._header(now),
                episode=self.episode,
                step=int(event.get("step", -1)),
                rule=str(event.get("rule", "")),
                before=np.asarray(event.get("before") or [], dtype=np.float64),
                after=np.asarray(after or [], dtype=np.float64),
                refused=after is None,
                message=str(event.get("message", "")),
            )
            self._ros(TOPIC_SAFETY, SAFETY_EVENT, msg, now)
        if events:
            self._maybe_flush()

    def end_episode(self, *, success: bool | None = None, reason: str | None = None) -> None:
        """Mark the end of the running episode and flush it to disk."""
        self._check_open()
        outcome = "" if success is None else ("success" if success else "failure")
        self._episode_event(self.clock_ns(), "end", outcome=outcome, reason=reason or "")
        self.flush()

    def flush(self) -> None:
        """Close the open chunk and hand everything to the operating system."""
        if not self.closed and self._writer is not None:
            self._writer.flush()
        self._last_flush = time.monotonic()

    def close(self) -> None:
        """Write the file's summary section (indexes, statistics), close it, stop the view."""
        if self.closed:
            return
        self.closed = True
        try:
            if self._writer is not None:
                self._writer.finish()
        finally:
            if self._file is not None:
                self._file.close()
            if self.live is not None:
                self.live.close()

    def __enter__(self) -> McapRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- helpers ---------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError(f"recording {self.path} is closed")

    def _maybe_flush(self) -> None:
        if time.monotonic() - self._last_flush >= self.flush_every_s:
            self.flush()

    def _episode_event(
        self,
        stamp_ns: int,
        event: str,
        *,
        seed: int | None = None,
        outcome: str = "",
        reason: str = "",
        meta: Mapping[str, Any] = {},
    ) -> None:
        msg = self._store.types[EPISODE_EVENT](
            header=self._header(stamp_ns),
            event=event,
            episode=self.episode,
            has_seed=seed is not None,
            seed=int(seed or 0),
            outcome=outcome,
            reason=reason,
            meta_json=json.dumps(dict(meta), default=json_default),
        )
        self._ros(TOPIC_EPISODE, EPISODE_EVENT, msg, stamp_ns)

    def _trajectory(self, action: Any, stamp_ns: int) -> Any:
        t = self._store.types
        values = np.asarray(action, dtype=np.float64).ravel()
        names = self.action_names if len(self.action_names) == values.size else []
        dt_ns = round(self.control_dt * 1e9)
        point = t["trajectory_msgs/msg/JointTrajectoryPoint"](
            positions=values,
            velocities=np.zeros(0),
            accelerations=np.zeros(0),
            effort=np.zeros(0),
            time_from_start=t["builtin_interfaces/msg/Duration"](
                sec=dt_ns // 10**9, nanosec=dt_ns % 10**9
            ),
        )
        return t[JOINT_TRAJECTORY](
            header=self._header(stamp_ns),
            joint_names=names or [f"a{i}" for i in range(values.size)],
            points=[point],
        )

    def _image(self, camera: str, frame: np.ndarray, stamp_ns: int) -> None:
        import simplejpeg

        if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3:
            return  # not an RGB frame (e.g. depth): the step channel still holds the step
        data = simplejpeg.encode_jpeg(
            np.ascontiguousarray(frame), quality=self.jpeg_quality, colorspace="RGB"
        )
        msg = self._store.types[COMPRESSED_IMAGE](
            header=self._header(stamp_ns, frame_id=camera),
            format="jpeg",
            data=np.frombuffer(data, dtype=np.uint8),
        )
        self._ros(CAMERA_TOPIC.format(camera), COMPRESSED_IMAGE, msg, stamp_ns)


class SafetyTap:
    """Forwards a safety filter's new events to a recording (a ``rollout`` callback).

    Works with any filter that keeps ``events`` (objects with ``to_dict()``, newest last, a
    bounded deque) and ``counts`` (events ever recorded, by rule), as
    :class:`hardware.safety.SafetyFilter` does. Call it once more after a fault, so the event
    that raised is recorded too.
    """

    def __init__(self, safety: Any, recording: McapRecorder) -> None:
        self.safety, self.recording = safety, recording
        self.seen = sum(safety.counts.values())

    def __call__(self, record: StepRecord | None = None) -> None:
        total = sum(self.safety.counts.values())
        new = min(total - self.seen, len(self.safety.events))
        if new > 0:
            events = list(self.safety.events)[-new:]
            self.recording.safety_events([e.to_dict() for e in events])
        self.seen = total
