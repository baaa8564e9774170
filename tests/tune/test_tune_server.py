"""The tuning server's access rules and WebSocket protocol, without a browser (real uvicorn)."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TOKEN = "tok-0123456789"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from embodied.tune import ServerConfig, TuneConfig, TuneSession
    from embodied.tune.server import TuneServer
    from embodied.tune.task import build_task

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
            (json.dumps({"cmd": "gains", "params": {"kp": -1}}), "kp must be >= 0"),
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
    from embodied.tune.server import STATIC_DIR

    html = (STATIC_DIR / "index.html").read_text()
    refs = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert refs and all(r.startswith("static/") for r in refs), refs
    for ref in refs:
        assert (STATIC_DIR / Path(ref).name).is_file()
    for name in ("tune.js", "plot.js", "tune.css", "index.html"):
        text = (STATIC_DIR / name).read_text()
        assert not re.search(r"https?://", text), f"{name} references the internet"
