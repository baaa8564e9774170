"""The PDP experiment's shifted-scene baselines get PDP's budgets: DP best-of-N spends exactly
the search rollouts of PDP's CEM search on the same seeds; DP fine-tuning gets the same
demonstration and gradient steps; seed groups stay disjoint."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import torch

from embodied.apps import route_task
from embodied.apps.lab import pdp as experiment
from embodied.apps.lab.pdp import (
    BUDGETS,
    SEED_OFFSETS,
    SHIFT_DIAGNOSTICS,
    SHIFT_METHODS,
    TRAIN_SEED_STRIDE,
    TUNING_SEEDS,
    PDPEvalConfig,
    PDPExperimentConfig,
    best_of_n_noise,
    check_disjoint,
    make_env,
    seed_groups,
    shifted_scene,
)
from embodied.errors import ConfigError
from policies.diffusion.modeling_pdp import PDPModel
from policies.diffusion.policy_pdp import PDPPolicy
from tests.diffusion.conftest import tiny_config


def _policy(z_dim: int) -> PDPPolicy:
    torch.manual_seed(z_dim)
    model = PDPModel(tiny_config(state_dim=8, z_dim=z_dim, horizon=8, n_action_steps=8))
    model.normalizer.set_stats(
        state_min=-0.4 * np.ones(8),
        state_max=0.4 * np.ones(8),
        action_min=-0.5 * np.ones(2),
        action_max=0.5 * np.ones(2),
    )
    return PDPPolicy(model)


def test_best_of_n_spends_the_cem_rollouts_on_the_same_seeds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pdp, dp = _policy(2), _policy(0)
    calls: list[tuple[str, int, int, str]] = []
    real = route_task.rollout  # every rollout of the experiment is route_task.run_episodes'

    def recording(env: Any, policy: Any, **kw: Any) -> Any:
        name = "pdp" if policy is pdp else "dp" if policy is dp else "other"
        scene = (kw.get("reset_options") or {}).get("scene", "default")
        calls.append((name, int(kw["seed"]), getattr(policy, "noise_seed", -1), scene))
        return real(env, policy, **kw)

    monkeypatch.setattr(route_task, "rollout", recording)
    cfg = PDPEvalConfig(
        n_eval=2,
        n_shift_eval=2,
        scenes=("block_center",),
        adapt_steps=2,
        cem_iterations=2,
        cem_population=3,
        cem_rollouts=2,
        plots=False,
    )
    groups = seed_groups(cfg)
    entry = shifted_scene(make_env(), pdp, dp, "block_center", 0, cfg, groups)
    search = set(groups["block_center/search"])
    by_policy = Counter(name for name, seed, _, _ in calls if seed in search)
    expected = cfg.cem_iterations * cfg.cem_population * cfg.cem_rollouts
    assert by_policy == {"pdp": expected, "dp": expected}
    assert entry["budget"]["search_rollouts"] == {"dp_best_of_n": expected, "pdp_search": expected}
    assert entry["budget"]["search_seeds"] == sorted(search)
    # DP tried noise streams 0..5, each on both search seeds
    dp_search = Counter(
        (noise, seed) for name, seed, noise, _ in calls if name == "dp" and seed in search
    )
    assert set(dp_search) == {(k, s) for k in range(6) for s in search}
    assert all(scene == "block_center" for *_, scene in calls)
    # evaluation episodes: every method on the scene's evaluation seeds, none on search seeds
    ev = list(groups["block_center/evaluation"])
    for key in (*SHIFT_METHODS, *SHIFT_DIAGNOSTICS):
        assert entry[key]["seeds"] == ev and entry[key]["n"] == 2, key
    assert entry["budget"]["gradient_steps"] == 2
    assert entry["budget"]["demonstration_seed"] in groups["block_center/demonstration"]
    assert dp.noise_seed == 0  # restored after the search


def test_best_of_n_picks_the_cheapest_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    dp = _policy(0)

    def fake(env: Any, policy: Any, seeds: Any, scene: str = "default", z: Any = None) -> Any:
        ok = policy.noise_seed == 2
        return [{"success": ok, "steps": 50, "seed": s} for s in seeds]

    monkeypatch.setattr(experiment, "run_episodes", fake)
    res = best_of_n_noise(None, dp, "block_left", [1, 2, 3], 4)
    assert res.noise_seed == 2 and res.rollouts == 12 and len(res.costs) == 4
    assert dp.noise_seed == 0
    with pytest.raises(ConfigError, match="n >= 1"):
        best_of_n_noise(None, dp, "block_left", [1], 0)


@pytest.mark.parametrize("budget", sorted(BUDGETS))
def test_seed_groups_are_disjoint_for_every_budget(budget: str) -> None:
    cfg = PDPExperimentConfig.for_budget(budget)
    demonstration_seeds = range(0, 3 * cfg.n_demonstrations)  # failures skip seeds: margin
    for k in cfg.train_seeds:
        ev = replace(cfg.evaluation, seed=cfg.evaluation.seed + TRAIN_SEED_STRIDE * k)
        groups = seed_groups(ev)
        check_disjoint(
            {"training demonstrations": demonstration_seeds, "tuning": TUNING_SEEDS, **groups}
        )
        assert len(groups["evaluation"]) == ev.n_eval
        for scene in ev.scenes:
            assert len(groups[f"{scene}/evaluation"]) == ev.n_shift_eval
            assert len(groups[f"{scene}/search"]) == ev.cem_rollouts


def test_overlapping_seed_groups_are_refused() -> None:
    too_many = PDPEvalConfig(n_shift_eval=SEED_OFFSETS.shifted_demonstration + 1)
    with pytest.raises(ConfigError, match="block_left/evaluation.*block_left/demonstration"):
        check_disjoint(seed_groups(too_many))
    with pytest.raises(ConfigError, match="training demonstrations.*'evaluation'"):
        check_disjoint({"training demonstrations": [1000], **seed_groups(PDPEvalConfig())})
    with pytest.raises(ConfigError, match="share env seed"):
        experiment.evaluate("unused", "unused", "unused", training_seeds=range(1000, 1001))


def test_default_protocol_meets_the_statistics_floor() -> None:
    cfg = PDPExperimentConfig()
    assert cfg.seeds >= 3 and cfg.modes == ("reference", "receding")
    assert cfg.evaluation.n_eval >= 50 and cfg.evaluation.n_shift_eval >= 50
    assert PDPExperimentConfig.for_budget("full") == cfg
    with pytest.raises(ConfigError, match="'nope'"):
        PDPExperimentConfig(modes=("reference", "nope"))
    with pytest.raises(ConfigError, match="unknown experiment budget 'huge'"):
        PDPExperimentConfig.for_budget("huge")
    with pytest.raises(ConfigError, match="interpolation_points=1"):
        PDPEvalConfig(interpolation_points=1)
