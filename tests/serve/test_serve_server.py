"""``embodied serve`` and ``--policy ws://``: against openpi's real client and upstream server,
equal to the in-process policy, and robust to bad requests, lost clients and many clients."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import policies
import sim
from embodied.apps.cli import app
from embodied.apps.serve import PolicyServer, ServeConfig, server_metadata
from embodied.chunking import ChunkingConfig
from embodied.contracts import Policy
from embodied.errors import CompatibilityError, ConfigError
from embodied.io import free_port
from embodied.loop import rollout
from embodied.wire import packb, unpackb
from policies.remote import RemotePolicy, RemotePolicyError
from tests.serve.conftest import LIBERO_INSTRUCTION, serve_subprocess

ROOT = Path(__file__).resolve().parents[2]


def openpi_libero_observation(seed: int = 0) -> dict[str, Any]:
    """What openpi's LIBERO client sends: 224 px frames (rotated 180 degrees), state 8, prompt."""
    rng = np.random.default_rng(seed)
    return {
        "observation/image": rng.integers(0, 256, (224, 224, 3), dtype=np.uint8),
        "observation/wrist_image": rng.integers(0, 256, (224, 224, 3), dtype=np.uint8),
        "observation/state": rng.normal(size=8),
        "prompt": LIBERO_INSTRUCTION,
    }


class Echo(Policy):
    """A test policy: the first two state dims as every row of a 3-row chunk (optionally slow
    or failing)."""

    action_dim = 2
    n_action_steps = 2

    def __init__(self, delay_s: float = 0.0, fail: bool = False) -> None:
        super().__init__()
        self.delay_s, self.fail = delay_s, fail

    def predict_action_chunk(self, obs: dict[str, Any]) -> np.ndarray:
        if self.fail:
            raise RuntimeError("policy exploded")
        time.sleep(self.delay_s)
        state = np.asarray(obs["state"], dtype=np.float64)
        if state.shape != (2,):
            raise CompatibilityError(f"state has shape {state.shape}, Echo takes (2,)")
        return np.tile(state, (3, 1))


@pytest.fixture
def echo_server() -> Iterator[PolicyServer]:
    server = PolicyServer(Echo(), port=0, max_message_bytes=1 << 20).start()
    yield server
    server.stop()


_free_port = free_port


# ---- against openpi's own code ----------------------------------------------------------------
# openpi-client 0.1.2 connects without a context manager, which websockets >= 14 warns about
OPENPI_CONNECT_WARNING = "ignore:connect\\(\\) must be used as a context manager:DeprecationWarning"


@pytest.mark.filterwarnings(OPENPI_CONNECT_WARNING)
def test_openpi_client_calls_embodied_serve(
    openpi_client: ModuleType, libero_pdp: Path, tmp_path: Path
) -> None:
    """openpi's WebsocketClientPolicy, unmodified, drives `embodied serve` with the keys its
    LIBERO client sends; the chunks equal the in-process policy's."""
    from openpi_client.websocket_client_policy import WebsocketClientPolicy

    port = _free_port()
    with serve_subprocess(libero_pdp, port):
        health = urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10)
        assert (health.status, health.read()) == (200, b"OK\n")
        client = WebsocketClientPolicy("127.0.0.1", port)
        meta = client.get_server_metadata()
        assert meta["action_dim"] == 7 and meta["n_action_steps"] == 4
        assert "observation/wrist_image" in meta["foreign_observation_keys"]
        answers = [client.infer(openpi_libero_observation(i)) for i in range(2)]
    local = policies.load(libero_pdp)
    local.reset()
    for i, answer in enumerate(answers):
        expected = local.fresh_chunk(local.adapt_observation(openpi_libero_observation(i)))
        assert answer["actions"].shape == (8, 7)
        np.testing.assert_allclose(answer["actions"], expected, atol=1e-5)
        assert answer["server_timing"]["infer_ms"] > 0
    assert "prev_total_ms" in answers[1]["server_timing"]  # as openpi's server reports it


