"""The code base stays ruff-clean (lint + format) and mypy-clean."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["embodied", "policies", "controllers", "sim", "hardware"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=900
    )


@pytest.mark.parametrize("cmd", [("ruff", "check", "."), ("ruff", "format", "--check", ".")])
def test_ruff(cmd: tuple[str, ...]) -> None:
    proc = _run(*cmd)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_mypy() -> None:
    proc = _run("mypy", *PACKAGES)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
