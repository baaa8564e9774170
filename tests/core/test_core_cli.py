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
          or m.startswith("embodied.apps.cli.cmd_")]
print(json.dumps({"help": out.getvalue(), "loaded": loaded}))
"""


def test_help_lists_every_command_module_without_importing_it() -> None:
    """`embodied --help` lists one command per ``cmd_*.py`` file and imports none of them (so
    it stays fast while the command modules import torch & co at the top)."""
    proc = subprocess.run(
        [sys.executable, "-c", _HELP_PROBE], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    probe = json.loads(proc.stdout)
    assert probe["loaded"] == []
    files = {p.stem.removeprefix("cmd_") for p in Path(cli.__file__).parent.glob("cmd_*.py")}
    listed = set(re.findall(r"^│ (\w+) ", probe["help"], re.MULTILINE))
    assert listed == files == set(cli.command_modules())


def test_each_command_help_is_its_module_docstring() -> None:
    """The line `embodied --help` shows (read without import) heads the command's own help."""
    from typer.testing import CliRunner

    for name in cli.command_modules():
        summary = cli.command_help(name).split("\n\n")[0]
        assert summary and "\n" not in summary, name  # one line in the command list
        result = CliRunner().invoke(cli.app, [name, "--help"])
        assert result.exit_code == 0, (name, result.output)
        assert " ".join(summary.split()) in " ".join(result.output.split()), (name, result.output)


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
