"""Serve a policy over the network with openpi's websocket protocol (``embodied serve``).

The server speaks upstream openpi's ``WebsocketPolicyServer`` protocol
(``src/openpi/serving/websocket_policy_server.py``): on connect it sends its metadata map,
then answers each observation map with an action map holding ``actions`` (chunk x
action_dim) and ``server_timing`` (``infer_ms``, and ``prev_total_ms`` from the second
request on), all msgpack with numpy arrays as ``openpi_client.msgpack_numpy`` packs them
(:mod:`embodied.wire`); ``GET /healthz`` answers 200. So openpi's ``WebsocketClientPolicy``
(and its LIBERO evaluation client) can call it, and :class:`policies.remote.RemotePolicy`
(``--policy ws://host:port`` in every command) can call it or an upstream openpi server.

Where it goes beyond openpi (our extension, never needed by an openpi client):

* Each connection gets its own episode state (:meth:`~embodied.contracts.Policy.fork`:
  history, sampling noise, knob values), so clients never interleave; inference runs one
  request at a time (one model), off the event loop, so slow inference never stalls the
  server's other connections.
* Bad requests (not msgpack, a wrong dtype or shape, unknown keys, over the size limit) are
  answered with an error text frame, as openpi reports errors, and the connection stays open;
  a failure inside the policy is reported the same way, then that connection is closed
  (code 1011), as openpi does; the server keeps serving the others.
* ``embodied/op`` ``reset`` / ``observe`` and ``embodied/knobs`` (:mod:`embodied.wire`).
* Binding anything but a loopback address needs ``api_key`` (checked as openpi's client sends
  it: ``Authorization: Api-Key <key>``) or an explicit ``insecure``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import http
import logging
import threading
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

import policies
from embodied.apps.tune.configuration_tune import is_loopback
from embodied.config import Rule, checked, validate
from embodied.contracts import Env, Policy, Steerable
from embodied.errors import CompatibilityError, ConfigError, EmbodiedError
from embodied.wire import (
    EXT_PREFIX,
    KNOBS_KEY,
    OP_KEY,
    OPS,
    PROTOCOL_VERSION,
    SEED_KEY,
    WireError,
    packb,
    text_keys,
    unpackb,
)

log = logging.getLogger("embodied.apps.serve")


@dataclass(frozen=True)
class ServeConfig:
    """A policy server.

    Args:
        policy: Policy to serve: a name, a checkpoint folder (as in ``embodied eval``).
        env: Env the policy is set up for (its description is sent in the metadata, and
            the policy is checked against it at start); none: the policy alone.
        host: Interface to bind; ``127.0.0.1`` (default) serves this machine only.
        port: TCP port (0: any free port, printed at start).
        api_key: Key clients must send as ``Authorization: Api-Key <key>`` (openpi's client:
            ``WebsocketClientPolicy(api_key=...)``). Required off loopback, unless ``insecure``.
        insecure: Allow a non-loopback ``host`` without an api key (a trusted network only).
        max_message_mb: Largest request accepted (MiB); bigger ones get an error answer.
        policy_kwargs: Extra keyword arguments of the policy factory (``--policy-arg``).
        env_kwargs: Extra keyword arguments of the env (``--env-arg``).
    """

    policy: str
    env: str | None = None
    host: str = "127.0.0.1"
    port: int = checked(8000, ge=0, le=65535, fix="pass --port 0..65535")
    api_key: str | None = None
    insecure: bool = False
    max_message_mb: float = checked(64.0, gt=0, fix="pass e.g. --max-message-mb 64")
    policy_kwargs: Mapping[str, Any] = field(default_factory=dict)
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)

    config_name: ClassVar[str] = "serve"
    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "api_key",
            lambda c: c.api_key is None or len(c.api_key) >= 8,
            "is shorter than 8 characters",
            "pass a longer --api-key",
            show_value=False,
        ),
        Rule(
            "host",
            lambda c: is_loopback(c.host) or c.api_key is not None or c.insecure,
            "serves the policy beyond this machine without a key",
            "pass --api-key SECRET (clients send it as openpi's does), --insecure on a "
            "trusted network, or bind --host 127.0.0.1",
        ),
    )

    def __post_init__(self) -> None:
        validate(self)


def knob_metadata(policy: Policy) -> dict[str, dict[str, Any]]:
    """The policy's knobs as metadata (bounds, default, units, description)."""
    if not isinstance(policy, Steerable):
        return {}
    return {
        name: {
            "low": list(k.low),
            "high": list(k.high),
            "default": list(k.default),
            "units": k.units,
            "description": k.description,
        }
        for name, k in policy.knobs().items()
    }


