"""The PDP experiment's plots draw given data; obstacles come from the task's MuJoCo model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import mujoco
import numpy as np
import pytest
import torch

from embodied.apps import plotting
from embodied.apps.lab import pdp_plots
from embodied.apps.lab.pdp import CEM_STEP_COST, constraint_cost
from embodied.apps.lab.pdp_plots import plot_latents, plot_route_histograms
from embodied.apps.plotting import Box, obstacle_boxes, plot_interpolation
from embodied.apps.route_task import make_env, run_episodes
from embodied.errors import ConfigError
from policies.diffusion.modeling_pdp import PDPModel
from policies.diffusion.policy_pdp import PDPPolicy
from tests.diffusion.conftest import tiny_config

PNG = b"\x89PNG\r\n\x1a\n"


def _rows(n: int) -> list[dict[str, object]]:
    routes = ("left", "center", "right", "none")
    return [
        {
            "route": routes[i % 4],
            "success": i % 2 == 0,
            "path": np.stack(
                [np.full(10, 0.3 * (i / max(n - 1, 1)) - 0.15), np.linspace(-0.3, 0.3, 10)], 1
            ),
        }
        for i in range(n)
    ]


def test_obstacle_boxes_are_the_model_geoms() -> None:
    model = make_env().unwrapped.model
    boxes = obstacle_boxes(model)
    assert [b.name for b in boxes] == ["obstacle_left", "obstacle_right"]
    for b in boxes:
        i = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, b.name)
        assert model.geom_type[i] == mujoco.mjtGeom.mjGEOM_BOX
        lo = model.geom_pos[i, :2] - model.geom_size[i, :2]
        hi = model.geom_pos[i, :2] + model.geom_size[i, :2]
        np.testing.assert_allclose([b.x_min, b.y_min, b.x_max, b.y_max], [*lo, *hi])
    with pytest.raises(ConfigError, match="no geom named"):
        obstacle_boxes(model, prefix="no_such_geom_")


def test_interpolation_plot_draws_the_given_boxes_and_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    boxes = [Box("a", -0.2, -0.05, -0.1, 0.05), Box("b", 0.05, -0.1, 0.25, 0.02)]
    drawn: list[Any] = []
    save = plotting.save_figure

    def keep(fig: Any, path: Path, **kwargs: Any) -> Path:
        drawn.append(fig)
        return save(fig, path, **kwargs)

    monkeypatch.setattr(plotting, "save_figure", keep)
    alphas = np.linspace(0.0, 1.0, 3)
    out = plot_interpolation(tmp_path / "i.png", alphas, _rows(3), ("left", "right"), boxes)
    assert out.read_bytes()[:8] == PNG
    (ax,) = drawn[0].axes
    rects = [(p.get_x(), p.get_y(), p.get_width(), p.get_height()) for p in ax.patches]
    want = [(b.x_min, b.y_min, b.x_max - b.x_min, b.y_max - b.y_min) for b in boxes]
    np.testing.assert_allclose(rects, want)
    assert len(ax.lines) == 3


def test_latent_plot_renders_given_rows(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    latents = rng.standard_normal((9, 2))
    labels = ["left", "center", "right"] * 3
    grid_z = [np.array([a, b]) for b in (-2.5, 2.5) for a in (-2.5, 2.5)]
    out = plot_latents(tmp_path / "l.png", latents, labels, grid_z, _rows(4), seed=3)
    assert out.read_bytes()[:8] == PNG


def test_route_histogram_plot_draws_fractions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn: list[Any] = []
    save = pdp_plots.save_figure

    def keep(fig: Any, path: Path, **kwargs: Any) -> Path:
        drawn.append(fig)
        return save(fig, path, **kwargs)

    monkeypatch.setattr(pdp_plots, "save_figure", keep)
    routes = ("left", "center", "right")
    hist = {"demonstrations": {"left": 1, "center": 2, "right": 1}, "PDP": {"center": 5}}
    out = plot_route_histograms(tmp_path / "c.png", hist, routes)
    assert out.read_bytes()[:8] == PNG
    (ax,) = drawn[0].axes
    heights = [p.get_height() for p in ax.patches]
    np.testing.assert_allclose(heights, [0.25, 0.5, 0.25, 0.0, 1.0, 0.0])


def test_plots_do_not_import_the_experiment() -> None:
    code = (
        "import sys, embodied.apps.lab.pdp_plots; assert 'embodied.apps.lab.pdp' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_constraint_cost_is_failure_plus_step_cost_of_the_search_rollouts() -> None:
    torch.manual_seed(0)
    model = PDPModel(tiny_config(state_dim=8, z_dim=2))
    model.normalizer.set_stats(
        state_min=-0.4 * np.ones(8),
        state_max=0.4 * np.ones(8),
        action_min=-0.5 * np.ones(2),
        action_max=0.5 * np.ones(2),
    )
    policy, env = PDPPolicy(model), make_env()
    cands = np.array([[1.0, -1.0], [-2.0, 0.5]])
    costs = constraint_cost(env, policy, "block_center", [7])(cands)
    assert costs.shape == (2,)
    for zc, c in zip(cands, costs, strict=True):
        (row,) = run_episodes(env, policy, [7], "block_center", z=zc)
        assert c == pytest.approx(1.0 - row["success"] + CEM_STEP_COST * row["steps"])
