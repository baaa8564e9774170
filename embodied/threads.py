"""Pinning a process to one compute thread (benchmarks, evaluation workers, Ray actors)."""

from __future__ import annotations

import os


def single_thread(threadpools: bool = False) -> None:
    """Pin torch and BLAS to one thread in this process.

    Sets ``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` and ``MKL_NUM_THREADS`` to 1 unless
    already set (seen by libraries loaded afterwards) and calls ``torch.set_num_threads(1)``.

    Args:
        threadpools: Also limit the BLAS/OpenMP pools already loaded, through threadpoolctl
            when it is installed.
    """
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:  # pragma: no cover - torch is a core dependency
        pass
    if threadpools:
        try:
            from threadpoolctl import threadpool_limits

            threadpool_limits(1)
        except ImportError:
            pass