def server_metadata(policy: Policy, env: Env | None = None) -> dict[str, Any]:
    """What the server sends on connect: everything a client checks before the first step."""
    from embodied import __version__

    meta: dict[str, Any] = {
        "server": f"embodied {__version__}",
        "embodied_protocol": PROTOCOL_VERSION,
        "policy": type(policy).__name__,
        "action_dim": int(policy.action_dim),
        "n_action_steps": int(policy.n_action_steps),
        "history_steps": int(policy.history_steps),
        "image_keys": list(policy.image_keys),
        "image_size": list(policy.image_size) if policy.image_size else None,
        "image_orientation": policy.image_orientation,
        "gripper_convention": policy.gripper_convention,
        "knobs": knob_metadata(policy),
        "observation_keys": ["state", *policy.image_keys, "instruction"],
        "foreign_observation_keys": list(policy.foreign_observation_keys),
    }
    if env is not None:
        meta["env"] = env.describe()
    return meta


class RequestError(EmbodiedError, ValueError):
    """A request the server refuses (answered with an error text, the connection stays)."""


class PolicyServer:
    """The websocket server around one policy (shared weights, one fork per connection).

    Args:
        policy: The policy served.
        metadata: Sent on connect (default: :func:`server_metadata`).
        host: Interface to bind.
        port: TCP port (0: any free port; :attr:`port` holds the bound one after start).
        api_key: Required ``Authorization: Api-Key`` value, or None.
        max_message_bytes: Largest request answered; a request up to 4x bigger gets an
            error answer, a bigger one closes the connection (code 1009).
        handshake_timeout_s: Longest time a client may take to open its WebSocket (s); a
            slower one (slowloris) is closed.
    """

    def __init__(
        self,
        policy: Policy,
        metadata: Mapping[str, Any] | None = None,
        host: str = "127.0.0.1",
        port: int = 8000,
        api_key: str | None = None,
        max_message_bytes: int = 64 << 20,
        handshake_timeout_s: float = 10.0,
    ) -> None:
        self.policy = policy
        self.metadata = dict(metadata if metadata is not None else server_metadata(policy))
        self.host = host
        self.port = int(port)
        self.api_key = api_key
        self.max_message_bytes = int(max_message_bytes)
        self.handshake_timeout_s = float(handshake_timeout_s)
        self._infer_lock = threading.Lock()  # one model: one inference at a time
        self._server: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self.connections = 0
        """Connections open now."""
        self.requests = 0
        """Requests answered (actions, resets and errors)."""

    # ---- HTTP side: health check and key ------------------------------------------------------
    def _process_request(self, connection: Any, request: Any) -> Any:
        if request.path == "/healthz":
            return connection.respond(http.HTTPStatus.OK, "OK\n")
        if self.api_key is not None:
            sent = request.headers.get("Authorization", "")
            if not hmac.compare_digest(sent.encode(), f"Api-Key {self.api_key}".encode()):
                return connection.respond(
                    http.HTTPStatus.UNAUTHORIZED,
                    "missing or wrong api key (send 'Authorization: Api-Key <key>')\n",
                )
        return None

    # ---- one connection --------------------------------------------------------------------
    async def _handler(self, websocket: Any) -> None:
        from websockets.exceptions import ConnectionClosed
        from websockets.frames import CloseCode

        self.connections += 1
        session = self.policy.fork()
        peer = websocket.remote_address
        log.info("connection from %s opened", peer)
        prev_total_ms: float | None = None
        try:
            await websocket.send(packb(self.metadata))
            while True:
                data = await websocket.recv()
                start = time.monotonic()
                try:
                    answer = await self._answer(session, data, prev_total_ms)
                except RequestError as exc:
                    self.requests += 1
                    await websocket.send(f"error: {exc}")
                    continue
                except Exception:  # the policy failed: report, close this connection only
                    self.requests += 1
                    log.exception("policy failed on a request from %s", peer)
                    await websocket.send(traceback.format_exc())
                    await websocket.close(
                        code=CloseCode.INTERNAL_ERROR,
                        reason="Internal server error. Traceback included in previous frame.",
                    )
                    return
                if answer is None:  # observe: no answer
                    continue
                self.requests += 1
                await websocket.send(packb(answer))
                prev_total_ms = (time.monotonic() - start) * 1e3
        except ConnectionClosed:
            log.info("connection from %s closed", peer)
        finally:
            self.connections -= 1

    async def _answer(
        self, session: Policy, data: Any, prev_total_ms: float | None
    ) -> dict[str, Any] | None:
        try:
            message = unpackb(data, max_bytes=self.max_message_bytes)
        except WireError as exc:
            raise RequestError(str(exc)) from exc
        if not isinstance(message, Mapping):
            raise RequestError(
                f"a request is a map of observation keys, got {type(message).__name__}",
                fix="send a dict (openpi_client.msgpack_numpy.packb(obs))",
            )
        try:
            message = text_keys(message)
        except WireError as exc:
            raise RequestError(str(exc)) from exc
        op = message.pop(OP_KEY, "infer")
        seed = message.pop(SEED_KEY, None)
        knobs = message.pop(KNOBS_KEY, None)
        unknown = sorted(k for k in message if k.startswith(EXT_PREFIX))
        if op not in OPS or unknown:
            raise RequestError(
                f"unknown {'op ' + repr(op) if op not in OPS else 'keys ' + str(unknown)}",
                fix=f"ops: {list(OPS)}; extension keys: {OP_KEY}, {SEED_KEY}, {KNOBS_KEY}",
            )
        if op == "reset":
            if seed is not None and not isinstance(seed, int):
                raise RequestError(f"{SEED_KEY}={seed!r:.40} is not an int")
            session.reset()
            if seed is not None:
                session.seed_episode(int(seed))
            return {"ok": True}
        try:
            obs = session.adapt_observation(message)
            _set_knobs(session, knobs)
        except (EmbodiedError, ValueError, TypeError) as exc:
            raise RequestError(str(exc)) from exc
        t0 = time.monotonic()
        try:
            if op == "observe":
                await asyncio.to_thread(self._locked, session.observe, obs)
                return None
            chunk = await asyncio.to_thread(self._locked, session.fresh_chunk, obs)
        except (CompatibilityError, ConfigError) as exc:  # the policy refused the observation
            raise RequestError(str(exc)) from exc
        infer_ms = (time.monotonic() - t0) * 1e3
        chunk = np.asarray(chunk, dtype=np.float64)
        if chunk.ndim != 2 or chunk.shape[1] != session.action_dim or not np.isfinite(chunk).all():
            raise RuntimeError(
                f"{type(session).__name__}.fresh_chunk returned shape {chunk.shape} (finite: "
                f"{bool(np.isfinite(chunk).all())}); expected finite (n, {session.action_dim})"
            )
        timing: dict[str, float] = {"infer_ms": infer_ms}
        if prev_total_ms is not None:
            timing["prev_total_ms"] = prev_total_ms
        return {"actions": chunk, "server_timing": timing}

    def _locked(self, fn: Any, *args: Any) -> Any:
        with self._infer_lock:
            return fn(*args)

    # ---- running -----------------------------------------------------------------------------
    async def run(self) -> None:
        """Serve until :meth:`stop` (or the task is cancelled)."""
        from websockets.asyncio.server import serve

        self._loop = asyncio.get_running_loop()
        async with serve(
            self._handler,
            self.host,
            self.port,
            compression=None,
            max_size=4 * self.max_message_bytes,
            open_timeout=self.handshake_timeout_s,
            process_request=self._process_request,
        ) as server:
            self._server = server
            self.port = int(next(iter(server.sockets)).getsockname()[1])
            self._ready.set()
            await server.serve_forever()

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted."""
        asyncio.run(self.run())

    def start(self, timeout_s: float = 30.0) -> PolicyServer:
        """Serve from a background thread; returns once the port is bound."""
        self._thread = threading.Thread(
            target=self._serve_quietly, name="embodied-serve", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise RuntimeError(f"policy server did not start within {timeout_s} s")
        return self

    def _serve_quietly(self) -> None:
        with contextlib.suppress(asyncio.CancelledError):  # stop() cancels serve_forever
            asyncio.run(self.run())

    def stop(self) -> None:
        """Stop a server started with :meth:`start` (open connections are closed)."""
        if self._loop is not None and self._server is not None:
            self._loop.call_soon_threadsafe(self._server.close)
        if self._thread is not None:
            self._thread.join(timeout=10)

    @property
    def url(self) -> str:
        """``ws://host:port`` of the bound server."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"ws://{host}:{self.port}"


