"""The evaluation harness on real MuJoCo tasks (and one LIBERO task): results, videos,
worker processes, a killed worker's episode rerun, and compatibility refusal."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import imageio.v2 as imageio
import numpy as np
import pytest

import policies
import sim
from embodied.apps.evaluation import (
    EpisodeRecord,
    EpisodeSpec,
    EvalConfig,
    EvalResult,
    EvaluationError,
    PolicyLoader,
    evaluate,
    summarize,
    wilson_interval,
)
from embodied.apps.evaluation.report import write_results
from embodied.apps.evaluation.worker import record_fields
from embodied.contracts import Env, Observation, Policy
from embodied.errors import CompatibilityError, ConfigError
from embodied.loop import rollout

ROOT = Path(__file__).resolve().parents[2]


def arm_reach_random(env: Env) -> Policy:
    """A 4-dim policy (made for mujoco:arm_reach), whatever env it is given."""
    return policies.load("random", env=sim.make("mujoco:arm_reach"))


RAISING_SEEDS = (1, 3)
"""Reset seeds on which :class:`RaisesOnSeeds` raises in ``predict_action_chunk``."""


class RaisesOnSeeds(Policy):
    """The env's scripted expert, except that predicting raises in the episodes whose reset
    seed is in :data:`RAISING_SEEDS` (``error`` picks the exception type)."""

    def __init__(self, env: Env, error: type[Exception] = RuntimeError) -> None:
        super().__init__()
        self.inner = policies.load("expert", env=env, speed=0.3)
        self.action_dim = self.inner.action_dim
        self.n_action_steps = self.inner.n_action_steps
        self.error = error
        self.seed: int | None = None
        env_reset = env.reset

        def reset(*, seed: int | None = None, options: Any = None) -> Any:
            self.seed = seed  # the policy learns the episode's seed from the env it drives
            return env_reset(seed=seed, options=options)

        env.reset = reset  # type: ignore[method-assign]

    def reset(self) -> None:
        super().reset()
        self.inner.reset()

    def predict_action_chunk(self, obs: Observation) -> np.ndarray:
        if self.seed in RAISING_SEEDS:
            raise self.error(f"policy broke on seed {self.seed}")
        return self.inner.predict_action_chunk(obs)


def raises_runtime_error(env: Env) -> Policy:
    """Picklable factory: :class:`RaisesOnSeeds` raising ``RuntimeError``."""
    return RaisesOnSeeds(env, RuntimeError)


def raises_config_error(env: Env) -> Policy:
    """Picklable factory: :class:`RaisesOnSeeds` raising ``ConfigError`` (misconfiguration)."""
    return RaisesOnSeeds(env, ConfigError)


@pytest.mark.parametrize("workers", [0, 1], ids=["inline", "local"])
def test_episode_that_raises_counts_as_a_failure(workers: int, tmp_path: Path) -> None:
    """An exception inside an episode fails that episode (n grows, successes do not), as in
    OpenVLA's LIBERO evaluation, on the inline and the local process backend; a ConfigError
    (the evaluation is misconfigured) still stops the evaluation."""
    cfg = EvalConfig("mujoco:reach_around", episodes=5, workers=workers, out=tmp_path)
    events: list[tuple[str, dict[str, Any]]] = []
    result = evaluate(cfg, raises_runtime_error, lambda k, d: events.append((k, d)))
    bad = [r for r in result.episodes if r.spec.seed in RAISING_SEEDS]
    assert [r.spec.index for r in bad] == [1, 3]
    for r in bad:
        assert not r.success and r.steps == 0 and r.attempts == 1
        assert r.error and r.error.startswith(f"RuntimeError: policy broke on seed {r.spec.seed}")
        assert "in predict_action_chunk" in r.error  # the innermost frame
    assert all(r.error is None and r.success for r in result.episodes if r not in bad)
    t = result.task("mujoco:reach_around")
    assert (t.n, t.successes, t.errors) == (5, 3, 2)
    assert t.success_rate == 0.6 and (t.ci_low, t.ci_high) == wilson_interval(3, 5)
    assert (result.groups[0].n, result.groups[0].successes) == (5, 3)
    kinds = [k for k, _ in events]
    assert kinds.count("start") == 5 and kinds.count("done") == 3 and kinds.count("failed") == 2
    failed = [d for k, d in events if k == "failed"]
    assert [d["spec"].index for d in failed] == [1, 3]
    assert all(d["record"].error == d["error"] for d in failed)
    md = (tmp_path / "results.md").read_text()
    assert "| 3/5 (60.0%) |" in md and "## Errors" in md
    assert "episode 1 (seed 1): `RuntimeError: policy broke on seed 1`" in md
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["tasks"][0]["errors"] == 2 and data["episodes"][3]["error"] == bad[1].error

    # a ConfigError names a fix the user must apply: the evaluation stops
    cfg = EvalConfig("mujoco:reach_around", episodes=3, workers=workers, preflight=False)
    with pytest.raises(ConfigError, match="policy broke on seed 1"):
        evaluate(cfg, raises_config_error)


def test_which_errors_stop_the_evaluation() -> None:
    """Project errors that name a setup fix stop it; an episode's own failures do not."""
    from embodied.apps.evaluation.worker import aborts_evaluation
    from embodied.errors import ActionError, CheckpointError, SafetyFault, UnknownNameError

    setup = (ConfigError, CompatibilityError, UnknownNameError, CheckpointError)
    assert all(aborts_evaluation(e("x")) for e in setup)
    assert aborts_evaluation(KeyboardInterrupt())
    episode = (RuntimeError, ValueError, FloatingPointError, ActionError, SafetyFault)
    assert not any(aborts_evaluation(e("x")) for e in episode)


