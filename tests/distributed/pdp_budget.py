"""Run under ``torchrun --nproc-per-node 2``: a wall-time budget that only one rank exceeds.

Rank 1 gets a clock that runs 1000 s per reading, so by its own clock the budget runs out
after a few steps while rank 0's real clock never reaches it. The ranks must still stop at
the same step (a rank that stopped alone would leave the other waiting forever in the next
gradient all-reduce), and ``train_pdp`` must tear its process group down before it returns.
Every rank writes ``<out>/rank<r>.json``.

Rank 1 also opens the run folder 2 s late (after the process group is up), so rank 0 would
have written its step-0 checkpoint by then: no rank may write to the folder before every rank
has opened it.
"""

from __future__ import annotations

import json
import os
import sys
import time
import types
from pathlib import Path

import torch

from policies.diffusion import training_pdp


class _FastClock:
    """``perf_counter`` that advances 1000 s per call."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 1000.0
        return self.now


def main(data: Path, out: Path) -> None:
    rank = int(os.environ["RANK"])
    if rank == 1:
        open_run = training_pdp._open_run

        def late_open_run(*args: object) -> object:
            time.sleep(2.0)
            return open_run(*args)  # type: ignore[arg-type]

        training_pdp._open_run = late_open_run  # type: ignore[assignment]
        training_pdp.time = types.SimpleNamespace(perf_counter=_FastClock().perf_counter)  # type: ignore[assignment]
    result = training_pdp.train_pdp(
        data,
        out / "run",
        overrides={"steps": 60, "batch_size": 16, "hidden_dim": 32, "horizon": 8,
                   "n_action_steps": 4, "z_dim": 0},
        progress=False,
        tensorboard=False,
        budget_s=10_000.0,
    )  # fmt: skip
    (out / f"rank{rank}.json").write_text(
        json.dumps({"steps": result.steps, "initialized_after": torch.distributed.is_initialized()})
    )


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(Path(sys.argv[1]), Path(sys.argv[2]))
