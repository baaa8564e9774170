"""A newcomer follows README's five-minute tour end to end: the Python block runs as written,
and every command of the tour runs, in the README's order, in a fresh folder.

The commands are read from README.md (a changed tour changes this test) and run as a user
types them, with the ``embodied`` console script. Only their size is scaled down so the suite
stays within its budget (:data:`SCALE`, :data:`EXTRA`: fewer episodes, steps and timesteps;
free ports instead of fixed ones); no option is removed. ``CKPT`` (a checkpoint trained on
LIBERO demonstrations) is a tiny PDP trained here on a LIBERO-format demonstration file.
The long-running servers (``tune``, ``serve``) are started, used, and stopped with Ctrl-C.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.test_cli_readme import README, _fenced_commands

pytestmark = [pytest.mark.libero, pytest.mark.usefixtures("libero_assets")]

REPO = README.parent
LIBERO_SIZE = 32
"""Image size (px) of the LIBERO-format demonstrations the tiny ``CKPT`` is trained on."""

SCALE = {
    "--episodes": "2",
    "--n": "2",
    "--rl-timesteps": "64",
}
"""Options whose README value is scaled down (option -> value here)."""

EXTRA: dict[str, list[str]] = {
    "train pdp": ["--steps", "2", "--manifold-steps", "2", "--batch-size", "4",
                  "--snapshot-every-s", "0"],
    "eval": ["--max-steps", "8", "--workers", "0"],
    "lab steer reference": ["--seeds", "1"],
    "lab steer experiment": [
        "--demonstration-episodes", "2", "--train-steps", "2", "--llm-layers", "1",
        "--image-size", "32", "--episodes", "1", "--sweep-episodes", "1",
        "--sweep-alphas", "0,0.5", "--haeon-coefs", "0.5,1", "--setpoints", "0.1",
    ],
    "lab steer dial": [
        "--demonstrations", "2", "--train-steps", "2", "--llm-layers", "1",
        "--image-size", "32", "--episodes", "1", "--alphas", "0,0.5",
    ],
    "deploy": ["--max-seconds", "1"],
}  # fmt: skip
"""Options added to a tour command (its verb -> options) to make it small; the others run
as written."""

LIBERO_EVAL = ["--max-steps", "3"]
"""Added to the LIBERO evaluation (its ``--episodes`` becomes 1: one per task of the suite)."""

WORDS = {"render_size=84": f"render_size={LIBERO_SIZE}"}
"""Words of the tour replaced here: the tiny checkpoint's image size."""


def tour_section() -> str:
    """README's "A five-minute tour" section."""
    text = README.read_text(encoding="utf-8")
    start = text.index("## A five-minute tour")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def tour_python() -> str:
    """The tour's Python block."""
    blocks = re.findall(r"```python\n(.*?)```", tour_section(), re.S)
    assert len(blocks) == 1, "the tour shows one Python block"
    return str(blocks[0])


def tour_commands() -> list[list[str]]:
    """The tour's command lines, in order, as argument lists (``embodied`` first)."""
    return [shlex.split(c) for c in _fenced_commands(tour_section())]


