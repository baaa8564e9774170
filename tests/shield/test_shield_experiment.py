"""The shield experiment on mujoco:reach_around with a no-go zone, its CLI and ``deploy --shield``.

The smoke budget runs both arms end to end (about 20 s on one core): the shielded arm has no
evaluation violation at the configured risk on the seeded task, and the reported counts and
intervals are consistent. The stopping-point identity the abstraction rests on is checked on
the real MuJoCo env.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from controllers.rl.configuration_rl import PPOSettings
from controllers.shield import ActionSet, BinSpec, RobustShield, ShieldConfig
from embodied.apps.cli import main
from embodied.apps.deploy import DeployConfig, deploy
from embodied.apps.lab.shield import (
    ACTION_VECTORS,
    DT_S,
    TAU_S,
    HazardReachEnv,
    ShieldExperimentConfig,
    make_shield,
    run_experiment,
    stopping_offsets,
)
from embodied.errors import ConfigError
from hardware import DEFAULT_CONFIG, load_robot_config
from tests.conftest import require


def test_stopping_point_integrates_the_command_exactly() -> None:
    """``z = p + tau v`` moves by ``u dt`` per control step, whatever the velocity lag."""
    env = HazardReachEnv()
    obs, _ = env.reset(seed=3)
    rng = np.random.default_rng(0)
    for _ in range(30):
        a = int(rng.integers(len(ACTION_VECTORS)))
        s = obs.astype(np.float64)
        obs, _, terminated, truncated, info = env.step(a)
        if info["collided"] or terminated or truncated:
            break
        n = obs.astype(np.float64)
        z0, z1 = s[:2] + TAU_S * s[2:4], n[:2] + TAU_S * n[2:4]
        # float32 observations: ~1e-7 m of round-off
        np.testing.assert_allclose(z1 - z0, np.asarray(ACTION_VECTORS[a]) * DT_S, atol=2e-6)
    env.close()


def test_toward_the_zone_is_blocked_next_to_it() -> None:
    shield = make_shield(horizon=1, risk_bound=0.25, delta=0.05)
    # stopping point 1 cm left of the grown zone's x-span, inside its y-span, at rest
    near_left = np.array([-0.06 - 0.025 - 0.01, -0.18, 0.0, 0.0])
    assert stopping_offsets(near_left)[1] == 0.0 and -0.025 < stopping_offsets(near_left)[0] < 0
    s = shield.abstraction.state_of(near_left)  # row-major: +-5 is an ex bin, +-1 an ey bin
    # stay, +x (2.5 cm into the grown zone), -x, +y, -y: what the dynamics do, 400 times each
    for a, nxt in enumerate([s, s + 5, s - 5, s + 1, s - 1]):
        shield.counts.add(s, a, nxt, times=400)
    shield.refresh()
    assert shield.abstraction.labels(s + 5) == frozenset({"bad"})
    assert shield.allowed(shield.reset(s)).tolist() == [True, False, True, True, True]


def _consistent_rate(rate: dict[str, Any]) -> None:
    low, high = rate["wilson95"]
    assert 0 <= rate["count"] <= rate["n"]
    assert low <= rate["rate"] <= high


def test_smoke_experiment_writes_results_and_the_shield_holds(tmp_path: Path) -> None:
    require("sb3_contrib")
    cfg = ShieldExperimentConfig.for_budget("smoke")
    summary = run_experiment(tmp_path, cfg, log=lambda _: None)
    assert {p.name for p in tmp_path.iterdir()} >= {"results.json", "results.md"}
    assert json.loads((tmp_path / "results.json").read_text())["config"]["seeds"] == cfg.seeds
    assert "| shielded |" in (tmp_path / "results.md").read_text()
    runs = {r["arm"]: r for r in summary["runs"]}
    assert set(runs) == {"ppo", "shielded"}
    shielded, ppo = runs["shielded"], runs["ppo"]
    assert shielded["eval_violations"] == 0  # the seeded task, at the configured risk
    assert shielded["train_violations"] == 0  # after exploration the shield held in training
    for r in (shielded, ppo):
        assert 0 <= r["eval_violations"] <= r["eval_episodes"] == cfg.eval_episodes
        assert 0 <= r["eval_successes"] <= r["eval_episodes"]
        assert 0 <= r["train_violations"] <= r["train_episodes"]
    assert shielded["exploration"]["steps"] == cfg.exploration_steps
    assert ppo["exploration"]["steps"] == 0
    curve = shielded["curve"]
    seen = [p["transitions"] for p in curve]
    assert seen == sorted(seen) and seen[-1] >= cfg.exploration_steps
    assert all(0.0 <= p["blocked"] <= 1.0 for p in curve)
    # refreshed during exploration too: 1000, 2000 and 5000 transitions (smoke explores 6000)
    assert [x for x in seen if 0 < x < cfg.exploration_steps] == [1000.0, 2000.0, 5000.0]
    # with little data every state is flagged (no action meets the bound); data clears flags
    assert curve[0]["flagged"] == 1.0 and curve[-1]["flagged"] < curve[0]["flagged"]
    for arm in ("ppo", "shielded"):
        agg = summary["aggregate"][arm]
        _consistent_rate(agg["eval_violation_rate"])
        _consistent_rate(agg["eval_success_rate"])
        _consistent_rate(agg["train_violation_rate"])
        assert agg["eval_violation_rate"]["n"] == cfg.eval_episodes * cfg.seeds
    assert summary["aggregate"]["shielded"]["eval_violation_rate"]["count"] == 0


def test_config_refuses_bad_values_naming_the_key() -> None:
    with pytest.raises(ConfigError, match="exploration_steps"):
        ShieldExperimentConfig(timesteps=1000, exploration_steps=900, ppo=PPOSettings(n_steps=256))
    with pytest.raises(ConfigError, match="eval_seed0"):
        ShieldExperimentConfig(eval_seed0=1)
    with pytest.raises(ConfigError, match="budget 'huge'"):
        ShieldExperimentConfig.for_budget("huge")


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--risk-bound", "1.5"], "risk_bound=1.5 must be < 1"),
        (["--seeds", "0"], "seeds=0 must be >= 1"),
        (["--budget", "huge"], "budget 'huge'"),
    ],
)
def test_cli_refuses_a_bad_value_with_exit_2(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    args: list[str],
    named: str,
) -> None:
    out = tmp_path / "run"
    monkeypatch.setattr(
        sys, "argv", ["embodied", "lab", "shield", "experiment", "--out", str(out), *args]
    )
    with pytest.raises(SystemExit) as info:
        main()
    err = " ".join(capsys.readouterr().err.split())
    assert info.value.code == 2, err
    assert named in err and "fix:" in err, err
    assert not out.exists()


def first_joint(obs: Any) -> np.ndarray:
    """Measure of the deploy test's shield: the first joint position (rad)."""
    return np.asarray(obs["state"], dtype=np.float64)[:1]


