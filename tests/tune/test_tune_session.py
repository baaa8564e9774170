"""The tuning session on the built-in arm task: bumpless changes, pause/step, files, RL, CLI."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import controllers
from embodied.apps.tune import TuneConfig, TuneSession, experiments
from embodied.apps.tune.live_controller import LiveController
from embodied.apps.tune.session import default_builder
from embodied.apps.tune.task import build_task
from embodied.errors import ConfigError


def _session(tmp_path: Path, **kw: object) -> TuneSession:
    cfg = TuneConfig(out_dir=tmp_path, **kw)  # type: ignore[arg-type]
    return TuneSession(build_task(cfg, camera=False), cfg)


def test_gain_changes_and_mode_switches_are_bumpless() -> None:
    params = {
        "pid": {"kp": 1.0, "ki": 20.0, "output_min": -1.0, "output_max": 1.0},
        "fixed": {"value": 0.5},
    }
    live = LiveController(default_builder, params, neutral=0.0, mode="fixed", clamp=(-1.0, 1.0))
    dt = 0.05
    assert live.update(0.1, 0.15, dt) == 0.5
    live.set_mode("pid")  # takes over from the fixed 0.5
    assert live.update(0.1, 0.15, dt) == pytest.approx(
        0.5 + 1.0 * 0.05 + 20.0 * 0.05 * dt, abs=1e-9
    )
    outs = [live.update(0.12, 0.15, dt) for _ in range(5)]
    before = outs[-1]
    live.set_params("pid", {"kp": 4.0})  # same error: output continues, no jump of 3 * 0.03
    after = live.update(0.12, 0.15, dt)
    assert abs(after - before) < 0.05  # the integral step only (20 * 0.03 * 0.05 = 0.03)
    assert live.controller("pid").config.kp == 4.0  # type: ignore[attr-defined]
    # without bumpless transfer the same change jumps by (4 - 1) * 0.03 = 0.09 on top
    raw = controllers.make("pid", kp=1.0, ki=20.0, output_min=-1.0, output_max=1.0)
    raw.reset(output=0.5)  # type: ignore[call-arg]
    for _ in range(6):
        raw.update(0.12, 0.15, dt)
    b = raw.update(0.12, 0.15, dt)
    raw.set_gains(bumpless=False, kp=4.0)  # type: ignore[attr-defined]
    assert raw.update(0.12, 0.15, dt) - b > 0.1
    live.set_mode("off")
    assert live.update(0.0, 0.15, dt) == 0.0


def test_live_session_pause_step_resume_and_telemetry(tmp_path: Path) -> None:
    session = _session(tmp_path)
    session.start()
    try:
        _wait(lambda: len(session.telemetry_since(-1)) >= 5)
        session.submit({"cmd": "pause"})
        _wait(lambda: session.paused)
        time.sleep(0.3)
        n = len(session.telemetry_since(-1))
        time.sleep(0.4)
        assert len(session.telemetry_since(-1)) == n  # paused: no control steps
        session.submit({"cmd": "step"})
        _wait(lambda: len(session.telemetry_since(-1)) == n + 1)
        time.sleep(0.3)
        assert len(session.telemetry_since(-1)) == n + 1  # exactly one step
        session.submit({"cmd": "new_seed", "seed": 5})
        session.submit({"cmd": "resume"})
        _wait(lambda: session.seed == 5 and len(session.telemetry_since(-1)) > n + 5)
        s = session.telemetry_since(-1)[-1]
        assert s["mode"] == "pid" and s["setpoint"] == 0.15 and 0 <= s["progress"] <= 1
    finally:
        session.close()


def test_save_and_load_gains_round_trip(tmp_path: Path) -> None:
    session = _session(tmp_path)
    session.submit({"cmd": "gains", "params": {"kp": 0.7, "ki": 55}})
    session.submit({"cmd": "setpoint", "value": 0.2})
    session.submit({"cmd": "save", "name": "tuned"})
    ctrl = controllers.load(tmp_path / "tuned.yaml")  # the file `embodied eval/deploy` take
    assert (ctrl.config.kp, ctrl.config.ki) == (0.7, 55.0)  # type: ignore[attr-defined]
    from embodied.apps.deploy import steering_from_file  # `embodied deploy --controller tuned.yaml`

    steer = steering_from_file(tmp_path / "tuned.yaml")
    assert (steer.concept.name, steer.knob, steer.setpoint) == ("ee_speed", "alpha", 0.2)
    session.submit({"cmd": "gains", "params": {"kp": 3}})
    session.submit({"cmd": "setpoint", "value": 0.1})
    session.submit({"cmd": "controller", "type": "off"})
    session.submit({"cmd": "load", "name": "tuned"})
    assert session.live.mode == "pid" and session.live.params["pid"]["kp"] == 0.7
    assert session.live.controller("pid").config.ki == 55.0  # type: ignore[attr-defined]
    assert session.setpoint == 0.2
    with pytest.raises(ConfigError, match="not allowed"):
        session.submit({"cmd": "load", "name": "../tuned"})
    session.submit({"cmd": "load", "name": "absent"})
    _, events = session.events_since(0)
    assert events[-1]["type"] == "error" and "no gains file 'absent.yaml'" in events[-1]["message"]
    session.submit({"cmd": "controller", "type": "off"})
    session.submit({"cmd": "save", "name": "nothing"})
    assert "nothing to save" in session.events_since(0)[1][-1]["message"]
    assert not (tmp_path / "nothing.yaml").exists()


def test_rl_controller_drives_the_arm_from_the_page_command(tmp_path: Path) -> None:
    from controllers.rl import MLPActor, RLController, RLControllerConfig

    # an RL-format actor with hand-set weights: delta alpha = 0.2 tanh(2 e / 0.1 m/s)
    state = {
        "hidden.0.weight": np.array([[2.0, 0, 0, 0, 0]], np.float32),
        "hidden.0.bias": np.zeros(1, np.float32),
        "out.weight": np.array([[1.0]], np.float32),
        "out.bias": np.zeros(1, np.float32),
    }
    rl = RLController(RLControllerConfig(hidden_sizes=(1,)), MLPActor(state))
    controllers.save(rl, tmp_path / "rl_speed.yaml")
    session = _session(tmp_path, setpoint=0.2, hold=False)  # episodes end at the target
    session.submit({"cmd": "controller", "type": "rl", "path": "rl_speed.yaml"})
    assert session.live.mode == "rl"
    ep = session.run_episode(pace=False)
    assert ep.success
    assert np.mean(ep.measurements[-8:]) == pytest.approx(0.2, abs=0.02)
    assert np.all(np.abs(ep.knobs["alpha"]) <= 1.0)


def test_step_test_and_autotune_improve_on_default_gains(tmp_path: Path) -> None:
    session = _session(tmp_path)
    base = experiments.step_test(session, 0.08, 0.15)
    assert base["start_settled"] and base["acceptable"]  # stepped from a settled start
    assert base["rise_time_s"] > 0.3  # the default gains are sluggish on this plant
    tuned = experiments.autotune(session, 0.08, 0.15, budget=5)
    assert tuned["score"] <= tuned["baseline_score"]
    chosen = [c for c in tuned["candidates"] if c["kp"] == tuned["proposal"]["kp"]
              and c["ki"] == tuned["proposal"]["ki"]]  # fmt: skip
    assert chosen[0]["acceptable"]
    assert session.live.params["pid"]["kp"] == 1.0  # proposals are not applied by themselves
    session.submit({"cmd": "apply_proposal"})
    after = experiments.step_test(session, 0.08, 0.15)
    assert after["score"] == pytest.approx(tuned["score"])
    assert after["overshoot_pct"] <= session.config.max_overshoot_pct
    assert math.isfinite(after["settling_time_s"])
    assert (
        json.loads((tmp_path / "last_autotune.json").read_text())["proposal"] == tuned["proposal"]
    )


def test_autotune_never_proposes_an_unsettled_or_over_limit_loop(tmp_path: Path) -> None:
    """From aggressive gains with a strict overshoot limit: a candidate with a lower IAE that
    overshoots more than the limit is not preferred; with none acceptable there is no proposal."""
    session = _session(tmp_path, max_overshoot_pct=0.5)
    session.live.set_params("pid", {"kp": 8.0, "ki": 400.0})
    res = experiments.autotune(session, 0.08, 0.15, budget=4)
    rows = res["candidates"]
    assert all(c["acceptable"] == (c["overshoot_pct"] is not None and c["overshoot_pct"] <= 0.5
               and c["settling_time_s"] is not None) for c in rows)  # fmt: skip
    if res["proposal"] is None:
        assert not any(c["acceptable"] for c in rows)
    else:
        best = min((c for c in rows if c["acceptable"]), key=lambda c: c["score"])
        assert res["proposal"] == {"kp": best["kp"], "ki": best["ki"]}
    assert any(not c["acceptable"] for c in rows)  # the start gains overshoot beyond 0.5 %


def test_cli_step_test_prints_the_page_figures(tmp_path: Path) -> None:
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    exe = [sys.executable, "-m", "embodied", "tune", "--out", str(tmp_path), "--json"]
    out = subprocess.run(
        [*exe, "--step-test"], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)["step_test"]
    assert res["from"] == 0.08 and res["to"] == 0.15 and res["params"]["kp"] == 1.0
    assert res["rise_time_s"] > 0 and res["overshoot_pct"] >= 0
    bad = subprocess.run(
        [*exe, "--host", "0.0.0.0"], capture_output=True, text=True, env=env, timeout=60
    )
    assert bad.returncode == 2 and "host='0.0.0.0' is refused without a token" in bad.stderr


def _wait(cond: object, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail("condition not reached in time")
        time.sleep(0.02)


def test_experiments_lock_the_controls_and_can_be_stopped(tmp_path: Path) -> None:
    session = _session(tmp_path)
    session.start()
    try:
        session.submit({"cmd": "autotune", "budget": 50, "from": 0.08, "to": 0.15})
        _wait(lambda: session.busy)
        with pytest.raises(ConfigError, match="refused: an experiment"):
            session.submit({"cmd": "gains", "params": {"kp": 9}})
        session.submit({"cmd": "stop_job"})
        _wait(lambda: not session.busy)
        assert session.live.params["pid"]["kp"] == 1.0  # restored after the search
        assert session.proposal is None
        _, events = session.events_since(0)
        assert [e["type"] for e in events if e["type"] in ("stopped", "error")] == ["stopped"]
        assert not session.paused  # live episodes resume
        session.submit({"cmd": "gains", "params": {"kp": 2}})  # controls are back
    finally:
        session.close()


def test_simc_autotune_fits_a_model_reports_margins_and_verifies(tmp_path: Path) -> None:
    """SIMC on the built-in task: a bump test gives an FOPDT model, the proposal comes with its
    gain and phase margins and is a loop the step test found acceptable (settled, within the
    overshoot limit), better than the default gains."""
    session = _session(tmp_path, autotune_method="simc")
    base = experiments.step_test(session, 0.08, 0.15)
    res = experiments.autotune(session, 0.08, 0.15, budget=4)
    assert res["method"] == "simc" and res["bump"]["start_settled"]
    m = res["model"]
    assert m["gain"] > 0 and m["tau_s"] > 0 and m["theta_s"] >= session.task.env.dt / 2
    assert res["proposal"] is not None
    chosen = res["candidates"][-1]
    assert chosen["acceptable"] and chosen["overshoot_pct"] <= session.config.max_overshoot_pct
    assert all(not c["acceptable"] for c in res["candidates"][:-1])  # the first acceptable wins
    assert chosen["margins"]["gain_margin"] > 2 and chosen["margins"]["phase_margin_deg"] > 45
    assert chosen["score"] < base["score"]
    assert session.live.params["pid"]["kp"] == 1.0  # not applied by itself
