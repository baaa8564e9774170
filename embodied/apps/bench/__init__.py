"""Benchmarks: ``embodied bench <area> --json``.

Each area is a module ``embodied/apps/bench/<area>.py`` with ``run(quick: bool) -> dict``,
registered in :data:`AREAS`. Benchmarks pin torch and BLAS to one thread and report
medians of many runs (the machines they run on are shared and noisy).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import Any

from embodied import threads
from embodied.registry import Registry

AREAS: Registry[dict[str, Any]] = Registry("benchmark area")


def _discover() -> None:
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("_"):
            AREAS.register(info.name, _lazy(info.name))


def _lazy(name: str) -> Callable[..., dict[str, Any]]:
    def run(quick: bool = False) -> dict[str, Any]:
        module = importlib.import_module(f"{__name__}.{name}")
        return module.run(quick=quick)  # type: ignore[no-any-return]

    run.__doc__ = f"benchmark area {name}"
    return run


def single_thread() -> None:
    """Pin torch and BLAS to one thread (call before timing)."""
    threads.single_thread(threadpools=True)


def run_area(area: str, quick: bool = False) -> dict[str, Any]:
    """Run benchmark ``area`` single-threaded and return its JSON object."""
    single_thread()
    return AREAS.make(area, quick=quick)


_discover()
