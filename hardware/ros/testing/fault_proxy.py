"""A loopback TCP proxy that misbehaves on command: the network between the robot side and
rosbridge_server, for fault tests (issue 41, promise 3).

Put it between :class:`~hardware.ros.robot.RosRobot` and rosbridge_server (the robot config's
URL names the proxy's port) and set its mode while traffic flows:

* ``pass``: bytes forwarded as they come;
* ``latency``: every chunk held ``latency_s`` before it is forwarded (a latency spike);
* ``stall``: nothing forwarded either way and no FIN: the bytes pile up in the proxy, as in a
  network path that stopped, and are delivered when the mode changes (late);
* ``fragment``: bytes forwarded one at a time;
* ``reset``: every open connection is reset (RST, ``SO_LINGER`` 0) as the mode is set; new
  connections are accepted;
* ``duplicate``: each WebSocket frame forwarded twice;
* ``reorder``: each WebSocket frame swapped with the next one of its direction.

TCP delivers a stream in order and once, so duplicates and reorders are made at the frame
level (RFC 6455 framing: the proxy parses frames and never forwards half of one out of order):
what a middlebox or a replaying endpoint above TCP could do. Runs in threads of the test's
process; binds 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator

MODES = ("pass", "latency", "stall", "fragment", "reset", "duplicate", "reorder")


def frames(buffer: bytearray) -> Iterator[bytes]:
    """Pop every complete WebSocket frame from the front of ``buffer`` (RFC 6455 5.2)."""
    while len(buffer) >= 2:
        length = buffer[1] & 0x7F
        masked = buffer[1] & 0x80
        at = 2
        if length == 126:
            if len(buffer) < 4:
                return
            (length,) = struct.unpack(">H", buffer[2:4])
            at = 4
        elif length == 127:
            if len(buffer) < 10:
                return
            (length,) = struct.unpack(">Q", buffer[2:10])
            at = 10
        end = at + (4 if masked else 0) + length
        if len(buffer) < end:
            return
        frame = bytes(buffer[:end])
        del buffer[:end]
        yield frame


class _Pipe:
    """One direction of one connection: reads ``src``, writes ``dst`` as the mode says."""

    def __init__(self, proxy: FaultProxy, src: socket.socket, dst: socket.socket, name: str):
        self.proxy, self.src, self.dst, self.name = proxy, src, dst, name
        self.pending = bytearray()  # bytes held (stall) or not yet a whole frame
        self.held: bytes | None = None  # the frame a reorder holds back
        self.upgraded = False  # past the HTTP upgrade: frames from here on

    def run(self) -> None:
        self.src.settimeout(0.02)
        try:
            while not self.proxy.closed:
                try:
                    data = self.src.recv(65536)
                except TimeoutError:
                    data = None
                if data == b"":
                    break
                self._forward(data or b"")
        except OSError:
            pass
        finally:
            for s in (self.src, self.dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def _forward(self, data: bytes) -> None:
        mode, latency_s = self.proxy.mode, self.proxy.latency_s
        self.pending += data
        if mode == "stall":
            return  # held until the path recovers
        if not self.upgraded:
            head_end = self.pending.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = bytes(self.pending[: head_end + 4])
            del self.pending[: head_end + 4]
            self.dst.sendall(head)
            self.upgraded = True
        if mode in ("duplicate", "reorder"):
            for frame in frames(self.pending):
                self.proxy.count(mode)
                if mode == "duplicate":
                    self.dst.sendall(frame + frame)
                elif self.held is None:
                    self.held = frame
                else:
                    self.dst.sendall(frame + self.held)
                    self.held = None
            return
        if self.held is not None:  # the mode changed while a frame was held back
            self.dst.sendall(self.held)
            self.held = None
        out = bytes(self.pending)
        self.pending.clear()
        if not out:
            return
        if mode == "latency":
            time.sleep(latency_s)
        if mode == "fragment":
            for i in range(len(out)):
                self.dst.sendall(out[i : i + 1])
            self.proxy.count("fragment")
            return
        self.dst.sendall(out)


class FaultProxy:
    """Forward ``127.0.0.1:port`` to ``127.0.0.1:target_port`` with :attr:`mode` faults.

    Args:
        target_port: The rosbridge_server's port.
        port: Port to listen on (0: a free one, in :attr:`port` after :meth:`start`).
    """

    def __init__(self, target_port: int, port: int = 0) -> None:
        self.target_port = target_port
        self.mode = "pass"
        self.latency_s = 0.0
        self.closed = False
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()
        self._conns: list[tuple[socket.socket, socket.socket]] = []
        self._listener = socket.create_server(("127.0.0.1", port))
        self.port = int(self._listener.getsockname()[1])
        self._thread = threading.Thread(target=self._accept, name="fault-proxy", daemon=True)

    def start(self) -> FaultProxy:
        """Accept connections in a background thread."""
        self._thread.start()
        return self

    def count(self, what: str) -> None:
        with self._lock:
            self.counts[what] = self.counts.get(what, 0) + 1

    def set_mode(self, mode: str, latency_s: float = 0.0) -> None:
        """Switch the fault; ``reset`` resets every open connection at once."""
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {MODES}")
        self.latency_s = latency_s
        self.mode = "pass" if mode == "reset" else mode  # after the reset, traffic flows
        self.count(mode)
        if mode == "reset":
            with self._lock:
                conns, self._conns = self._conns, []
            for pair in conns:
                for s in pair:
                    with contextlib.suppress(OSError):  # RST, not FIN
                        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                        s.close()

    def _accept(self) -> None:
        self._listener.settimeout(0.1)
        while not self.closed:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._conns.append((client, server))
            for src, dst, name in ((client, server, "up"), (server, client, "down")):
                pipe = _Pipe(self, src, dst, name)
                threading.Thread(target=pipe.run, name=f"fault-proxy-{name}", daemon=True).start()

    def close(self) -> None:
        """Stop accepting and close every connection."""
        self.closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            conns, self._conns = self._conns, []
        for pair in conns:
            for s in pair:
                with contextlib.suppress(OSError):
                    s.close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
