"""The evaluation pipeline and the quick demo, end to end on mujoco:reach_around (tiny)."""

from __future__ import annotations

import json
from pathlib import Path

from policies.diffusion.experiment import SHIFT_METHODS, evaluate, quick_demo
from policies.diffusion.training import train_pdp
from tests.diffusion.conftest import tiny_config


def test_evaluate_writes_tables_and_plots(reach_dataset: Path, tmp_path: Path) -> None:
    for name, z_dim in (("pdp", 2), ("dp", 0)):
        train_pdp(
            reach_dataset,
            tmp_path / name,
            tiny_config(z_dim=z_dim, steps=3),
            overrides={"obs_exclude": ["vel_x", "vel_y"]},
            progress=False,
            tensorboard=False,
        )
    res = evaluate(
        tmp_path / "pdp",
        tmp_path / "dp",
        tmp_path / "eval",
        n_eval=1,
        n_coverage=2,
        scenes=("block_left",),
        n_shift_eval=1,
        cem_iterations=1,
        cem_population=2,
        cem_rollouts=1,
        adapt_steps=3,
        n_control=1,
        plot_grid=2,
    )
    for key in ("unshifted", "coverage", "route_control", "shifted"):
        assert key in res
    row = res["shifted"]["block_left"]
    for method in SHIFT_METHODS:
        assert 0.0 <= row[method] <= 1.0
    saved = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert saved["shifted"]["block_left"]["cem_rollouts"] == 2
    md = (tmp_path / "eval" / "results.md").read_text()
    assert "PDP + one-demo adaptation (paper: z from 0)" in md and "block_left" in md
    for png in ("latent_space.png", "interpolation.png"):
        assert (tmp_path / "eval" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_quick_demo_trains_and_rolls_out(tmp_path: Path) -> None:
    metrics = quick_demo(tmp_path, budget_s=12.0, n_demos=6)
    assert metrics["train_steps"] >= 1
    assert set(metrics["routes"]) <= {"left", "center", "right"} and metrics["routes"]
    assert len(metrics["prior_samples"]) == 3
    assert 0.0 <= metrics["success_rate"] <= 1.0
    assert Path(metrics["plot"]).exists()
    assert (Path(metrics["checkpoint"]) / "model.safetensors").exists()
