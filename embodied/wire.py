"""The policy-serving wire format: openpi's msgpack with numpy arrays, plus our control keys.

Messages are msgpack maps. A numpy array travels as the map openpi's
``openpi_client.msgpack_numpy.pack_array`` writes (``__ndarray__``, ``data`` (raw bytes, C
order), ``dtype`` (``dtype.str``, e.g. ``"<f4"``), ``shape``), a numpy scalar as its
``__npgeneric__`` map, so openpi's client and server read what we write and we read what they
write. Unlike openpi's ``unpack_array`` ours checks what it decodes (a dtype outside
:data:`WIRE_DTYPE_KINDS`, a shape that does not match the byte count, a nesting too deep) and
raises :class:`WireError` instead of building an object array or reading past a buffer.

A session (:mod:`embodied.apps.serve` answers it, :class:`policies.remote.RemotePolicy` opens
it) follows openpi's protocol: the server sends its metadata map first, then answers each
observation map with an action map (``actions``: chunk x action_dim, ``server_timing``). What
openpi has no word for travels under keys starting with :data:`EXT_PREFIX`, which openpi's
clients never send:

* ``embodied/op``: ``"infer"`` (the default), ``"observe"`` (record an observation in the
  policy's history, no answer) or ``"reset"`` (start an episode; ``embodied/seed`` seeds it;
  answered with ``{"ok": True}``).
* ``embodied/knobs``: knob name -> value, applied before the observation is used.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgpack
import numpy as np

from embodied.errors import EmbodiedError

EXT_PREFIX = "embodied/"
"""Prefix of the message keys that extend openpi's protocol."""

OP_KEY = "embodied/op"
SEED_KEY = "embodied/seed"
KNOBS_KEY = "embodied/knobs"
OPS = ("infer", "observe", "reset")
"""Operations a request may name under :data:`OP_KEY` (``infer`` when absent)."""

PROTOCOL_VERSION = 1
"""Version of our extension keys, sent in the metadata as ``embodied_protocol``."""

WIRE_DTYPE_KINDS = frozenset("biuf")
"""numpy dtype kinds an array may have on the wire: bool, signed and unsigned ints, floats
(openpi refuses void, object and complex; we also refuse strings and datetimes in arrays)."""

MAX_DEPTH = 8
"""Deepest nesting of maps and lists a message may have."""


class WireError(EmbodiedError, ValueError):
    """A message that is not valid msgpack, or an array map that does not describe an array."""


def _pack_default(obj: Any) -> Any:
    if isinstance(obj, (np.ndarray, np.generic)) and obj.dtype.kind not in WIRE_DTYPE_KINDS:
        raise WireError(
            f"cannot send a numpy {type(obj).__name__} of dtype {obj.dtype}",
            fix=f"convert it to a bool, int or float dtype (kinds {sorted(WIRE_DTYPE_KINDS)})",
        )
    if isinstance(obj, np.ndarray):
        return {
            b"__ndarray__": True,
            b"data": np.ascontiguousarray(obj).tobytes(),
            b"dtype": obj.dtype.str,
            b"shape": obj.shape,
        }
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise WireError(
        f"cannot send a {type(obj).__name__} ({obj!r:.60})",
        fix="send numbers, strings, bytes, lists, dicts and numpy arrays only",
    )


def _dtype(raw: Any) -> np.dtype[Any]:
    try:
        dtype = np.dtype(raw.decode() if isinstance(raw, bytes) else str(raw))
    except (TypeError, ValueError, UnicodeDecodeError) as exc:
        raise WireError(f"array dtype {raw!r} is not a numpy dtype ({exc})") from exc
    if dtype.kind not in WIRE_DTYPE_KINDS:
        raise WireError(
            f"array dtype {dtype} (kind {dtype.kind!r}) is not allowed on the wire",
            fix=f"send bool, int or float arrays (kinds {sorted(WIRE_DTYPE_KINDS)})",
        )
    return dtype


def _unpack_hook(obj: dict[Any, Any]) -> Any:
    if b"__ndarray__" in obj:
        dtype = _dtype(obj.get(b"dtype"))
        shape = obj.get(b"shape")
        data = obj.get(b"data")
        if not isinstance(data, bytes) or not isinstance(shape, (list, tuple)):
            raise WireError(
                f"array map needs bytes 'data' and a list 'shape' (got {type(data).__name__}, "
                f"{shape!r:.40})"
            )
        if not all(isinstance(n, int) and n >= 0 for n in shape):
            raise WireError(f"array shape {shape!r:.60} is not a list of non-negative ints")
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if count * dtype.itemsize != len(data):
            raise WireError(
                f"array of shape {tuple(shape)} and dtype {dtype} needs "
                f"{count * dtype.itemsize} bytes, the message holds {len(data)}"
            )
        # a writable copy: consumers may normalise in place, and the buffer is the message's
        return np.frombuffer(data, dtype=dtype).reshape(shape).copy()
    if b"__npgeneric__" in obj:
        dtype = _dtype(obj.get(b"dtype"))
        try:
            return dtype.type(obj.get(b"data"))
        except (TypeError, ValueError, OverflowError) as exc:
            raise WireError(f"numpy scalar {obj.get(b'data')!r:.40} is not a {dtype}") from exc
    return obj


def packb(message: Any) -> bytes:
    """Encode ``message`` (maps, lists, scalars, strings, numpy arrays) as openpi does."""
    return msgpack.packb(message, default=_pack_default, use_bin_type=True)  # type: ignore[no-any-return]


def unpackb(data: bytes, max_bytes: int | None = None) -> Any:
    """Decode one message; arrays come back as writable numpy arrays.

    Args:
        data: The message bytes.
        max_bytes: Refuse messages longer than this (None: no limit).

    Raises:
        WireError: too long, not msgpack, an invalid array map or nested deeper than
            :data:`MAX_DEPTH`; the message says which.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise WireError(
            f"expected a binary msgpack message, got {type(data).__name__}",
            fix="send msgpack bytes (openpi_client.msgpack_numpy.packb), not text",
        )
    if max_bytes is not None and len(data) > max_bytes:
        raise WireError(
            f"message of {len(data)} bytes is over the limit of {max_bytes} bytes",
            fix="send smaller frames (resize on the client) or raise the server's --max-message-mb",
        )
    try:
        message = msgpack.unpackb(data, object_hook=_unpack_hook, raw=False, strict_map_key=False)
    except WireError:
        raise
    except Exception as exc:  # msgpack raises several unrelated types for bad input
        raise WireError(f"message is not valid msgpack ({type(exc).__name__}: {exc})") from exc
    _check_depth(message, 0)
    return message


def _check_depth(value: Any, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise WireError(f"message nests maps/lists deeper than {MAX_DEPTH} levels")
    if isinstance(value, Mapping):
        for v in value.values():
            _check_depth(v, depth + 1)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _check_depth(v, depth + 1)


def text_keys(message: Mapping[Any, Any]) -> dict[str, Any]:
    """``message`` with bytes keys decoded (openpi packs str keys; raw clients may not)."""
    out: dict[str, Any] = {}
    for key, value in message.items():
        if isinstance(key, bytes):
            key = key.decode("utf-8", "replace")
        if not isinstance(key, str):
            raise WireError(f"message key {key!r:.40} is not a string")
        out[key] = value
    return out
