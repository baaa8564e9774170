"""Demonstration collection: dataset round trip, `embodied collect` CLI, `bench sim` shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner, Result

import policies
import sim
from embodied.apps.cli import app
from embodied.apps.collect import ExecutionNoise
from embodied.datasets import Dataset, DatasetWriter
from embodied.loop import rollout


def test_dataset_round_trip_keeps_arrays_and_metadata(tmp_path: Path) -> None:
    env = sim.make("mujoco:arm_reach", image_size=32)
    expert = policies.load("expert", env=env, speed=0.25)
    writer = DatasetWriter(tmp_path / "ds", env_args=env.describe())
    episodes = [rollout(env, expert, seed=s) for s in range(3)]
    for ep in episodes:
        writer.add(ep)
    ds = Dataset(tmp_path / "ds")
    assert len(ds) == 3 and ds.env_args["env_id"] == "mujoco:arm_reach"
    for ep, loaded in zip(episodes, ds, strict=True):
        assert np.array_equal(loaded.actions, ep.actions)
        assert np.array_equal(loaded.obs["state"], ep.observations["state"])
        assert np.array_equal(loaded.obs["image.front"], ep.observations["image.front"])
        assert loaded.obs["image.front"].shape == (len(ep), 32, 32, 3)
        assert loaded.instruction == ep.instruction and loaded.attrs["success"]
        assert loaded.attrs["meta"]["seed"] == ep.meta["seed"]


def _collect(runner: CliRunner, *args: str) -> Result:
    return runner.invoke(app, ["collect", *args], catch_exceptions=True)


def test_collect_cli_writes_resumes_and_records_expert_choices(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "demonstrations"
    res = _collect(
        runner,
        "--env",
        "mujoco:reach_around",
        "--episodes",
        "3",
        "--out",
        str(out),
        "--speed",
        "0.3:0.4",
        "--camera",
        "--image-size",
        "32",
    )
    assert res.exit_code == 0, res.output
    res = _collect(
        runner,
        "--env",
        "mujoco:reach_around",
        "--episodes",
        "2",
        "--out",
        str(out),
        "--route",
        "right",
        "--speed",
        "0.35",
        "--camera",
        "--image-size",
        "32",
    )
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.glob("episode_*.hdf5")) == [
        f"episode_{i:06d}.hdf5" for i in range(5)
    ]
    ds = Dataset(out)
    seeds = [ep.attrs["meta"]["seed"] for ep in ds]
    assert seeds == [0, 1, 2, 3, 4]  # resumed numbering and seeds, no repeats
    metas = [ep.attrs["meta"] for ep in ds]
    assert all(0.3 <= m["speed"] <= 0.4 for m in metas)
    assert [m["route"] for m in metas[3:]] == ["right", "right"]
    assert all(ep.attrs["success"] for ep in ds)
    assert ds[0].obs["image.top"].shape[1:] == (32, 32, 3)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["env_args"]["env_id"] == "mujoco:reach_around"


def test_collect_cli_refuses_bad_input(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "d"

    def collect(env: str, *args: str) -> Any:
        return _collect(runner, "--env", env, "--episodes", "1", "--out", str(out), *args)

    res = collect("mujoco:nope")
    assert res.exit_code != 0 and "reach_around" in str(res.exception)
    res = collect("mujoco:reach_around", "--speed", "fast")
    assert res.exit_code != 0 and "--speed" in str(res.exception)
    # the zero policy never succeeds: give up after max attempts, keep nothing
    res = collect("mujoco:reach_around", "--policy", "zero", "--max-attempts", "1")
    assert res.exit_code != 0 and "only 0 of 1" in str(res.exception)
    assert not list(out.glob("episode_*.hdf5"))
    res = collect(
        "mujoco:reach_around", "--policy", "zero", "--max-attempts", "1", "--keep-failures"
    )
    assert res.exit_code == 0, res.output
    assert len(Dataset(out)) == 1 and not Dataset(out)[0].attrs["success"]
    res = collect("mujoco:arm_reach")
    assert res.exit_code != 0 and "different env_id" in str(res.exception)


def test_execution_noise_has_its_std_correlation_bounds_and_seed() -> None:
    spec = sim.make("mujoco:arm_reach", camera=False).action_spec
    half = (np.asarray(spec.high) - np.asarray(spec.low)) / 2
    zero = np.zeros(spec.dim)

    def draws(fraction: float, tau: float, seed: int, n: int = 20000) -> np.ndarray:
        noise = ExecutionNoise(spec, fraction, tau, dt=0.05)
        noise.seed(seed)
        noise.reset()
        return np.stack([noise(zero, {}) for _ in range(n)])

    iid, ar = draws(0.1, 0.0, 1), draws(0.1, 0.5, 1)
    for x in (iid, ar):  # 0.1 of the half-range: hardly ever clipped
        assert np.allclose(x.std(axis=0), 0.1 * half, rtol=0.1)
    lag1 = [np.corrcoef(x[:-1, 0], x[1:, 0])[0, 1] for x in (iid, ar)]
    assert abs(lag1[0]) < 0.05 and lag1[1] == pytest.approx(np.exp(-0.05 / 0.5), abs=0.03)
    big = draws(2.0, 0.0, 1, n=2000)  # clipped into the action range
    assert np.all(big >= np.asarray(spec.low)) and np.all(big <= np.asarray(spec.high))
    assert np.isclose(big, np.asarray(spec.high)).any()
    assert np.array_equal(draws(0.1, 0.5, 7, 50), draws(0.1, 0.5, 7, 50))
    assert not np.array_equal(draws(0.1, 0.5, 7, 50), draws(0.1, 0.5, 8, 50))


def test_collect_with_action_noise_labels_with_the_clean_expert_action(tmp_path: Path) -> None:
    out = tmp_path / "dart"
    args = ["--env", "mujoco:arm_reach", "--no-camera", "--episodes", "2", "--seed", "5"]
    args += ["--action-noise", "0.3", "--noise-time-constant", "0.5", "--out", str(out)]
    res = _collect(CliRunner(), *args)
    assert res.exit_code == 0, res.output
    ds = Dataset(out)
    env = sim.make("mujoco:arm_reach", camera=False)
    expert = policies.load("expert", env=env)
    noise = ExecutionNoise(env.action_spec, 0.3, 0.5, env.dt)
    seeds = [loaded.attrs["meta"]["seed"] for loaded in ds]
    for seed, loaded in zip(seeds, ds, strict=True):
        noise.seed(seed)
        ep = rollout(env, expert, seed=seed, safety=noise, record_images=False)
        # the label is what the expert asked for, the env got it with noise
        assert np.array_equal(loaded.actions, ep.raw_actions)
        assert np.array_equal(loaded.extras["executed_actions"], ep.actions)
        assert np.abs(loaded.extras["executed_actions"] - loaded.actions).mean() > 0.01
        assert loaded.attrs["meta"]["action_noise"] == {"std": 0.3, "time_constant_s": 0.5}
    res = _collect(CliRunner(), *args[:-1], str(tmp_path / "bad"), "--action-noise", "-1")
    assert res.exit_code != 0 and "action_noise" in str(res.exception)


def test_bench_sim_reports_every_task() -> None:
    from embodied.apps.bench.sim import bench_task

    row = bench_task("reach_around", steps=50, repeats=1, render_reps=2)
    for key in ("adapter_steps_per_s", "raw_steps_per_s", "overhead", "render_ms"):
        assert row[key] > 0
    assert row["overhead"] == pytest.approx(row["raw_steps_per_s"] / row["adapter_steps_per_s"])
