"""``embodied train minijudge``: options generated from MiniJudgeTrainConfig, bad values refused
with exit code 2, and the command line recorded in calibration.json."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from typer.testing import CliRunner

from embodied.apps.cli import app
from embodied.apps.cli._config_options import field_docs
from embodied.apps.training.training_minijudge import MiniJudgeTrainConfig, parse_command

FLAGS = "--out --n-arm --n-ball --n-val --n-wrong-val --steps --batch --lr --stride --seed "
FLAGS += "--extra-arm-experts --wrong-arm --swap-arm --extra-ball-experts --init --image-size --head --film-layer "
FLAGS += "--cell-weight --arrival-weight --arrival-negative-weight --threshold-tnr "
FLAGS += "--threads --cache --checkpoint-every"


def _flat(text: str) -> str:
    """Help text without the rich box and line wrapping."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def test_help_lists_every_field_with_its_doc_and_default() -> None:
    result = CliRunner().invoke(app, ["train", "minijudge", "--help"], env={"COLUMNS": "2000"})
    assert result.exit_code == 0, result.output
    text, docs = _flat(result.output), field_docs(MiniJudgeTrainConfig)
    fields = dataclasses.fields(MiniJudgeTrainConfig)
    assert [f"--{f.name.replace('_', '-')}" for f in fields] == FLAGS.split()  # as before
    for f in fields:
        expected = f"--{f.name.replace('_', '-')} <\\S+> " + re.escape(docs[f.name])
        if f.default is dataclasses.MISSING:
            expected += r" \[required\]"
        elif f.default is not None:
            expected += " " + re.escape(f"[default: {f.default}]")
        assert re.search(expected, text), (f.name, expected, text)
    assert "[default: 48]" in text and "[default: 0.002]" in text and "[default: cells]" in text


def test_bad_value_is_a_usage_error_naming_the_key(tmp_path: Path) -> None:
    runner = CliRunner()
    for option, value, named in [
        ("--head", "bogus", "head='bogus'"),
        ("--n-val", "0", "n_val=0"),
        ("--threshold-tnr", "95", "threshold_tnr=95.0"),
    ]:
        argv = ["train", "minijudge", "--out", str(tmp_path / "j"), option, value]
        result = runner.invoke(app, argv, env={"COLUMNS": "200"})
        assert result.exit_code == 2, (option, result.output)
        assert named in _flat(result.output) and "fix:" in result.output, result.output
        assert not (tmp_path / "j").exists()
    result = runner.invoke(app, ["train", "minijudge", "--steps", "3"])
    assert result.exit_code == 2 and "--out" in result.output  # required


def test_command_records_its_command_line_and_config(tmp_path: Path) -> None:
    """A recalibration-sized run (no optimizer step, 2 episodes per split)."""
    out = tmp_path / "judge"
    argv = ["train", "minijudge", "--out", str(out), "--steps", "0", "--n-val", "1"]
    argv += ["--n-wrong-val", "0", "--image-size", "64", "--seed", "3"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output.strip().splitlines()[-1])
    assert summary["out"] == str(out) and 0 < summary["threshold"] < 1
    train = json.loads((out / "calibration.json").read_text())["train"]
    assert train["command"].startswith(f"embodied train minijudge --out {out} --n-arm 48 ")
    config = MiniJudgeTrainConfig(**train["config"])
    assert (config.steps, config.n_val, config.image_size, config.seed) == (0, 1, 64, 3)
    assert parse_command(train["command"]) == config
    assert train["seeds"] == {}  # no training episodes without optimizer steps
