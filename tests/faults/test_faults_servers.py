"""Servers stay up (issue 41, promise 4).

The tune page's HTTP and WebSocket endpoints (real uvicorn) and the policy server (real
websockets) get malformed, oversized and slow (slowloris) requests that hypothesis generates,
from one connection, while a well-behaved client is served beside it. After every request:
the offending connection got an error answer or was closed (never a 5xx, never a hang), the
well-behaved client is still served, and the process's memory stayed bounded.

Profiles as in ``tests/core/test_core_fuzz_loaders.py`` (``EMBODIED_FUZZ_PROFILE=ci``: 20
cases per kind, derandomized; ``slow``: 200). Counts land in
``test-artifacts/reliability_servers.json``.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import ARTIFACTS, FUZZ_PROFILE, fuzz_settings, require

hypothesis = require("hypothesis")
st = require("hypothesis.strategies")

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = fuzz_settings(ci=20, slow=200)
TOKEN = "tok-0123456789"
HEAD_TIMEOUT_S = 1.0
MEMORY_BOUND_MB = 64
"""Growth of this process's resident memory allowed over a whole attack (both servers run in
it): an unbounded buffer would grow by the attack's volume, hundreds of MB."""
TALLY: dict[str, dict[str, int]] = {}


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def _count(name: str, key: str) -> None:
    row = TALLY.setdefault(name, {"cases": 0, "survived": 0, "crashes": 0})
    row[key] += 1


@pytest.fixture(scope="module", autouse=True)
def _report() -> Iterator[None]:
    yield
    artifacts = ARTIFACTS
    artifacts.mkdir(parents=True, exist_ok=True)
    (artifacts / "reliability_servers.json").write_text(
        json.dumps({**TALLY, "profile": FUZZ_PROFILE}, indent=2) + "\n"
    )


# ---- the tune page -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tune(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from embodied.apps.tune import ServerConfig, TuneConfig, TuneSession
    from embodied.apps.tune.server import TuneServer
    from embodied.apps.tune.task import build_task

    cfg = TuneConfig(out_dir=tmp_path_factory.mktemp("tune-fuzz"))
    server = TuneServer(
        TuneSession(build_task(cfg, camera=False), cfg),
        ServerConfig(port=0, token=TOKEN, head_timeout_s=HEAD_TIMEOUT_S),
    )
    server.start()
    yield server
    server.stop()


def _state_ok(port: int) -> None:
    """The well-behaved client: the page's state answers 200 within a second."""
    url = f"http://127.0.0.1:{port}/api/state?token={TOKEN}"
    t0 = time.monotonic()
    with urllib.request.urlopen(url, timeout=5) as resp:
        assert resp.status == 200 and "knob" in json.loads(resp.read())
    assert time.monotonic() - t0 < 1.0