def test_processor_maps_openpi_libero_keys(libero_pdp: Path) -> None:
    """The 180-degree rotation undone, the frame resized to the training size, state and
    prompt renamed; a missing key or a float frame is refused naming it."""
    policy = policies.load(libero_pdp)
    raw = openpi_libero_observation()
    obs = policy.adapt_observation(raw)
    assert sorted(obs) == ["image.agentview", "image.eye_in_hand", "instruction", "state"]
    assert obs["image.agentview"].shape == (32, 32, 3) and obs["instruction"] == LIBERO_INSTRUCTION
    # a frame at the training size is only un-rotated
    small = {**raw, "observation/image": raw["observation/image"][:32, :32]}
    np.testing.assert_array_equal(
        policy.adapt_observation(small)["image.agentview"],
        raw["observation/image"][:32, :32][::-1, ::-1],
    )
    with pytest.raises(CompatibilityError, match="lacks \\['image.eye_in_hand'\\]"):
        policy.adapt_observation({k: v for k, v in raw.items() if k != "observation/wrist_image"})
    with pytest.raises(CompatibilityError, match="float64 array"):
        policy.adapt_observation({**raw, "observation/image": np.zeros((224, 224, 3))})


def test_remote_policy_calls_the_upstream_openpi_server(
    openpi_server: ModuleType, libero_pdp: Path
) -> None:
    """Our client against upstream openpi's WebsocketPolicyServer (unmodified) wrapping our
    policy: the same actions as in process, compatibility checked from its metadata."""
    served = policies.load(libero_pdp)

    class Wrapped:  # openpi_client.base_policy.BasePolicy's interface
        def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
            return {"actions": served.fresh_chunk(served.adapt_observation(obs))}

        def reset(self) -> None:
            served.reset()

    meta = {k: v for k, v in server_metadata(served).items() if k != "embodied_protocol"}
    port = _free_port()
    upstream = openpi_server.WebsocketPolicyServer(Wrapped(), "127.0.0.1", port, meta)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    remote = _connect(f"ws://127.0.0.1:{port}")
    local = policies.load(libero_pdp)
    local.reset()
    for i in range(6):  # 6 steps: two chunks of n_action_steps 4
        obs = local.adapt_observation(openpi_libero_observation(i))
        np.testing.assert_allclose(remote.select_action(obs), local.select_action(obs), atol=1e-6)
    assert remote.metadata["action_dim"] == 7 and "embodied_protocol" not in remote.metadata
    env = sim.make("mujoco:reach_around")
    with pytest.raises(CompatibilityError, match="outputs 7-dim actions"):
        remote.check_compatible(env)  # from the metadata, before any step
    remote.close()


def _connect(url: str, **kw: Any) -> RemotePolicy:
    deadline = time.monotonic() + 30
    while True:
        try:
            return RemotePolicy(url, **kw)
        except RemotePolicyError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


# ---- remote equals in process -----------------------------------------------------------------
def test_remote_rollout_equals_in_process_with_history_seed_and_knob(reach_pdp: Path) -> None:
    """A PDP with a 2-step history and knob z: every step's action over the network equals the
    in-process one (observations recorded every step, episode seeds, knob values sent)."""
    served = policies.load(reach_pdp)
    assert served.history_steps == 2
    server = PolicyServer(served, server_metadata(served), port=0).start()
    try:
        remote = RemotePolicy(server.url)
        assert remote.history_steps == 2 and set(remote.knobs()) == {"z"}
        env = sim.make("mujoco:reach_around")
        for seed, z in ((3, None), (4, [0.8, -0.5])):
            local = policies.load(reach_pdp)
            for p in (local, remote):
                if z is not None:
                    p.set_knob("z", z)  # type: ignore[attr-defined]
            ep_local = rollout(env, local, seed=seed, max_steps=30)
            ep_remote = rollout(env, remote, seed=seed, max_steps=30)
            np.testing.assert_allclose(ep_remote.actions, ep_local.actions, atol=1e-9)
            assert (ep_remote.knobs["z"] == ep_local.knobs["z"]).all()
        remote.close()
    finally:
        server.stop()


def test_eval_cli_takes_a_remote_policy(reach_pdp: Path, tmp_path: Path) -> None:
    served = policies.load(reach_pdp)
    server = PolicyServer(served, server_metadata(served), port=0).start()
    try:
        runner = CliRunner()
        outs = {}
        for name, spec in (("local", str(reach_pdp)), ("remote", server.url)):
            result = runner.invoke(
                app,
                [
                    *[
                        "eval",
                        "--env",
                        "mujoco:reach_around",
                        "--episodes",
                        "2",
                        "--max-steps",
                        "20",
                    ],
                    "--policy",
                    spec,
                    "--out",
                    str(tmp_path / name),
                ],
            )
            assert result.exit_code == 0, result.output
            outs[name] = json.loads((tmp_path / name / "results.json").read_text())
        rows = [
            [(e["spec"]["seed"], e["success"], e["steps"], e["reward_sum"]) for e in o["episodes"]]
            for o in outs.values()
        ]
        assert rows[0] == rows[1] and len(rows[0]) == 2
    finally:
        server.stop()


