"""A rosbridge v2 link built on roslibpy (Twisted transport), safe for a control loop.

roslibpy's limits, and how this module lives with them:

* **One Twisted reactor per process, not restartable.** :func:`ensure_reactor` starts it once,
  in a daemon thread, without signal handlers (Ctrl-C stays with the main thread); links are
  closed with ``Ros.close()`` and never ``Ros.terminate()`` (which would stop the reactor for
  good). Any number of :class:`RosbridgeLink` objects share that reactor.
* **roslibpy queues while disconnected** (``send_on_ready``): a command published during an
  outage would be sent, stale, after the reconnect. :meth:`RosbridgeLink.publish` therefore
  writes only to an open protocol and drops (and counts) anything else - never queued.
* **roslibpy re-subscribes one second after a reconnect.** This link re-advertises and
  re-subscribes itself the moment the websocket reopens.
* **Reconnects** use roslibpy's ``ReconnectingClientFactory`` with our backoff
  (initial delay, factor, maximum).
* **autobahn leaves Nagle on** (its ``tcpNoDelay`` option is never applied): every time the
  link comes up, :func:`_tune_socket` sets ``TCP_NODELAY`` on our socket and re-arms
  ``TCP_QUICKACK`` after each read, so neither our frames nor the server's (which has the same
  bug) wait up to 40 ms for a delayed ACK (issue 16; ``embodied bench ros`` compares with
  plain roslibpy, which keeps the stalls).

Outgoing messages are validated against their type first (:mod:`hardware.ros.messages`), and
are latest-wins per topic: a burst leaves one pending message per topic, never a growing queue.
A caller that publishes in a tight loop should call :meth:`RosbridgeLink.wait_flushed` first
(:class:`hardware.ros.robot.RosRobot` does, holding none of its locks): it waits, at most
``flush_wait_s`` (2 ms), for the reactor thread to write the topic's previous message. Without
it the caller holds the GIL for whole switch intervals (5 ms) and leaves the reactor about one
write per interval, superseding nearly everything (issue 16: 75-400 delivered commands/s
against plain roslibpy's 1,400-1,800 in ``embodied bench ros``).
Latest-wins alone cannot promise delivery: a ROS 1 subscriber connects to the server's
publisher asynchronously after ``advertise``, and what is published before that is lost. The
caller re-publishes what must arrive (``publish(..., resend=True)``; :class:`hardware.ros.robot
.RosRobot` does so for its newest command and its e-stop until the robot's state confirms them).
Incoming messages are kept in a bounded deque per topic (default: latest only).
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from embodied.errors import ConfigError, SafetyFault
from hardware.ros import messages

log = logging.getLogger("hardware.ros")


class _DropStalePongs(logging.Filter):
    """Autobahn counts any incoming data as liveness and discards the pending ping, so a late
    pong for it is logged as "non-pending"; with a 100 Hz state stream that is routine noise."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "non-pending pong" not in record.getMessage()


logging.getLogger("twisted").addFilter(_DropStalePongs())

_REACTOR_LOCK = threading.Lock()
_REACTOR_THREAD: threading.Thread | None = None


def in_reactor_thread() -> bool:
    """Whether the caller runs on the reactor thread (where blocking calls would deadlock)."""
    return _REACTOR_THREAD is not None and threading.current_thread() is _REACTOR_THREAD


def ensure_reactor(timeout_s: float = 5.0) -> None:
    """Start the process-wide Twisted reactor in a daemon thread (once)."""
    global _REACTOR_THREAD
    from twisted.internet import reactor

    with _REACTOR_LOCK:
        if _REACTOR_THREAD is None:
            _REACTOR_THREAD = threading.Thread(
                target=reactor.run,  # type: ignore[misc,attr-defined]
                kwargs={"installSignalHandlers": False},
                name="twisted-reactor",
                daemon=True,
            )
            _REACTOR_THREAD.start()
    deadline = time.monotonic() + timeout_s
    while not reactor.running:  # type: ignore[attr-defined]
        if time.monotonic() > deadline:
            raise SafetyFault(
                "the Twisted reactor did not start",
                fix="do not stop the reactor (Ros.terminate) in this process",
            )
        time.sleep(0.001)