def _exchange(port: int, data: bytes, timeout_s: float) -> bytes:
    """Send ``data`` on a fresh connection; everything the server answers until it closes or
    ``timeout_s`` passes (then the AssertionError says the connection hung)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        with contextlib.suppress(OSError):  # closed while we sent: an answer may be there
            sock.sendall(data)
        chunks = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            except OSError:
                return b"".join(chunks)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            if b"\r\n\r\n" in b"".join(chunks):  # a whole head: the status line is known
                sock.settimeout(0.5)
        head = b"".join(chunks)
        assert head.startswith(b"HTTP/1.1 "), f"no answer within {timeout_s} s to {data[:120]!r}"
        return head


TOKEN_CHARS = st.text(st.characters(codec="ascii", exclude_characters="\r\n"), max_size=40)
HEADER = st.tuples(
    st.one_of(st.sampled_from(["Host", "Content-Length", "Transfer-Encoding", "Upgrade",
                               "Connection", "Authorization", "Cookie"]), TOKEN_CHARS),
    st.one_of(TOKEN_CHARS, st.sampled_from(["-1", "2199023255552", "chunked", "websocket",
                                            "x" * 70_000, "9" * 40])),
)  # fmt: skip
REQUEST = st.builds(
    lambda method, path, version, headers, body, junk: junk
    or (
        f"{method} {path} {version}\r\n".encode(errors="replace")
        + b"".join(f"{k}: {v}\r\n".encode(errors="replace") for k, v in headers)
        + b"\r\n"
        + body
    ),
    method=st.one_of(st.sampled_from(["GET", "POST", "PUT", "DELETE", "OPTIONS", "GE T"]),
                     TOKEN_CHARS),
    path=st.one_of(st.sampled_from(["/", "/api/state", "/api/frame.jpg", "/ws", "/static/..%2f..",
                                    "/static/../../etc/passwd", f"/api/state?token={TOKEN}",
                                    "/%zz", "*", "/" + "a" * 70_000]), TOKEN_CHARS),
    version=st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/9.9", "", "HTTP/1.1 extra"]),
    headers=st.lists(HEADER, max_size=6),
    body=st.binary(max_size=256),
    junk=st.one_of(st.just(b""), st.binary(min_size=1, max_size=2048)),
)  # fmt: skip


@SETTINGS
@hypothesis.given(request=REQUEST)
def test_tune_http_answers_every_generated_request(tune: Any, request: bytes) -> None:
    """A 4xx (or a 2xx for a request that happens to be valid) or a close; never a 5xx or a
    hang; the page keeps being served."""
    _count("tune page HTTP", "cases")
    head = _exchange(tune.port, request, timeout_s=HEAD_TIMEOUT_S + 3.0)
    if head:
        status = int(head.split(b" ", 2)[1])
        assert status < 500 or status == 503, f"{status} for {request[:200]!r}:\n{head[:400]!r}"
    _state_ok(tune.port)
    _count("tune page HTTP", "survived")


def test_tune_slowloris_is_cut_off_while_others_are_served(tune: Any) -> None:
    """Thirty connections trickling a request head: each is answered 408 and closed after the
    head deadline, and the page is served all along."""
    _count("tune page slowloris", "cases")
    socks = [socket.create_connection(("127.0.0.1", tune.port), timeout=5) for _ in range(30)]
    for s in socks:
        s.sendall(b"GET /api/state HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    t0 = time.monotonic()
    closed: dict[int, bytes] = {}
    while len(closed) < len(socks) and time.monotonic() - t0 < HEAD_TIMEOUT_S + 5:
        for i, s in enumerate(socks):
            if i in closed:
                continue
            try:
                s.sendall(b"X-Slow: 1\r\n")
                s.settimeout(0.01)
                data = s.recv(4096)
                if data or data == b"":
                    closed[i] = data
            except TimeoutError:
                pass
            except OSError:
                closed[i] = b""
        _state_ok(tune.port)
        time.sleep(0.1)
    for s in socks:
        s.close()
    assert len(closed) == len(socks), f"{len(socks) - len(closed)} slow connections still open"
    assert all(d.startswith(b"HTTP/1.1 408") for d in closed.values() if d), closed
    assert time.monotonic() - t0 < HEAD_TIMEOUT_S + 5
    _count("tune page slowloris", "survived")


def _page(port: int) -> Any:
    from websockets.sync.client import connect

    url = f"ws://127.0.0.1:{port}/ws?token={TOKEN}"
    ws = connect(url, open_timeout=10, max_size=None).__enter__()
    hello = json.loads(ws.recv(timeout=10))
    assert hello["type"] == "hello"
    return ws


def _reply(ws: Any) -> dict[str, Any]:
    while True:
        msg = json.loads(ws.recv(timeout=10))
        if msg["type"] in ("ack", "error"):
            return msg


JSON_TREES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20)),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)  # fmt: skip
COMMANDS = st.fixed_dictionaries(
    {"cmd": st.sampled_from(["set_gains", "setpoint", "step_test", "autotune", "save",
                             "load", "pause", "resume", "nope"])},
    optional={"kp": JSON_TREES, "ki": JSON_TREES, "value": JSON_TREES, "name": JSON_TREES,
              "path": st.sampled_from(["../../etc/passwd", "/tmp/x.yaml", "a" * 300])},
)  # fmt: skip
WS_MESSAGES = st.one_of(
    COMMANDS.map(json.dumps),
    JSON_TREES.map(lambda t: json.dumps(t, allow_nan=True)),
    st.text(max_size=200),
    st.binary(max_size=200),
    st.integers(4097, 200_000).map(lambda n: "x" * n),  # over the command limit / frame limit
)


@SETTINGS
@hypothesis.given(message=WS_MESSAGES)
def test_tune_websocket_answers_every_generated_message(tune: Any, message: Any) -> None:
    """An ack or an error for each message; a frame over the size limit closes that connection
    with 1009 (message too big), never 1011 (server error); another page keeps its acks."""
    from websockets.exceptions import ConnectionClosed

    _count("tune page WebSocket", "cases")
    bystander = _page(tune.port)
    try:
        ws = _page(tune.port)
        try:
            ws.send(message)
            reply = _reply(ws)
            assert reply["type"] in ("ack", "error")
        except ConnectionClosed as closed:
            code = closed.rcvd.code if closed.rcvd is not None else None
            assert code == 1009, f"closed with {code} for {str(message)[:200]!r}"
        finally:
            ws.close()
        bystander.send(json.dumps({"cmd": "nope"}))
        assert _reply(bystander)["type"] == "error"  # still served, and still refusing
    finally:
        bystander.close()
    _state_ok(tune.port)
    _count("tune page WebSocket", "survived")


# ---- the policy server ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def policy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """``embodied serve``'s server around a real checkpoint (a tiny state-only PDP trained on
    four reach_around demonstrations): its processor checks every request."""
    import policies
    from embodied.apps.route_task import collect_demonstrations
    from embodied.apps.serve import PolicyServer, server_metadata
    from policies.diffusion.training_pdp import train_pdp
    from tests.diffusion.conftest import tiny_config

    root = tmp_path_factory.mktemp("serve-fuzz")
    collect_demonstrations(4, seed=0, out_dir=root / "demos")
    train_pdp(root / "demos", root / "policy", tiny_config(steps=2, batch_size=8, z_dim=0),
              progress=False, tensorboard=False)  # fmt: skip
    policy = policies.load(root / "policy")
    server = PolicyServer(
        policy,
        server_metadata(policy),
        port=0,
        max_message_bytes=1 << 20,
        handshake_timeout_s=HEAD_TIMEOUT_S,
    ).start()
    server.state_dim = policy.config.state_dim  # type: ignore[attr-defined]
    yield server
    server.stop()


def _client(server: Any) -> Any:
    from websockets.sync.client import connect

    from embodied.wire import unpackb

    ws = connect(server.url, max_size=None, open_timeout=10).__enter__()
    assert unpackb(ws.recv(timeout=10))["action_dim"] == 2
    ws.state_dim = server.state_dim
    return ws


def _served(ws: Any) -> None:
    from embodied.wire import packb, unpackb

    ws.send(packb({"state": np.zeros(ws.state_dim)}))
    reply = unpackb(ws.recv(timeout=10))
    assert reply["actions"].shape[1] == 2 and np.isfinite(reply["actions"]).all()


ARRAYS = st.fixed_dictionaries(
    {
        b"__ndarray__": st.just(True),
        b"data": st.binary(max_size=64),
        b"dtype": st.sampled_from([b"<f8", b"<f4", b"|u1", b"<c16", b"O", b"V8", b"zz", b""]),
        b"shape": st.one_of(
            st.lists(st.integers(-(2**40), 2**40), max_size=4),
            st.sampled_from([[2**20, 2**20], [-1], [0], "x"]),
        ),
    }
)  # openpi's msgpack_numpy array encoding, with absurd declared shapes and dtypes
OBSERVATIONS = st.dictionaries(
    st.sampled_from(["state", "prompt", "observation/image", "embodied/op", "embodied/seed",
                     "embodied/knobs", "x"]),
    st.one_of(JSON_TREES, ARRAYS, st.binary(max_size=64)),
    max_size=4,
)  # fmt: skip


def _pack_raw(tree: Any) -> bytes:
    import msgpack

    return bytes(msgpack.packb(tree, use_bin_type=True))


POLICY_MESSAGES = st.one_of(
    OBSERVATIONS.map(_pack_raw),
    JSON_TREES.map(_pack_raw),
    st.binary(max_size=512),
    st.text(max_size=100),
    st.integers((4 << 20) + 1, (4 << 20) + 4096).map(lambda n: b"\x00" * n),  # over 4x the limit
)


@SETTINGS
@hypothesis.given(message=POLICY_MESSAGES)
def test_policy_server_answers_every_generated_message(policy_server: Any, message: Any) -> None:
    """An error text or an action for each request (the connection going on), or a 1009 close
    for a frame over 4x the limit; another client keeps being served."""
    from websockets.exceptions import ConnectionClosed

    _count("policy server", "cases")
    bystander = _client(policy_server)
    try:
        ws = _client(policy_server)
        try:
            ws.send(message)
            reply = ws.recv(timeout=10)
            if isinstance(reply, str):  # a refusal names the problem, not a traceback
                assert "Traceback" not in reply, reply[-600:]
            _served(ws)  # the same connection goes on
        except ConnectionClosed as closed:
            code = closed.rcvd.code if closed.rcvd is not None else None
            assert code == 1009, f"closed with {code} for {message[:120]!r}"
        finally:
            ws.close()
        _served(bystander)
    finally:
        bystander.close()
    _count("policy server", "survived")


def test_policy_server_cuts_off_slow_handshakes(policy_server: Any) -> None:
    """Twenty connections trickling their upgrade request are closed after the handshake
    deadline; a client connecting meanwhile is served."""
    _count("policy server slowloris", "cases")
    port = policy_server.port
    socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(20)]
    for s in socks:
        s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    ws = _client(policy_server)
    _served(ws)
    ws.close()
    t0 = time.monotonic()
    open_ = set(range(len(socks)))
    while open_ and time.monotonic() - t0 < HEAD_TIMEOUT_S + 5:
        for i in list(open_):
            try:
                socks[i].sendall(b"X-Slow: 1\r\n")
                socks[i].settimeout(0.01)
                if socks[i].recv(4096) == b"":
                    open_.discard(i)
            except TimeoutError:
                pass
            except OSError:
                open_.discard(i)
        time.sleep(0.1)
    for s in socks:
        s.close()
    assert not open_, f"{len(open_)} slow handshakes still open"
    _count("policy server slowloris", "survived")


def test_memory_stays_bounded_under_oversized_floods(tune: Any, policy_server: Any) -> None:
    """Two hundred oversized frames and heads against each server: resident memory grows by
    less than MEMORY_BOUND_MB (the flood is about 1 GB)."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    _count("memory under floods", "cases")
    before = _rss_mb()
    big = b"\x00" * (5 << 20)  # over the policy server's 4 MiB frame limit
    for _ in range(100):
        ws = connect(policy_server.url, max_size=None, open_timeout=10).__enter__()
        ws.recv(timeout=10)
        try:
            ws.send(big)
            ws.recv(timeout=10)
        except ConnectionClosed:
            pass
        ws.close()
        page = connect(f"ws://127.0.0.1:{tune.port}/ws?token={TOKEN}", open_timeout=10)
        page = page.__enter__()
        page.recv(timeout=10)
        try:
            page.send("x" * (5 << 20))
            while True:
                page.recv(timeout=10)
        except ConnectionClosed:
            pass
        page.close()
        _exchange(tune.port, b"GET / HTTP/1.1\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n", 5.0)
    grown = _rss_mb() - before
    TALLY["memory under floods"]["rss_growth_mb"] = round(grown)
    assert grown < MEMORY_BOUND_MB, f"resident memory grew {grown:.0f} MB"
    _state_ok(tune.port)
    _count("memory under floods", "survived")