# ---- bad input, lost and many clients ---------------------------------------------------------
def _raw(server: PolicyServer) -> Any:
    from websockets.sync.client import connect

    ws = connect(server.url, max_size=None).__enter__()  # a plain connection on websockets 12-17
    assert unpackb(ws.recv(timeout=10))["action_dim"] == 2
    return ws


def _ask(ws: Any, data: Any) -> Any:
    ws.send(data)
    reply = ws.recv(timeout=10)
    return reply if isinstance(reply, str) else unpackb(reply)


@pytest.mark.parametrize(
    ("request_", "error"),
    [
        (b"\xc1\x00", "not valid msgpack"),
        (packb([1, 2]), "is a map of observation keys, got list"),
        (packb({"state": np.zeros(3)}), "state has shape \\(3,\\)"),
        (packb({"observation/image": np.zeros((4, 4, 3))}), "does not read observation keys"),
        (packb({"state": np.zeros(2), "embodied/op": "dance"}), "unknown op 'dance'"),
        (packb({"state": np.zeros(2), "embodied/seed": 1, "embodied/x": 1}), "unknown keys"),
        (packb({"state": np.zeros(2), "embodied/knobs": {"alpha": 1.0}}), "Echo has no knobs"),
        (packb({"state": np.zeros(300_000)}), "over the limit of 1048576 bytes"),
        ("a text frame", "not text"),
    ],
    ids=[
        "not-msgpack",
        "not-a-map",
        "bad-shape",
        "foreign-keys",
        "bad-op",
        "bad-ext-key",
        "no-knobs",
        "too-big",
        "text",
    ],
)
def test_bad_requests_get_an_error_and_the_connection_goes_on(
    echo_server: PolicyServer, request_: Any, error: str
) -> None:
    import re

    ws = _raw(echo_server)
    reply = _ask(ws, request_)
    assert isinstance(reply, str) and re.search(error, reply), reply
    good = _ask(ws, packb({"state": np.array([0.5, -1.0])}))  # the same connection still works
    np.testing.assert_array_equal(good["actions"], [[0.5, -1.0]] * 3)
    ws.close()


def test_lost_failing_and_many_clients_do_not_stop_the_server() -> None:
    slow = PolicyServer(Echo(delay_s=0.3), port=0).start()
    failing = PolicyServer(Echo(fail=True), port=0).start()
    try:
        # a client that leaves mid-inference
        ws = _raw(slow)
        ws.send(packb({"state": np.zeros(2)}))
        ws.close()
        # a policy failure: the traceback as text, that connection closed (1011), as openpi does
        from websockets.exceptions import ConnectionClosedError

        ws = _raw(failing)
        assert "policy exploded" in _ask(ws, packb({"state": np.zeros(2)}))
        with pytest.raises(ConnectionClosedError) as closed:
            ws.recv(timeout=10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011
        # 10 clients at once, each its own answers
        errors: list[BaseException] = []

        def client(i: int) -> None:
            try:
                remote = RemotePolicy(slow.url)
                for k in range(3):
                    chunk = remote.predict_action_chunk({"state": np.array([i, k], dtype=float)})
                    np.testing.assert_array_equal(chunk, [[i, k]] * 3)
                remote.close()
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not errors, errors
        assert slow.requests >= 30
        deadline = time.monotonic() + 10
        while slow.connections and time.monotonic() < deadline:
            time.sleep(0.05)
        assert slow.connections == 0
    finally:
        slow.stop()
        failing.stop()


# ---- keys, hosts and the client's errors ------------------------------------------------------
@pytest.mark.filterwarnings(OPENPI_CONNECT_WARNING)
def test_api_key_is_checked_as_openpis_client_sends_it(openpi_client: ModuleType) -> None:
    from openpi_client.websocket_client_policy import WebsocketClientPolicy
    from websockets.exceptions import InvalidStatus

    server = PolicyServer(Echo(), port=0, api_key="sesame-1234").start()
    try:
        with pytest.raises(InvalidStatus, match="401"):
            WebsocketClientPolicy("127.0.0.1", server.port)
        with pytest.raises(InvalidStatus, match="401"):
            WebsocketClientPolicy("127.0.0.1", server.port, api_key="wrong-key-99")
        client = WebsocketClientPolicy("127.0.0.1", server.port, api_key="sesame-1234")
        assert client.infer({"state": np.ones(2)})["actions"].shape == (3, 2)
        with pytest.raises(RemotePolicyError, match="HTTP 401.*api_key=KEY"):
            RemotePolicy(server.url)
        assert RemotePolicy(server.url, api_key="sesame-1234").action_dim == 2
        health = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=10)
        assert health.status == 200  # health needs no key, as openpi's
    finally:
        server.stop()