def verb(argv: list[str]) -> str:
    """``embodied train pdp ...`` -> ``train pdp``; ``embodied eval ...`` -> ``eval``."""
    words = [w for w in argv[1:4] if not w.startswith("-")]
    if words[0] == "lab":
        return " ".join(words[:3])
    if words[0] == "train":
        return " ".join(words[:2])
    return words[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scaled(argv: list[str], cwd: Path, ckpt: Path | None) -> list[str]:
    """``argv`` with :data:`SCALE` values, :data:`EXTRA` options, free ports, ``CKPT`` filled
    and repository paths (``hardware/configs/...``) made absolute (the test runs elsewhere)."""
    out = [str(Path(sys.executable).with_name("embodied"))]
    args = argv[1:]
    libero = any(w.startswith("libero:") for w in args)
    for i, word in enumerate(args):
        prev = args[i - 1] if i else ""
        if prev == "--episodes" and libero:
            word = "1"
        elif prev in SCALE:
            word = SCALE[prev]
        elif prev == "--port":
            word = str(free_port())
        elif word in WORDS:
            word = WORDS[word]
        elif word == "CKPT":
            assert ckpt is not None
            word = str(ckpt)
        elif "ws://127.0.0.1:" in word:
            word = "ws://127.0.0.1:{serve_port}"
        elif (REPO / word).exists() and not (cwd / word).exists() and "/" in word:
            word = str(REPO / word)
        out.append(word)
    out += EXTRA.get(verb(argv), [])
    if libero:
        out += LIBERO_EVAL
    return out


@pytest.fixture(scope="module")
def libero_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny PDP trained on a LIBERO-format demonstration file (the tour's ``CKPT``)."""
    from policies.diffusion.training_pdp import train_pdp
    from sim.libero import load_demonstrations
    from tests.libero.test_libero_demonstrations import (
        TINY_VISUOMOTOR_PDP,
        write_libero_demonstration_file,
    )

    root = tmp_path_factory.mktemp("libero_ckpt")
    data = root / "pick_up_the_alphabet_soup_and_place_it_in_the_basket_demo.hdf5"
    write_libero_demonstration_file(data, lengths=(6, 9))
    overrides = {**TINY_VISUOMOTOR_PDP, "steps": 2}
    train_pdp(load_demonstrations(data), root / "run", overrides=overrides, progress=False,
              tensorboard=False)  # fmt: skip
    return root / "run"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _run(argv: list[str], cwd: Path, timeout_s: float = 900) -> str:
    done = subprocess.run(
        argv, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout_s
    )
    assert done.returncode == 0, (
        f"tour command failed ({done.returncode}): {shlex.join(argv)}\n{done.stdout[-3000:]}"
        f"\n{done.stderr[-3000:]}"
    )
    return done.stdout


@pytest.fixture
def server() -> Iterator[list[subprocess.Popen[str]]]:
    """Long-running tour commands started by a test; Ctrl-C'd (then killed) afterwards."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_for_port(port: int, proc: subprocess.Popen[str], timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"server exited: {proc.stdout.read() if proc.stdout else ''}"
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"nothing listened on 127.0.0.1:{port} within {timeout_s} s")


def test_the_tour_python_block_runs_as_written(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", tour_python()], cwd=tmp_path, env=_env(), capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    success, shape = done.stdout.strip().splitlines()[-1].split(" ", 1)
    assert success == "True" and re.fullmatch(r"\(\d+, \d+\)", shape), done.stdout


def test_the_tour_commands_run_end_to_end(
    tmp_path: Path, libero_checkpoint: Path, server: list[subprocess.Popen[str]]
) -> None:
    commands = tour_commands()
    verbs = [verb(c) for c in commands]
    # the tour's order: data before training, training before evaluating and serving it
    assert verbs.index("collect") < verbs.index("train pdp") < verbs.index("eval")
    assert verbs.index("train pdp") < verbs.index("serve")
    serve_port = None
    ran: list[str] = []
    for argv in commands:
        line = scaled(argv, tmp_path, libero_checkpoint)
        name = verb(argv)
        t0 = time.monotonic()
        if name == "tune":
            port = free_port()
            proc = subprocess.Popen(
                [*line, "--port", str(port)], cwd=tmp_path, env=_env(), text=True,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            )  # fmt: skip
            server.append(proc)
            _wait_for_port(port, proc)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as page:
                assert page.status == 200 and b"<html" in page.read().lower()
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=60) in (0, 130, -signal.SIGINT)
        elif name == "serve":
            serve_port = int(line[line.index("--port") + 1])
            proc = subprocess.Popen(
                line, cwd=tmp_path, env=_env(), text=True, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
            server.append(proc)
            _wait_for_port(serve_port, proc)
        else:
            if any("{serve_port}" in w for w in line):
                assert serve_port is not None, "the tour evaluates a served policy before serving"
                line = [w.format(serve_port=serve_port) for w in line]
            _run(line, tmp_path)
        ran.append(name)
        print(f"{time.monotonic() - t0:6.1f} s  {shlex.join(argv)}")  # seen with -s
    assert set(ran) >= {"collect", "train pdp", "eval", "judge", "deploy", "tune", "serve"}
    # what the tour said each command writes is there
    assert (tmp_path / "runs" / "pdp" / "model.safetensors").exists()
    results = json.loads((tmp_path / "runs" / "eval_served" / "results.json").read_text())
    assert len(results["episodes"]) == 2
    assert (tmp_path / "runs" / "judges.json").exists()
    assert (tmp_path / "runs" / "deploy" / "summary.json").exists()
