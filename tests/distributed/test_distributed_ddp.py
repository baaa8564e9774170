"""DDP on CPU (gloo): the accelerate helpers and `embodied train pdp` under torchrun."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.torch import load_file

from embodied.distributed import Distributed, resolve_mixed_precision
from embodied.errors import ConfigError
from tests.conftest import require

HERE = Path(__file__).resolve().parent


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _torchrun(n: int, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={n}",
        "--master-addr=127.0.0.1",
        f"--master-port={_port()}",
        *args,
    ]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return env


def _run_two_ranks(script: str, *args: str, out: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run ``script`` (in this folder) on 2 gloo ranks; return the ``out/rank<r>.json`` files."""
    proc = subprocess.run(
        _torchrun(2, str(HERE / script), *args),
        env=_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    # each rank's own error first: the tail alone is the launcher's summary and the rank
    # that hung up on the one that crashed
    errors = [ln for ln in proc.stderr.splitlines() if "Error" in ln and ln.startswith("[rank")]
    assert proc.returncode == 0, "\n".join(errors[:20]) + "\n...\n" + proc.stderr[-3000:]
    r0, r1 = (json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1))
    return r0, r1


def test_single_process_context_and_sharding() -> None:
    """Not launched: a plain context (no accelerate); shards split a global batch evenly."""
    dist = Distributed.from_env()
    assert not dist.enabled and dist.is_main and dist.world_size == 1
    assert dist.shard(32) == slice(0, 32)
    assert dist.any_rank(True) and not dist.any_rank(False)
    two = [Distributed(rank=r, world_size=2) for r in (0, 1)]
    assert [d.shard(32) for d in two] == [slice(0, 16), slice(16, 32)]
    with pytest.raises(ConfigError, match="33 is not divisible by 2"):
        two[0].shard(33)
    assert resolve_mixed_precision("auto", cuda=False) == "no"
    with pytest.raises(ConfigError, match="'fp8'"):
        resolve_mixed_precision("fp8", cuda=False)


def test_ddp_helpers_two_processes(tmp_path: Path) -> None:
    """2 gloo ranks: different local data, synchronised gradients, single-process result."""
    require("accelerate")
    r0, r1 = _run_two_ranks("ddp_toy.py", str(tmp_path), out=tmp_path)
    assert r0["world_size"] == r1["world_size"] == 2
    assert r0["wrapper"] == "DistributedDataParallel"
    assert not np.allclose(r0["local_losses"], r1["local_losses"])  # each rank its own block
    mean_local = (np.asarray(r0["local_losses"]) + np.asarray(r1["local_losses"])) / 2
    np.testing.assert_allclose(mean_local, r0["single_losses"], rtol=1e-5)
    np.testing.assert_array_equal(r0["weights"], r1["weights"])  # gradients were all-reduced
    np.testing.assert_allclose(r0["weights"], r0["single_weights"], rtol=1e-5, atol=1e-6)
    assert r0["any_rank"] == r1["any_rank"] == [True, False]  # rank 1's flag reaches rank 0


def _tb_losses(tb: Path) -> dict[int, float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = list(tb.glob("events.out.tfevents.*"))
    assert len(files) == 1, f"expected one event file (main process only), got {files}"
    acc = EventAccumulator(str(tb))
    acc.Reload()
    return {e.step: e.value for e in acc.Scalars("train/loss")}


@pytest.fixture(scope="module")
def pdp_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from embodied.apps.route_task import collect_demonstrations

    root = tmp_path_factory.mktemp("ddp_demos")
    collect_demonstrations(6, seed=0, out_dir=root)
    return root


def test_train_pdp_two_processes_match_one(pdp_data: Path, tmp_path: Path) -> None:
    """`embodied train pdp` unchanged under torchrun: same loss curve and weights as 1 process."""
    require("accelerate")
    args = [
        "train", "pdp", "--data", str(pdp_data), "--steps", "20", "--manifold-steps", "5",
        "--batch-size", "16", "--hidden-dim", "32", "--horizon", "8", "--n-action-steps", "4",
        "--checkpoint-every", "10", "--no-progress",
    ]  # fmt: skip
    one = subprocess.Popen(
        [sys.executable, "-m", "embodied", *args, "--out", str(tmp_path / "one")],
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    two = subprocess.run(
        _torchrun(2, "-m", "embodied", *args, "--out", str(tmp_path / "two")),
        env=_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    out1, err1 = one.communicate(timeout=300)
    assert one.returncode == 0, err1[-3000:]
    assert two.returncode == 0, two.stderr[-3000:]
    final1 = json.loads(out1.strip().splitlines()[-1])["final_loss"]
    finals2 = [json.loads(x)["final_loss"] for x in two.stdout.splitlines() if x.startswith("{")]
    assert len(finals2) == 1, two.stdout  # only the main process prints its result
    assert finals2[0] == pytest.approx(final1, rel=1e-4)
    curve1, curve2 = _tb_losses(tmp_path / "one" / "tb"), _tb_losses(tmp_path / "two" / "tb")
    assert sorted(curve1) == sorted(curve2) == [10, 20]
    for step in curve1:
        assert curve2[step] == pytest.approx(curve1[step], rel=1e-4)
    w1 = load_file(str(tmp_path / "one" / "model.safetensors"))
    w2 = load_file(str(tmp_path / "two" / "model.safetensors"))
    assert w1.keys() == w2.keys()  # checkpoint keeps the model's own names (no DDP prefix)
    for k in w1:
        np.testing.assert_allclose(w1[k].numpy(), w2[k].numpy(), rtol=1e-4, atol=1e-5)
    state = json.loads((tmp_path / "two" / "train_state.json").read_text())
    assert state["step"] == 20
    assert len(list((tmp_path / "two").glob("train_state_*.safetensors"))) == 1


def test_train_pdp_budget_agreed_and_group_torn_down(pdp_data: Path, tmp_path: Path) -> None:
    """A budget only rank 1 exceeds stops both ranks at one step; the group is destroyed.

    Before the ranks agreed, rank 0 waited forever in the all-reduce rank 1 never joined;
    before ``train_pdp`` destroyed its process group, gloo could abort the process at exit
    (SIGABRT, "terminate called without an active exception") after a successful run.
    """
    require("accelerate")
    r0, r1 = _run_two_ranks("pdp_budget.py", str(pdp_data), str(tmp_path), out=tmp_path)
    assert r0["steps"] == r1["steps"]
    assert 0 < r0["steps"] < 60  # rank 1's budget stopped both, long before the 60 steps
    assert not r0["initialized_after"] and not r1["initialized_after"]
    state = json.loads((tmp_path / "run" / "train_state.json").read_text())
    assert state["step"] == r0["steps"]  # the early stop was checkpointed
