"""Robot recordings to datasets: read rosbag1, rosbag2 and MCAP files, align, segment, write.

``embodied datasets import BAG --map MAPPING --out DIR`` reads a recording with ``rosbags``
(rosbag1 ``.bag``, rosbag2 folders and ``.db3``) or ``mcap`` (``.mcap``, read as a stream so a
file cut off by a crash reads up to its last complete chunk), samples the mapped topics on
control ticks and writes our dataset (``embodied datasets export`` turns it into LeRobot v3).

The mapping (YAML or JSON) names what becomes what::

    clock: /joint_command          # one control step per message of this topic, or
    # rate_hz: 20                  # ticks at this rate over the span every stream covers
    max_skew_s: 0.05               # a stream's message must lie this close to the tick
    state:  {topic: /joint_states, field: position, align: previous}
    action: {topic: /joint_command, field: "points[0].positions", align: nearest}
    cameras:
      front: {topic: /camera/front/compressed}    # CompressedImage (JPEG/PNG) or Image
    instruction: {text: "pick up the red cube"}   # or {topic: /instruction, field: data}
    episodes: {split: gap, gap_s: 1.0}             # or {split: topic, topic: /episode_start}
                                                   # success: true marks them all successes

``align`` is ``previous`` (the newest message at or before the tick: what a controller
running at the tick had seen) or ``nearest``; a tick where any stream has no message within
``max_skew_s`` is dropped and ends the episode. Episodes are split at ticks farther apart than
``gap_s`` (``split: gap``) or at each message of a topic (``split: topic``). Service calls are
not in bags (``rosbag``, ``ros2 bag`` and MCAP recorders record topics), so an episode boundary
a service marks is imported through a topic that announces it (``split: topic``). Our own
recordings (``--record FILE.mcap``) import with no mapping (:func:`recording_mapping`): one
step per ``/embodied/action`` message, the state, cameras and instruction of the same step,
episodes at ``/embodied/episode`` starts, and the env description from the file's metadata.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from embodied.config import Rule, checked, nested, validate
from embodied.datasets.hdf5 import DatasetWriter, EpisodeData
from embodied.errors import ConfigError, DatasetError
from embodied.recording import (
    CAMERA_TOPIC,
    EPISODE_EVENT,
    METADATA_NAME,
    TOPIC_ACTION,
    TOPIC_EPISODE,
    TOPIC_INSTRUCTION,
    TOPIC_STATE,
)

ALIGN_RULES = ("previous", "nearest")
"""How a stream's message is chosen for a tick (see the module docstring)."""
SPLIT_RULES = ("gap", "topic")
"""How ticks are split into episodes."""
BAG_SUFFIXES = (".bag", ".mcap", ".db3")


@dataclass(frozen=True)
class BagMessage:
    """One decoded message of a recording.

    Attributes:
        topic: Topic name.
        msgtype: ROS type, e.g. ``sensor_msgs/msg/JointState``.
        log_time_ns: When it was recorded (ns since the epoch, the bag's clock).
        msg: The message (``rosbags`` dataclasses).
    """

    topic: str
    msgtype: str
    log_time_ns: int
    msg: Any


@dataclass
class Recording:
    """Every message of the mapped topics, by topic, in log-time order.

    Attributes:
        path: The bag.
        topics: Topic -> ROS type of every topic in the bag.
        messages: Topic -> its messages (only the topics asked for).
        metadata: MCAP metadata records (name -> key -> value).
        truncated: The MCAP file ended inside a record (a killed recorder); everything before
            the cut was read.
    """

    path: Path
    topics: dict[str, str]
    messages: dict[str, list[BagMessage]]
    metadata: dict[str, dict[str, str]] = field(default_factory=dict)
    truncated: bool = False


def _check_path(path: Path) -> None:
    if not path.exists():
        raise DatasetError(f"bag {str(path)!r} does not exist", fix="check the path")
    if path.is_file() and path.suffix not in BAG_SUFFIXES:
        raise DatasetError(
            f"bag {str(path)!r}: unknown suffix {path.suffix!r}",
            fix=f"give a rosbag1 .bag, a rosbag2 folder or .db3, or an .mcap file "
            f"({', '.join(BAG_SUFFIXES)})",
        )


