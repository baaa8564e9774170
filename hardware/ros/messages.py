"""ROS message schemas, validation and conversion for the rosbridge v2 JSON encoding.

rosbridge_server only logs a malformed message on the server and never tells the client, so
every outgoing message is checked here against its type (fields, primitive types, ranges,
finite floats) before it is sent. ROS 1 and ROS 2 differ in time fields (``secs/nsecs`` vs
``sec/nanosec``) and ``std_msgs/Header`` (ROS 2 has no ``seq``); both are handled.
"""

from __future__ import annotations

import base64
import io
import math
import struct
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from embodied.errors import ActionError

# Field type strings: primitive names, "<type>[]" arrays, or message type names.
_SCHEMAS: dict[str, dict[str, str]] = {
    "std_msgs/Bool": {"data": "bool"},
    "std_msgs/Float64": {"data": "float64"},
    "std_msgs/UInt64": {"data": "uint64"},
    "std_msgs/MultiArrayDimension": {"label": "string", "size": "uint32", "stride": "uint32"},
    "std_msgs/MultiArrayLayout": {"dim": "std_msgs/MultiArrayDimension[]", "data_offset": "uint32"},
    "std_msgs/Float64MultiArray": {"layout": "std_msgs/MultiArrayLayout", "data": "float64[]"},
    "geometry_msgs/Vector3": {"x": "float64", "y": "float64", "z": "float64"},
    "geometry_msgs/Twist": {"linear": "geometry_msgs/Vector3", "angular": "geometry_msgs/Vector3"},
    "sensor_msgs/JointState": {
        "header": "std_msgs/Header",
        "name": "string[]",
        "position": "float64[]",
        "velocity": "float64[]",
        "effort": "float64[]",
    },
    "sensor_msgs/CompressedImage": {
        "header": "std_msgs/Header",
        "format": "string",
        "data": "uint8[]",
    },
    "sensor_msgs/Image": {
        "header": "std_msgs/Header",
        "height": "uint32",
        "width": "uint32",
        "encoding": "string",
        "is_bigendian": "uint8",
        "step": "uint32",
        "data": "uint8[]",
    },
    "trajectory_msgs/JointTrajectoryPoint": {
        "positions": "float64[]",
        "velocities": "float64[]",
        "accelerations": "float64[]",
        "effort": "float64[]",
        "time_from_start": "duration",
    },
    "trajectory_msgs/JointTrajectory": {
        "header": "std_msgs/Header",
        "joint_names": "string[]",
        "points": "trajectory_msgs/JointTrajectoryPoint[]",
    },
    "std_srvs/TriggerRequest": {},
    "std_srvs/TriggerResponse": {"success": "bool", "message": "string"},
}

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "uint8": (0, 2**8 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint64": (0, 2**64 - 1),
}


class MessageError(ActionError):
    """An outgoing ROS message does not match its type; it was not sent."""


def schema(msg_type: str, ros_version: int = 1) -> dict[str, str]:
    """Field name -> field type of ``msg_type`` in the ROS 1 or ROS 2 layout."""
    if msg_type == "std_msgs/Header":
        if ros_version == 1:
            return {"seq": "uint32", "stamp": "time", "frame_id": "string"}
        return {"stamp": "time", "frame_id": "string"}
    if msg_type in ("time", "duration"):
        if ros_version == 1:
            return {"secs": "int32" if msg_type == "duration" else "uint32", "nsecs": "int32"}
        return {"sec": "int32", "nanosec": "uint32"}
    if msg_type not in _SCHEMAS:
        raise MessageError(
            f"no schema for ROS type {msg_type!r}",
            fix=f"use one of {sorted([*_SCHEMAS, 'std_msgs/Header'])}",
        )
    return _SCHEMAS[msg_type]


