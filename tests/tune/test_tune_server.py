"""The tuning server's access rules and WebSocket protocol, without a browser (real uvicorn)."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

TOKEN = "tok-0123456789"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from embodied.apps.tune import ServerConfig, TuneConfig, TuneSession
    from embodied.apps.tune.server import TuneServer
    from embodied.apps.tune.task import build_task

    cfg = TuneConfig(out_dir=tmp_path_factory.mktemp("tune-srv"))
    srv = TuneServer(
        TuneSession(build_task(cfg, camera=False), cfg), ServerConfig(port=0, token=TOKEN)
    )
    srv.start()
    yield srv
    srv.stop()


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes, Any]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read(), resp.headers
    except urllib.error.HTTPError as err:
        return err.code, err.read(), err.headers


def test_http_needs_the_token(server: Any) -> None:
    base = f"http://127.0.0.1:{server.port}"
    for path in ("/", "/api/state", "/api/frame.jpg", "/static/tune.js"):
        status, body, _ = _get(base + path)
        assert status == 401, path
        assert b"token" in body
        assert _get(f"{base}{path}?token=wrong-token-xx")[0] == 401
    status, body, headers = _get(f"{base}/?token={TOKEN}")
    assert status == 200 and b"embodied tune" in body
    cookie = headers["set-cookie"].split(";")[0]
    assert "HttpOnly" in headers["set-cookie"] and "SameSite=strict" in headers["set-cookie"]
    assert _get(base + "/static/tune.js", {"Cookie": cookie})[0] == 200
    status, body, _ = _get(base + "/api/state", {"Authorization": f"Bearer {TOKEN}"})
    assert status == 200 and json.loads(body)["env_id"] == "mujoco:arm_reach"


def test_websocket_needs_the_token_and_same_origin(server: Any) -> None:
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect
    from websockets.typing import Origin

    url = f"ws://127.0.0.1:{server.port}/ws"
    for bad in (url, f"{url}?token=wrong-token-xx"):
        with pytest.raises(InvalidStatus) as err:
            connect(bad, open_timeout=10).close()
        assert err.value.response.status_code == 403
    with pytest.raises(InvalidStatus):  # cross-site page trying to drive the robot
        connect(
            f"{url}?token={TOKEN}", origin=Origin("http://evil.example"), open_timeout=10
        ).close()
    with connect(f"{url}?token={TOKEN}", open_timeout=10) as ws:
        hello = json.loads(ws.recv(timeout=10))
        assert hello["type"] == "hello" and hello["state"]["knob"] == "alpha"


def _reply(ws: Any) -> dict[str, Any]:
    while True:
        msg = json.loads(ws.recv(timeout=10))
        if msg["type"] in ("ack", "error"):
            return msg


def test_websocket_refuses_bad_commands_before_the_controller(server: Any) -> None:
    from websockets.sync.client import connect

    session = server.session
    pid = session.live.controller("pid")
    before = (dict(session.live.params["pid"]), pid.config, session.setpoint)
    with connect(f"ws://127.0.0.1:{server.port}/ws?token={TOKEN}", open_timeout=10) as ws:
        for raw, needle in [
            ("not json", "not valid JSON"),
            (json.dumps([1, 2]), "must be a JSON object"),
            (json.dumps({"cmd": "gains", "params": {"kp": -1}}), "kp=-1.0 must be >= 0"),
            (json.dumps({"cmd": "gains", "params": {"kp": "abc"}}), "must be a number"),
            (json.dumps({"cmd": "setpoint", "value": 7}), "setpoint 7 outside"),
            ("x" * 5000, "exceeds"),
        ]:
            ws.send(raw)
            reply = _reply(ws)
            assert reply["type"] == "error" and needle in reply["message"], (raw[:40], reply)
        assert (dict(session.live.params["pid"]), pid.config, session.setpoint) == before
        ws.send(json.dumps({"cmd": "gains", "params": {"kp": 1.5}}))
        assert _reply(ws)["type"] == "ack"
        # the loop thread applies it between control steps
        for _ in range(200):
            msg = json.loads(ws.recv(timeout=10))
            if msg["type"] == "state" and msg["state"]["params"]["pid"]["kp"] == 1.5:
                break
        else:
            pytest.fail("the accepted gain change never reached the session")
        assert pid.config.kp == 1.5


def test_telemetry_streams_control_steps(server: Any) -> None:
    from websockets.sync.client import connect

    with connect(f"ws://127.0.0.1:{server.port}/ws?token={TOKEN}", open_timeout=10) as ws:
        samples: list[dict[str, Any]] = []
        while len(samples) < 10:
            msg = json.loads(ws.recv(timeout=10))
            if msg["type"] == "telemetry":
                samples += msg["samples"]
    keys = {
        "seq",
        "episode",
        "t",
        "measurement",
        "setpoint",
        "output",
        "knob",
        "action_norm",
        "progress",
        "success",
        "mode",
        "ctrl",
    }
    assert keys <= set(samples[0])
    seqs = [s["seq"] for s in samples]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert {"p", "i", "d", "error"} <= set(samples[-1]["ctrl"])  # the PID's own telemetry


def test_page_ships_every_asset_itself() -> None:
    from embodied.apps.tune.server import STATIC_DIR

    html = (STATIC_DIR / "index.html").read_text()
    refs = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert refs and all(r.startswith("static/") for r in refs), refs
    for ref in refs:  # static/<path> is served from STATIC_DIR/<path> (vendor/ included)
        assert (STATIC_DIR / ref.removeprefix("static/")).is_file(), ref
    for name in ("tune.js", "plot.js", "tune.css", "index.html"):
        text = (STATIC_DIR / name).read_text()
        assert not re.search(r"https?://", text), f"{name} references the internet"


@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A server without a token: what `embodied tune` runs by default on 127.0.0.1."""
    from embodied.apps.tune import ServerConfig, TuneConfig, TuneSession
    from embodied.apps.tune.server import TuneServer
    from embodied.apps.tune.task import build_task

    cfg = TuneConfig(out_dir=tmp_path_factory.mktemp("tune-open"))
    srv = TuneServer(TuneSession(build_task(cfg, camera=False), cfg), ServerConfig(port=0))
    srv.start()
    yield srv
    srv.stop()