def test_binding_beyond_loopback_needs_a_key_or_insecure() -> None:
    with pytest.raises(ConfigError, match="host='0.0.0.0'.*--api-key"):
        ServeConfig(policy="zero", host="0.0.0.0")
    ServeConfig(policy="zero", host="0.0.0.0", insecure=True)
    ServeConfig(policy="zero", host="0.0.0.0", api_key="long-enough")
    argv = [sys.executable, "-m", "embodied", "serve", "--policy", "zero", "--host", "0.0.0.0"]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2 and "--insecure" in proc.stderr, proc.stderr
    from embodied.apps.serve import load_served

    with pytest.raises(ConfigError, match="reads the simulator's internal state"):
        load_served(ServeConfig(policy="expert", env="mujoco:reach_around"))


def test_client_errors_name_the_server_and_the_fix() -> None:
    port = _free_port()
    reach = (
        f"cannot reach policy server 127.0.0.1:{port}.*embodied serve --policy SPEC --port {port}"
    )
    with pytest.raises(RemotePolicyError, match=reach):
        RemotePolicy(f"ws://127.0.0.1:{port}", timeout_s=2)
    with pytest.raises(ConfigError, match="needs a host and a port"):
        RemotePolicy("ws://127.0.0.1")
    with pytest.raises(ConfigError, match="takes no options \\['speed'\\]"):
        policies.load(f"ws://127.0.0.1:{port}", speed=0.1)
    slow = PolicyServer(Echo(delay_s=1.0), port=0).start()
    try:
        remote = RemotePolicy(slow.url, timeout_s=0.2)
        with pytest.raises(RemotePolicyError, match="did not answer within 0.2 s.*timeout_s"):
            remote.predict_action_chunk({"state": np.zeros(2)})
    finally:
        slow.stop()


def test_client_reconnects_after_a_server_restart() -> None:
    server = PolicyServer(Echo(), port=0).start()
    port = server.port
    remote = RemotePolicy(server.url, reconnects=5)
    assert remote.predict_action_chunk({"state": np.ones(2)}).shape == (3, 2)
    server.stop()
    server = PolicyServer(Echo(), port=port).start()
    try:
        np.testing.assert_array_equal(
            remote.predict_action_chunk({"state": np.array([2.0, 3.0])}), [[2.0, 3.0]] * 3
        )
    finally:
        server.stop()
    with pytest.raises(RemotePolicyError, match="lost the connection.*5 reconnects failed"):
        remote.predict_action_chunk({"state": np.ones(2)})


def test_deploy_and_collect_take_a_remote_policy(tmp_path: Path) -> None:
    """`deploy` (dry run, safety filter on the robot's side) and `collect` with --policy ws://."""
    from embodied.apps.collect import CollectConfig, collect
    from embodied.apps.deploy import DeployConfig, deploy
    from embodied.datasets import Dataset
    from hardware.configuration_robot import DEFAULT_CONFIG, load_robot_config
    from hardware.env import RobotEnv
    from hardware.sim_robot import SimRobot

    robot_config = load_robot_config(DEFAULT_CONFIG)
    with SimRobot(robot_config) as robot:
        served = policies.load("sine", env=RobotEnv(robot, max_episode_steps=5))
    server = PolicyServer(served, server_metadata(served), port=0).start()
    try:
        local = deploy(
            robot_config, DeployConfig("sine", dry_run=True, max_seconds=0.2), tmp_path / "l"
        )
        remote = deploy(
            robot_config, DeployConfig(server.url, dry_run=True, max_seconds=0.2), tmp_path / "r"
        )
        assert remote.reason == local.reason == "max_steps" and remote.steps == local.steps
        np.testing.assert_allclose(
            Dataset(tmp_path / "r" / "episodes")[0].actions,
            Dataset(tmp_path / "l" / "episodes")[0].actions,
            atol=1e-9,
        )
    finally:
        server.stop()
    served = policies.load("zero", env=sim.make("mujoco:reach_around"))
    server = PolicyServer(served, server_metadata(served), port=0).start()
    try:
        cfg = CollectConfig(
            env="mujoco:reach_around", episodes=1, policy=server.url, keep_failures=True
        )
        result = collect(cfg, tmp_path / "demos")
        assert result.kept == 1
        assert not Dataset(tmp_path / "demos")[0].actions.any()  # the zero policy, over the wire
    finally:
        server.stop()