def validate(msg_type: str, msg: Any, ros_version: int = 1, path: str = "") -> None:
    """Check ``msg`` (rosbridge JSON form) against ``msg_type``; floats must be finite.

    Raises:
        MessageError: naming the field path, the bad value and the fix.
    """
    where = path or msg_type
    fields = schema(msg_type, ros_version)
    if not isinstance(msg, Mapping):
        raise MessageError(f"{where} must be an object for {msg_type}, got {msg!r}")
    unknown = sorted(set(msg) - set(fields))
    if unknown:
        raise MessageError(
            f"{where}: unknown field(s) {unknown} for {msg_type} (ROS {ros_version})",
            fix=f"fields are {sorted(fields)}",
        )
    missing = sorted(set(fields) - set(msg))
    if missing:
        raise MessageError(
            f"{where}: missing field(s) {missing} for {msg_type}",
            fix="fill every field (empty arrays are fine)",
        )
    for name, ftype in fields.items():
        _check_value(ftype, msg[name], ros_version, f"{where}.{name}")


def _check_value(ftype: str, value: Any, ros_version: int, where: str) -> None:
    if ftype.endswith("[]"):
        inner = ftype[:-2]
        if inner == "uint8" and isinstance(value, str):
            try:
                base64.b64decode(value, validate=True)
            except ValueError as exc:
                raise MessageError(f"{where} is not valid base64 uint8[] data") from exc
            return
        if not isinstance(value, list | tuple):
            raise MessageError(f"{where} must be a list of {inner}, got {type(value).__name__}")
        for i, item in enumerate(value):
            _check_value(inner, item, ros_version, f"{where}[{i}]")
        return
    if ftype in ("float32", "float64"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise MessageError(f"{where} must be a number, got {value!r}")
        if not math.isfinite(value):
            raise MessageError(f"{where} is {value!r}", fix="send finite values only")
        return
    if ftype in _INT_RANGES:
        lo, hi = _INT_RANGES[ftype]
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise MessageError(f"{where} must be a {ftype} in [{lo}, {hi}], got {value!r}")
        return
    if ftype == "bool":
        if not isinstance(value, bool):
            raise MessageError(f"{where} must be true/false, got {value!r}")
        return
    if ftype == "string":
        if not isinstance(value, str):
            raise MessageError(f"{where} must be a string, got {value!r}")
        return
    validate(ftype, value, ros_version, where)


# ---------------------------------------------------------------- stamps
def to_stamp(t_s: float, ros_version: int = 1) -> dict[str, int]:
    """Seconds -> ``{"secs", "nsecs"}`` (ROS 1) or ``{"sec", "nanosec"}`` (ROS 2)."""
    sec = math.floor(t_s)
    nsec = min(round((t_s - sec) * 1e9), 999_999_999)
    return {"secs": sec, "nsecs": nsec} if ros_version == 1 else {"sec": sec, "nanosec": nsec}


def from_stamp(stamp: Mapping[str, Any]) -> float:
    """``{"secs","nsecs"}`` or ``{"sec","nanosec"}`` -> seconds (either ROS version)."""
    if "secs" in stamp:
        return float(stamp["secs"]) + float(stamp.get("nsecs", 0)) * 1e-9
    if "sec" in stamp:
        return float(stamp["sec"]) + float(stamp.get("nanosec", 0)) * 1e-9
    raise MessageError(f"stamp {dict(stamp)!r} has neither secs/nsecs nor sec/nanosec")


def header(ros_version: int = 1, frame_id: str = "", t_s: float | None = None) -> dict[str, Any]:
    """A ``std_msgs/Header`` for now (or ``t_s``) in the ROS 1 or ROS 2 layout."""
    h: dict[str, Any] = {
        "stamp": to_stamp(time.time() if t_s is None else t_s, ros_version),
        "frame_id": frame_id,
    }
    if ros_version == 1:
        h["seq"] = 0
    return h


# ---------------------------------------------------------------- builders
def joint_command(
    msg_type: str,
    joint_names: Sequence[str],
    target_rad: np.ndarray,
    ros_version: int = 1,
    time_from_start_s: float = 0.0,
) -> dict[str, Any]:
    """A joint position command of ``msg_type`` (JointTrajectory or Float64MultiArray)."""
    positions = [float(x) for x in np.asarray(target_rad, dtype=np.float64)]
    if msg_type == "trajectory_msgs/JointTrajectory":
        return {
            "header": header(ros_version),
            "joint_names": list(joint_names),
            "points": [
                {
                    "positions": positions,
                    "velocities": [],
                    "accelerations": [],
                    "effort": [],
                    "time_from_start": to_stamp(time_from_start_s, ros_version),
                }
            ],
        }
    if msg_type == "std_msgs/Float64MultiArray":
        return {
            "layout": {
                "dim": [{"label": "joints", "size": len(positions), "stride": 1}],
                "data_offset": 0,
            },
            "data": positions,
        }
    raise MessageError(
        f"{msg_type!r} is not a joint position command type",
        fix="use trajectory_msgs/JointTrajectory or std_msgs/Float64MultiArray",
    )


def twist(linear_m_s: Sequence[float], angular_rad_s: Sequence[float]) -> dict[str, Any]:
    """A ``geometry_msgs/Twist`` from linear (m/s) and angular (rad/s) 3-vectors."""
    lx, ly, lz = (float(v) for v in linear_m_s)
    ax, ay, az = (float(v) for v in angular_rad_s)
    return {"linear": {"x": lx, "y": ly, "z": lz}, "angular": {"x": ax, "y": ay, "z": az}}


# ---------------------------------------------------------------- parsers
def parse_joint_state(
    msg: Mapping[str, Any], joint_names: Sequence[str]
) -> tuple[np.ndarray, np.ndarray, float]:
    """(position rad, velocity rad/s, stamp s) in ``joint_names`` order from a JointState.

    Joints may come in any order with extra joints; missing velocities read as 0.

    Raises:
        MessageError: a configured joint is missing or arrays are inconsistent.
    """
    names = list(msg.get("name", []))
    pos = list(msg.get("position", []))
    vel = list(msg.get("velocity", []))
    if len(pos) != len(names) or (vel and len(vel) != len(names)):
        raise MessageError(
            f"JointState has {len(names)} names, {len(pos)} positions, {len(vel)} velocities"
        )
    index = {n: i for i, n in enumerate(names)}
    missing = [n for n in joint_names if n not in index]
    if missing:
        raise MessageError(
            f"JointState lacks joints {missing}; it has {names}",
            fix="match the joint names in the robot config to the robot's JointState",
        )
    idx = [index[n] for n in joint_names]
    position = np.asarray([pos[i] for i in idx], dtype=np.float64)
    velocity = np.asarray([vel[i] for i in idx] if vel else [0.0] * len(idx), dtype=np.float64)
    stamp = from_stamp(msg["header"]["stamp"]) if "header" in msg else 0.0
    return position, velocity, stamp


def _bytes(data: Any, where: str) -> bytes:
    """A ``uint8[]`` field: base64 text (JSON), bytes (CBOR) or a list of ints."""
    if isinstance(data, str):
        return base64.b64decode(data)
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    if isinstance(data, list):
        return bytes(data)
    raise MessageError(f"{where}: data is {type(data).__name__}, not uint8[]")


def _resize(img: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    if img.shape[:2] == tuple(size):
        return img
    from PIL import Image

    return np.asarray(Image.fromarray(img).resize((size[1], size[0])), dtype=np.uint8)


def decode_compressed_image(msg: Mapping[str, Any], size: tuple[int, int]) -> np.ndarray:
    """uint8 (H, W, 3) RGB image of ``size`` (height, width) from a CompressedImage."""
    from PIL import Image

    if "bytes" in msg and "data" not in msg:  # cbor-raw: the ROS 1 wire form
        msg = parse_raw("sensor_msgs/CompressedImage", msg["bytes"])
    raw = _bytes(msg["data"], "sensor_msgs/CompressedImage")
    img = Image.open(io.BytesIO(raw)).convert("RGB")
    if img.size != (size[1], size[0]):
        img = img.resize((size[1], size[0]))
    return np.asarray(img, dtype=np.uint8)


IMAGE_ENCODINGS = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}
"""``sensor_msgs/Image`` encodings :func:`decode_image` reads (8 bit), and channels per pixel."""


def decode_image(msg: Mapping[str, Any], size: tuple[int, int] | None = None) -> np.ndarray:
    """uint8 (H, W, 3) RGB array from a ``sensor_msgs/Image`` (resized to ``size`` if given).

    Accepts every form the bridge delivers: JSON (``data`` base64 text), ``cbor`` (``data``
    bytes) and ``cbor-raw`` (``{"secs", "nsecs", "bytes"}``: the ROS 1 serialized message).

    Raises:
        MessageError: an encoding other than :data:`IMAGE_ENCODINGS`, or ``height``, ``width``,
            ``step`` and the data length that do not agree.
    """
    if "bytes" in msg and "data" not in msg:
        msg = parse_raw("sensor_msgs/Image", msg["bytes"])
    encoding = msg.get("encoding")
    channels = IMAGE_ENCODINGS.get(encoding)  # type: ignore[arg-type]
    if channels is None:
        raise MessageError(
            f"sensor_msgs/Image encoding {encoding!r} is not supported",
            fix=f"publish one of {sorted(IMAGE_ENCODINGS)} (8 bit)",
        )
    height, width, step = (msg.get(k) for k in ("height", "width", "step"))
    if not all(isinstance(v, int) and v > 0 for v in (height, width, step)):
        raise MessageError(f"sensor_msgs/Image: bad height/width/step {height}/{width}/{step}")
    assert isinstance(height, int) and isinstance(width, int) and isinstance(step, int)
    data = _bytes(msg.get("data"), "sensor_msgs/Image")
    if step < width * channels or len(data) != height * step:
        raise MessageError(
            f"sensor_msgs/Image {width}x{height} {encoding}: step {step} and "
            f"{len(data)} data bytes do not match (need step >= {width * channels}, "
            f"data == height x step = {height * step})"
        )
    rows = np.frombuffer(data, dtype=np.uint8).reshape(height, step)
    img = rows[:, : width * channels].reshape(height, width, channels)
    if encoding in ("bgr8", "bgra8"):
        img = img[:, :, 2::-1]
    elif channels == 1:
        img = np.repeat(img, 3, axis=2)
    else:
        img = img[:, :, :3]
    img = np.array(img)  # a writable copy, not a view of the frame's bytes
    return img if size is None else _resize(img, size)


def image_stamp(msg: Mapping[str, Any]) -> float:
    """Header stamp (s) of an image in any form :func:`decode_image` accepts."""
    if "bytes" in msg and "header" not in msg:
        secs, nsecs = struct.unpack_from("<II", bytes(msg["bytes"][4:12]))
        return secs + nsecs * 1e-9
    return from_stamp(msg["header"]["stamp"])


def parse_raw(msg_type: str, raw: bytes) -> dict[str, Any]:
    """Parse the ROS 1 wire form (``cbor-raw``) of a ``sensor_msgs/Image`` or
    ``sensor_msgs/CompressedImage``; ``data`` is bytes (no copy beyond the slice)."""
    buf = memoryview(bytes(raw))
    pos = 0

    def u32() -> int:
        nonlocal pos
        (v,) = struct.unpack_from("<I", buf, pos)
        pos += 4
        return int(v)

    def string() -> str:
        nonlocal pos
        n = u32()
        pos += n
        return bytes(buf[pos - n : pos]).decode("utf8")

    try:
        seq, secs, nsecs = u32(), u32(), u32()
        head = {"seq": seq, "stamp": {"secs": secs, "nsecs": nsecs}, "frame_id": string()}
        if msg_type == "sensor_msgs/Image":
            height, width, encoding = u32(), u32(), string()
            bigendian = buf[pos]
            pos += 1
            step = u32()
            out: dict[str, Any] = {
                "header": head,
                "height": height,
                "width": width,
                "encoding": encoding,
                "is_bigendian": bigendian,
                "step": step,
            }
        elif msg_type == "sensor_msgs/CompressedImage":
            out = {"header": head, "format": string()}
        else:
            raise MessageError(f"no ROS 1 wire parser for {msg_type} (cbor-raw)")
        n = u32()
        if pos + n != len(buf):
            raise MessageError(
                f"{msg_type} wire form: {len(buf) - pos} data bytes, header says {n}"
            )
        out["data"] = bytes(buf[pos : pos + n])
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise MessageError(f"{msg_type} wire form truncated ({len(buf)} bytes): {exc}") from exc
    return out
