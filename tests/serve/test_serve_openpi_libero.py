"""openpi's own LIBERO evaluation client (``../shared/openpi/examples/libero/main.py``,
unmodified) drives a LIBERO policy served by ``embodied serve``.

The client runs LIBERO itself (its 256 px renders, 180-degree rotation, ``resize_with_pad`` to
224 px, eef pos + axis-angle + gripper qpos state, ``replan_steps`` actions per chunk) and
catches every exception into a log line and an early end of the episode, so the test checks
what only a served chunk per replan can produce: a replay video with a frame for every control
step of the episode. The runner below narrows the suite to its first task (one episode of 290
steps instead of ten); the client's file and arguments are otherwise its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from embodied.io import free_port
from tests.conftest import SHARED, require
from tests.serve.conftest import ROOT, serve_subprocess

CLIENT = SHARED / "openpi" / "examples" / "libero" / "main.py"

# max_steps for libero_object in the client (its longest training demo has 254 steps)
MAX_STEPS = 280

RUNNER = textwrap.dedent(
    """
    import runpy, sys

    from sim.libero.resources import import_libero, resolve_assets

    import_libero()
    resolve_assets()  # the assets folder as a user configures it ($EMBODIED_LIBERO_ASSETS)
    from libero.libero import benchmark

    suite_name, client, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
    whole = benchmark.get_benchmark_dict


    def first_task_only():
        suites = whole()
        base = suites[suite_name]

        class FirstTask(base):
            def __init__(self, *a, **k):
                super().__init__(*a, **k)
                self.n_tasks = 1

        suites[suite_name] = FirstTask
        return suites


    benchmark.get_benchmark_dict = first_task_only
    sys.argv = [client, *argv]
    runpy.run_path(client, run_name="__main__")
    """
)


pytestmark = [pytest.mark.libero, pytest.mark.usefixtures("libero_assets")]


def test_openpi_libero_client_evaluates_a_served_policy(libero_pdp: Path, tmp_path: Path) -> None:
    for module in ("tyro", "imageio", "tqdm", "openpi_client", "libero"):
        require(module)
    assert CLIENT.is_file(), f"{CLIENT} is missing (../shared/openpi, see its README)"
    port = free_port()
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    with serve_subprocess(libero_pdp, port):
        runner = tmp_path / "run_openpi_libero.py"
        runner.write_text(RUNNER)
        videos = tmp_path / "videos"
        client_args = ["--args.host", "127.0.0.1", "--args.port", str(port)]
        client_args += ["--args.task-suite-name", "libero_object"]
        client_args += ["--args.num-trials-per-task", "1", "--args.video-out-path", str(videos)]
        client = subprocess.run(
            [sys.executable, str(runner), "libero_object", str(CLIENT), *client_args],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=900,
        )
    log = client.stdout + client.stderr
    assert client.returncode == 0, log[-3000:]
    assert "Caught exception" not in log, log[-3000:]
    assert "Total episodes: 1" in log, log[-3000:]
    (video,) = videos.glob("rollout_*.mp4")
    import av

    with av.open(str(video)) as container:
        frames = sum(1 for _ in container.decode(video=0))
    # a frame per control step after the client's 10 waiting steps: the whole episode ran on
    # chunks served by embodied serve (an error would have ended it at the failing step) unless
    # the untrained policy happened to succeed
    assert frames == MAX_STEPS or "Success: True" in log, (frames, log[-2000:])
    assert frames > 5, frames
