"""A command that touches robosuite or LIBERO prints nothing of the libraries' own noise.

A user saw three robosuite macro warnings at the start and ``EGLError`` tracebacks from
render-context destructors at the end of every LIBERO command. Each case runs a fresh
interpreter that makes a rendering env, steps it, and exits *without* closing it, as a script
that hits an exception would.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPTS = {
    "libero": (
        "import sim\n"
        "env = sim.make('libero:libero_goal:0')\n"
        "env.reset(seed=0)\n"
        "env.step(env.action_space.sample() * 0)\n"
        "print('stepped')\n"
    ),
    "robosuite": (
        "import sim\n"
        "env = sim.make('robosuite:Lift', camera=['agentview'], image_size=32)\n"
        "env.reset(seed=0)\n"
        "env.step(env.action_space.sample() * 0)\n"
        "print('stepped')\n"
    ),
}


@pytest.mark.parametrize("family", sorted(SCRIPTS))
def test_rendering_env_left_open_exits_without_tracebacks_or_warnings(
    family: str, shared_dir: Path
) -> None:
    env = {
        **os.environ,
        "MUJOCO_GL": "egl",
        "EMBODIED_LIBERO_ASSETS": str(shared_dir / "libero-assets"),
    }
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPTS[family]],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "stepped" in proc.stdout
    assert "Exception ignored" not in output, output
    assert "EGLError" not in output, output
    assert "macro file" not in output, output
