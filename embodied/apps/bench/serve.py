"""``embodied bench serve``: loopback round trip of a served policy, ours against openpi's.

Each server runs in its own process on 127.0.0.1 and serves the same policy
(:class:`~embodied.apps.bench._serve_target.ConstantChunk`: a 50 x 7 chunk, no compute, so the
time is the transport's). One client (a plain websocket sending the same bytes to both) sends
openpi's LIBERO observation: two 224 x 224 x 3 uint8 frames, an 8-dim state and a prompt; the
servers are called alternately, request by request, in one run.

Figures (ms): ``rtt_ms_p50.*`` / ``rtt_ms_p99.*`` with ``*`` one of

* ``in_process``: the floor, the policy called in this process (adapt + chunk; no transport);
* ``ours``: ``embodied serve``'s server (:class:`embodied.apps.serve.PolicyServer`);
* ``openpi``: upstream openpi's ``WebsocketPolicyServer`` (``../shared/openpi/src``, needs
  ``openpi-client``); an ``error`` row when it cannot start;
* ``remote_policy``: our whole client path (:class:`policies.remote.RemotePolicy` -> ours).

``rtt_p50_ratio`` / ``rtt_p99_ratio``: ours / openpi (issue 39's goal: <= 1.0).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from embodied.apps.bench._serve_target import ConstantChunk
from embodied.io import free_port
from embodied.wire import packb, unpackb

OPENPI_SRC = Path(__file__).resolve().parents[3].parent / "shared" / "openpi" / "src"


def observation() -> dict[str, Any]:
    """openpi's LIBERO client observation: two 224 px frames, state 8, prompt."""
    rng = np.random.default_rng(0)
    return {
        "observation/image": rng.integers(0, 256, (224, 224, 3), dtype=np.uint8),
        "observation/wrist_image": rng.integers(0, 256, (224, 224, 3), dtype=np.uint8),
        "observation/state": rng.normal(size=8),
        "prompt": "pick up the ketchup and place it in the basket",
    }


def _start(kind: str) -> tuple[subprocess.Popen[bytes], Any]:
    from websockets.sync.client import connect

    port = free_port()
    env = dict(os.environ)
    if kind == "openpi":
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(OPENPI_SRC), env.get("PYTHONPATH")]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "embodied.apps.bench._serve_target", kind, str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            ws = connect(f"ws://127.0.0.1:{port}", compression=None, max_size=None).__enter__()
            unpackb(ws.recv(timeout=10))  # type: ignore[arg-type]  # the metadata (bytes)
            return proc, ws
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                err = proc.stderr.read().decode()[-600:] if proc.stderr else ""
                raise RuntimeError(f"{kind} server did not start: {err}") from None
            time.sleep(0.1)


def _pct(samples: list[float]) -> dict[str, float]:
    arr = np.asarray(samples)
    return {"p50": float(np.percentile(arr, 50)), "p99": float(np.percentile(arr, 99))}


def run(quick: bool = False) -> dict[str, Any]:
    """Round trips per server, interleaved; see the module docstring."""
    from policies.remote import RemotePolicy

    n = 60 if quick else 600
    obs = observation()
    data = packb(obs)
    policy = ConstantChunk()
    times: dict[str, list[float]] = {
        "in_process": [],
        "ours": [],
        "openpi": [],
        "remote_policy": [],
    }
    servers: dict[str, tuple[subprocess.Popen[bytes], Any]] = {}
    errors: dict[str, str] = {}
    for kind in ("ours", "openpi"):
        try:
            servers[kind] = _start(kind)
        except (RuntimeError, OSError) as exc:
            errors[kind] = str(exc)
    remote = RemotePolicy(f"ws://127.0.0.1:{servers['ours'][1].remote_address[1]}")
    try:
        for i in range(n + 10):  # 10 warm-up rounds
            t0 = time.perf_counter()
            policy.fresh_chunk(policy.adapt_observation(unpackb(data)))
            t1 = time.perf_counter()
            rtt = {"in_process": t1 - t0}
            for kind, (_, ws) in servers.items():
                t0 = time.perf_counter()
                ws.send(data)
                reply = unpackb(ws.recv(timeout=30))
                rtt[kind] = time.perf_counter() - t0
                assert reply["actions"].shape == (50, 7)
            t0 = time.perf_counter()
            remote.predict_action_chunk(obs)
            rtt["remote_policy"] = time.perf_counter() - t0
            if i >= 10:
                for k, v in rtt.items():
                    times[k].append(v * 1e3)
    finally:
        remote.close()
        for proc, ws in servers.values():
            ws.close()
            proc.kill()
            proc.wait()
    out: dict[str, Any] = {"requests": n, "request_bytes": len(data)}
    for kind, samples in times.items():
        if samples:
            pct = _pct(samples)
            out.setdefault("rtt_ms_p50", {})[kind] = pct["p50"]
            out.setdefault("rtt_ms_p99", {})[kind] = pct["p99"]
    if "openpi" in servers:
        out["rtt_p50_ratio"] = out["rtt_ms_p50"]["ours"] / out["rtt_ms_p50"]["openpi"]
        out["rtt_p99_ratio"] = out["rtt_ms_p99"]["ours"] / out["rtt_ms_p99"]["openpi"]
    for kind, message in errors.items():
        out.setdefault("error", {})[kind] = message
    return out