def read_recording(path: str | os.PathLike[str], topics: Iterable[str] | None = None) -> Recording:
    """Read ``topics`` (all when None) of the bag at ``path``.

    Raises:
        DatasetError: the file is missing, not a bag, or damaged beyond a cut-off end.
    """
    path = Path(path)
    _check_path(path)
    wanted = None if topics is None else set(topics)
    if path.is_file() and path.stat().st_size == 0:
        raise DatasetError(f"bag {str(path)!r} is empty (0 bytes)", fix="check the recording")
    if path.suffix == ".mcap":
        return _read_mcap(path, wanted)
    return _read_rosbags(path, wanted)


def _read_rosbags(path: Path, wanted: set[str] | None) -> Recording:
    from rosbags.highlevel import AnyReader

    try:
        with AnyReader([path]) as reader:
            topics = {c.topic: c.msgtype for c in reader.connections}
            conns = [c for c in reader.connections if wanted is None or c.topic in wanted]
            messages: dict[str, list[BagMessage]] = {t: [] for t in topics}
            for conn, t_ns, raw in reader.messages(connections=conns):
                msg = reader.deserialize(raw, conn.msgtype)
                messages[conn.topic].append(BagMessage(conn.topic, conn.msgtype, int(t_ns), msg))
    except DatasetError:
        raise
    except Exception as exc:  # rosbags' errors are many (ReaderError, struct, lz4, ...)
        fix = "check the file (`rosbag check`, or `rosbag reindex` for an unindexed bag)"
        raise DatasetError(f"bag {str(path)!r} cannot be read: {exc}", fix=fix) from exc
    return Recording(path, topics, messages)


def _read_mcap(path: Path, wanted: set[str] | None) -> Recording:
    from mcap.records import Channel, Chunk, Message, Metadata, Schema
    from mcap.stream_reader import StreamReader, breakup_chunk
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    # one empty type store per encoding, filled from the file's own schemas (as rosbags'
    # AnyReader does): a ROS 1 Header is not a ROS 2 one, and another distro's types may differ
    stores = {"cdr": get_typestore(Stores.EMPTY), "ros1": get_typestore(Stores.EMPTY)}
    schemas: dict[int, Schema] = {}
    channels: dict[int, Channel] = {}
    registered: set[tuple[str, str]] = set()
    topics: dict[str, str] = {}
    messages: dict[str, list[BagMessage]] = {}
    metadata: dict[str, dict[str, str]] = {}
    truncated = False

    def decode(channel: Channel, data: bytes) -> tuple[str, Any]:
        schema = schemas.get(channel.schema_id)
        if channel.message_encoding == "json":
            return (schema.name if schema else "json"), json.loads(data)
        if schema is None:
            raise DatasetError(
                f"{str(path)!r}: channel {channel.topic!r} has no schema",
                fix="record with a writer that stores schemas (MCAP ROS profiles do)",
            )
        encoding = channel.message_encoding
        if encoding not in stores:
            raise DatasetError(
                f"{str(path)!r}: channel {channel.topic!r} has encoding {encoding!r}",
                fix="import cdr (ROS 2), ros1 or json channels",
            )
        store = stores[encoding]
        name = schema.name if "/msg/" in schema.name else schema.name.replace("/", "/msg/", 1)
        if (encoding, name) not in registered:
            if name not in store.types:
                store.register(get_types_from_msg(schema.data.decode(), name))
            registered.add((encoding, name))
        if encoding == "cdr":
            return name, store.deserialize_cdr(data, name)
        return name, store.deserialize_ros1(data, name)

    def handle(record: Any) -> None:
        if isinstance(record, Schema):
            schemas[record.id] = record
        elif isinstance(record, Channel):
            channels[record.id] = record
            schema = schemas.get(record.schema_id)
            topics[record.topic] = schema.name if schema else record.message_encoding
            messages.setdefault(record.topic, [])
        elif isinstance(record, Message):
            channel = channels[record.channel_id]
            if wanted is None or channel.topic in wanted:
                msgtype, msg = decode(channel, record.data)
                messages[channel.topic].append(
                    BagMessage(channel.topic, msgtype, int(record.log_time), msg)
                )
        elif isinstance(record, Metadata):
            metadata[record.name] = dict(record.metadata)

    with path.open("rb") as f:
        try:
            # chunks are broken up here, not by the reader: a damaged one is a cut-off end
            for record in StreamReader(f, skip_magic=False, emit_chunks=True).records:
                if isinstance(record, Chunk):
                    for inner in breakup_chunk(record, validate_crc=True):
                        handle(inner)
                else:
                    handle(record)
        except DatasetError:
            raise
        except Exception as exc:  # a damaged file breaks the parser anywhere
            # (McapError, EOFError, struct.error, zstd/lz4 decompression, a bad schema text)
            from mcap.exceptions import InvalidMagic

            if isinstance(exc, InvalidMagic):
                raise DatasetError(
                    f"{str(path)!r} is not an MCAP file ({exc})",
                    fix="give an .mcap file, or a rosbag1 .bag / rosbag2 folder by its suffix",
                ) from exc
            if not any(messages.values()):
                raise DatasetError(
                    f"{str(path)!r} is cut off before its first complete chunk "
                    f"({type(exc).__name__}: {exc}): no message can be read",
                    fix="record for longer than the recorder's flush period, or check the "
                    "file (`mcap doctor FILE`)",
                ) from exc
            truncated = True  # a killed recorder: keep every complete chunk before the cut
    return Recording(path, topics, messages, metadata, truncated)


