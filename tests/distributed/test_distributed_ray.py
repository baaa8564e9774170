"""Ray evaluation backend and sweeps on a private local Ray instance bound to 127.0.0.1."""

from __future__ import annotations

import functools
import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from embodied.apps.evaluation import EvalConfig, EvalVariant, evaluate
from embodied.apps.evaluation.ray_backend import RayBackend
from embodied.apps.evaluation.sweep import SweepConfig, run_sweep
from tests.conftest import require

OUTCOME = ("success", "steps", "success_step", "reward_sum", "reason")


@pytest.fixture(scope="module")
def local_ray() -> Any:
    """One local Ray instance for the module (2 CPUs, no dashboard, 127.0.0.1 only)."""
    ray = require("ray")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        logging_level="WARNING",
        log_to_driver=False,
    )
    yield ray
    ray.shutdown()


def _outcomes(result: Any) -> list[tuple[Any, ...]]:
    return [tuple(getattr(e, k) for k in OUTCOME) for e in result.episodes]


def test_ray_backend_without_cluster_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """--address auto with no running cluster: an error naming the address and the fix.

    Ray's ``auto`` discovery is machine-wide (it scans every process for a GCS server and
    reads /tmp/ray's last-cluster file), so another suite's Ray on the same machine would be
    found; both finders are made to see no cluster, which is the case this test is about.
    """
    from embodied.errors import ConfigError

    ray = require("ray")
    from ray._private import services

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    # Ray calls find_gcs_addresses.cache_clear(), so the stand-in is cached too.
    monkeypatch.setattr(services, "find_gcs_addresses", functools.cache(lambda: []))
    monkeypatch.setattr(services, "find_bootstrap_address", lambda temp_dir: None)
    assert not ray.is_initialized()
    with pytest.raises(ConfigError, match="'auto'") as info:
        RayBackend(workers=1, address="auto").connect()
    assert "ray start --head" in str(info.value)
    assert not ray.is_initialized()


def test_ray_eval_identical_to_serial(local_ray: Any) -> None:
    """Same grid on Ray actors and inline: identical per-episode outcomes, in grid order."""
    kw: dict[str, Any] = {"envs": ("mujoco:reach_around",), "episodes": 6, "seed": 3}
    events: list[str] = []
    par = evaluate(
        EvalConfig(**kw, workers=2, backend="ray"), "expert", lambda k, d: events.append(k)
    )
    ser = evaluate(EvalConfig(**kw, workers=0), "expert")
    assert _outcomes(par) == _outcomes(ser)
    assert [e.spec.index for e in par.episodes] == list(range(6))
    assert all(e.worker != os.getpid() and e.attempts == 1 for e in par.episodes)
    assert events.count("start") == events.count("done") == 6  # live progress, once each
    assert par.tasks[0].successes == ser.tasks[0].successes


def test_ray_killed_worker_episode_is_rerun(local_ray: Any) -> None:
    """SIGKILL the actor running episode 1 mid-episode: it is rerun once, nothing lost or doubled."""
    # A slow expert (0.02 m/s, ~10 s of sim time) with the camera on: an episode lasts
    # seconds, so the kill lands inside it however fast the machine is.
    slow = EvalVariant(name="slow", policy_kwargs={"speed": 0.02})
    kw: dict[str, Any] = {
        "envs": ("mujoco:arm_reach",),
        "episodes": 4,
        "seed": 0,
        "variants": (slow,),
    }
    events: list[tuple[str, dict[str, Any]]] = []
    killed: list[int] = []

    def on_event(kind: str, data: dict[str, Any]) -> None:
        events.append((kind, data))
        if kind == "start" and data["spec"].index == 1 and not killed:
            killed.append(data["pid"])  # camera on: an episode takes seconds; kill inside it
            threading.Timer(0.3, os.kill, (data["pid"], signal.SIGKILL)).start()

    par = evaluate(EvalConfig(**kw, workers=2, backend="ray", max_retries=2), "expert", on_event)
    died = [d for k, d in events if k == "worker_died"]
    assert [d["pid"] for d in died] == killed
    assert died[0]["spec"].index == 1
    assert [e.attempts for e in par.episodes] == [1, 2, 1, 1]
    assert all(e.error is None for e in par.episodes)
    assert par.episodes[1].worker != killed[0]
    assert sum(k == "done" for k, _ in events) == 4  # counted once each
    ser = evaluate(
        EvalConfig(**kw, workers=0, env_kwargs={"mujoco": {"camera": False}}), "expert"
    )  # rendering does not touch the physics
    assert _outcomes(par) == _outcomes(ser)


