"""The latency experiment at a tiny budget: every cell runs, figures are consistent."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from embodied.apps.lab.latency import LatencyConfig, markdown, run_experiment
from embodied.errors import ConfigError


def test_latency_experiment_runs_every_cell(tmp_path: Path) -> None:
    cfg = LatencyConfig(
        delays=(0, 4),
        episodes=2,
        training_seeds=(0,),
        demonstrations=4,
        train_steps=20,
        horizon=8,
        n_action_steps=4,
    )
    res = run_experiment(cfg, tmp_path)
    assert set(res["cells"]) == {f"{m}@{d}" for m in ("sync", "async", "rtc") for d in (0, 4)}
    for cell in res["cells"].values():
        assert cell["n"] == 2 and 0 <= cell["wilson95"][0] <= cell["success"] <= cell["wilson95"][1]
    # synchronous execution without delay never misses a period; with 4 steps it waits 4 per chunk
    assert res["cells"]["sync@0"]["missed_periods"] == 0
    assert res["cells"]["sync@4"]["missed_periods"] >= 4
    # asynchronous: only the first chunk is waited for (the delay fits in half a chunk)
    assert res["cells"]["async@4"]["missed_periods"] == pytest.approx(4)
    assert math.isfinite(res["cells"]["rtc@4"]["boundary_jump"])
    assert (tmp_path / "latency.png").stat().st_size > 0
    assert "| rtc |" in (tmp_path / "latency.md").read_text() == markdown(res)
    with pytest.raises(ConfigError, match=r"methods\[0\]='bidirectional' must be one of"):
        LatencyConfig(methods=("bidirectional",))
    with pytest.raises(ConfigError, match="eval_seed=10 may overlap"):
        LatencyConfig(eval_seed=10)


def test_visuomotor_latency_cells_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """arm_reach with two cameras (the camera arm recipe) at a tiny budget; a rerun reuses the
    finished cells and refuses a folder of another configuration."""
    import json

    from embodied.apps.lab import latency

    cfg = LatencyConfig(
        env="mujoco:arm_reach",
        delays=(2,),
        methods=("sync", "rtc"),
        episodes=1,
        training_seeds=(0,),
        demonstrations=2,
        train_steps=3,
        horizon=8,
        n_action_steps=4,
        cameras=("front", "top"),
        image_size=32,
        exclude_state=("ee_vx", "ee_vy", "ee_vz"),
    )
    res = run_experiment(cfg, tmp_path)
    assert set(res["cells"]) == {"sync@2", "rtc@2"}
    saved = json.loads((tmp_path / "policy_seed0" / "config.json").read_text())
    assert saved["vision"]["cameras"] == ["front", "top"]
    assert saved["vision"]["crop_shape"] == [24, 24] and saved["n_obs_steps"] == 1
    seen = [saved["state_names"][i] for i in saved["obs_dims"]]
    assert "ee_vx" not in seen and len(seen) == saved["state_dim"] - 3
    assert sorted(p.name for p in (tmp_path / "cells").glob("*@*.json")) == [
        "rtc@2_seed0.json",
        "sync@2_seed0.json",
    ]

    def no_rollouts(*args: object, **kwargs: object) -> None:
        raise AssertionError("a finished cell was rolled out again")

    monkeypatch.setattr(latency, "run_cell", no_rollouts)
    assert run_experiment(cfg, tmp_path)["cells"] == res["cells"]
    with pytest.raises(ConfigError, match="another latency configuration"):
        run_experiment(replace(cfg, episodes=2), tmp_path)


def test_a_killed_policy_training_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A training killed after its step-0 checkpoint has weights on disk but is unfinished: the
    rerun resumes it instead of evaluating the half-trained policy (found in a real run)."""
    import json

    from embodied.apps.lab.latency import train_policies
    from policies.diffusion import training_pdp

    cfg = LatencyConfig(
        delays=(0,), episodes=1, training_seeds=(0,), demonstrations=2, train_steps=12,
        horizon=8, n_action_steps=4,
    )  # fmt: skip
    real = training_pdp.train_pdp
    monkeypatch.setattr(  # the first run stops after 4 of its 12 steps, as a kill would
        training_pdp, "train_pdp", lambda *a, **k: real(*a, **{**k, "stop_after": 4})
    )
    (ckpt,) = train_policies(cfg, tmp_path)
    state = json.loads((ckpt / "train_state.json").read_text())
    assert (ckpt / "model.safetensors").exists() and state["step"] == 4
    assert not training_pdp.training_finished(ckpt)
    monkeypatch.setattr(training_pdp, "train_pdp", real)
    (ckpt,) = train_policies(cfg, tmp_path)
    assert json.loads((ckpt / "train_state.json").read_text())["step"] == 12
    assert training_pdp.training_finished(ckpt)
