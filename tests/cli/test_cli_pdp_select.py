"""``embodied train pdp-select`` evaluates a run at the cameras and image size it trained on
unless told otherwise (the documented command carries neither)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import embodied.apps.cli.cmd_train as cmd_train
from embodied.apps.cli import app, main
from policies.diffusion.configuration_pdp import PDPConfig, VisionConfig


def _run(tmp_path: Path, vision: dict[str, Any] | None) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    cfg = PDPConfig(state_dim=9, action_dim=7, vision=VisionConfig(**(vision or {})))
    (run / "config.json").write_text(json.dumps(cfg.to_dict()))
    return run


@pytest.mark.parametrize(
    ("vision", "args", "libero"),
    [
        (
            {"cameras": ("agentview", "eye_in_hand"), "image_shape": (84, 84)},
            [],
            {"cameras": ("agentview", "eye_in_hand"), "render_size": 84},
        ),
        (  # what the user passes wins
            {"cameras": ("agentview", "eye_in_hand"), "image_shape": (84, 84)},
            ["--cameras", "agentview", "--env-arg", "render_size=128"],
            {"cameras": ("agentview",), "render_size": 128},
        ),
        (None, [], {}),  # a state-only run: the env's own defaults
    ],
)
def test_pdp_select_defaults_to_the_runs_cameras_and_image_size(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    vision: dict[str, Any] | None,
    args: list[str],
    libero: dict[str, Any],
) -> None:
    run = _run(tmp_path, vision)
    seen: list[Any] = []

    def fake(config: Any) -> dict[str, Any]:
        seen.append(config)
        row = {"snapshot": "step_1", "train_seconds": 60.0, "successes": 1, "n": 2}
        return {"chosen": "step_1", "curve": [{**row, "ci_low": 0.1, "ci_high": 0.9}]}

    monkeypatch.setattr(cmd_train, "select_snapshot", fake)
    result = CliRunner().invoke(app, ["train", "pdp-select", str(run), *args])
    assert result.exit_code == 0, result.output
    assert seen[0].env_kwargs["libero"] == libero
    assert "chosen: step_1" in result.output


def test_pdp_select_refuses_a_folder_that_is_no_training_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["embodied", "train", "pdp-select", str(tmp_path)])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "config.json" in err and "train pdp --out" in err
    (tmp_path / "config.json").write_text(json.dumps({"policy_type": "openvla"}))
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "'openvla' checkpoint, not a PDP training run" in err and "train pdp --out" in err
