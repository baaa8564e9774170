"""Judge calibration report: ROC-AUC, rates at the threshold, reliability bins, one format
for the oracle and every judge (`embodied judge`, `embodied eval --judge`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import policies
import sim
from embodied.errors import ConfigError
from embodied.loop import rollout
from embodied.rewards.calibration import judge_report, reliability, roc_auc
from embodied.rewards.judging import judge_episodes


def _pairwise_auc(p: np.ndarray, y: np.ndarray) -> float:
    pos, neg = p[y], p[~y]
    diff = pos[:, None] - neg[None, :]
    return float(((diff > 0) + 0.5 * (diff == 0)).mean())


def test_roc_auc_equals_the_pairwise_definition_with_ties() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        y = rng.random(60) < 0.4
        p = np.round(rng.random(60) * 0.5 + 0.3 * y, 1)  # coarse: many ties
        assert roc_auc(p, y) == pytest.approx(_pairwise_auc(p, y), abs=1e-12)
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == pytest.approx(0.75)
    assert roc_auc([0.3] * 4, [0, 1, 0, 1]) == 0.5
    assert np.isnan(roc_auc([0.2, 0.9], [1, 1]))
    with pytest.raises(ConfigError, match="3 scores for 2 labels"):
        roc_auc([0.1, 0.2, 0.3], [0, 1])


def test_reliability_bins_and_calibration_error() -> None:
    p = np.array([0.05, 0.15, 0.15, 0.95, 1.0, 0.55])
    y = np.array([0, 0, 1, 1, 1, 0], dtype=bool)
    bins = reliability(p, y, n_bins=10)
    assert [(b["lo"], b["count"]) for b in bins] == [(0.0, 1), (0.1, 2), (0.5, 1), (0.9, 2)]
    assert bins[1]["frac_success"] == 0.5 and bins[3]["mean_prob"] == pytest.approx(0.975)
    rep = judge_report(p, y, threshold=0.5)
    expected = (1 * 0.05 + 2 * abs(0.15 - 0.5) + 1 * 0.55 + 2 * abs(0.975 - 1.0)) / 6
    assert rep["ece"] == pytest.approx(expected)
    assert (rep["tpr"], rep["tnr"], rep["n"]) == (pytest.approx(200 / 3), pytest.approx(200 / 3), 6)
    assert rep["fpr"] == pytest.approx(100 / 3) and rep["roc_auc"] == pytest.approx(
        _pairwise_auc(p, y)
    )


@pytest.fixture(scope="module")
def episodes() -> list:
    env = sim.make("mujoco:arm_reach", image_size=48)
    try:
        return [
            rollout(env, policies.load("expert", env=env, speed=0.25), seed=21),
            rollout(env, policies.load("random", env=env, seed=1), seed=22, max_steps=25),
        ]
    finally:
        env.close()


def test_oracle_and_a_judge_share_the_report_format(episodes: list, minijudge) -> None:
    # stride 1: the expert's only success frame is its last one
    oracle = judge_episodes(episodes, "oracle", per_frame=True)
    judged = judge_episodes(episodes, minijudge, per_frame=True)
    for key in ("agreement", "frame_agreement"):
        assert set(oracle[key]) == set(judged[key])
        assert {"roc_auc", "tpr", "tnr", "fpr", "fnr", "ece", "reliability"} <= set(judged[key])
    fa = oracle["frame_agreement"]
    assert fa["roc_auc"] == 1.0 and fa["accuracy"] == 100.0 and fa["ece"] == 0.0
    assert oracle["judge"] == {"backend": "oracle"}
    assert [r["judge_prob"] for r in oracle["episodes"]] == [1.0, 0.0]
    assert judged["frame_agreement"]["n"] == fa["n"]  # the same frames
    # a live SimOracle handed over for recorded episodes reads their labels too
    from embodied.rewards import SimOracle

    again = judge_episodes(episodes, SimOracle(), per_frame=True)
    assert again["frame_agreement"] == fa and again["episodes"] == oracle["episodes"]


def test_judge_cli_reports_several_judges_with_a_reliability_plot(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from embodied.apps.cli import app

    out = tmp_path / "report.json"
    argv = ["judge", "--env", "mujoco:arm_reach", "--n", "2", "--seed", "40"]
    res = CliRunner().invoke(app, [*argv, "--judge", "oracle,minijudge", "--out", str(out)])
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    assert [r["spec"] for r in report["judges"]] == ["oracle", "minijudge"]
    assert report["judges"][0]["agreement"]["accuracy"] == 100.0
    assert "AUC" in res.output and "minijudge" in res.output
    assert out.with_suffix(".png").stat().st_size > 1000


def test_eval_judge_report_has_auc_rates_and_plot(tmp_path: Path) -> None:
    from embodied.apps.evaluation import EvalConfig, evaluate
    from embodied.apps.evaluation.report import write_results

    cfg = EvalConfig("mujoco:arm_reach", episodes=2, workers=0, seed=7100, judge="minijudge")
    result = evaluate(cfg, "expert")
    write_results(result, tmp_path)
    agr = result.to_dict()["judge_agreement"]
    assert {"roc_auc", "fpr", "fnr", "ece", "reliability", "threshold"} <= set(agr)
    assert agr["threshold"] == pytest.approx(float(policies_threshold()))
    assert (tmp_path / "judge_reliability.png").exists()
    assert "ROC-AUC" in (tmp_path / "results.md").read_text()


def policies_threshold() -> float:
    from embodied.rewards import load_judge

    return float(load_judge("minijudge").threshold)