def test_max_episode_errors_stops_the_evaluation() -> None:
    cfg = EvalConfig("mujoco:reach_around", episodes=5, workers=0, max_episode_errors=2)
    t = evaluate(cfg, raises_runtime_error).task("mujoco:reach_around")
    assert (t.n, t.errors) == (5, 2)  # two failed episodes are allowed
    cfg = EvalConfig("mujoco:reach_around", episodes=5, workers=0, max_episode_errors=1)
    events: list[str] = []
    with pytest.raises(EvaluationError, match="2 episodes failed.*max_episode_errors=1"):
        evaluate(cfg, raises_runtime_error, lambda k, d: events.append(k))
    assert events.count("start") == 4  # stopped at the second failure (episode 3)
    with pytest.raises(ConfigError, match="max_episode_errors"):
        EvalConfig("mujoco:reach_around", max_episode_errors=-1)


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
    for e in data["episodes"][3:]:  # arm_reach: the expert reaches the named cube only
        assert e["outcome"]["reached"] == e["instruction"].split()[2], e["outcome"]
        assert e["outcome"]["wrong_cube_reached"] is False
    wrong = data["tasks"][1]["outcome_rates"]["wrong_cube_reached"]
    assert (wrong["count"], wrong["rate"]) == (0, 0.0)
    assert "| mujoco:arm_reach | default | wrong_cube_reached | 0/3 (0.0%) |" in md
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


def test_record_outcome_keeps_plain_scalars_of_the_final_info() -> None:
    env = sim.make("mujoco:arm_reach", camera=False)
    ep = rollout(env, policies.load("zero", env=env), seed=0, max_steps=2)
    env.close()
    assert ep.final_info["reached"] == "" and ep.final_info["wrong_cube_reached"] is False
    spec = EpisodeSpec(0, "mujoco:arm_reach", "mujoco:arm_reach", 0, 0, None, "default", {})
    out = record_fields(spec, ep, 0.0)["outcome"]
    assert out["reached"] == "" and out["wrong_cube_reached"] is False
    assert "success" not in out and "ee_pos" not in out and out["target"] in ep.instruction
    info = {
        "success": np.bool_(True),
        "wrong_cube_reached": np.bool_(True),
        "dist": np.float32(0.5),
        "count": np.int64(3),
        "gap": float("nan"),
        "reached": "green",
        "ee_pos": np.zeros(3),
        "cubes": {"red": 1},
        "nothing": None,
    }
    out = record_fields(spec, dataclasses.replace(ep, final_info=info), 0.0)["outcome"]
    assert set(out) == {"wrong_cube_reached", "dist", "count", "gap", "reached"}
    assert out["wrong_cube_reached"] is True and type(out["dist"]) is float
    assert type(out["count"]) is int and out["count"] == 3 and math.isnan(out["gap"])
    json.dumps({k: v for k, v in out.items() if k != "gap"})  # plain Python types