# ---- mapping -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Stream:
    """A mapped topic: ``topic``, the ``field`` path in its message and the ``align`` rule."""

    config_name: ClassVar[str] = "stream"

    topic: str
    field: str = ""
    align: str = checked("previous", choices=ALIGN_RULES)

    def __post_init__(self) -> None:
        validate(self)


@dataclass(frozen=True)
class BagMapping:
    """Which topic and field become state, action, cameras and instruction (module docstring).

    Args:
        state: The state stream (a vector field).
        action: The action stream (a vector field).
        cameras: Camera name -> its image stream (``CompressedImage`` or ``Image``).
        clock: One tick per message of this topic (None: ticks at ``rate_hz``).
        rate_hz: Tick rate when there is no ``clock`` (Hz).
        max_skew_s: Largest distance between a tick and a stream's chosen message (s).
        instruction: A fixed instruction (``text``) ...
        instruction_topic: ... or a topic whose newest message (``instruction_field``) at each
            episode start is the instruction.
        instruction_field: Field of that topic's messages.
        split: ``gap`` or ``topic`` (:data:`SPLIT_RULES`).
        gap_s: ``split: gap``: ticks farther apart than this start a new episode (s).
        split_topic: ``split: topic``: each message of this topic starts an episode.
        env: Env description of the dataset (our recordings: from the file); None builds one
            from the message field names.
        success: ``episodes.success``: mark every episode a success (``true``, e.g.
            teleoperated demonstrations) or a failure; None leaves the outcome unrecorded
            (training then takes the episode as a demonstration).
    """

    state: Stream
    action: Stream
    cameras: Mapping[str, Stream] = field(default_factory=dict)
    config_name: ClassVar[str] = "mapping"

    clock: str | None = None
    rate_hz: float | None = checked(None, gt=0, fix="e.g. rate_hz: 20")
    max_skew_s: float = checked(0.05, ge=0, fix="e.g. max_skew_s: 0.05")
    instruction: str = ""
    instruction_topic: str | None = None
    instruction_field: str = "data"
    split: str = checked("gap", choices=SPLIT_RULES, fix="episodes: {split: gap} or {split: topic}")
    gap_s: float = checked(1.0, gt=0, fix="episodes: {gap_s: 1.0}")
    split_topic: str | None = None
    env: Mapping[str, Any] | None = None
    success: bool | None = None

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "clock",
            lambda c: (c.clock is None) != (c.rate_hz is None),
            "and rate_hz={rate_hz!r}: give exactly one",
            "clock: <the command topic> (one step per command), or rate_hz: 20",
        ),
        Rule(
            "split_topic",
            lambda c: c.split != "topic" or bool(c.split_topic),
            "names no topic for episodes.split 'topic'",
            "episodes: {split: topic, topic: /episode_start}",
        ),
    )

    def __post_init__(self) -> None:
        validate(self)

    def topics(self) -> set[str]:
        """Every topic the mapping reads."""
        out = {self.state.topic, self.action.topic, *(s.topic for s in self.cameras.values())}
        out |= {t for t in (self.clock, self.instruction_topic, self.split_topic) if t}
        return out


