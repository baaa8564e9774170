"""Demonstration collection: dataset round trip, `embodied collect` CLI, `bench sim` shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import policies
import sim
from embodied.apps.cli import app
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


def _collect(runner: CliRunner, *args: str) -> object:
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


def test_bench_sim_reports_every_task() -> None:
    from embodied.apps.bench.sim import bench_task

    row = bench_task("reach_around", steps=50, repeats=1, render_reps=2)
    for key in ("adapter_steps_per_s", "raw_steps_per_s", "overhead", "render_ms"):
        assert row[key] > 0
    assert row["overhead"] == pytest.approx(row["raw_steps_per_s"] / row["adapter_steps_per_s"])