def _tune_socket(proto: Any) -> None:
    """Low-latency options on the websocket's TCP socket (issue 16).

    * ``TCP_NODELAY``: autobahn (22.7 to 26.11) reads ``self.tcpNoDelay`` in ``connectionMade``
      before the factory's options are copied onto the protocol; the AttributeError is swallowed
      and Nagle stays on, so a small frame written while an earlier one is unacknowledged
      waits for the peer's delayed ACK (up to 40 ms on Linux).
    * ``TCP_QUICKACK``, re-armed after every read: the server's end has the same autobahn bug
      and we cannot change it; acknowledging its frames at once (instead of up to 40 ms later)
      is what lets its Nagle-held next frame (a joint state right after another) go out.
    """
    transport = getattr(proto, "transport", None)
    sock = transport.getHandle() if transport is not None else None
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError as exc:  # pragma: no cover - not a TCP socket
        log.debug("TCP_NODELAY not set: %s", exc)
        return
    quickack = getattr(socket, "TCP_QUICKACK", None)  # Linux only
    if quickack is None:
        return
    received = proto.dataReceived

    def data_received(data: bytes) -> None:
        with contextlib.suppress(OSError):  # Linux clears it again: re-arm it after each read
            sock.setsockopt(socket.IPPROTO_TCP, quickack, 1)
        received(data)

    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, quickack, 1)
    proto.dataReceived = data_received


COMPRESSIONS = ("none", "png", "cbor", "cbor-raw")
"""``compression`` values of the subscribe op that rosbridge_server 0.11.17 implements and this
link decodes (roslibpy 2.1 itself accepts only ``none`` and ``png``, and decodes neither ``png``
nor the binary CBOR frames; the link installs its own handlers)."""


@dataclass
class _Sub:
    topic: str
    msg_type: str
    callback: Callable[[dict[str, Any]], None] | None
    queue: deque[tuple[float, dict[str, Any]]]
    throttle_rate_ms: int = 0
    queue_length: int = 1
    compression: str = "none"
    fragment_size: int | None = None
    last_rx_s: float = -1.0
    received: int = 0


