"""``embodied train pdp``: generated config options reach the checkpoint's config.json."""

from __future__ import annotations

import json
from pathlib import Path

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