def test_boolean_outcome_rates_in_results_json_and_markdown(tmp_path: Path) -> None:
    """One wrong-cube episode of four (one of them errored) is 1/4 with its Wilson interval
    in the stats, results.json and results.md; string outcomes are not counted."""
    outcomes: list[dict[str, Any]] = [
        {"reached": "red", "wrong_cube_reached": False},
        {"reached": "green", "wrong_cube_reached": True},
        {"reached": "red", "wrong_cube_reached": False},
        {},
    ]
    records = [
        EpisodeRecord(
            spec=EpisodeSpec(i, "mujoco:arm_reach", "mujoco:arm_reach", i, i, None, "default", {}),
            success=i in (0, 2),
            steps=30,
            instruction="reach the red cube",
            outcome=o,
            error="RuntimeError: broke" if i == 3 else None,
        )
        for i, o in enumerate(outcomes)
    ]
    tasks, groups = summarize(records)
    lo, hi = wilson_interval(1, 4)
    assert tasks[0].outcome_rates == {
        "wrong_cube_reached": {"count": 1, "rate": 0.25, "ci_low": lo, "ci_high": hi}
    }
    assert (tasks[0].n, tasks[0].successes, tasks[0].errors) == (4, 2, 1)
    result = EvalResult({}, {}, {}, {}, records, tasks, groups, 1.0)
    write_results(result, tmp_path)
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["tasks"][0]["outcome_rates"]["wrong_cube_reached"] == {
        "count": 1,
        "rate": 0.25,
        "ci_low": lo,
        "ci_high": hi,
    }
    assert [e["outcome"].get("wrong_cube_reached") for e in data["episodes"]] == [
        False,
        True,
        False,
        None,
    ]
    md = (tmp_path / "results.md").read_text()
    row = "| mujoco:arm_reach | default | wrong_cube_reached | 1/4 (25.0%) | [4.6%, 69.9%] |"
    assert (f"{100 * lo:.1f}%", f"{100 * hi:.1f}%") == ("4.6%", "69.9%")
    assert "## Outcomes" in md and row in md and "| reached |" not in md
    # Without boolean outcomes the report has no outcome section.
    for r in records:
        r.outcome = {k: v for k, v in r.outcome.items() if k != "wrong_cube_reached"}
    tasks, groups = summarize(records)
    assert tasks[0].outcome_rates == {}
    plain = EvalResult({}, {}, {}, {}, records, tasks, groups, 1.0).markdown()
    assert "Outcomes" not in plain and "wrong_cube_reached" not in plain


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


def test_episode_that_could_not_be_run_counts_as_a_failure() -> None:
    """A worker that dies on every attempt: the episode is an error and a failure in n.

    OpenVLA's LIBERO evaluation counts an episode that raised as a failure; dropping it
    from n would raise the success rate.
    """
    cfg = EvalConfig("mujoco:reach_around", episodes=4, workers=1, max_retries=1)
    kills: list[int] = []

    def on_event(kind: str, data: dict[str, Any]) -> None:
        if kind == "start" and data["spec"].index == 1:
            os.kill(data["pid"], signal.SIGKILL)  # every attempt at episode 1 dies
            kills.append(data["pid"])

    result = evaluate(cfg, PolicyLoader("expert", {"speed": 0.3}), on_event=on_event)
    assert len(kills) == 2  # first try + one retry
    failed = result.episodes[1]
    assert failed.error and "died 2 times" in failed.error and not failed.success
    t = result.task("mujoco:reach_around")
    assert (t.n, t.successes, t.errors) == (4, 3, 1)
    assert t.success_rate == 0.75 and (t.ci_low, t.ci_high) == wilson_interval(3, 4)
    assert t.mean_steps == sum(r.steps for r in result.episodes if r.error is None) / 3
    g = result.groups[0]
    assert (g.n, g.successes) == (4, 3)
    assert "| 3/4 (75.0%) |" in result.markdown().replace("  ", " ")


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


def test_videos_keep_the_policy_cameras_size(tmp_path: Path) -> None:
    """An 84 px camera (not a multiple of 8) is written at 84 px, not rescaled."""
    from embodied.video import write_mp4

    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 255, (84, 84, 3), dtype=np.uint8) for _ in range(3)]
    path = write_mp4(tmp_path / "v.mp4", frames, fps=20)
    back = imageio.mimread(path)
    assert len(back) == 3 and back[0].shape == (84, 84, 3)
