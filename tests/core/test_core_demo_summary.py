"""`embodied demo` ends with a short summary per section and where the files are, not the JSON."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest


def sample_metrics() -> dict[str, Any]:
    """Metrics shaped as `run_demo` writes them (every section, quick budgets)."""
    per_episode = [{"judge_prob": 0.9, "judge_success": True, "oracle_success": True}] * 4 + [
        {"judge_prob": 0.1, "judge_success": False, "oracle_success": False}
    ] * 4
    return {
        "machine": {"python": "3.11.9", "platform": "Linux-6.8-x86_64"},
        "quick": True,
        "seed": 0,
        "sections": {
            "sim": {
                "reach_around": {"episodes": 6, "expert_success_rate": 1.0,
                                 "route_counts": {"left": 3, "right": 3}},
                "arm_reach": {"episodes": 2, "expert_success_rate": 0.5,
                              "median_ee_speed_m_s_by_commanded_speed": {"0.10": 0.0987},
                              "video": "arm_reach_rollout.mp4"},
            },
            "pdp": {
                "checkpoint": "pdp/pdp", "train_steps": 3000, "train_seconds": 38.2,
                "final_loss": 0.0123,
                "routes": {"left": {"z": [0.1] * 8, "route_taken": "left", "success": True,
                                    "steps": 80}},
                "prior_samples": [{"z": [0.2] * 8, "route_taken": "right", "success": True}] * 8,
                "success_rate": 0.75, "route_match": 1.0, "plot": "pdp/pdp_z.png",
                "seconds": 40.1,
            },
            "steer": {"steps": 160, "success": True, "tracking_rmse_m_s": 0.0213,
                      "alpha_range": [0.2, 1.4], "rise_time_s": 0.45, "overshoot_pct": 4.2,
                      "settling_time_s": 1.35},
            "judge": {"judge": {"backend": "minijudge", "n_frames": 5, "threshold": 0.33}, "episodes": 8, "oracle_successes": 4,
                      "agreement": {"tpr": 100.0, "tnr": 75.0, "fpr": 25.0, "fnr": 0.0,
                                    "n_pos": 4, "n_neg": 4, "accuracy": 87.5},
                      "per_episode": per_episode},
        },
        "seconds": {"sim": 12.3, "pdp": 41.0, "steer": 6.2, "judge": 9.9},
        "files": ["arm_reach_rollout.mp4", "metrics.json", "pdp", "reach_around_routes.png",
                  "steer_pid_rollout.mp4", "steer_pid_tracking.png"],
    }  # fmt: skip


def _render(metrics: dict[str, Any], out: Path) -> str:
    from rich.console import Console

    from embodied.apps.demo import print_summary

    buf = io.StringIO()
    print_summary(metrics, out, Console(file=buf, width=160, color_system=None))
    return buf.getvalue()


def test_summary_is_short_and_names_figures_and_files(tmp_path: Path) -> None:
    out = tmp_path / "report"
    (out / "pdp").mkdir(parents=True)
    for name in ("metrics.json", "reach_around_routes.png", "pdp/pdp_z.png",
                 "steer_pid_tracking.png", "arm_reach_rollout.mp4", "steer_pid_rollout.mp4"):  # fmt: skip
        (out / name).write_bytes(b"x")
    metrics = sample_metrics()
    text = _render(metrics, out)
    assert len(text.splitlines()) <= 40, text
    assert '"per_episode"' not in text and "judge_prob" not in text  # not the JSON
    assert "minijudge (threshold 0.330)" in text and "{" not in text  # no raw dicts
    for section in ("sim", "pdp", "steer", "judge"):
        assert section in text
    for figure in ("100%", "left 3, right 3", "0.021 m/s", "87.5%", "75%", "4.2 %", "3000"):
        assert figure in text, figure
    assert str(out / "metrics.json") in text
    for name in ("reach_around_routes.png", "pdp/pdp_z.png", "steer_pid_tracking.png",
                 "arm_reach_rollout.mp4", "steer_pid_rollout.mp4"):  # fmt: skip
        assert name in text, name


def test_summary_copes_with_a_partial_run(tmp_path: Path) -> None:
    """--only steer, and a step response that could not be measured: still a table."""
    metrics = sample_metrics()
    steer = {"steps": 40, "success": False, "tracking_rmse_m_s": 0.05,
             "alpha_range": [0.0, 1.0], "step_response": "episode ended before the step"}  # fmt: skip
    metrics["sections"] = {"steer": steer}
    metrics["seconds"] = {"steer": 3.0}
    text = _render(metrics, tmp_path)
    assert "steer" in text and "0.050 m/s" in text and "ended before the step" in text
    assert "pdp" not in text and "plots: none" in text


def test_cli_prints_the_summary_not_the_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command's own output (the sections themselves are tested elsewhere)."""
    from typer.testing import CliRunner

    import embodied.apps.demo
    from embodied.apps.cli import app

    def fake_run_demo(out: Path, **kwargs: Any) -> dict[str, Any]:
        out.mkdir(parents=True, exist_ok=True)
        (out / "metrics.json").write_text(json.dumps(sample_metrics()))
        (out / "steer_pid_tracking.png").write_bytes(b"x")
        return sample_metrics()

    monkeypatch.setattr(embodied.apps.demo, "run_demo", fake_run_demo)
    res = CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    assert '"sections"' not in res.stdout and '"per_episode"' not in res.stdout
    assert len(res.stdout) < 4000 and "87.5%" in res.stdout
    assert "metrics.json" in res.stdout and "steer_pid_tracking.png" in res.stdout


def test_demo_judges_scenes_the_judge_never_saw() -> None:
    """The demo's judged episodes use reset seeds outside every split the judge was trained,
    calibrated or reported on (as recorded in the shipped ``calibration.json``)."""
    from embodied.apps.demo import JUDGE_SEED0
    from embodied.rewards.minijudge.modeling_minijudge import SHIPPED

    splits = json.loads((Path(SHIPPED) / "calibration.json").read_text())["splits"]
    used = [
        (lo, hi)
        for split in ("train", "calibration", "report")
        for ranges in splits[split]["seeds"].values()
        for lo, hi in ranges
    ]
    demo_seeds = range(JUDGE_SEED0, JUDGE_SEED0 + 12)  # 6 expert + 6 random at full size
    clashes = [(s, r) for s in demo_seeds for r in used if r[0] <= s <= r[1]]
    assert not clashes, clashes
