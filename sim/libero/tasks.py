"""LIBERO suites and tasks: listing, resolving ``suite[:task]`` ids, file paths.

Task order is LIBERO's default (task order 0), so ``libero:libero_spatial:3`` is task 3 of
``benchmark.get_benchmark_dict()["libero_spatial"]()``, the numbering papers report.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from embodied.errors import ConfigError, UnknownNameError
from sim.libero.configuration_libero import SUITES, check_suite
from sim.libero.resources import config_file, import_libero


@dataclass(frozen=True)
class LiberoTask:
    """One LIBERO task.

    Attributes:
        suite: Suite name, e.g. ``libero_spatial``.
        index: Position in the suite (task order 0).
        name: LIBERO's task name (the bddl file stem).
        language: The instruction.
    """

    suite: str
    index: int
    name: str
    language: str

    @property
    def env_task(self) -> str:
        """The task part of the env id: ``<suite>:<index>``."""
        return f"{self.suite}:{self.index}"

    def bddl_file(self) -> Path:
        """Path of the task's BDDL problem file (from LIBERO's config)."""
        return _path("bddl_files") / self.suite / f"{self.name}.bddl"

    def init_states_file(self) -> Path:
        """Path of the task's fixed init states (``*.pruned_init``)."""
        return _path("init_states") / self.suite / f"{self.name}.pruned_init"


def _path(key: str) -> Path:
    ll = import_libero()
    path = Path(ll.get_libero_path(key))
    if not path.exists():
        raise ConfigError(
            f"LIBERO's {key!r} path {str(path)!r} (from {config_file()}) does not exist",
            fix=f"fix or delete {config_file()}; it is rewritten with the package defaults",
        )
    return path


def language_from_task_name(name: str) -> str:
    """The instruction encoded in a task name (LIBERO's ``grab_language_from_filename``)."""
    if name[:1].isupper():  # LIBERO-100 names start with the scene, e.g. KITCHEN_SCENE3_...
        start = name.find("SCENE") + (8 if "SCENE10" in name else 7)
        return " ".join(name[start:].split("_"))
    return " ".join(name.split("_"))


@cache
def suite_tasks(suite: str) -> tuple[LiberoTask, ...]:
    """The tasks of ``suite`` in LIBERO's default order."""
    check_suite(suite)
    import_libero()
    from libero.libero.benchmark.libero_suite_task_map import libero_task_map

    return tuple(
        LiberoTask(suite, i, name, language_from_task_name(name))
        for i, name in enumerate(libero_task_map[suite])
    )


def all_tasks() -> dict[str, tuple[LiberoTask, ...]]:
    """Suite name -> tasks, for every suite."""
    return {s: suite_tasks(s) for s in SUITES}


def resolve_task(spec: str) -> LiberoTask:
    """Resolve ``suite``, ``suite:<index>`` or ``suite:<task name>`` to a task.

    A bare suite name means its task 0.

    Raises:
        UnknownNameError: unknown suite or task; the message lists what exists.
    """
    suite, _, task = spec.partition(":")
    tasks = suite_tasks(check_suite(suite))
    if not task:
        return tasks[0]
    if task.isdigit():
        i = int(task)
        if i < len(tasks):
            return tasks[i]
    else:
        for t in tasks:
            if task in (t.name, t.language, t.language.replace(" ", "_")):
                return t
    listing = "; ".join(f"{t.index}: {t.name}" for t in tasks)
    raise UnknownNameError(
        f"unknown task {task!r} in LIBERO suite {suite!r} ({len(tasks)} tasks): {listing}",
        fix=f"use libero:{suite}:<index 0-{len(tasks) - 1}> or a listed task name",
    )


def expand(spec: str) -> list[LiberoTask]:
    """All tasks a ``suite[:task]`` spec names: the whole suite for a bare suite name."""
    suite, _, task = spec.partition(":")
    return list(suite_tasks(check_suite(suite))) if not task else [resolve_task(spec)]