def test_ray_episode_error_is_raised_with_its_cause(local_ray: Any) -> None:
    """An episode that raises inside an actor stops the run with the original error."""
    from embodied.errors import UnknownNameError

    config = EvalConfig(
        envs=("mujoco:reach_around",),
        episodes=2,
        workers=2,
        backend="ray",
        preflight=False,
        env_kwargs={"mujoco": {"bogus_option": 1}},
    )
    with pytest.raises(UnknownNameError, match="bogus_option"):
        evaluate(config, "expert")


def test_ray_episode_that_raises_counts_as_a_failure(local_ray: Any) -> None:
    """A RuntimeError in an episode on a Ray actor: that episode fails (counted in n and in
    errors, reported with a ``failed`` event), the others run; as inline."""
    from tests.evaluation.test_evaluation_harness import RAISING_SEEDS, raises_runtime_error

    kw: dict[str, Any] = {"envs": ("mujoco:reach_around",), "episodes": 5}
    events: list[str] = []
    par = evaluate(
        EvalConfig(**kw, workers=2, backend="ray"),
        raises_runtime_error,
        lambda k, d: events.append(k),
    )
    bad = [e.spec.index for e in par.episodes if e.spec.seed in RAISING_SEEDS]
    assert bad == [1, 3] and [e.spec.index for e in par.episodes if e.error] == bad
    assert all("RuntimeError: policy broke on seed" in str(par.episodes[i].error) for i in bad)
    assert all(e.worker != os.getpid() and e.attempts == 1 for e in par.episodes)
    t = par.task("mujoco:reach_around")
    assert (t.n, t.successes, t.errors) == (5, 3, 2)
    assert (events.count("done"), events.count("failed")) == (3, 2)
    ser = evaluate(EvalConfig(**kw, workers=0), raises_runtime_error)
    assert _outcomes(par) == _outcomes(ser)