# ---- the defects the generated cases found, kept as regression tests ----------------------------
def test_tune_websocket_binary_frame_gets_an_error_not_a_server_error(tune: Any) -> None:
    """Found by the generator (``message=b''``): starlette's ``receive_text`` raised KeyError
    on a binary frame and the page's connection dropped without a close frame."""
    ws = _page(tune.port)
    try:
        ws.send(b"")
        reply = _reply(ws)
        assert reply == {"type": "error", "message": "commands are JSON text frames"}
        ws.send(json.dumps({"cmd": "nope"}))
        assert _reply(ws)["type"] == "error"  # the same connection goes on
    finally:
        ws.close()


def test_policy_server_refuses_an_observation_without_state(policy_server: Any) -> None:
    """Found by the generator (``message=b'\\x80'``, an empty map): the PDP read
    ``obs['state']``, the KeyError's traceback was sent and the connection closed with 1011."""
    from embodied.wire import packb

    ws = _client(policy_server)
    try:
        for request, error in (
            ({}, "observation has no 'state'"),
            ({"state": "text"}, "'state' \\(str\\) is not a numeric vector"),
            ({"state": np.full(ws.state_dim, np.nan)}, "NaN or infinity"),
        ):
            ws.send(packb(request))
            reply = ws.recv(timeout=10)
            assert isinstance(reply, str) and re.search(error, reply), reply
            _served(ws)
    finally:
        ws.close()
