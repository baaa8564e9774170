"""The CLI as a user runs it: `python -m embodied ...` in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


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