def test_sweep_on_ray_matches_inline_and_writes_table(local_ray: Any, tmp_path: Path) -> None:
    """PID gains x setpoints on Ray: one JSON + markdown table and one PNG; equal to inline."""
    kw: dict[str, Any] = {
        "env": "mujoco:arm_reach",
        "policy": "expert_speed_knob",
        "grid": {"kp": (0.5, 4.0), "setpoint": (0.08, 0.14)},
        "controller_params": {"ki": 50.0, "output_min": -1.0, "output_max": 1.0},
        "env_kwargs": {"camera": False},
        "episodes": 1,
        "max_steps": 40,
    }
    res = run_sweep(SweepConfig(**kw, workers=2, backend="ray", out=tmp_path))
    ref = run_sweep(SweepConfig(**kw, workers=0))
    assert [r["point"] for r in res.rows] == [
        {"kp": 0.5, "setpoint": 0.08},
        {"kp": 0.5, "setpoint": 0.14},
        {"kp": 4.0, "setpoint": 0.08},
        {"kp": 4.0, "setpoint": 0.14},
    ]
    for a, b in zip(res.rows, ref.rows, strict=True):
        assert a["tracking_rmse"] == pytest.approx(b["tracking_rmse"], rel=1e-9)
        assert a["mean_measurement"] == pytest.approx(b["mean_measurement"], rel=1e-9)
    # the controller acts: higher setpoint -> faster arm, and gains change the tracking error
    by = {(r["point"]["kp"], r["point"]["setpoint"]): r for r in res.rows}
    assert by[(4.0, 0.14)]["mean_measurement"] > by[(4.0, 0.08)]["mean_measurement"] + 0.02
    assert by[(0.5, 0.14)]["tracking_rmse"] != pytest.approx(by[(4.0, 0.14)]["tracking_rmse"])
    data = json.loads((tmp_path / "sweep.json").read_text())
    assert data["format"] == "embodied-sweep/1" and len(data["rows"]) == 4
    assert len(data["episodes"]) == 4
    md = (tmp_path / "sweep.md").read_text()
    assert md.count("\n| 0.5 |") == 2 and "tracking RMSE (m/s)" in md
    assert (tmp_path / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sweep_bad_input_names_value_and_fix() -> None:
    """Bad axes, a missing setpoint and an unknown controller gain are refused up front."""
    from embodied.apps.evaluation.sweep import parse_axis
    from embodied.errors import ConfigError

    assert parse_axis("kp=1,2.5,x") == ("kp", (1, 2.5, "x"))
    with pytest.raises(ConfigError, match="'kp'.*NAME=V1,V2"):
        parse_axis("kp")
    base: dict[str, Any] = {"env": "mujoco:arm_reach", "policy": "expert_speed_knob"}
    with pytest.raises(ConfigError, match="no setpoint") as info:
        SweepConfig(**base, grid={"kp": (1, 2)})
    assert "--setpoint" in str(info.value)
    with pytest.raises(ConfigError, match="setpoint values must be numbers"):
        SweepConfig(**base, grid={"setpoint": ("fast",)})
    with pytest.raises(ConfigError, match="kq"):
        run_sweep(
            SweepConfig(
                **base, grid={"kq": (1.0,)}, setpoint=0.1, workers=0, max_steps=5,
                env_kwargs={"camera": False},
            )
        )  # fmt: skip


def test_sweep_cli_local_backend(tmp_path: Path) -> None:
    """`embodied sweep` from the command line (local backend): table, JSON and plot."""
    from typer.testing import CliRunner

    from embodied.apps.cli import app

    res = CliRunner().invoke(
        app,
        ["sweep", "--env", "mujoco:arm_reach", "--policy", "expert_speed_knob",
         "--grid", "kp=0.5,2", "--setpoint", "0.1", "--set", "ki=50", "--set", "output_min=-1",
         "--set", "output_max=1", "--episodes", "1", "--max-steps", "20", "--workers", "0",
         "--env-arg", "camera=false", "--out", str(tmp_path)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "| 0.5 |" in res.stdout and "| 2 |" in res.stdout
    rows = json.loads((tmp_path / "sweep.json").read_text())["rows"]
    assert [r["point"]["kp"] for r in rows] == [0.5, 2]
    assert all(r["n"] == 1 and r["errors"] == 0 for r in rows)
    assert (tmp_path / "sweep.png").stat().st_size > 10_000


RAY_AUTH_PROBE = r"""
import json, os
import grpc
from ray.core.generated import gcs_service_pb2 as gcs, gcs_service_pb2_grpc as gcs_grpc
from ray.core.generated import node_manager_pb2 as nm, node_manager_pb2_grpc as nm_grpc
from embodied.apps.evaluation import EvalConfig, evaluate

probes = {}

def probe(kind, data):
    # runs while the backend's private instance is up: call its GCS and raylet directly
    if kind != "start" or probes:
        return
    import ray
    node = ray._private.worker.global_worker.node
    bearer = [("authorization", "Bearer " + os.environ.get("RAY_AUTH_TOKEN", ""))]
    calls = {
        "gcs": (node.gcs_address, lambda ch, md: gcs_grpc.NodeInfoGcsServiceStub(ch)
                .GetAllNodeInfo(gcs.GetAllNodeInfoRequest(), timeout=20, metadata=md)),
        "raylet": (f"{node.node_ip_address}:{node.node_manager_port}",
                   lambda ch, md: nm_grpc.NodeManagerServiceStub(ch)
                   .GetNodeStats(nm.GetNodeStatsRequest(), timeout=20, metadata=md)),
    }
    for name, (address, call) in calls.items():
        with grpc.insecure_channel(address) as channel:
            for suffix, metadata in (("without_token", None), ("with_token", bearer)):
                try:
                    call(channel, metadata)
                    probes[f"{name}_{suffix}"] = "OK"
                except grpc.RpcError as exc:
                    probes[f"{name}_{suffix}"] = exc.code().name

result = evaluate(
    EvalConfig(envs=("mujoco:reach_around",), episodes=2, workers=1, backend="ray"), "expert", probe
)
print(json.dumps({
    "probes": probes,
    "errors": [e.error for e in result.episodes],
    "env_after": {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")},
}))
"""


def test_private_ray_instance_refuses_rpcs_without_its_token(tmp_path: Path) -> None:
    """The backend's own Ray instance (its GCS and raylet listen beyond loopback) answers only
    RPCs carrying its token, even when the shell says ``RAY_AUTH_MODE=disabled``; the token is
    per instance (no file in ``~/.ray``) and the environment is restored afterwards."""
    import subprocess
    import sys

    require("ray")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(RAY_AUTH_MODE="disabled", HOME=str(tmp_path))  # e.g. left over in a user's shell
    proc = subprocess.run(
        [sys.executable, "-c", RAY_AUTH_PROBE],
        capture_output=True, text=True, timeout=300, env=env,
        cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["probes"] == {
        "gcs_without_token": "UNAUTHENTICATED",
        "gcs_with_token": "OK",
        "raylet_without_token": "UNAUTHENTICATED",
        "raylet_with_token": "OK",
    }, out
    assert out["errors"] == [None, None]  # the actors work under token authentication
    assert out["env_after"] == {"RAY_AUTH_MODE": "disabled", "RAY_AUTH_TOKEN": None}
    assert not (tmp_path / ".ray" / "auth_token").exists()
