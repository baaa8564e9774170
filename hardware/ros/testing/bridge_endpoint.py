#!/usr/bin/env python3
"""A small rosbridge v2 endpoint: websocket JSON <-> a real ROS 1 graph (rospy).

``rosbridge_server`` is not installable from Debian; this endpoint speaks the same v2
protocol subset that roslibpy uses (``advertise``, ``unadvertise``, ``publish``,
``subscribe``, ``unsubscribe``, ``call_service``, ``set_level``; replies ``publish``,
``service_response`` and ``status``) so the production client talks to it exactly as to
rosbridge_server. Encoding follows rosbridge: times as ``{"secs", "nsecs"}`` (``sec/nanosec``
accepted on input), ``uint8[]`` as base64 strings. Invalid messages are answered with an
error ``status`` (and logged), as rosbridge does.

Runs under the system ``/usr/bin/python3`` with Debian's ``python3-rospy`` and
``python3-websockets`` (10.x). Binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import signal
import sys
import threading
from collections import OrderedDict
from typing import Any

import genpy
import roslib.message
import rospy
import rosservice
import rostopic
import websockets

_INTS = {"int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "char", "byte"}
_FLOATS = {"float32", "float64"}


class ConversionError(ValueError):
    """A JSON message does not fit its ROS type."""


def _base(slot_type: str) -> tuple[str, bool]:
    if "[" in slot_type:
        return slot_type[: slot_type.index("[")], True
    return slot_type, False


def _to_time(value: Any, cls: type) -> Any:
    if not isinstance(value, dict):
        raise ConversionError(f"time/duration must be an object, got {value!r}")
    secs: Any = value.get("secs", value.get("sec", 0))
    nsecs: Any = value.get("nsecs", value.get("nanosec", 0))
    return cls(int(secs), int(nsecs))


def _convert(slot_type: str, value: Any, where: str) -> Any:
    base, is_array = _base(slot_type)
    if is_array:
        if base in ("uint8", "char"):
            if isinstance(value, str):
                return base64.b64decode(value)
            return bytes(value)
        if not isinstance(value, list):
            raise ConversionError(f"{where} must be a list")
        return [_convert(base, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if base in _FLOATS:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConversionError(f"{where} must be a number, got {value!r}")
        return float(value)
    if base in _INTS:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConversionError(f"{where} must be an integer, got {value!r}")
        return value
    if base == "bool":
        if not isinstance(value, bool):
            raise ConversionError(f"{where} must be a bool, got {value!r}")
        return value
    if base == "string":
        if not isinstance(value, str):
            raise ConversionError(f"{where} must be a string, got {value!r}")
        return value
    if base == "time":
        return _to_time(value, rospy.Time)
    if base == "duration":
        return _to_time(value, rospy.Duration)
    if base == "Header":
        base = "std_msgs/Header"
    cls = roslib.message.get_message_class(base)
    if cls is None:
        raise ConversionError(f"{where}: unknown message type {base!r}")
    return fill(cls(), value, where)


def fill(msg: Any, data: Any, where: str = "msg") -> Any:
    """Fill ROS message ``msg`` from a rosbridge JSON object (unknown fields are errors)."""
    if not isinstance(data, dict):
        raise ConversionError(f"{where} must be an object, got {data!r}")
    slots = dict(zip(msg.__slots__, msg._slot_types, strict=False))
    unknown = sorted(set(data) - set(slots))
    if unknown:
        raise ConversionError(f"{where}: unknown field(s) {unknown} for {msg._type}")
    for name, value in data.items():
        setattr(msg, name, _convert(slots[name], value, f"{where}.{name}"))
    return msg


def to_json(value: Any, slot_type: str | None = None) -> Any:
    """ROS message (or field) -> rosbridge JSON form."""
    if isinstance(value, genpy.TVal):
        return {"secs": value.secs, "nsecs": value.nsecs}
    if isinstance(value, genpy.Message):
        return {
            n: to_json(getattr(value, n), t)
            for n, t in zip(value.__slots__, value._slot_types, strict=False)
        }
    if isinstance(value, bytes):
        base, is_array = _base(slot_type or "")
        if is_array and base in ("uint8", "char"):
            return base64.b64encode(value).decode("ascii")
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
        inner = _base(slot_type)[0] if slot_type else None
        return [to_json(v, inner) for v in value]
    return value


class Client:
    """One websocket client; outgoing messages are latest-wins per topic (bounded)."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.pending: OrderedDict[Any, str] = OrderedDict()
        self.event = asyncio.Event()
        self.subs: dict[str, str] = {}  # topic -> subscribe id
        self.level = "error"
        self.tasks: set[asyncio.Future[None]] = set()

    def enqueue(self, key: Any, text: str) -> None:
        self.pending[key] = text
        self.pending.move_to_end(key)
        self.event.set()

    async def writer(self) -> None:
        while True:
            await self.event.wait()
            self.event.clear()
            while self.pending:
                _, text = self.pending.popitem(last=False)
                await self.ws.send(text)