_STREAM_KEYS = {"topic", "field", "align"}
_TOP_KEYS = {
    "state",
    "action",
    "cameras",
    "clock",
    "rate_hz",
    "max_skew_s",
    "instruction",
    "episodes",
}


def _stream(data: Any, key: str, source: str) -> Stream:
    if not isinstance(data, Mapping) or "topic" not in data:
        raise ConfigError(
            f"{source}: {key} must be a map with a topic, got {data!r}",
            fix=f"{key}: {{topic: /joint_states, field: position}}",
        )
    extra = sorted(set(data) - _STREAM_KEYS)
    if extra:
        raise ConfigError(
            f"{source}: {key} has unknown keys {extra}", fix=f"use {sorted(_STREAM_KEYS)}"
        )
    fields = {
        "topic": str(data["topic"]),
        "field": str(data.get("field", "")),
        "align": str(data.get("align", "previous")),
    }
    return nested(Stream, fields, key, BagMapping)


def load_mapping(path: str | os.PathLike[str]) -> BagMapping:
    """Read a mapping file (YAML or JSON; see the module docstring).

    Raises:
        ConfigError: unreadable file, unknown or missing keys, bad values.
    """
    import yaml

    source = str(path)
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"mapping {source!r} cannot be read: {exc}", fix="fix the file") from exc
    if not isinstance(data, Mapping):
        raise ConfigError(f"mapping {source!r} is not a map", fix="see `datasets import --help`")
    extra = sorted(set(data) - _TOP_KEYS)
    if extra:
        raise ConfigError(f"{source}: unknown keys {extra}", fix=f"use {sorted(_TOP_KEYS)}")
    for key in ("state", "action"):
        if key not in data:
            raise ConfigError(f"{source}: no {key!r}", fix=f"{key}: {{topic: ..., field: ...}}")
    cams = data.get("cameras") or {}
    if not isinstance(cams, Mapping):
        raise ConfigError(f"{source}: cameras must map names to streams", fix="cameras: {}")
    instr = data.get("instruction") or {}
    if isinstance(instr, str):
        instr = {"text": instr}
    episodes = data.get("episodes") or {}
    if not isinstance(instr, Mapping) or not isinstance(episodes, Mapping):
        raise ConfigError(
            f"{source}: instruction and episodes must be maps",
            fix="instruction: {text: ...}; episodes: {split: gap, gap_s: 1.0}",
        )
    try:
        return BagMapping(
            state=_stream(data["state"], "state", source),
            action=_stream(data["action"], "action", source),
            cameras={str(k): _stream(v, f"cameras.{k}", source) for k, v in cams.items()},
            clock=data.get("clock"),
            rate_hz=None if data.get("rate_hz") is None else float(data["rate_hz"]),
            max_skew_s=float(data.get("max_skew_s", 0.05)),
            instruction=str(instr.get("text", "")),
            instruction_topic=instr.get("topic"),
            instruction_field=str(instr.get("field", "data")),
            split=str(episodes.get("split", "gap")),
            gap_s=float(episodes.get("gap_s", 1.0)),
            split_topic=episodes.get("topic"),
            success=_optional_bool(episodes.get("success"), f"{source}: episodes.success"),
        )
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"{source}: {exc}", fix="numbers for rate_hz, max_skew_s, gap_s") from exc


