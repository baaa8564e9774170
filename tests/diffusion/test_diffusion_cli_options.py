"""``embodied train pdp`` and ``embodied lab pdp experiment``: generated config options reach the
configs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner


def test_train_pdp_options_reach_the_config(reach_dataset: Path, tmp_path: Path) -> None:
    from embodied.apps.cli import app

    out = tmp_path / "ckpt"
    argv = ["train", "pdp", "--data", str(reach_dataset), "--out", str(out), "--no-progress"]
    argv += ["--steps", "2", "--manifold-steps", "2", "--hidden-dim", "24", "--horizon", "4"]
    argv += ["--n-action-steps", "3", "--n-obs-steps", "1", "--batch-size", "8", "--lr", "0.001"]
    argv += ["--seed", "5", "--z-dim", "3", "--checkpoint-every", "2"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    cfg = json.loads((out / "config.json").read_text())
    assert (cfg["steps"], cfg["manifold"]["steps"], cfg["hidden_dim"]) == (2, 2, 24)
    assert (cfg["horizon"], cfg["n_action_steps"], cfg["n_obs_steps"]) == (4, 3, 1)
    assert (cfg["batch_size"], cfg["lr"], cfg["seed"], cfg["z_dim"]) == (8, 0.001, 5, 3)
    assert cfg["denoiser"] == "mlp"  # not given: the dataclass default
    # --resume without the options keeps the run's config (options override only when given)
    more = CliRunner().invoke(app, [*argv[:7], "--resume", "--steps", "4"])
    assert more.exit_code == 0, more.output
    cfg = json.loads((out / "config.json").read_text())
    assert (cfg["steps"], cfg["hidden_dim"], cfg["horizon"]) == (4, 24, 4)


def test_pdp_experiment_budget_and_options(monkeypatch: Any, tmp_path: Path) -> None:
    """``--budget`` picks a preset; options given explicitly override it, the rest keep it."""
    from embodied.apps.cli import app
    from embodied.apps.lab.cli import cmd_pdp
    from embodied.apps.lab.pdp import BUDGETS, PDPExperimentConfig

    seen: list[PDPExperimentConfig] = []

    def fake(out: Path, cfg: PDPExperimentConfig) -> dict[str, Any]:
        seen.append(cfg)
        return {"runs": [], "aggregate": {}}

    monkeypatch.setattr(cmd_pdp, "run_experiment", fake)
    monkeypatch.setattr(cmd_pdp, "results_markdown", lambda runs, agg: "")
    argv = ["lab", "pdp", "experiment", "--out", str(tmp_path), "--budget", "cpu"]
    argv += ["--modes", "receding", "--seeds", "4", "--n-eval", "60"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    (cfg,) = seen
    cpu = BUDGETS["cpu"]
    assert (cfg.modes, cfg.seeds, cfg.evaluation.n_eval) == (("receding",), 4, 60)
    assert cfg.overrides == cpu["overrides"]  # not given: the preset's
    assert cfg.evaluation.n_shift_eval == 50  # the protocol's floor, kept by the cpu budget
    assert cfg.evaluation.scenes == cpu["evaluation"]["scenes"]
    result = CliRunner().invoke(app, ["lab", "pdp", "experiment", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert seen[-1] == PDPExperimentConfig()  # full budget: the protocol defaults
    bad = CliRunner().invoke(
        app, ["lab", "pdp", "experiment", "--out", str(tmp_path), "--budget", "x"]
    )
    assert bad.exit_code != 0 and "unknown experiment budget 'x'" in str(bad.exception)