def _ws_as(port: int, host: str, path: str = "/ws") -> Any:
    """Open the WebSocket as a page served from ``host`` whose name resolves to 127.0.0.1
    (DNS rebinding): the Host header and the Origin both name ``host``."""
    import socket

    from websockets.sync.client import connect
    from websockets.typing import Origin

    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    return connect(
        f"ws://{host}{path}", sock=sock, origin=Origin(f"http://{host}"), open_timeout=10
    )


def test_dns_rebinding_page_is_refused_without_token(open_server: Any) -> None:
    """A foreign Host (with a matching Origin) gets 403 on every page and on the WebSocket."""
    from websockets.exceptions import InvalidStatus

    port = open_server.port
    base = f"http://127.0.0.1:{port}"
    for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1.evil.example:{port}"):
        for path in ("/", "/api/state", "/api/frame.jpg", "/static/tune.js"):
            status, body, _ = _get(base + path, {"Host": host})
            assert status == 403, (host, path, status)
            assert b"not allowed" in body and b"--allow-host" in body, body
        with pytest.raises(InvalidStatus) as err:
            _ws_as(port, host).close()
        assert err.value.response.status_code == 403
    # the names of this machine still work, with and without a port
    for host in (
        f"127.0.0.1:{port}",
        f"localhost:{port}",
        f"[::1]:{port}",
        "LOCALHOST",
        "localhost.",
    ):
        status, body, _ = _get(base + "/", {"Host": host})
        assert status == 200 and b"embodied tune" in body, host
    with _ws_as(port, f"localhost:{port}") as ws:
        assert json.loads(ws.recv(timeout=10))["type"] == "hello"


def test_foreign_host_is_refused_even_with_the_token(server: Any) -> None:
    from websockets.exceptions import InvalidStatus

    port = server.port
    status, _, _ = _get(f"http://127.0.0.1:{port}/?token={TOKEN}", {"Host": f"evil.example:{port}"})
    assert status == 403
    with pytest.raises(InvalidStatus) as err:
        _ws_as(port, f"evil.example:{port}", f"/ws?token={TOKEN}").close()
    assert err.value.response.status_code == 403


def _scope(host: str | None) -> dict[str, Any]:
    headers = [] if host is None else [(b"host", host.encode("latin-1"))]
    return {"type": "http", "headers": headers}


def test_host_allow_list_takes_configured_names() -> None:
    from embodied.apps.tune import ServerConfig
    from embodied.apps.tune.server import host_ok
    from embodied.errors import ConfigError

    cfg = ServerConfig(allowed_hosts=("tune.lab", "Robot-PC.local", "10.0.0.7", "[fd00::5]"))
    allowed = cfg.host_allow_list()
    for host in ("tune.lab:8765", "TUNE.LAB", "robot-pc.local:80", "10.0.0.7:8765",
                 "[fd00::5]:8765", "127.0.0.1:1", "localhost", "[::1]"):  # fmt: skip
        assert host_ok(_scope(host), allowed), host
    assert not host_ok(_scope(None), allowed)  # no Host header at all
    for host in ("", "evil.example:8765", "tune.lab.evil.example", "10.0.0.8", "[::2]:8765",
                 "localhost:80@evil.example", "127.0.0.1:8765:1", "[::1"):  # fmt: skip
        assert not host_ok(_scope(host), allowed), host
    two = {"type": "http", "headers": [(b"host", b"localhost"), (b"host", b"evil.example")]}
    assert not host_ok(two, allowed)  # repeated Host header
    # the interface the server binds (the URL it prints) is allowed too
    assert host_ok(
        _scope("192.168.1.5:8765"), ServerConfig(host="192.168.1.5", token=TOKEN).host_allow_list()
    )
    for bad in ("http://tune.lab", "tune.lab:8765", "", "tune lab", "a/b", "*"):
        with pytest.raises(ConfigError, match="allowed host") as err:
            ServerConfig(allowed_hosts=(bad,))
        assert repr(bad) in str(err.value) and "fix:" in str(err.value)


def test_cli_allow_host_is_validated() -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "embodied", "tune", "--allow-host", "http://tune.lab"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "'http://tune.lab'" in proc.stderr and "fix:" in proc.stderr