def _set_knobs(policy: Policy, knobs: Any) -> None:
    if knobs is None:
        return
    if not isinstance(knobs, Mapping):
        raise RequestError(f"{KNOBS_KEY} must map knob names to values, got {knobs!r:.60}")
    if not isinstance(policy, Steerable):
        raise RequestError(
            f"{type(policy).__name__} has no knobs (sent {sorted(map(str, knobs))})",
            fix=f"drop {KNOBS_KEY}",
        )
    for name, value in knobs.items():
        policy.set_knob(str(name), np.asarray(value, dtype=np.float64))


def load_served(config: ServeConfig) -> tuple[Policy, Env | None]:
    """The policy (set up for ``config.env`` when given) and that env."""
    env = None
    if config.env:
        import sim

        env = sim.make(config.env, **dict(config.env_kwargs))
    policy = policies.load(config.policy, env=env, **dict(config.policy_kwargs))
    if policy.privileged:
        raise ConfigError(
            f"policy {config.policy!r} ({type(policy).__name__}) reads the simulator's internal "
            "state, which a server does not have",
            fix="serve a policy that acts on observations (a checkpoint folder, openvla, "
            "random, zero), or run the expert in process",
        )
    if env is not None:
        policy.check_compatible(env)
    return policy, env


def serve(config: ServeConfig, on_ready: Any = None) -> None:
    """Load the policy and serve it until interrupted (what ``embodied serve`` runs)."""
    policy, env = load_served(config)
    server = PolicyServer(
        policy,
        server_metadata(policy, env),
        host=config.host,
        port=config.port,
        api_key=config.api_key,
        max_message_bytes=int(config.max_message_mb * (1 << 20)),
    )
    if env is not None:
        env.close()
    server.start()
    if on_ready is not None:
        on_ready(server)
    try:
        assert server._thread is not None
        while server._thread.is_alive():
            server._thread.join(timeout=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
