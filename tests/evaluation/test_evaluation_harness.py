"""The evaluation harness on real MuJoCo tasks (and one LIBERO task): results, videos,
worker processes, a killed worker's episode rerun, and compatibility refusal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import imageio.v2 as imageio
import pytest

import policies
import sim
from embodied.apps.evaluation import EvalConfig, PolicyLoader, evaluate, wilson_interval
from embodied.contracts import Env, Policy
from embodied.errors import CompatibilityError

ROOT = Path(__file__).resolve().parents[2]


def arm_reach_random(env: Env) -> Policy:
    """A 4-dim policy (made for mujoco:arm_reach), whatever env it is given."""
    return policies.load("random", env=sim.make("mujoco:arm_reach"))


def test_inline_eval_writes_results_tables_and_video(tmp_path: Path) -> None:
    cfg = EvalConfig(
        envs=("mujoco:reach_around", "mujoco:arm_reach"),
        episodes=3,
        workers=0,
        out=tmp_path,
        video_episodes=(1,),
    )
    events: list[str] = []
    result = evaluate(cfg, "expert", on_event=lambda kind, data: events.append(kind))
    assert events.count("start") == events.count("done") == 6
    for env_id in ("mujoco:reach_around", "mujoco:arm_reach"):
        t = result.task(env_id)
        assert (t.n, t.successes) == (3, 3), t
        assert (t.ci_low, t.ci_high) == wilson_interval(3, 3)
    assert len(result.groups) == 2
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["versions"]["mujoco"] and data["versions"]["numpy"]
    assert data["policy"] == {"spec": "expert", "kwargs": {}}
    assert data["config"]["episodes"] == 3 and len(data["episodes"]) == 6
    assert set(data["envs"]) == {"mujoco:reach_around", "mujoco:arm_reach"}
    assert [e["spec"]["seed"] for e in data["episodes"][:3]] == [0, 1, 2]
    md = (tmp_path / "results.md").read_text()
    assert "| mujoco:arm_reach |" in md and "95% CI" in md and "3/3 (100.0%)" in md
    videos = data["files"]["videos"]
    assert len(videos) == 2 and all(v.endswith("__default__ep001.mp4") for v in videos)
    ep1 = next(e for e in data["episodes"] if e["video"] == videos[0])
    frames = imageio.mimread(tmp_path / videos[0])
    assert len(frames) == ep1["steps"] and frames[0].ndim == 3
    assert not list(tmp_path.rglob("*.tmp")) and not list(tmp_path.rglob("*partial*"))

    zero = evaluate(EvalConfig("mujoco:reach_around", episodes=2, workers=0, max_steps=15), "zero")
    t = zero.task("mujoco:reach_around")
    assert (t.successes, t.mean_steps) == (0, 15.0)
    assert zero.groups[0].mean_task_success == 0.0


def test_killed_worker_episode_is_rerun_not_lost() -> None:
    cfg = EvalConfig("mujoco:reach_around", episodes=6, workers=2, max_retries=1)
    killed: list[tuple[int, int]] = []
    died: list[dict[str, Any]] = []

    def on_event(kind: str, data: dict[str, Any]) -> None:
        if kind == "start" and data["spec"].index == 2 and not killed:
            os.kill(data["pid"], signal.SIGKILL)  # the worker holding episode 2 dies mid-episode
            killed.append((data["spec"].index, data["pid"]))
        elif kind == "worker_died":
            died.append(data)

    result = evaluate(cfg, PolicyLoader("expert", {"speed": 0.3}), on_event=on_event)
    assert killed and died and died[0]["pid"] == killed[0][1]
    assert died[0]["spec"].index == 2 and died[0]["exitcode"] == -signal.SIGKILL
    assert [r.spec.index for r in result.episodes] == list(range(6))
    assert [r.attempts for r in result.episodes] == [1, 1, 2, 1, 1, 1]
    assert all(r.error is None for r in result.episodes)
    assert result.episodes[2].worker != killed[0][1]
    assert len({r.worker for r in result.episodes}) >= 2  # really ran in worker processes
    # The rerun reproduces the episode: same outcome as running the grid in this process.
    inline = evaluate(
        EvalConfig("mujoco:reach_around", episodes=6, workers=0),
        PolicyLoader("expert", {"speed": 0.3}),
    )
    assert [(r.success, r.steps) for r in result.episodes] == [
        (r.success, r.steps) for r in inline.episodes
    ]


def test_incompatible_policy_is_refused_before_the_first_step() -> None:
    cfg = EvalConfig("mujoco:reach_around", episodes=2, workers=0)
    events: list[str] = []
    with pytest.raises(CompatibilityError, match="4-dim actions") as info:
        evaluate(cfg, arm_reach_random, on_event=lambda k, d: events.append(k))
    assert "takes 2" in str(info.value) and events == []  # refused in the preflight
    # Without the preflight the worker's rollout refuses it, before stepping.
    cfg = EvalConfig("mujoco:reach_around", episodes=2, workers=1, preflight=False)
    with pytest.raises(CompatibilityError, match="4-dim actions"):
        evaluate(cfg, arm_reach_random, on_event=lambda k, d: events.append(k))
    assert "done" not in events


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "embodied", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


def test_cli_bad_input_lists_what_exists() -> None:
    proc = _cli("eval", "--env", "mujoco:fly", "--policy", "expert", "--workers", "0")
    assert proc.returncode == 2 and "unknown mujoco task 'fly'" in proc.stderr
    assert "reach_around" in proc.stderr
    proc = _cli("eval", "--env", "mujoco:reach_around", "--policy", "nope", "--workers", "0")
    assert proc.returncode == 2 and "'nope'" in proc.stderr and "expert" in proc.stderr


@pytest.mark.libero
def test_cli_eval_on_a_libero_task_in_a_worker(tmp_path: Path, shared_dir: Path) -> None:
    proc = _cli(
        "eval",
        "--env",
        "libero:libero_90:0",
        "--policy",
        "zero",
        "--episodes",
        "2",
        "--workers",
        "1",
        "--max-steps",
        "6",
        "--video-episodes",
        "1",
        "--out",
        str(tmp_path),
        "--libero-assets",
        str(shared_dir / "libero-assets"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((tmp_path / "results.json").read_text())
    protocol = data["envs"]["libero:libero_90:0"]["protocol"]
    assert protocol["max_steps_by_suite"]["libero_90"] == 400 and protocol["num_wait_steps"] == 10
    assert data["versions"]["libero"] == "0.1.1" and data["versions"]["robosuite"] == "1.4.0"
    eps = data["episodes"]
    assert [e["spec"]["init_state"] for e in eps] == [0, 1]
    assert [e["steps"] for e in eps] == [6, 6] and not any(e["success"] for e in eps)
    assert eps[0]["worker"] != os.getpid()
    frames = imageio.mimread(tmp_path / data["files"]["videos"][0])
    assert len(frames) == 6 and frames[0].shape == (256, 256, 3)
    assert "libero:libero_90:0" in proc.stdout and "close the top drawer" in proc.stdout
