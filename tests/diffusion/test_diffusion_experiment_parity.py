"""One evaluation path: ``embodied eval`` and the PDP experiment's evaluation give the same
episodes (success, length, trajectory) for the same policy and seeds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from embodied.apps.evaluation import EpisodeRunner, EvalConfig, PolicyLoader, build_grid
from embodied.apps.evaluation import evaluate as eval_harness
from embodied.apps.lab.pdp import (
    ENV_ID,
    OBS_EXCLUDE,
    PDPEvalConfig,
    evaluate,
    make_env,
    run_episodes,
)
from policies.diffusion.policy_pdp import PDPPolicy
from policies.diffusion.training_pdp import train_pdp
from tests.diffusion.conftest import tiny_config

SEED = 1000
EPISODES = 4


@pytest.fixture(scope="module")
def checkpoints(reach_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny PDP and DP (receding variant) trained for seconds on real demonstrations."""
    root = tmp_path_factory.mktemp("parity")
    for name, z_dim in (("pdp", 2), ("dp", 0)):
        train_pdp(
            reach_dataset,
            root / name,
            tiny_config(z_dim=z_dim, steps=40, horizon=8, n_action_steps=4),
            overrides={"obs_exclude": list(OBS_EXCLUDE)},
            progress=False,
            tensorboard=False,
        )
    return root


def test_embodied_eval_and_the_experiment_give_the_same_episodes(
    checkpoints: Path, tmp_path: Path
) -> None:
    cfg = PDPEvalConfig(
        n_eval=EPISODES,
        n_shift_eval=1,
        scenes=("block_left",),
        seed=SEED,
        adapt_steps=1,
        cem_iterations=1,
        cem_population=1,
        cem_rollouts=1,
        interpolation_points=2,
        interpolation_episodes=1,
        plots=False,
    )
    res = evaluate(checkpoints / "pdp", checkpoints / "dp", tmp_path / "exp", cfg)
    # `embodied eval` (CLI) on the DP, the PDP (knob z at its default 0) and the PDP drawing
    # each episode's z from the prior
    from embodied.apps.cli import app

    for name, key, extra in (
        ("dp", "dp", []),
        ("pdp", "pdp_z0", []),
        ("pdp", "pdp_prior", ["--policy-arg", "z=prior"]),
    ):
        out = tmp_path / f"eval_{key}"
        argv = ["eval", "--env", ENV_ID, "--policy", str(checkpoints / name), *extra]
        argv += ["--episodes", str(EPISODES), "--seed", str(SEED), "--workers", "0"]
        argv += ["--out", str(out)]
        result = CliRunner().invoke(app, argv)
        assert result.exit_code == 0, result.output
        episodes = json.loads((out / "results.json").read_text())["episodes"]
        seeds = [e["spec"]["seed"] for e in episodes]
        assert seeds == res["unshifted"][key]["seeds"] == list(range(SEED, SEED + EPISODES))
        assert [int(e["success"]) for e in episodes] == res["unshifted"][key]["outcomes"], key


def test_eval_runner_and_run_episodes_roll_out_identical_trajectories(checkpoints: Path) -> None:
    """Stronger than success: the states of every step agree (sampling noise included)."""
    config = EvalConfig(envs=ENV_ID, episodes=EPISODES, seed=SEED, workers=0)
    runner = EpisodeRunner.from_config(config, PolicyLoader(str(checkpoints / "dp")))
    experiment_rows = run_episodes(
        make_env(), PDPPolicy.from_pretrained(checkpoints / "dp"), range(SEED, SEED + EPISODES)
    )
    specs = build_grid(config)
    assert [s.seed for s in specs] == [r["seed"] for r in experiment_rows]
    for spec, row in zip(specs, experiment_rows, strict=True):
        ep, _ = runner.rollout_spec(spec, runner.env(spec.env_id))
        np.testing.assert_array_equal(ep.observations["state"][:, :2], row["path"])
        assert (bool(ep.success), len(ep)) == (row["success"], row["steps"])
    result = eval_harness(config, PolicyLoader(str(checkpoints / "dp")))
    assert [r.success for r in result.episodes] == [r["success"] for r in experiment_rows]
