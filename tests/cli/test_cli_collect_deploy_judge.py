"""``embodied collect``, ``deploy`` and ``judge``: options generated from their config
dataclasses (CollectConfig, DeployConfig, JudgeAgreementConfig), bad values refused by the
config with exit code 2 and the key named, before anything is written."""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from embodied.apps.cli import app, main
from embodied.apps.cli._config_options import field_docs
from embodied.apps.collect import CollectConfig, collect
from embodied.apps.deploy import DeployConfig
from embodied.apps.judge import JudgeAgreementConfig
from embodied.datasets import Dataset
from embodied.errors import ConfigError
from hardware.configuration_robot import DEFAULT_CONFIG

# command -> (config, {field: flag}) of its generated options
GENERATED: dict[str, tuple[type, dict[str, str]]] = {
    "collect": (
        CollectConfig,
        {
            name: f"--{name.replace('_', '-')}"
            for name in (
                "env",
                "episodes",
                "policy",
                "seed",
                "speed",
                "route",
                "scene",
                "camera",
                "image_size",
                "keep_failures",
                "max_attempts",
            )
        },
    ),
    "deploy": (
        DeployConfig,
        {
            "policy": "--policy",
            "controller": "--controller",
            "rate_hz": "--rate",
            "dry_run": "--dry-run",
            "max_seconds": "--max-seconds",
            "episodes": "--episodes",
            "instruction": "--instruction",
            "clear_estop": "--clear-estop",
            "shield": "--shield",
            "shield_measure": "--shield-measure",
        },
    ),
    "judge": (
        JudgeAgreementConfig,
        {
            name: f"--{name.replace('_', '-')}"
            for name in (
                "episodes",
                "env",
                "policy",
                "n",
                "seed",
                "judge",
                "template",
                "camera",
                "per_frame",
                "device",
            )
        },
    ),
}


def _flat(text: str) -> str:
    """Help text without the rich box and line wrapping."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def _main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run ``embodied ARGV`` as the entry point does; assert exit code 2; return stderr."""
    monkeypatch.setattr(sys, "argv", ["embodied", *argv])
    with pytest.raises(SystemExit) as info:
        main()
    err = capsys.readouterr().err
    assert info.value.code == 2, err
    return " ".join(err.split())


@pytest.mark.parametrize("command", list(GENERATED))
def test_every_config_field_has_a_doc(command: str) -> None:
    config, _ = GENERATED[command]
    docs = field_docs(config)
    missing = [f.name for f in dataclasses.fields(config) if f.init and not docs.get(f.name)]
    assert not missing, f"{config.__name__} fields without a docstring entry: {missing}"


@pytest.mark.parametrize("command", list(GENERATED))
def test_help_shows_each_field_doc_and_default(command: str) -> None:
    config, flags = GENERATED[command]
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "2000"})
    assert result.exit_code == 0, result.output
    text, docs = _flat(result.output), field_docs(config)
    fields = {f.name: f for f in dataclasses.fields(config)}
    for name, flag in flags.items():
        default = fields[name].default
        expected = re.escape(flag) + r" (--no-\S+ |-\w )?<\S+> " + re.escape(docs[name])
        if default is dataclasses.MISSING:
            expected += r" \[required\]"
        elif default not in (None, False, ""):
            expected += " " + re.escape(f"[default: {default}]")
        assert re.search(expected, text), (flag, expected, text)
    # plain switches stay plain (no --no-... form), as the hand-written options were
    for switch in ("--keep-failures", "--dry-run", "--clear-estop", "--per-frame"):
        assert f"--no-{switch[2:]}" not in text


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--episodes", "0"], "episodes=0 must be >= 1"),
        (["--episodes", "3", "--max-attempts", "2"], "max_attempts=2 is below episodes=3"),
        (["--speed", "fast"], "speed 'fast'"),
        (["--image-size", "0"], "image_size=0 must be >= 1"),
    ],
)
def test_collect_bad_value_exits_2_naming_the_key(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    args: list[str],
    named: str,
) -> None:
    out = tmp_path / "d"
    err = _main(
        monkeypatch, capsys, "collect", "--env", "mujoco:reach_around", "--out", str(out), *args
    )
    assert named in err and "fix:" in err, err
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--max-seconds", "0"], "max_seconds=0.0 must be > 0"),
        (["--max-seconds", "inf"], "max_seconds=inf must be finite"),
        (["--episodes", "0"], "episodes=0 must be >= 1"),
        (["--rate", "-5"], "rate_hz=-5.0 must be > 0"),
    ],
)
def test_deploy_bad_value_exits_2_naming_the_key(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    args: list[str],
    named: str,
) -> None:
    out = tmp_path / "run"
    argv = ["deploy", "--robot", str(DEFAULT_CONFIG), "--policy", "hold", "--dry-run"]
    err = _main(monkeypatch, capsys, *argv, "--out", str(out), *args)
    assert named in err and "fix:" in err, err
    assert not out.exists()  # refused before the output folder or the robot


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--env", "mujoco:arm_reach", "--n", "0"], "n=0 must be >= 1"),
        (["--env", "mujoco:arm_reach", "--judge", ","], "judge=',' names no judge"),
        (["--env", "mujoco:arm_reach", "--device", "gpu"], "device='gpu'"),
        ([], "episodes=None and env=None"),
    ],
)
def test_judge_bad_value_exits_2_naming_the_key(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    args: list[str],
    named: str,
) -> None:
    out = tmp_path / "report.json"
    err = _main(monkeypatch, capsys, "judge", "--out", str(out), *args)
    assert named in err and "fix:" in err, err
    assert not out.exists()


def test_collect_is_callable_from_python(tmp_path: Path) -> None:
    config = CollectConfig("mujoco:reach_around", episodes=2, camera=False, speed="0.3:0.4")
    assert config.attempts == 16 and config.env_kwargs() == {"camera": False}
    result = collect(config, tmp_path / "d")
    assert (result.kept, result.last_shard) == (2, 1) and result.attempts >= 2
    metas = [ep.attrs["meta"] for ep in Dataset(tmp_path / "d")]
    assert [m["seed"] for m in metas] == [0, 1] and all(0.3 <= m["speed"] <= 0.4 for m in metas)
    with pytest.raises(ConfigError, match="max_attempts=1 is below episodes=2"):
        CollectConfig("mujoco:reach_around", episodes=2, max_attempts=1)