def _optional_bool(value: Any, key: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise ConfigError(f"{key} {value!r} is not true or false", fix="episodes: {success: true}")


def recording_mapping(recording: Recording) -> BagMapping:
    """The mapping of our own recordings (``--record``): exact steps, no alignment error.

    Raises:
        DatasetError: the file is not one of ours (no ``embodied.env`` metadata).
    """
    meta = recording.metadata.get(METADATA_NAME)
    if meta is None:
        raise DatasetError(
            f"{str(recording.path)!r} has no {METADATA_NAME!r} metadata: not an embodied recording",
            fix="pass --map MAPPING naming its state, action and camera topics",
        )
    try:
        env = json.loads(meta["env"])
        cams = sorted(env.get("observation", {}).get("cameras", {}))
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        raise DatasetError(
            f"{str(recording.path)!r}: its {METADATA_NAME!r} metadata is damaged ({exc})",
            fix="import it with --map MAPPING naming the /embodied/* topics",
        ) from exc
    return BagMapping(
        state=Stream(TOPIC_STATE, "position", "nearest"),
        action=Stream(TOPIC_ACTION, "points[0].positions", "nearest"),
        cameras={c: Stream(CAMERA_TOPIC.format(c), "", "nearest") for c in cams},
        clock=TOPIC_ACTION,
        max_skew_s=0.0,  # every message of a step carries the step's own stamp
        instruction_topic=TOPIC_INSTRUCTION,
        split="topic",
        split_topic=TOPIC_EPISODE,
        env=env,
    )


# ---- fields --------------------------------------------------------------------------------
_PART = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)((?:\[-?\d+\])*)")


def get_field(msg: Any, path: str, *, topic: str = "", msgtype: str = "") -> Any:
    """The value at ``path`` (``points[0].positions``) in ``msg``; ``""`` is the message.

    Raises:
        ConfigError: a name or index that the message does not have (names its fields).
    """
    value = msg
    for part in path.split(".") if path else []:
        m = _PART.fullmatch(part)
        if m is None:
            raise ConfigError(
                f"field {path!r} of {topic}: {part!r} is not a name or name[index]",
                fix="e.g. field: points[0].positions",
            )
        name, indexes = m.group(1), m.group(2)
        names = [n for n in getattr(value, "__dataclass_fields__", {}) if n != "__msgtype__"]
        if not hasattr(value, name) or (names and name not in names):
            raise ConfigError(
                f"topic {topic} ({msgtype}) has no field {path!r}: {type(value).__name__} has "
                f"{names}",
                fix=f"name one of {names} in the mapping",
            )
        value = getattr(value, name)
        for idx in re.findall(r"-?\d+", indexes):
            try:
                value = value[int(idx)]
            except (IndexError, TypeError) as exc:
                raise ConfigError(
                    f"topic {topic} ({msgtype}) field {path!r}: index {idx} out of range",
                    fix="check the index against the recorded messages",
                ) from exc
    return value


def _vector(msg: BagMessage, stream: Stream) -> np.ndarray:
    value = get_field(msg.msg, stream.field, topic=msg.topic, msgtype=msg.msgtype)
    try:
        out = np.asarray(value, dtype=np.float64).ravel()
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"topic {msg.topic} ({msg.msgtype}) field {stream.field!r} is not numeric",
            fix="map a numeric field or array (e.g. position)",
        ) from exc
    return out