def _check_int(name: str, value: object, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{name}={value!r} must be a whole number >= {low}")
    return value


@dataclass
class LinkStats:
    """Counters of a link (for reports and tests)."""

    published: int = 0
    """New messages accepted by :meth:`RosbridgeLink.publish` (validated, link open)."""
    resent: int = 0
    """Re-publications accepted (``publish(..., resend=True)``), counted apart from new ones;
    once everything is flushed, ``sent + superseded == published + resent``."""
    sent: int = 0
    """Messages written to the websocket (new and re-published)."""
    superseded: int = 0
    """Messages replaced by a newer one on the same topic before they were written."""
    dropped_disconnected: int = 0
    """Messages refused or discarded because the link was down."""
    rejected_invalid: int = 0
    """Messages refused by validation."""
    connects: int = 0
    disconnects: int = 0
    fragments: int = 0
    """``fragment`` ops received (pieces of messages larger than a subscription's
    ``fragment_size``)."""
    fragments_dropped: int = 0
    """Fragments discarded: a new message began before the previous one was complete."""
    undecodable: int = 0
    """Incoming frames that could not be decoded (logged)."""
    server_errors: list[str] = field(default_factory=list)


class RosbridgeLink:
    """One websocket link to a rosbridge v2 server.

    Args:
        host: Server host (127.0.0.1 for the local test graph).
        port: Server port.
        ros_version: 1 or 2 (message layouts for validation).
        reconnect_initial_s: First reconnect delay (s).
        reconnect_max_s: Largest reconnect delay (s).
        reconnect_factor: Delay growth per failed attempt.
        on_change: Called (from the reactor thread) with True/False when the link opens/closes.
        ping_interval_s: Websocket ping period (s) while the link is idle.
        ping_timeout_s: A ping unanswered this long (s) closes the link. A crashed server is
            seen at once through the TCP close; a hung one (no FIN) within
            :attr:`dead_peer_timeout_s`.
        flush_wait_s: Longest wait (s) of :meth:`wait_flushed` (0: never wait).
    """

    def __init__(
        self,
        host: str,
        port: int,
        ros_version: int = 1,
        reconnect_initial_s: float = 0.1,
        reconnect_max_s: float = 2.0,
        reconnect_factor: float = 2.0,
        on_change: Callable[[bool], None] | None = None,
        ping_interval_s: float = 0.5,
        ping_timeout_s: float = 1.0,
        flush_wait_s: float = 0.002,
    ) -> None:
        self.host, self.port, self.ros_version = host, int(port), ros_version
        self.backoff = (reconnect_initial_s, reconnect_max_s, reconnect_factor)
        self.ping = (ping_interval_s, ping_timeout_s)
        self.on_change = on_change
        self.stats = LinkStats()
        self.opened_s = -1.0
        self.closed_s = -1.0
        self.flush_wait_s = flush_wait_s
        self._lock = threading.Lock()
        self._flushed = threading.Condition(self._lock)
        self._proto: Any = None
        self._ros: Any = None
        self._subs: dict[str, _Sub] = {}
        self._adverts: dict[str, str] = {}
        self._latched: set[str] = set()
        self._pending: dict[str, bytes] = {}
        self._scheduled: set[str] = set()
        self._ids = 0
        self._closing = False
        self._fragments: dict[Any, dict[int, str]] = {}
        """Fragments of messages being reassembled, by message id (reactor thread only)."""

    # ----------------------------------------------------------- lifecycle
    def open(self, timeout_s: float = 10.0) -> RosbridgeLink:
        """Connect (waiting up to ``timeout_s``); reconnects happen automatically afterwards.

        Raises:
            SafetyFault: the server did not answer in time (naming host and port).
        """
        import roslibpy

        ensure_reactor()
        self._closing = False
        ros = roslibpy.Ros(self.host, self.port, transport="twisted")
        factory = ros.factory
        factory.initialDelay, factory.maxDelay, factory.factor = self.backoff
        factory.jitter = 0.05
        factory.resetDelay()
        # A half-open socket (peer hung, no FIN) is closed by websocket pings; a crashed peer
        # is noticed at once through the TCP close.
        factory.setProtocolOptions(
            autoPingInterval=self.ping[0], autoPingTimeout=self.ping[1], openHandshakeTimeout=2.0
        )
        factory.on("ready", self._on_ready)
        factory.on("close", self._on_close)
        self._ros = ros

        def adopt() -> None:  # reactor thread, so serialised with the "ready" event
            # roslibpy.Ros connects in its constructor: the socket may have opened before our
            # listener was registered; then adopt that protocol here.
            if factory._proto is not None and self._proto is None:
                self._on_ready(factory._proto)

        from twisted.internet import reactor

        reactor.callFromThread(adopt)  # type: ignore[attr-defined]
        try:
            ros.run(timeout=timeout_s)
        except Exception as exc:
            self.close()
            raise SafetyFault(
                f"no rosbridge server answered at ws://{self.host}:{self.port} "
                f"within {timeout_s} s ({type(exc).__name__})",
                fix="start rosbridge_server (or the test graph) and check host/port",
            ) from exc
        return self

    def close(self) -> None:
        """Send what is pending (e.g. the final stop command), then close the websocket and
        stop reconnecting. The shared reactor keeps running."""
        from twisted.internet import reactor, threads

        self._closing = True
        ros = self._ros
        if ros is None:
            return

        def finish() -> None:  # reactor thread: pending messages go out before the close frame
            ros.factory.stopTrying()
            with self._lock:
                proto = self._proto
                pending = list(self._pending.items())
                self._pending.clear()
                self._flushed.notify_all()
                self._proto = None
            if proto is not None:
                for _topic, payload in pending:
                    proto.sendMessage(payload, isBinary=False)
                    self.stats.sent += 1
                proto._manual_disconnect = True
                proto.sendClose()

        if threading.current_thread() is _REACTOR_THREAD:
            finish()
        else:
            try:
                threads.blockingCallFromThread(reactor, finish)
            except Exception as exc:  # reactor gone (interpreter exit): nothing left to send
                log.warning("closing rosbridge link: %s", exc)
        self._ros = None

    @property
    def dead_peer_timeout_s(self) -> float:
        """Longest time (s) a dead server can go unnoticed: one ping period plus its timeout."""
        return self.ping[0] + self.ping[1]

    @property
    def connected(self) -> bool:
        """Whether the websocket is open."""
        return self._proto is not None

    @property
    def pending_count(self) -> int:
        """Outgoing messages waiting for the reactor (at most one per advertised topic)."""
        return len(self._pending)

    def _on_ready(self, proto: Any) -> None:  # reactor thread
        if self._closing:
            proto.send_close()
            return
        _tune_socket(proto)
        proto._message_handlers["status"] = self._on_status  # rosbridge status/log messages
        self._install_decoders(proto)
        with self._lock:
            self._proto = proto
            self.opened_s = time.monotonic()
            self.stats.connects += 1
            adverts = dict(self._adverts)
            subs = list(self._subs.values())
        for topic, msg_type in adverts.items():
            self._send_now(proto, self._advertise_msg(topic, msg_type))
        for sub in subs:
            self._send_now(proto, self._subscribe_msg(sub))
        log.info(
            "rosbridge link up: ws://%s:%d (%d topics)",
            self.host,
            self.port,
            len(adverts) + len(subs),
        )
        if self.on_change is not None:
            self.on_change(True)

    def _on_close(self, _proto: Any) -> None:  # reactor thread
        with self._lock:
            was_open = self._proto is not None
            self._proto = None
            self.closed_s = time.monotonic()
            self._pending.clear()
            self._flushed.notify_all()
            if was_open:
                self.stats.disconnects += 1
        if was_open:
            log.warning("rosbridge link down: ws://%s:%d", self.host, self.port)
            if self.on_change is not None:
                self.on_change(False)

    def _install_decoders(self, proto: Any) -> None:
        """Teach roslibpy's protocol the server's other encodings (reactor thread).

        * binary frames (``cbor``/``cbor-raw`` subscriptions): roslibpy raises
          NotImplementedError on any binary frame; they are CBOR-decoded here;
        * ``{"op": "png"}`` (``png`` compression): the JSON text packed into the pixels of a
          PNG, base64-encoded; roslibpy has no handler (it raises on the unknown op);
        * ``{"op": "fragment"}`` (``fragment_size``): pieces of one JSON message; roslibpy has
          no handler. Reassembled here; see :meth:`_on_fragment` for the server's quirks.
        """
        proto._message_handlers["png"] = lambda m: self._on_png(proto, m)
        proto._message_handlers["fragment"] = lambda m: self._on_fragment(proto, m)
        self._fragments.clear()
        text_handler = proto.onMessage

        def on_message(payload: bytes, is_binary: bool) -> None:
            if not is_binary:
                text_handler(payload, is_binary)
                return
            try:
                import cbor2  # an autobahn dependency

                message = cbor2.loads(payload)
                self._dispatch(proto, message)
            except Exception as exc:
                self.stats.undecodable += 1
                log.error("undecodable binary frame (%d bytes) ignored: %s", len(payload), exc)

        proto.onMessage = on_message

    @staticmethod
    def _dispatch(proto: Any, message: Mapping[str, Any]) -> None:
        handler = proto._message_handlers.get(message.get("op"))
        if handler is None:
            raise ValueError(f"no handler for rosbridge op {message.get('op')!r}")
        handler(message)

    def _on_png(self, proto: Any, message: Mapping[str, Any]) -> None:  # reactor thread
        import base64
        import io

        from PIL import Image

        try:
            png = Image.open(io.BytesIO(base64.b64decode(message["data"])))
            text = png.tobytes().rstrip(b"\n")  # the server pads with newlines
            self._dispatch(proto, json.loads(text))
        except Exception as exc:
            self.stats.undecodable += 1
            log.error("undecodable png message ignored: %s", exc)

    def _on_fragment(self, proto: Any, message: Mapping[str, Any]) -> None:  # reactor thread
        """Reassemble ``fragment`` ops into the message they split.

        rosbridge_server 0.11.17 sends the fragments of one message back to back, numbered
        ``num`` = 0, 1, ...; its ``total`` is ``(len - 1) / size + 1`` computed in Python 3,
        i.e. a float (3.4 for 3 pieces: ``ceil`` would wait for a 4th that never comes), and
        publish messages carry no id, so every message's fragments have ``id`` 0. A message is
        therefore complete after ``floor(total)`` pieces, and a ``num`` of 0 starts a new one
        (an incomplete one is dropped and counted).
        """
        import math

        self.stats.fragments += 1
        try:
            key, num, total = message.get("id"), int(message["num"]), message["total"]
            count = math.floor(float(total))
            parts = self._fragments.get(key)
            if num == 0 or parts is None:
                self.stats.fragments_dropped += len(self._fragments.pop(key, {}))
                while len(self._fragments) >= 16:  # bounded: drop the oldest incomplete one
                    oldest = next(iter(self._fragments))
                    self.stats.fragments_dropped += len(self._fragments.pop(oldest))
                parts = self._fragments[key] = {}
            parts[num] = str(message["data"])
            if len(parts) < count:
                return
            del self._fragments[key]
            text = "".join(parts[i] for i in range(count))
        except (KeyError, ValueError, TypeError) as exc:
            self.stats.undecodable += 1
            log.error("bad fragment ignored: %s", exc)
            return
        try:
            self._dispatch(proto, json.loads(text))
        except Exception as exc:
            self.stats.undecodable += 1
            log.error("reassembled fragments undecodable (%d chars): %s", len(text), exc)

    def _on_status(self, message: Mapping[str, Any]) -> None:
        text = f"{message.get('level', '?')}: {message.get('msg', '')}"
        self.stats.server_errors.append(text)
        del self.stats.server_errors[:-100]
        log.warning("rosbridge server status %s", text)

    # ------------------------------------------------------------ messages
    def _next_id(self, kind: str, name: str) -> str:
        self._ids += 1
        return f"{kind}:{name}:{self._ids}"

    def _advertise_msg(self, topic: str, msg_type: str) -> dict[str, Any]:
        return {
            "op": "advertise",
            "id": self._next_id("advertise", topic),
            "topic": topic,
            "type": msg_type,
            "latch": topic in self._latched,
            "queue_size": 1,
        }

    def _subscribe_msg(self, sub: _Sub) -> dict[str, Any]:
        msg: dict[str, Any] = {
            "op": "subscribe",
            "id": self._next_id("subscribe", sub.topic),
            "topic": sub.topic,
            "type": sub.msg_type,
            "compression": sub.compression,
            "throttle_rate": sub.throttle_rate_ms,
            "queue_length": sub.queue_length,
        }
        if sub.fragment_size is not None:  # connection-wide on the server: only when asked
            msg["fragment_size"] = sub.fragment_size
        return msg

    @staticmethod
    def _send_now(proto: Any, message: Mapping[str, Any]) -> None:
        proto.send_message(json.dumps(message).encode("utf8"))

    def advertise(self, topic: str, msg_type: str, latch: bool = False) -> None:
        """Declare ``topic`` as ours (re-advertised after every reconnect).

        ``latch=True`` makes the server keep the last message for subscribers that connect
        later (ROS 1 connections form asynchronously; use it for e-stops).
        """
        messages.schema(msg_type, self.ros_version)  # unknown type -> MessageError now
        with self._lock:
            self._adverts[topic] = msg_type
            if latch:
                self._latched.add(topic)
            proto = self._proto
        if proto is not None:
            self._send_now(proto, self._advertise_msg(topic, msg_type))

    def subscribe(
        self,
        topic: str,
        msg_type: str,
        callback: Callable[[dict[str, Any]], None] | None = None,
        keep: int = 1,
        throttle_rate_ms: int = 0,
        queue_length: int = 1,
        compression: str = "none",
        fragment_size: int | None = None,
    ) -> None:
        """Receive ``topic``; the last ``keep`` messages are kept (see :meth:`latest`).

        ``callback`` runs on the reactor thread; keep it short. The other arguments go to the
        server's subscribe op (rosbridge_server 0.11.17 honours them; tested in ``tests/ros``):

        Args:
            throttle_rate_ms: At least this long (ms) between two messages the server sends
                (0: every message). Messages in between are dropped (``queue_length`` 0) or
                queued.
            queue_length: Messages the server buffers for this subscription while throttling
                (0: none, drop). It sends the OLDEST buffered one next, so with a throttle a
                longer queue means older messages; 1 keeps only the newest.
            compression: One of :data:`COMPRESSIONS`: ``none`` (JSON, ``uint8[]`` as base64),
                ``png`` (the JSON packed in a PNG), ``cbor`` (binary frame, ``uint8[]`` as
                bytes) or ``cbor-raw`` (binary frame, ``{"secs", "nsecs", "bytes"}`` with the
                ROS 1 serialized message: decode it with :func:`hardware.ros.messages.parse_raw`).
            fragment_size: Ask the server to split messages longer than this (characters of
                JSON) into ``fragment`` ops (reassembled here). The server applies it to the
                whole connection (every later message, every topic), and never to ``cbor``
                frames.
        """
        if keep < 1:
            raise ConfigError(f"keep={keep} must be >= 1")
        _check_int("throttle_rate_ms", throttle_rate_ms, 0)
        _check_int("queue_length", queue_length, 0)
        if fragment_size is not None:
            _check_int("fragment_size", fragment_size, 1)
        if compression not in COMPRESSIONS:
            raise ConfigError(
                f"compression={compression!r} is not supported",
                fix=f"use one of {list(COMPRESSIONS)}",
            )
        sub = _Sub(
            topic,
            msg_type,
            callback,
            deque(maxlen=keep),
            throttle_rate_ms,
            queue_length,
            compression,
            fragment_size,
        )
        with self._lock:
            if topic in self._subs:
                raise ConfigError(f"topic {topic!r} is already subscribed on this link")
            self._subs[topic] = sub
            proto = self._proto
        assert self._ros is not None, "open() the link first"
        self._ros.factory.on(topic, lambda msg, _s=sub: self._on_message(_s, msg))
        if proto is not None:
            self._send_now(proto, self._subscribe_msg(sub))

    def _on_message(self, sub: _Sub, msg: dict[str, Any]) -> None:  # reactor thread
        now = time.monotonic()
        sub.queue.append((now, msg))
        sub.last_rx_s = now
        sub.received += 1
        if sub.callback is not None:
            try:
                sub.callback(msg)
            except Exception:
                log.exception("callback for %s failed", sub.topic)

    def latest(self, topic: str) -> tuple[float, dict[str, Any]] | None:
        """(monotonic receive time s, message) of the newest message on ``topic``, or None."""
        sub = self._subs[topic]
        try:
            return sub.queue[-1]
        except IndexError:
            return None

    def last_rx_s(self, topic: str) -> float:
        """Monotonic time (s) of the last message on ``topic`` (-1 if none)."""
        return self._subs[topic].last_rx_s

    def publish(self, topic: str, msg: Mapping[str, Any], resend: bool = False) -> bool:
        """Validate and publish ``msg`` on an advertised ``topic``; latest-wins.

        Args:
            topic: An advertised topic.
            msg: The message (rosbridge JSON form).
            resend: ``msg`` repeats one published before (counted in ``stats.resent``, not
                ``stats.published``).

        Returns:
            True if accepted for sending; False when the link is down (nothing is queued).

        Raises:
            MessageError: ``msg`` does not match the topic's type (nothing is sent).
        """
        msg_type = self._adverts.get(topic)
        if msg_type is None:
            raise ConfigError(
                f"publish on {topic!r} before advertise()",
                fix="call link.advertise(topic, type) once after open()",
            )
        try:
            messages.validate(msg_type, msg, self.ros_version)
        except messages.MessageError:
            self.stats.rejected_invalid += 1
            raise
        payload = json.dumps(
            {
                "op": "publish",
                "id": self._next_id("publish", topic),
                "topic": topic,
                "msg": msg,
                "latch": False,
            }
        ).encode("utf8")
        from twisted.internet import reactor

        with self._lock:
            if self._proto is None:
                self.stats.dropped_disconnected += 1
                return False
            if topic in self._pending:
                self.stats.superseded += 1
            self._pending[topic] = payload
            if resend:
                self.stats.resent += 1
            else:
                self.stats.published += 1
            schedule = topic not in self._scheduled
            self._scheduled.add(topic)
        if schedule:
            reactor.callFromThread(self._flush, topic)  # type: ignore[attr-defined]
        return True

    def wait_flushed(self, topic: str) -> bool:
        """Wait, at most ``flush_wait_s``, until ``topic`` has no message waiting to be written.

        Call it before :meth:`publish` when publishing faster than the link writes, and not
        while holding a lock that a subscription callback takes (the reactor thread would wait
        for it instead of writing). A no-op on the reactor thread. Returns whether nothing is
        pending (False: the next publish supersedes the pending message).
        """
        if self.flush_wait_s <= 0 or in_reactor_thread():
            return topic not in self._pending
        with self._lock:
            return self._flushed.wait_for(lambda: topic not in self._pending, self.flush_wait_s)

    def _flush(self, topic: str) -> None:  # reactor thread
        with self._lock:
            self._scheduled.discard(topic)
            payload = self._pending.pop(topic, None)
            proto = self._proto
            self._flushed.notify_all()
        if payload is None:
            return
        if proto is None:
            self.stats.dropped_disconnected += 1
            return
        proto.sendMessage(payload, isBinary=False)
        self.stats.sent += 1

    def call_service(
        self,
        service: str,
        srv_type: str,
        args: Mapping[str, Any] | None = None,
        timeout_s: float = 2.0,
    ) -> dict[str, Any]:
        """Call a ROS service through the bridge (blocking; not from the reactor thread).

        rosbridge_server 0.11.17 never times a call out itself: a service that does not answer
        leaves the call pending on the server for good. The timeout here is the only bound.
        A service that does not exist is answered at once (``result: false``).

        Raises:
            SafetyFault: the link is down, no answer within ``timeout_s`` (naming the service
                and the timeout), or the service failed (the server's error text).
            ConfigError: ``timeout_s`` is not a finite number > 0 (no call would ever end).
        """
        import math

        import roslibpy
        from roslibpy.core import RosTimeoutError

        if not isinstance(timeout_s, int | float) or not math.isfinite(timeout_s) or timeout_s <= 0:
            raise ConfigError(
                f"service {service}: timeout_s={timeout_s!r} must be a finite number > 0",
                fix="pass timeout_s in seconds, e.g. 2.0",
            )

        if in_reactor_thread():  # the reply arrives on this very thread: it would never come
            raise SafetyFault(
                f"service {service} called from the reactor thread",
                fix="call services from another thread (e.g. RosRobot's keeper)",
            )
        if self._proto is None or self._ros is None:
            raise SafetyFault(
                f"service {service} not called: rosbridge link is down",
                fix="wait for the reconnect",
            )
        srv = roslibpy.Service(self._ros, service, srv_type)
        try:
            result = srv.call(roslibpy.ServiceRequest(dict(args or {})), timeout=timeout_s)
        except RosTimeoutError as exc:
            raise SafetyFault(
                f"service {service} ({srv_type}) did not answer within {timeout_s} s "
                "(timed out on our side; rosbridge_server keeps the call pending)",
                fix="check that the service's node is alive and not blocked",
            ) from exc
        except Exception as exc:
            raise SafetyFault(
                f"service {service} ({srv_type}) failed: {exc}",
                fix="check that the robot driver offers this service",
            ) from exc
        return dict(result)
