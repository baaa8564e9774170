"""Multi-process (DDP) training helpers on top of Hugging Face ``accelerate``.

Training loops stay single-process code and call these helpers; launched with
``accelerate launch`` or ``torchrun`` the same code runs data-parallel::

    torchrun --nproc-per-node 2 -m embodied train pdp --data D --out O   # 2 CPU processes, gloo
    accelerate launch --multi_gpu --num_processes 4 -m embodied train pdp --data D --out O
                                                                # 4 GPUs, nccl, bf16 autocast

(``accelerate launch --cpu`` starts several CPU processes only through ``mpirun``; torchrun
needs nothing extra.)

What :class:`Distributed` provides (accelerate does the engine work: process group, DDP
wrapping, device placement, autocast, gradient sync):

* ``from_env()``: a single-process context (no accelerate import, nothing changes) unless
  the process was started by a launcher (``WORLD_SIZE > 1``) or a GPU run was asked for;
  then an :class:`accelerate.Accelerator` (``gloo`` on CPU, ``nccl`` on GPU).
* mixed precision: ``auto`` = ``bf16`` on GPUs that support it, else ``fp16`` on GPU, ``no``
  on CPU (override with ``EMBODIED_MIXED_PRECISION`` or the launcher's ``--mixed_precision``).
* per-rank data sharding of a *global* batch: every rank draws the same global batch (same
  seed, same generator) and keeps its contiguous block :meth:`Distributed.shard`; with DDP's
  gradient averaging the update equals the single-process update on the whole batch, so the
  loss curve does not depend on the number of processes.
* :class:`LossModule`: wraps a model's loss *method* as ``forward`` so DDP can hook it, while
  only the trainable submodule is registered (unused parameters never stall the all-reduce and
  checkpoints keep the model's own parameter names).
* ``is_main`` / :meth:`Distributed.barrier`: one process writes checkpoints and logs.
* a context manager: ``with Distributed.from_env() as dist:`` tears the process group down
  at the end (after an error without waiting for the other processes).
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from embodied.errors import ConfigError

MIXED_PRECISION_ENV = "EMBODIED_MIXED_PRECISION"
"""Overrides the mixed-precision mode (``no``, ``fp16``, ``bf16``, ``auto``)."""


def launched_world_size() -> int:
    """Processes in this job as set by torchrun / accelerate launch (1 when not launched)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def resolve_mixed_precision(mode: str, cuda: bool) -> str:
    """``auto`` -> ``bf16`` / ``fp16`` on GPU, ``no`` on CPU; other modes are validated."""
    mode = os.environ.get(MIXED_PRECISION_ENV, mode) or "auto"
    if mode not in ("auto", "no", "fp16", "bf16"):
        raise ConfigError(
            f"mixed precision {mode!r} unknown", fix="use one of: auto, no, fp16, bf16"
        )
    if mode == "auto":
        if not cuda:
            return "no"
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if mode != "no" and not cuda:
        return "no"  # autocast on CPU would only slow the tiny models down
    return mode


class LossModule(nn.Module):
    """``forward(*args) = getattr(model, method)(*args)``, registering only ``trainable``.

    DDP synchronises gradients of the parameters of the module it wraps, and hooks them when
    that module's ``forward`` runs. Wrapping the full model would also register frozen or
    unused parts (e.g. an already trained encoder) and stall the gradient all-reduce; wrapping
    only ``trainable`` (the denoiser) keeps the model's loss code and parameter names intact.

    Args:
        model: The model whose loss method computes the training loss.
        trainable: The submodule whose parameters the optimizer updates.
        method: Name of the loss method of ``model``.
    """

    def __init__(self, model: nn.Module, trainable: nn.Module, method: str = "compute_loss"):
        super().__init__()
        if not callable(getattr(model, method, None)):
            raise ConfigError(f"{type(model).__name__} has no loss method {method!r}")
        self.trainable = trainable
        object.__setattr__(self, "_model", model)  # not registered: DDP must not see it
        self._method = method

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        """The model's loss."""
        return getattr(self._model, self._method)(*args, **kwargs)  # type: ignore[no-any-return]


