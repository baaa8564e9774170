"""Tiny-VLA behaviour cloning data-parallel on CPU (gloo): `embodied train vla` under torchrun."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from embodied.distributed import Distributed
from embodied.errors import ConfigError
from policies.openvla.training_openvla import (
    BCSettings,
    DemonstrationSteps,
    build_tiny_vla,
    train_bc,
)
from tests.conftest import require


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", MUJOCO_GL="egl")
    return env


def _toy_demonstrations(n: int = 24) -> DemonstrationSteps:
    """A red square's position decides the action (no simulator needed)."""
    rng = np.random.default_rng(0)
    imgs = np.zeros((n, 64, 64, 3), dtype=np.uint8)
    acts = np.zeros((n, 4))
    instr = []
    for i in range(n):
        x, y = rng.integers(4, 56, size=2)
        imgs[i, y : y + 8, x : x + 8] = (255, 0, 0)
        acts[i, :2] = (np.array([x, y]) - 30) / 300
        instr.append("reach the red cube quickly" if i % 2 else "reach the red cube slowly")
    return DemonstrationSteps(imgs, instr, acts, np.arange(n), np.full(n, 0.1))


def _first_loss(demonstrations: DemonstrationSteps, dist: Distributed) -> float:
    model, proc = build_tiny_vla(
        demonstrations.instructions, demonstrations.actions, "toy", [True] * 3 + [False]
    )
    settings = BCSettings(steps=1, batch_size=8, log_every=1)
    return train_bc(model, proc, demonstrations, settings, dist=dist)[0]["loss"]


def test_each_rank_trains_on_its_block_of_the_global_batch() -> None:
    """Rank r's loss is on its half of the same global batch; their mean is the global loss."""
    torch.set_num_threads(1)
    demonstrations = _toy_demonstrations()
    single = _first_loss(demonstrations, Distributed())
    halves = [_first_loss(demonstrations, Distributed(rank=r, world_size=2)) for r in (0, 1)]
    assert halves[0] != pytest.approx(halves[1], rel=1e-3)  # different samples per rank
    assert np.mean(halves) == pytest.approx(single, rel=1e-5)
    with pytest.raises(ConfigError, match="batch size 8 is not divisible by 3"):
        _first_loss(demonstrations, Distributed(rank=0, world_size=3))


def test_train_vla_two_processes_match_one(tmp_path: Path) -> None:
    """`embodied train vla` unchanged under torchrun: same loss curve and weights as 1 process."""
    require("accelerate")
    args = ["train", "vla", "--demonstration-episodes", "1", "--steps", "8", "--batch-size", "8",
            "--llm-layers", "1"]  # fmt: skip
    one = subprocess.Popen(
        [sys.executable, "-m", "embodied", *args, "--out", str(tmp_path / "one")],
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    two = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
         "--master-addr=127.0.0.1", f"--master-port={_port()}",
         "-m", "embodied", *args, "--out", str(tmp_path / "two")],
        env=_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    out1, err1 = one.communicate(timeout=300)
    assert one.returncode == 0, err1[-3000:]
    assert two.returncode == 0, two.stderr[-3000:]
    lines2 = [x for x in two.stdout.splitlines() if x.startswith("{")]
    assert len(lines2) == 1, two.stdout  # only the main process prints its result
    assert two.stderr.count("bc step 8:") == 1  # ... and logs
    cfg1 = json.loads((tmp_path / "one" / "config.json").read_text())["training"]
    cfg2 = json.loads((tmp_path / "two" / "config.json").read_text())["training"]
    assert cfg2["world_size"] == 2 and cfg1["world_size"] == 1
    curve1 = [r["loss"] for r in cfg1["history"]]
    curve2 = [r["loss"] for r in cfg2["history"]]
    assert len(curve1) == len(curve2) == 8
    assert curve1[-1] < curve1[0]  # it trains
    np.testing.assert_allclose(curve2, curve1, rtol=1e-4)
    assert json.loads(out1.strip().splitlines()[-1])["final_loss"] == curve1[-1]
    assert json.loads(lines2[0])["final_loss"] == pytest.approx(curve1[-1], rel=1e-4)
    w1 = load_file(str(tmp_path / "one" / "model.safetensors"))
    w2 = load_file(str(tmp_path / "two" / "model.safetensors"))
    assert w1.keys() == w2.keys()  # released parameter names, no DDP "module." prefix
    for k in w1:  # per tensor: Adam turns float-level gradient differences into tiny steps
        diff = float(torch.linalg.vector_norm(w1[k] - w2[k]))
        assert diff <= 1e-3 * float(torch.linalg.vector_norm(w1[k])) + 1e-6, k
    assert not list(tmp_path.glob(".two.*"))  # no leftover partial checkpoint folders
