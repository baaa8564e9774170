"""The CLI as a user runs it: `python -m embodied ...` in a subprocess."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import embodied.apps.cli as cli


def embodied(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "embodied", *args], capture_output=True, text=True, timeout=600
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"embodied {args} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


def test_help_lists_core_commands() -> None:
    out = embodied("--help").stdout
    for cmd in ("envs", "collect", "demo", "bench", "eval"):
        assert cmd in out


_HELP_PROBE = """
import contextlib, io, json, sys
from embodied.apps.cli import main
sys.argv = ["embodied", "--help"]
with contextlib.redirect_stdout(io.StringIO()) as out:
    main()
loaded = [m for m in sys.modules if m.split(".")[0] in ("torch", "mujoco", "transformers")
          or m.startswith(("embodied.apps.cli.cmd_", "embodied.apps.lab."))]
print(json.dumps({"help": out.getvalue(), "loaded": loaded}))
"""


def test_help_lists_every_command_module_without_importing_it() -> None:
    """`embodied --help` lists one command per ``cmd_*.py`` file, and the mounted ``lab`` group,
    and imports none of them (so it stays fast while the command modules import torch & co at
    the top); the deprecated top-level names are not listed."""
    proc = subprocess.run(
        [sys.executable, "-c", _HELP_PROBE], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    probe = json.loads(proc.stdout)
    assert probe["loaded"] == []
    files = {p.stem.removeprefix("cmd_") for p in Path(cli.__file__).parent.glob("cmd_*.py")}
    listed = set(re.findall(r"^│ (\w+) ", probe["help"], re.MULTILINE))
    assert listed == files | set(cli.MOUNTED) == set(cli.command_modules())
    assert not listed & set(cli.DEPRECATED)


def test_each_command_help_is_its_module_docstring() -> None:
    """The line `embodied --help` shows (read without import) heads the command's own help."""
    from typer.testing import CliRunner

    for name in cli.command_modules():
        summary = cli.command_help(name).split("\n\n")[0]
        assert summary and "\n" not in summary, name  # one line in the command list
        result = CliRunner().invoke(cli.app, [name, "--help"])
        assert result.exit_code == 0, (name, result.output)
        assert " ".join(summary.split()) in " ".join(result.output.split()), (name, result.output)


def test_lab_help_lists_its_commands_without_importing_them() -> None:
    """`embodied lab --help` lists the paper reproductions from their files, importing none."""
    from embodied.apps.lab import cli as lab_cli

    probe = _HELP_PROBE.replace('["embodied", "--help"]', '["embodied", "lab", "--help"]')
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert [m for m in out["loaded"] if m.startswith("embodied.apps.lab.cli.cmd_")] == []
    listed = set(re.findall(r"^│ (\w+) ", out["help"], re.MULTILINE))
    files = {p.stem.removeprefix("cmd_") for p in Path(lab_cli.__file__).parent.glob("cmd_*.py")}
    assert listed == files == set(cli.command_modules(lab_cli.__name__))
    assert set(cli.DEPRECATED) == files  # every old top-level name still runs


@pytest.mark.parametrize("old", sorted(cli.DEPRECATED))
def test_old_top_level_names_run_with_a_deprecation_note(old: str) -> None:
    """`embodied pdp ...` runs `embodied lab pdp ...` for one release: hidden from the listing,
    one line on stderr naming the new spelling, the same command otherwise."""
    from typer.testing import CliRunner

    new = cli.DEPRECATED[old]
    result = CliRunner().invoke(cli.app, [old, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert f"Deprecated: use `embodied {new}`" in " ".join(result.output.split())
    bad = CliRunner().invoke(cli.app, [old, "--no-such-option"])
    assert bad.exit_code == 2, bad.output  # parsed by the same command as the new spelling
    probe = (
        "import sys\n"
        "from embodied.apps.cli import main\n"
        f"sys.argv = ['embodied', {old!r}, '--no-such-option']\n"
        "main()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 2, proc.stderr[-2000:]


def test_an_old_name_prints_one_deprecation_line_on_stderr(tmp_path: Path) -> None:
    """Run through the console script's path, the old name notes the new one on stderr once."""
    proc = embodied("reward", "tiny-vlm", "--help", check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    argv = ("latency", "--methods", "nosuch", "--out", str(tmp_path / "x"))
    proc = embodied(*argv, check=False)
    assert proc.returncode == 2 and "methods[0]='nosuch' must be one of" in proc.stderr, proc.stderr
    notes = [line for line in proc.stderr.splitlines() if line.startswith("note:")]
    assert notes == [
        "note: `embodied latency` is deprecated and goes in 0.2.0; use `embodied lab latency`"
    ], proc.stderr[-2000:]


def test_unknown_command_is_a_usage_error() -> None:
    proc = embodied("evl", check=False)
    assert proc.returncode == 2
    assert "No such command 'evl'" in proc.stderr and "'eval'" in proc.stderr


def test_envs_lists_builtin_tasks() -> None:
    data = json.loads(embodied("envs", "--json").stdout)
    assert {"mujoco:reach_around", "mujoco:arm_reach"} <= set(data["envs"])


def test_unknown_env_names_the_fix(tmp_path: Path) -> None:
    proc = embodied(
        "collect", "--env", "mujoco:nope", "--episodes", "1", "--out", str(tmp_path), check=False
    )
    assert proc.returncode == 2
    assert "unknown mujoco task 'nope'" in proc.stderr and "fix:" in proc.stderr


def test_demo_sim_section_writes_report(tmp_path: Path) -> None:
    out = tmp_path / "report"
    embodied("demo", "--quick", "--only", "sim", "--out", str(out))
    metrics = json.loads((out / "metrics.json").read_text())
    sim = metrics["sections"]["sim"]
    assert sim["reach_around"]["expert_success_rate"] >= 0.8
    assert (out / "reach_around_routes.png").stat().st_size > 10_000
    mp4 = (out / "arm_reach_rollout.mp4").read_bytes()
    assert mp4[4:8] == b"ftyp" and len(mp4) > 2_000


@pytest.mark.parametrize("bad", ["nosuch"])
def test_demo_rejects_unknown_section(tmp_path: Path, bad: str) -> None:
    proc = embodied("demo", "--only", bad, "--out", str(tmp_path), check=False)
    assert proc.returncode == 2 and f"['{bad}']" in proc.stderr