class Bridge:
    """Relays between websocket clients and the ROS graph."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.publishers: dict[str, tuple[str, rospy.Publisher]] = {}
        self.subscribers: dict[str, tuple[rospy.Subscriber, set[Client]]] = {}
        self.lock = threading.Lock()

    def status(self, client: Client, level: str, text: str, op_id: Any = None) -> None:
        rospy.logwarn("bridge: %s", text)
        msg = {"op": "status", "level": level, "msg": text}
        if op_id is not None:
            msg["id"] = op_id
        client.enqueue(("status", id(msg)), json.dumps(msg))

    # ---------------------------------------------------------------- ops
    def advertise(self, client: Client, m: dict) -> None:
        topic, msg_type = m["topic"], m["type"]
        with self.lock:
            if topic in self.publishers:
                if self.publishers[topic][0] != msg_type:
                    raise ConversionError(f"{topic} is advertised as {self.publishers[topic][0]}")
                return
            cls = roslib.message.get_message_class(msg_type)
            if cls is None:
                raise ConversionError(f"unknown message type {msg_type!r}")
            pub = rospy.Publisher(
                topic,
                cls,
                queue_size=int(m.get("queue_size", 1)),
                latch=bool(m.get("latch", False)),
                tcp_nodelay=True,
            )
            self.publishers[topic] = (msg_type, pub)

    def publish(self, client: Client, m: dict) -> None:
        topic = m["topic"]
        if topic not in self.publishers:
            msg_type = m.get("type") or rostopic.get_topic_type(topic)[0]
            if not msg_type:
                raise ConversionError(f"publish on {topic}: not advertised and type unknown")
            self.advertise(client, {"topic": topic, "type": msg_type})
        msg_type, pub = self.publishers[topic]
        cls = roslib.message.get_message_class(msg_type)
        pub.publish(fill(cls(), m.get("msg", {}), topic))

    def subscribe(self, client: Client, m: dict) -> None:
        topic = m["topic"]
        msg_type = m.get("type") or rostopic.get_topic_type(topic)[0]
        if not msg_type:
            raise ConversionError(f"subscribe to {topic}: type not given and unknown")
        cls = roslib.message.get_message_class(msg_type)
        if cls is None:
            raise ConversionError(f"unknown message type {msg_type!r}")
        client.subs[topic] = m.get("id", "")
        with self.lock:
            if topic in self.subscribers:
                self.subscribers[topic][1].add(client)
                return
            clients: set[Client] = {client}

            def callback(msg: Any, _topic: str = topic, _clients: set = clients) -> None:
                text = json.dumps({"op": "publish", "topic": _topic, "msg": to_json(msg)})
                for c in list(_clients):
                    self.loop.call_soon_threadsafe(c.enqueue, ("publish", _topic), text)

            sub = rospy.Subscriber(topic, cls, callback, queue_size=1, tcp_nodelay=True)
            self.subscribers[topic] = (sub, clients)

    def unsubscribe(self, client: Client, m: dict) -> None:
        topic = m["topic"]
        client.subs.pop(topic, None)
        with self.lock:
            entry = self.subscribers.get(topic)
            if entry is None:
                return
            entry[1].discard(client)
            if not entry[1]:
                entry[0].unregister()
                del self.subscribers[topic]

    async def call_service(self, client: Client, m: dict) -> None:
        service, op_id = m["service"], m.get("id")

        def call() -> dict:
            srv_type = m.get("type") or rosservice.get_service_type(service)
            if not srv_type:
                raise ConversionError(f"service {service} is not available")
            cls = roslib.message.get_service_class(srv_type)
            req = fill(cls._request_class(), m.get("args") or {}, service)
            proxy = rospy.ServiceProxy(service, cls)
            return to_json(proxy(req))

        try:
            values = await self.loop.run_in_executor(None, call)
            reply = {"op": "service_response", "service": service, "values": values, "result": True}
        except Exception as exc:
            reply = {
                "op": "service_response",
                "service": service,
                "values": str(exc),
                "result": False,
            }
        if op_id is not None:
            reply["id"] = op_id
        client.enqueue(("service", op_id, id(reply)), json.dumps(reply))

    # ---------------------------------------------------------------- websocket
    async def handle(self, ws: Any, _path: str = "") -> None:
        client = Client(ws)
        writer = asyncio.ensure_future(client.writer())
        try:
            async for raw in ws:
                try:
                    m = json.loads(raw)
                    op = m.get("op")
                    if op == "publish":
                        self.publish(client, m)
                    elif op == "subscribe":
                        self.subscribe(client, m)
                    elif op == "unsubscribe":
                        self.unsubscribe(client, m)
                    elif op == "advertise":
                        self.advertise(client, m)
                    elif op == "unadvertise":
                        pass  # publishers are kept, as rosbridge does for a while
                    elif op == "call_service":
                        task = asyncio.ensure_future(self.call_service(client, m))
                        client.tasks.add(task)
                        task.add_done_callback(client.tasks.discard)
                    elif op == "set_level":
                        client.level = m.get("level", "error")
                    else:
                        self.status(client, "error", f"unsupported op {op!r}", m.get("id"))
                except Exception as exc:
                    self.status(
                        client,
                        "error",
                        f"{type(exc).__name__}: {exc}",
                        m.get("id") if isinstance(m, dict) else None,
                    )
        except websockets.ConnectionClosed:
            pass
        finally:
            writer.cancel()
            for topic in list(client.subs):
                self.unsubscribe(client, {"topic": topic})


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    bridge = Bridge(loop)
    stop: asyncio.Future[None] = loop.create_future()

    def request_stop() -> None:
        if not stop.done():
            stop.set_result(None)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, request_stop)
    async with websockets.serve(
        bridge.handle, host, port, ping_interval=None, max_size=2**24, compression=None
    ):
        print(f"READY rosbridge ws://{host}:{port}", flush=True)
        await stop


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9090)
    args = parser.parse_args(argv)
    rospy.init_node("rosbridge_test_endpoint", anonymous=True, disable_signals=True)
    asyncio.run(serve(args.host, args.port))
    rospy.signal_shutdown("endpoint stopped")


if __name__ == "__main__":
    main(sys.argv[1:])