def test_eval_runs_chunks_asynchronously_with_simulated_latency(
    reach_pdp: Path, tmp_path: Path
) -> None:
    """`embodied eval --execution async --delay-steps 2 --rtc`: the loader wraps the policy,
    the result file records how it executed; a bad combination exits 2 naming the option."""
    argv = ["eval", "--policy", str(reach_pdp), "--env", "mujoco:reach_around", "--episodes", "1"]
    argv += ["--max-steps", "20", "--out", str(tmp_path / "a")]
    argv += ["--execution", "async", "--delay-steps", "2", "--rtc", "--starve", "zeros"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    out = json.loads((tmp_path / "a" / "results.json").read_text())
    assert '"rtc": true' in json.dumps(out) and '"delay_steps": 2' in json.dumps(out)
    bad = [
        sys.executable,
        "-m",
        "embodied",
        "eval",
        "--policy",
        "zero",
        "--env",
        "mujoco:reach_around",
    ]
    proc = subprocess.run([*bad, "--rtc"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2 and "--execution async" in proc.stderr, proc.stderr


def test_eval_executes_the_rows_asked_for(reach_pdp: Path, tmp_path: Path) -> None:
    """`embodied eval --execute-steps 2`: the result file records it; more rows than the
    policy's chunk holds exit 2 naming the option and the range."""
    argv = ["eval", "--policy", str(reach_pdp), "--env", "mujoco:reach_around", "--episodes", "1"]
    argv += ["--max-steps", "10", "--workers", "0"]
    result = CliRunner().invoke(app, [*argv, "--out", str(tmp_path / "a"), "--execute-steps", "2"])
    assert result.exit_code == 0, result.output
    out = json.loads((tmp_path / "a" / "results.json").read_text())
    assert '"execute_steps": 2' in json.dumps(out)
    bad = [sys.executable, "-m", "embodied", *argv, "--out", str(tmp_path / "b")]
    proc = subprocess.run(
        [*bad, "--execute-steps", "99"], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 2, proc.stderr
    assert "execute_steps=99" in proc.stderr and "--execute-steps between 1 and" in proc.stderr


def test_remote_policy_keeps_the_rows_asked_for_across_a_reconnect() -> None:
    """`--execute-steps 3` on a served policy survives the server's metadata sent again on a
    reconnect; without it the server's value, else the whole chunk, runs."""
    policy = RemotePolicy("ws://127.0.0.1:9", connect=False)
    assert policy.n_action_steps == 10**9  # no server value yet: the whole chunk
    policy._set_metadata({"action_dim": 2, "n_action_steps": 8})
    assert policy.n_action_steps == 8
    assert ChunkingConfig(execute_steps=3).wrap(policy) is policy
    policy._set_metadata({"action_dim": 2, "n_action_steps": 8})  # what a reconnect receives
    assert policy.n_action_steps == 3


def test_tune_steers_a_remote_policy_as_in_process(tmp_path: Path) -> None:
    """`embodied tune --policy ws://...`: the page's session drives a served PDP's knob z; the
    knob trace and the actions equal the in-process policy's."""
    from embodied.apps.route_task import collect_demonstrations
    from embodied.apps.tune import TuneConfig, TuneSession
    from embodied.apps.tune.task import build_task
    from policies.diffusion.training_pdp import train_pdp
    from tests.diffusion.conftest import tiny_config

    collect_demonstrations(4, seed=0, out_dir=tmp_path / "demos")
    ckpt = tmp_path / "policy"
    cfg = tiny_config(steps=3, batch_size=8, z_dim=1)
    train_pdp(tmp_path / "demos", ckpt, cfg, progress=False, tensorboard=False)
    served = policies.load(ckpt)
    server = PolicyServer(served, server_metadata(served), port=0).start()
    try:
        episodes = []
        for spec in (str(ckpt), server.url):
            tune = TuneConfig(
                env_id="mujoco:reach_around",
                policy=spec,
                knob="z",
                setpoint=0.05,
                pace=False,
                hold=False,
                out_dir=tmp_path / "tune",
            )
            session = TuneSession(build_task(tune, camera=False), tune)
            episodes.append(session.run_episode(seed=3))
    finally:
        server.stop()
    local, remote = episodes
    assert len(remote.actions) == len(local.actions) > 10
    np.testing.assert_allclose(remote.actions, local.actions, atol=1e-9)
    np.testing.assert_allclose(remote.knobs["z"], local.knobs["z"], atol=1e-12)
    assert np.ptp(local.knobs["z"]) > 0  # the PID moved the knob: steering reached the server
