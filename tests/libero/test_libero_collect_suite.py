"""Collecting a LIBERO suite: one file per task, tasks in parallel workers, resumable."""

from __future__ import annotations

import os
from pathlib import Path

import h5py
import pytest

pytestmark = [pytest.mark.libero, pytest.mark.usefixtures("libero_assets")]

import embodied.apps.collect as collect_module  # noqa: E402
from embodied.apps.collect import CollectConfig, collect, libero_demo_path  # noqa: E402
from embodied.errors import ConfigError  # noqa: E402
from sim.libero.resources import ASSETS_ENV_VAR  # noqa: E402

TASKS = ["libero:libero_object:0", "libero:libero_object:5"]


def test_suite_collects_each_task_in_parallel_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # two tasks of the suite stand for its ten (the parent expands, the workers get one each)
    monkeypatch.setattr(collect_module, "collect_tasks", lambda config: list(TASKS))
    # a forkserver started before the assets were configured (as another test or an earlier
    # evaluation in the same process may have) keeps its old environment: the workers must
    # get the assets folder from the parent anyway (failed in CI before they did)
    from multiprocessing import forkserver

    assets = os.environ[ASSETS_ENV_VAR]
    forkserver._forkserver._stop()  # type: ignore[attr-defined]
    monkeypatch.delenv(ASSETS_ENV_VAR)
    forkserver.ensure_running()
    monkeypatch.setenv(ASSETS_ENV_VAR, assets)
    cfg = CollectConfig(
        env="libero:libero_object", episodes=1, seed=1000, init_states="sampled",
        image_size=32, workers=2,
    )  # fmt: skip
    seen: list[int] = []
    result = collect(cfg, tmp_path, on_attempt=lambda r: seen.append(r.kept))
    assert result.kept == 2 and seen[-1] == 2
    for task in TASKS:
        path = libero_demo_path(tmp_path, task)
        with h5py.File(path, "r") as f:
            assert f["data"].attrs["num_demos"] == 1
            assert f["data/demo_0/obs/agentview_rgb"].shape[1:] == (32, 32, 3)
    stamps = {p: p.stat().st_mtime_ns for p in tmp_path.glob("*.hdf5")}
    again = collect(cfg, tmp_path)  # every task's file is there: nothing is redone
    assert again.kept == 2 and again.attempts == 0
    assert {p: p.stat().st_mtime_ns for p in tmp_path.glob("*.hdf5")} == stamps


def test_the_suite_is_every_task() -> None:
    tasks = collect_module.collect_tasks(CollectConfig(env="libero:libero_object"))
    assert tasks == [f"libero:libero_object:{k}" for k in range(10)]
    one = collect_module.collect_tasks(CollectConfig(env="libero:libero_object:3"))
    assert one == ["libero:libero_object:3"]


def test_workers_are_for_libero_suites() -> None:
    with pytest.raises(ConfigError, match="workers=2"):
        CollectConfig(env="mujoco:reach_around", workers=2)