def test_deploy_puts_a_saved_shield_before_the_safety_filter(tmp_path: Path) -> None:
    robot = load_robot_config(DEFAULT_CONFIG)
    config = ShieldConfig(bins=(BinSpec("q0", (0.0,), "rad"),), horizon=1, automaton="builtin")
    actions = ActionSet(np.zeros((1, 4)))  # one action: hold every joint at 0 rad
    shield = RobustShield.create(config, {"bad": [False, False]}, actions, measure=first_joint)
    folder = shield.save(tmp_path / "shield")
    run = DeployConfig(
        "sine",
        dry_run=True,
        rate_hz=50,
        max_seconds=0.2,
        shield=str(folder),
        shield_measure=f"{__name__}:first_joint",
    )
    result = deploy(robot, run, tmp_path / "out")
    assert result.reason == "max_steps"
    assert result.summary["shield"]["steps"] == result.steps > 0
    # the sine proposals were replaced by the shield's single action, then safety-filtered
    assert result.summary["shield"]["interventions"] == 0  # nearest of one action: no block
    with pytest.raises(ConfigError, match="shield_measure"):
        DeployConfig("hold", shield_measure=f"{__name__}:first_joint")
    wrong = RobustShield.create(config, {"bad": [False, False]}, ActionSet([[0.0], [1.0]]))
    with pytest.raises(ConfigError, match="1-dim actions"):
        deploy(robot, DeployConfig("hold", dry_run=True, shield=str(wrong.save(tmp_path / "w"))),
               tmp_path / "out2")  # fmt: skip
