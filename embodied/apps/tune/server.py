"""The tuning page's ASGI app (Starlette): static page, JSON state, camera frame, WebSocket.

WebSocket protocol (JSON text messages):

* server -> page: ``hello`` (session snapshot, gains files), then at ``telemetry_hz``:
  ``telemetry`` (new samples), ``state`` (when it changed), ``frame`` (JPEG, base64, at
  ``frame_hz``) and events (``ack``, ``error``, ``step_result``, ``autotune_candidate``,
  ``autotune_done``, ``episode_end``, ``saved``, ``loaded``, ``files``, ``info``).
* page -> server: commands ``{"cmd": ..., ...}`` (see :mod:`embodied.apps.tune.commands`); each is
  answered by ``ack`` or ``error`` (refused commands never reach the controller).

Access: the server binds 127.0.0.1 by default. Every HTTP request and WebSocket must name an
allowed host in its ``Host`` header (127.0.0.1, localhost, [::1], the bound host and
``ServerConfig.allowed_hosts``, any port), else it gets 403: a page on another site whose DNS
name an attacker re-points at 127.0.0.1 (DNS rebinding) sends its own name there. With a token,
every HTTP request and the WebSocket must also carry it (``?token=``, ``Authorization: Bearer``,
or the cookie the page gets on its first authorised load); WebSockets from another origin are
refused (cross-site hijacking).
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import io
import json
import logging
import threading
import time
from http.cookies import SimpleCookie
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from embodied.apps.tune import gains_io
from embodied.apps.tune.commands import MAX_COMMAND_BYTES
from embodied.apps.tune.configuration_tune import ServerConfig, normalise_host
from embodied.apps.tune.session import TuneSession
from embodied.errors import EmbodiedError
from embodied.io import plain_json

log = logging.getLogger(__name__)

COOKIE = "embodied_tune_token"
STATIC_DIR = Path(str(resources.files("embodied.apps.tune") / "static"))


def _token_from_scope(scope: dict[str, Any]) -> str | None:
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    if query.get("token"):
        return query["token"][0]
    headers = {
        k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])
    }
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    cookie = SimpleCookie(headers.get("cookie", ""))
    return cookie[COOKIE].value if COOKIE in cookie else None


def token_ok(scope: dict[str, Any], token: str | None) -> bool:
    """Whether the request/WebSocket ``scope`` carries ``token`` (always true without one)."""
    if not token:
        return True
    given = _token_from_scope(scope)
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


def request_host(scope: dict[str, Any]) -> str | None:
    """The name in the request's ``Host`` header (normalised, port dropped); None if absent,
    repeated or malformed."""
    hosts = [v.decode("latin-1") for k, v in scope.get("headers", []) if k.lower() == b"host"]
    if len(hosts) != 1:
        return None
    host = hosts[0].strip()
    if host.startswith("["):  # [IPv6]:port
        end = host.find("]")
        if end < 0:
            return None
        name, rest = host[: end + 1], host[end + 1 :]
    else:
        name, sep, port = host.partition(":")
        rest = sep + port
    if rest and not (rest.startswith(":") and rest[1:].isdigit()):
        return None
    return normalise_host(name) or None


def host_ok(scope: dict[str, Any], allowed: frozenset[str]) -> bool:
    """Whether the request's ``Host`` header names one of ``allowed`` (normalised names)."""
    name = request_host(scope)
    return name is not None and name in allowed


def origin_ok(scope: dict[str, Any]) -> bool:
    """A WebSocket's Origin (if sent, as browsers do) must be the page's own host."""
    headers = {
        k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])
    }
    origin = headers.get("origin")
    if origin is None:
        return True  # non-browser clients (scripts) send none
    return urlsplit(origin).netloc.lower() == headers.get("host", "").lower()


class AccessGate:
    """ASGI middleware: Host allow-list on everything, then the token (if any).

    HTTP requests for a host not in ``allowed_hosts`` get 403, without the token 401;
    refused WebSockets are closed before the handshake completes (the client sees 403).

    Args:
        app: The wrapped ASGI app.
        token: Shared secret (None: no token needed).
        allowed_hosts: Normalised names the ``Host`` header may carry
            (:meth:`ServerConfig.host_allow_list`).
    """

    def __init__(self, app: Any, token: str | None, allowed_hosts: frozenset[str]) -> None:
        self.app, self.token, self.allowed_hosts = app, token, allowed_hosts

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        if not host_ok(scope, self.allowed_hosts):
            headers = {k.decode("latin-1").lower(): v for k, v in scope.get("headers", [])}
            given = headers.get("host", b"").decode("latin-1")
            # the allowed names are not listed: a rebinding page can read this answer
            message = (
                f"403: Host {given!r} is not allowed; fix: open the URL printed by "
                "`embodied tune`, or start it with --allow-host NAME for the name you use\n"
            )
            await _refuse(kind, receive, send, 403, message, "host not allowed")
            return
        if not token_ok(scope, self.token):
            message = "401: missing or wrong token; open the URL printed by `embodied tune`\n"
            await _refuse(kind, receive, send, 401, message, "missing or wrong token")
            return
        if kind == "websocket" and not origin_ok(scope):
            await _refuse(kind, receive, send, 403, "", "cross-origin WebSocket refused")
            return
        await self.app(scope, receive, send)