def _image(msg: BagMessage) -> np.ndarray:
    m = msg.msg
    if msg.msgtype.endswith("CompressedImage"):
        data = bytes(np.asarray(m.data, dtype=np.uint8))
        if data[:2] == b"\xff\xd8":
            import simplejpeg

            return simplejpeg.decode_jpeg(data, colorspace="RGB")  # type: ignore[no-any-return]
        import io

        from PIL import Image

        return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    if msg.msgtype.endswith("/Image"):
        raw = np.asarray(m.data, dtype=np.uint8)
        enc = str(m.encoding)
        if enc in ("rgb8", "bgr8"):
            img = raw.reshape(int(m.height), int(m.step) // 1)[:, : int(m.width) * 3]
            img = img.reshape(int(m.height), int(m.width), 3)
            return img[..., ::-1].copy() if enc == "bgr8" else img.copy()
        if enc == "mono8":
            gray = raw.reshape(int(m.height), int(m.step))[:, : int(m.width)]
            return np.repeat(gray[..., None], 3, axis=2)
        raise ConfigError(
            f"topic {msg.topic}: image encoding {enc!r} is not imported",
            fix="record rgb8, bgr8, mono8 or compressed (JPEG/PNG) images",
        )
    raise ConfigError(
        f"topic {msg.topic} ({msg.msgtype}) is not an image",
        fix="map sensor_msgs/Image or sensor_msgs/CompressedImage topics to cameras",
    )


# ---- alignment -----------------------------------------------------------------------------
def _times(recording: Recording, topic: str) -> np.ndarray:
    msgs = recording.messages.get(topic, [])
    if topic not in recording.topics:
        raise ConfigError(
            f"topic {topic} is not in {str(recording.path)!r} (its topics: "
            f"{sorted(recording.topics)})",
            fix="name a recorded topic in the mapping",
        )
    if not msgs:
        raise ConfigError(
            f"topic {topic} has no messages in {str(recording.path)!r}",
            fix="record the topic, or map another one",
        )
    times = np.array([m.log_time_ns for m in msgs], dtype=np.int64)
    _check_monotonic(recording, topic, times, "log times")
    # a clock that jumps back (a sim-time reset, an NTP step) shows in the header stamps of
    # messages a bag stored in log-time order
    heads: list[Any] = [getattr(getattr(m.msg, "header", None), "stamp", None) for m in msgs]
    if heads and all(h is not None for h in heads):
        stamps = np.array([int(h.sec) * 10**9 + int(h.nanosec) for h in heads], dtype=np.int64)
        _check_monotonic(recording, topic, stamps, "header stamps")
    return times


def _check_monotonic(recording: Recording, topic: str, times: np.ndarray, what: str) -> None:
    back = np.flatnonzero(np.diff(times) < 0)
    if back.size:
        k = int(back[0]) + 1
        raise DatasetError(
            f"topic {topic}: the clock jumps back by {(times[k - 1] - times[k]) / 1e9:.3f} s at "
            f"message {k} ({what}) of {str(recording.path)!r}",
            fix="cut the recording at the jump (e.g. `rosbag filter` on t) and import the parts",
        )


def pick(times: np.ndarray, ticks: np.ndarray, rule: str, max_skew_ns: int) -> np.ndarray:
    """Index of each tick's message under ``rule`` (-1: none within ``max_skew_ns``)."""
    right = np.searchsorted(times, ticks, side="right")
    prev = right - 1
    if rule == "previous":
        idx = prev
        ok = (prev >= 0) & (ticks - times[np.clip(prev, 0, None)] <= max_skew_ns)
    else:
        nxt = np.clip(right, 0, len(times) - 1)
        prev_c = np.clip(prev, 0, None)
        d_prev = np.where(prev >= 0, np.abs(ticks - times[prev_c]), np.iinfo(np.int64).max)
        d_next = np.where(right < len(times), np.abs(times[nxt] - ticks), np.iinfo(np.int64).max)
        idx = np.where(d_prev <= d_next, prev_c, nxt)
        ok = np.minimum(d_prev, d_next) <= max_skew_ns
    return np.where(ok, idx, -1)


@dataclass
class ImportResult:
    """What an import wrote.

    Attributes:
        episodes: Episodes written.
        steps: Control steps written.
        dropped_ticks: Ticks dropped because a stream had no message within the skew.
        truncated: The source MCAP file was cut off (read up to its last complete chunk).
        shards: Paths of the written shards.
    """

    episodes: int
    steps: int
    dropped_ticks: int
    truncated: bool
    shards: list[Path]


def import_bag(
    bag: str | os.PathLike[str],
    out: str | os.PathLike[str],
    mapping: BagMapping | None = None,
    *,
    min_steps: int = 2,
) -> ImportResult:
    """Import ``bag`` into the dataset folder ``out`` (``mapping`` None: our recording).

    Raises:
        ConfigError: a mapped topic or field does not exist, or the mapping is invalid.
        DatasetError: the bag cannot be read, or its clock jumps back.
    """
    bag = Path(bag)
    if mapping is None:
        recording = read_recording(bag)
        mapping = recording_mapping(recording)
    else:
        _check_path(bag)
        recording = read_recording(bag, mapping.topics())
    skew = round(mapping.max_skew_s * 1e9)
    streams = {"state": mapping.state, "action": mapping.action}
    streams |= {f"image.{k}": v for k, v in mapping.cameras.items()}
    times = {key: _times(recording, s.topic) for key, s in streams.items()}
    if mapping.clock is not None:
        ticks = _times(recording, mapping.clock)
    else:
        assert mapping.rate_hz is not None
        start = max(int(t[0]) for t in times.values())
        stop = min(int(t[-1]) for t in times.values())
        period = 1e9 / mapping.rate_hz
        ticks = start + np.round(np.arange(0, max(0, stop - start) + 1, period)).astype(np.int64)
    chosen = {key: pick(times[key], ticks, streams[key].align, skew) for key in streams}
    valid = np.all(np.stack([c >= 0 for c in chosen.values()]), axis=0)
    # episode boundaries: a dropped tick, a gap, or a message of the split topic
    new_episode = np.zeros(len(ticks), dtype=bool)
    if mapping.split == "topic":
        assert mapping.split_topic is not None
        starts = _split_times(recording, mapping.split_topic)
        seg = np.searchsorted(starts, ticks, side="right")  # 0: before the first start
        valid &= seg > 0
        new_episode[1:] = seg[1:] != seg[:-1]
    else:
        new_episode[1:] = np.diff(ticks) > mapping.gap_s * 1e9
    new_episode[1:] |= ~valid[:-1]

    instr_times, instr_msgs = _instructions(recording, mapping)
    ends = _episode_ends(recording) if mapping.split_topic == TOPIC_EPISODE else None
    writer = DatasetWriter(out, env_args=dict(mapping.env or _env_from(recording, mapping)))
    shards: list[Path] = []
    steps = 0
    run: list[int] = []

    def flush() -> None:
        nonlocal steps
        if len(run) >= min_steps:
            episode = _episode(
                recording, mapping, streams, chosen, run, ticks, instr_times, instr_msgs
            )
            if ends is not None:  # our recordings: the outcome from the episode's end event
                k = int(np.searchsorted(ends[0], ticks[run[-1]], side="left"))
                outcome = ends[1][k] if k < len(ends[1]) else ""
                if outcome in ("success", "failure"):  # a robot session's stays unrecorded
                    episode.attrs["success"] = outcome == "success"
            shards.append(writer.add(episode))
            steps += len(run)
        run.clear()

    for i in range(len(ticks)):
        if new_episode[i]:
            flush()
        if valid[i]:
            run.append(i)
    flush()
    return ImportResult(len(shards), steps, int((~valid).sum()), recording.truncated, shards)


def _split_times(recording: Recording, topic: str) -> np.ndarray:
    times = _times(recording, topic)
    if topic == TOPIC_EPISODE:  # our recordings: only the start events start an episode
        msgs = recording.messages[topic]
        keep = [m.msgtype != EPISODE_EVENT or m.msg.event == "start" for m in msgs]
        times = times[np.array(keep, dtype=bool)]
    return times


def _episode_ends(recording: Recording) -> tuple[np.ndarray, list[str]]:
    """Times and outcomes of the end events of our recordings."""
    msgs = [m for m in recording.messages.get(TOPIC_EPISODE, []) if m.msg.event == "end"]
    return np.array([m.log_time_ns for m in msgs], dtype=np.int64), [m.msg.outcome for m in msgs]


def _instructions(recording: Recording, mapping: BagMapping) -> tuple[np.ndarray, list[str]]:
    if mapping.instruction_topic is None:
        return np.zeros(0, dtype=np.int64), []
    topic = mapping.instruction_topic
    times = _times(recording, topic)
    texts = [
        str(get_field(m.msg, mapping.instruction_field, topic=topic, msgtype=m.msgtype))
        for m in recording.messages[topic]
    ]
    return times, texts


def _episode(
    recording: Recording,
    mapping: BagMapping,
    streams: Mapping[str, Stream],
    chosen: Mapping[str, np.ndarray],
    run: list[int],
    ticks: np.ndarray,
    instr_times: np.ndarray,
    instr_texts: list[str],
) -> EpisodeData:
    obs: dict[str, np.ndarray] = {}
    actions = np.zeros(0)
    for key, stream in streams.items():
        msgs = recording.messages[stream.topic]
        picked = [msgs[int(chosen[key][i])] for i in run]
        if key.startswith("image."):
            frames = [_image(m) for m in picked]
            shapes = {f.shape for f in frames}
            if len(shapes) > 1:
                raise ConfigError(
                    f"topic {stream.topic}: frames of sizes {sorted(shapes)} in one episode",
                    fix="record one image size per camera",
                )
            obs[key] = np.stack(frames)
            continue
        rows = [_vector(m, stream) for m in picked]
        if len({r.size for r in rows}) > 1:
            raise ConfigError(
                f"topic {stream.topic} field {stream.field!r}: vectors of sizes "
                f"{sorted({r.size for r in rows})}",
                fix="map a field of one fixed size",
            )
        if key == "action":
            actions = np.stack(rows)
        else:
            obs[key] = np.stack(rows)
    instruction = mapping.instruction
    if instr_texts:
        k = int(np.searchsorted(instr_times, ticks[run[0]], side="right")) - 1
        instruction = instr_texts[max(k, 0)] if k >= 0 else instruction
    n = len(run)
    dones = np.zeros(n, dtype=np.uint8)
    dones[-1] = 1
    return EpisodeData(
        obs=obs,
        actions=actions,
        rewards=np.zeros(n),
        dones=dones,
        attrs={
            "instruction": instruction,
            **({} if mapping.success is None else {"success": mapping.success}),
            "judge_score": -1.0,
            "meta": json.dumps({"source": str(recording.path), "t0_ns": int(ticks[run[0]])}),
        },
        extras={"stamps_ns": ticks[np.array(run)].astype(np.int64)},
    )


def _env_from(recording: Recording, mapping: BagMapping) -> dict[str, Any]:
    """An env description for a mapped bag: entry names from the first messages."""

    def names(stream: Stream, prefix: str) -> list[str]:
        first = recording.messages[stream.topic][0]
        size = _vector(first, stream).size
        if stream.field == "position" and hasattr(first.msg, "name"):
            got = [str(n) for n in first.msg.name]
            if len(got) == size:
                return got
        if stream.field.endswith("positions") and hasattr(first.msg, "joint_names"):
            got = [str(n) for n in first.msg.joint_names]
            if len(got) == size:
                return got
        return [f"{prefix}{i}" for i in range(size)]

    from embodied.specs import ImageSpec, ObservationSpec, VectorSpec

    def unbounded(entries: list[str]) -> VectorSpec:
        n = len(entries)
        inf = float("inf")
        return VectorSpec(tuple(entries), (-inf,) * n, (inf,) * n, ("1",) * n)

    cams = {}
    for cam, stream in mapping.cameras.items():
        h, w = _image(recording.messages[stream.topic][0]).shape[:2]
        cams[cam] = ImageSpec(int(h), int(w))
    rate = mapping.rate_hz
    if rate is None:
        assert mapping.clock is not None
        ticks = _times(recording, mapping.clock)
        rate = 1e9 / float(np.median(np.diff(ticks))) if len(ticks) > 1 else 1.0
    return {
        "env_id": f"bag:{recording.path.name}",
        "instruction": mapping.instruction,
        "control_rate_hz": float(rate),
        "max_episode_steps": None,
        "observation": ObservationSpec(unbounded(names(mapping.state, "s")), cams).to_dict(),
        "action": unbounded(names(mapping.action, "a")).to_dict(),
        "gripper_convention": None,
    }