@dataclass
class Distributed:
    """Where this process stands in a (possibly) data-parallel training job.

    Attributes:
        accelerator: The :class:`accelerate.Accelerator`, or None for a plain single process.
        rank: Global rank (0 .. world_size - 1).
        world_size: Number of processes.
        device: Device of this process's model and batches.
        mixed_precision: ``no``, ``fp16`` or ``bf16``.
    """

    accelerator: Any = None
    rank: int = 0
    world_size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    mixed_precision: str = "no"

    @property
    def is_main(self) -> bool:
        """True on the process that writes checkpoints, logs and progress."""
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        """True when running under an accelerator (several processes or a GPU)."""
        return self.accelerator is not None

    @classmethod
    def from_env(
        cls,
        mixed_precision: str = "auto",
        use_gpu: bool | None = None,
        find_unused_parameters: bool = False,
    ) -> Distributed:
        """The context of this process.

        Args:
            mixed_precision: ``auto``, ``no``, ``fp16`` or ``bf16`` (GPU only).
            use_gpu: Train on GPU; None: when launched on a machine with CUDA.
            find_unused_parameters: Passed to DDP: set it when the wrapped module has
                trainable parameters that the loss does not reach (e.g. the last vision
                layers of OpenVLA, whose features come from the second-to-last layer).

        Raises:
            ConfigError: accelerate is missing for a launched run, or a bad precision mode.
        """
        world = launched_world_size()
        cuda = torch.cuda.is_available() if use_gpu is None else bool(use_gpu)
        if use_gpu and not torch.cuda.is_available():
            raise ConfigError("use_gpu=True but torch sees no CUDA device", fix="drop use_gpu")
        if world == 1 and not (use_gpu or (cuda and "LOCAL_RANK" in os.environ)):
            return cls()  # plain single CPU process: no accelerate, behaviour unchanged
        try:
            from accelerate import Accelerator
        except ImportError as exc:
            raise ConfigError(
                f"a launched ({world}-process) run needs accelerate ({exc})",
                fix="pip install 'accelerate>=1.0'",
            ) from exc
        from accelerate.utils import DistributedDataParallelKwargs

        mp = resolve_mixed_precision(mixed_precision, cuda)
        ddp = DistributedDataParallelKwargs(find_unused_parameters=find_unused_parameters)
        acc = Accelerator(cpu=not cuda, mixed_precision=mp, kwargs_handlers=[ddp])
        return cls(acc, acc.process_index, acc.num_processes, acc.device, mp)

    # ---- data --------------------------------------------------------------------------
    def shard(self, global_batch: int) -> slice:
        """This rank's contiguous block of a global batch of ``global_batch`` items.

        Raises:
            ConfigError: the global batch does not split evenly (the mean over ranks of
                per-rank mean losses would then not equal the global mean).
        """
        if global_batch % self.world_size:
            raise ConfigError(
                f"global batch size {global_batch} is not divisible by {self.world_size} processes",
                fix=f"use a batch size that is a multiple of {self.world_size}",
            )
        per = global_batch // self.world_size
        return slice(self.rank * per, (self.rank + 1) * per)

    def to_device(self, *tensors: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        """Move tensors (None passes through) to this process's device."""
        return tuple(None if t is None else t.to(self.device, non_blocking=True) for t in tensors)

    # ---- model / optimisation ----------------------------------------------------------
    def prepare(self, module: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[Any, Any]:
        """DDP-wrap ``module`` and wrap ``optimizer`` (identity for a plain single process)."""
        if self.accelerator is None:
            return module, optimizer
        return self.accelerator.prepare(module, optimizer)  # type: ignore[no-any-return]

    def backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()`` (with gradient scaling for fp16); DDP all-reduces gradients."""
        if self.accelerator is None:
            loss.backward()
        else:
            self.accelerator.backward(loss)

    def clip_grad_norm_(self, parameters: Iterable[nn.Parameter], max_norm: float) -> None:
        """Clip the (already synchronised, unscaled) gradient norm."""
        if self.accelerator is None:
            torch.nn.utils.clip_grad_norm_(parameters, max_norm)
        else:
            self.accelerator.clip_grad_norm_(parameters, max_norm)

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        """Mixed-precision autocast for the forward pass (no-op without it)."""
        if self.accelerator is None or self.mixed_precision == "no":
            yield
        else:
            with self.accelerator.autocast():
                yield

    # ---- collectives -------------------------------------------------------------------
    def mean(self, value: torch.Tensor | float) -> float:
        """Mean of a scalar over all processes (e.g. the logged loss)."""
        t = torch.as_tensor(value, dtype=torch.float32).detach().reshape(1)
        if self.accelerator is None or self.world_size == 1:
            return float(t.item())
        return float(self.accelerator.reduce(t.to(self.device), reduction="mean").item())

    def broadcast(self, array: np.ndarray) -> np.ndarray:
        """Rank 0's copy of ``array`` on every process (same shape everywhere)."""
        if self.accelerator is None or self.world_size == 1:
            return array
        from accelerate.utils import broadcast

        t = torch.as_tensor(np.ascontiguousarray(array)).to(self.device)
        return broadcast(t, from_process=0).cpu().numpy()  # type: ignore[no-any-return]

    def any_rank(self, flag: bool) -> bool:
        """True on every process when ``flag`` is true on any one of them.

        Decisions that end the loop early (a wall-time budget) are taken per process from
        its own clock; they must agree, or the ranks that go on wait forever in the next
        gradient all-reduce for the ones that stopped.
        """
        if self.accelerator is None or self.world_size == 1:
            return bool(flag)
        t = torch.tensor([1.0 if flag else 0.0], device=self.device)
        return bool(self.accelerator.reduce(t, reduction="sum").item() > 0)

    def barrier(self) -> None:
        """Wait for every process (e.g. before reading what the main process wrote)."""
        if self.accelerator is not None and self.world_size > 1:
            self.accelerator.wait_for_everyone()

    def __enter__(self) -> Distributed:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        """:meth:`close`; after an error on this process without waiting for the others."""
        self.close(wait=exc_type is None)

    def close(self, wait: bool = True) -> None:
        """Tear down the process group (call at the end of a launched run).

        Without it gloo's worker threads still hold work objects at interpreter exit and the
        process can die with SIGABRT ("terminate called without an active exception") after
        a run that succeeded.

        Args:
            wait: Wait for every process first (normal end). False after an error on this
                process: the others may never reach the barrier.
        """
        if self.accelerator is not None and self.world_size > 1:
            gc.collect()  # DDP wrappers left in reference cycles still hold the group
            if wait:
                self.accelerator.wait_for_everyone()
                self.accelerator.end_training()
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                torch.distributed.destroy_process_group()