async def _refuse(kind: str, receive: Any, send: Any, status: int, body: str, reason: str) -> None:
    """Answer an HTTP request with ``status`` and ``body``, or close a WebSocket (policy)."""
    if kind == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.close", "code": 1008, "reason": reason})
        return
    data = body.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(data)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


def encode_jpeg(frame: Any, quality: int = 80) -> str:
    """Base64 JPEG of a uint8 (H, W, 3) frame."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(frame).save(buf, format="JPEG", quality=quality)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def create_app(session: TuneSession, config: ServerConfig) -> Any:
    """Build the Starlette app serving ``session`` (wrapped in the host and token gate)."""
    # starlette and uvicorn come with the optional ``ui`` extra: imported only when serving
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import FileResponse, JSONResponse, Response
    from starlette.routing import Mount, Route, WebSocketRoute
    from starlette.staticfiles import StaticFiles
    from starlette.websockets import WebSocket, WebSocketDisconnect

    async def index(request: Request) -> Response:
        resp = FileResponse(STATIC_DIR / "index.html", headers={"cache-control": "no-store"})
        if config.token:
            resp.set_cookie(COOKIE, config.token, httponly=True, samesite="strict")
        return resp

    async def state(request: Request) -> Response:
        return JSONResponse(plain_json(session.snapshot(), finite=True))

    async def frame(request: Request) -> Response:
        _, img = session.latest_frame()
        if img is None:
            return Response(status_code=204)
        data = base64.b64decode(await asyncio.to_thread(encode_jpeg, img))
        return Response(data, media_type="image/jpeg", headers={"cache-control": "no-store"})

    async def ws_endpoint(ws: WebSocket) -> None:
        await ws.accept()
        lock = asyncio.Lock()

        async def send(msg: dict[str, Any]) -> None:
            async with lock:
                await ws.send_text(json.dumps(plain_json(msg, finite=True), allow_nan=False))

        await send(
            {"type": "hello", "state": session.snapshot(), "files": gains_io.list_files(session)}
        )
        sender = asyncio.create_task(_pump(session, config, send))
        try:
            while True:
                message = await ws.receive()
                if message["type"] == "websocket.disconnect":
                    break
                text = message.get("text")
                if text is None:  # a binary frame: the page only ever sends JSON text
                    await send({"type": "error", "message": "commands are JSON text frames"})
                    continue
                await send(_handle(session, text))
        except WebSocketDisconnect:
            pass
        finally:
            sender.cancel()

    routes = [
        Route("/", index),
        Route("/api/state", state),
        Route("/api/frame.jpg", frame),
        WebSocketRoute("/ws", ws_endpoint),
        Mount("/static", app=StaticFiles(directory=STATIC_DIR), name="static"),
    ]
    return AccessGate(Starlette(routes=routes), config.token, config.host_allow_list())


def _handle(session: TuneSession, text: str) -> dict[str, Any]:
    """Validate and submit one command; the reply is an ``ack`` or an ``error``."""
    if len(text) > MAX_COMMAND_BYTES:
        return {
            "type": "error",
            "message": f"command of {len(text)} bytes exceeds {MAX_COMMAND_BYTES}",
        }
    try:
        message = json.loads(text)
    except json.JSONDecodeError as exc:
        return {"type": "error", "message": f"command is not valid JSON ({exc.msg}): {text[:80]!r}"}
    try:
        return {"type": "ack", "message": session.submit(message), "cmd": message.get("cmd")}
    except EmbodiedError as exc:
        cmd = message.get("cmd") if isinstance(message, dict) else None
        return {"type": "error", "message": f"refused: {exc}", "cmd": cmd}


async def _pump(session: TuneSession, config: ServerConfig, send: Any) -> None:
    """Push telemetry, state changes, events and frames to one page."""
    seq = -1
    event_seq, _ = session.events_since(10**18)  # only events after connecting
    version = -1
    frame_seq = 0
    next_frame = 0.0
    period = 1.0 / config.telemetry_hz
    try:
        while True:
            samples = session.telemetry_since(seq)
            if samples:
                seq = samples[-1]["seq"]
                await send({"type": "telemetry", "samples": samples})
            event_seq, events = session.events_since(event_seq)
            for ev in events:
                await send(ev)
            if session.state_version != version:
                version = session.state_version
                await send({"type": "state", "state": session.snapshot()})
            now = time.monotonic()
            if now >= next_frame:
                fseq, img = session.latest_frame()
                if img is not None and fseq != frame_seq:
                    frame_seq = fseq
                    next_frame = now + 1.0 / config.frame_hz
                    jpeg = await asyncio.to_thread(encode_jpeg, img)
                    await send({"type": "frame", "jpeg": jpeg, "shape": list(img.shape)})
            await asyncio.sleep(period)
    except asyncio.CancelledError:
        raise
    except Exception:  # the page went away mid-send
        log.debug("telemetry pump ended", exc_info=True)


def head_deadline_protocol(timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's h11 HTTP protocol with a deadline on every request head.

    uvicorn waits for a connection's first request head forever, and for a later one as long
    as bytes keep coming (its keep-alive timer stops at the first byte): a client that sends a
    header line every few seconds (slowloris) holds a socket and its buffer indefinitely. Here
    a head that is not complete ``timeout_s`` after the connection opened (or after the last
    response) is answered 408 and the connection closed.
    """
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeadDeadlineH11Protocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm_head_deadline()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm_head_deadline()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            super().connection_lost(exc)

        def _arm_head_deadline(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._head_timer = self.loop.call_later(timeout_s, self._head_deadline)

        def _head_deadline(self) -> None:
            self._head_timer = None
            transport = self.transport
            if transport.is_closing() or transport.get_protocol() is not self:
                return  # closed, or upgraded to a WebSocket that now owns the transport
            if self.conn.their_state is not h11.IDLE:
                return  # the head arrived: a request is being served
            body = f"request head not received within {timeout_s:g} s\n".encode()
            transport.write(
                b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
                b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
            )
            transport.close()

    return HeadDeadlineH11Protocol


class TuneServer:
    """Runs the app with uvicorn, in this thread (:meth:`run`) or a background one (:meth:`start`).

    Args:
        session: The session to serve (started by :meth:`start` / :meth:`run`).
        config: Host, port, token (validated: a non-loopback host needs a token), allowed
            Host names.
    """

    def __init__(self, session: TuneSession, config: ServerConfig) -> None:
        import uvicorn  # optional ``ui`` extra, like starlette in create_app
        from uvicorn.config import WS_PROTOCOLS

        self.session, self.config = session, config
        # the sans-I/O websockets implementation where this uvicorn has it (the other is deprecated)
        ws = "websockets-sansio" if "websockets-sansio" in WS_PROTOCOLS else "websockets"
        self._uv = uvicorn.Server(
            uvicorn.Config(
                create_app(session, config),
                host=config.host,
                port=config.port,
                log_level="warning",
                http=head_deadline_protocol(config.head_timeout_s),
                ws=ws,
                # a command is at most MAX_COMMAND_BYTES: a larger frame closes with 1009
                ws_max_size=4 * MAX_COMMAND_BYTES,
                limit_concurrency=config.max_connections,
                lifespan="off",
            )
        )
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        for server in getattr(self._uv, "servers", ()):  # set once uvicorn listens
            for sock in server.sockets:
                return int(sock.getsockname()[1])
        return self.config.port

    @property
    def url(self) -> str:
        """URL of the page (with the token when one is set)."""
        host = self.config.host if ":" not in self.config.host else f"[{self.config.host}]"
        url = f"http://{host}:{self.port}/"
        return url + (f"?token={self.config.token}" if self.config.token else "")

    def start(self, timeout_s: float = 20.0) -> None:
        """Start the session and serve in a background thread; return once listening."""
        self.session.start()
        self._thread = threading.Thread(target=self._uv.run, name="embodied-tune-http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._uv.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(
                    f"tuning server did not start on {self.config.host}:{self.config.port}"
                )
            time.sleep(0.05)

    def run(self) -> None:
        """Start the session and serve until Ctrl-C."""
        self.session.start()
        try:
            self._uv.run()
        finally:
            self.session.close()

    def stop(self) -> None:
        """Stop serving and close the session."""
        self._uv.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
        self.session.close()
