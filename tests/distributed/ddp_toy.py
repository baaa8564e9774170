"""Run under ``torchrun --nproc-per-node 2``: checks :class:`embodied.distributed.Distributed`.

A linear regression trained for a few steps with the helpers (global batch, per-rank block,
DDP gradient sync over gloo). Every rank writes ``<out>/rank<r>.json`` with its local losses
and final weights; the test compares them with a single-process run on the global batch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from torch import nn

from embodied.distributed import Distributed, LossModule

STEPS, BATCH = 4, 8


class Toy(nn.Module):
    """y = W x; ``compute_loss`` is the MSE (the DDP-visible part is ``lin``)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(3, 1)

    def compute_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.mean((self.lin(x) - y) ** 2)


def train(dist: Distributed) -> tuple[list[float], list[float], str]:
    """Train; return this rank's local losses, the final weights and the wrapper type."""
    gen = torch.Generator().manual_seed(1)
    x_all = torch.randn(64, 3, generator=gen)
    y_all = x_all @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.1
    model = Toy()
    opt = torch.optim.SGD(model.lin.parameters(), lr=0.1)
    loss_fn, opt = dist.prepare(LossModule(model, model.lin), opt)
    local: list[float] = []
    for _ in range(STEPS):
        b = torch.randint(0, 64, (BATCH,), generator=gen)
        r = dist.shard(BATCH)
        loss = loss_fn(*dist.to_device(x_all[b][r], y_all[b][r]))
        opt.zero_grad()
        dist.backward(loss)
        opt.step()
        local.append(float(loss.item()))
    weights = torch.cat([p.detach().flatten() for p in model.lin.parameters()]).tolist()
    return local, weights, type(loss_fn).__name__


def main(out: Path) -> None:
    dist = Distributed.from_env()
    local, weights, wrapper = train(dist)
    ref_local, ref_weights, _ = train(Distributed())  # this process alone, on the whole batch
    (out / f"rank{dist.rank}.json").write_text(
        json.dumps(
            {
                "rank": dist.rank,
                "world_size": dist.world_size,
                "wrapper": wrapper,
                "local_losses": local,
                "weights": weights,
                "single_losses": ref_local,
                "single_weights": ref_weights,
                "any_rank": [dist.any_rank(dist.rank == 1), dist.any_rank(False)],
            }
        )
    )
    dist.close()


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(Path(sys.argv[1]))
