"""The LIBERO benchmark behind the ``embodied`` env contract (family ``libero``).

Env ids: ``libero:<suite>`` (task 0), ``libero:<suite>:<index>``, ``libero:<suite>:<task name>``
with suites ``libero_spatial``, ``libero_object``, ``libero_goal``, ``libero_10``,
``libero_90``. Needs the ``libero`` extra (``pip install --no-deps libero==0.1.1`` plus
``pip install .[libero]``) and LIBERO's assets (``$EMBODIED_LIBERO_ASSETS`` / ``assets_dir=``,
or the Hugging Face hub)::

    env = sim.make("libero:libero_spatial:0", cameras=("agentview",), assets_dir=...)
    obs, info = env.reset(options={"init_state": 3})

Observations carry LIBERO's raw frames (orientation ``vertical_flip``) and actions are
LIBERO-native (gripper -1 open, +1 close); conversions belong to the policy's processor.

The evaluation protocol is :class:`LiberoProtocol`; demonstrations load with
:func:`load_demonstrations`.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])

if importlib.util.find_spec("libero") is None or importlib.util.find_spec("robosuite") is None:
    raise ImportError(
        "libero extra not installed (pip install --no-deps libero==0.1.1 && pip install .[libero])"
    )

from embodied.contracts import Env
from embodied.errors import ConfigError
from sim import ENVS, EnvFamily
from sim.libero.configuration_libero import DEFAULT_MAX_STEPS, SUITES, LiberoProtocol
from sim.libero.demonstrations import (
    LIBERO_OBS_KEY_MAP,
    demonstration_files,
    is_libero_demonstration_file,
    load_demonstrations,
)
from sim.libero.env import LiberoEnv
from sim.libero.resources import (
    ASSETS_ENV_VAR,
    ensure_config,
    load_init_states,
    resolve_assets,
)
from sim.libero.tasks import LiberoTask, all_tasks, expand, resolve_task, suite_tasks


def make(task: str, **kwargs: Any) -> Env:
    """Build ``LiberoEnv(task, **kwargs)``; ``task`` is ``suite[:index or name]``."""
    params = inspect.signature(LiberoEnv).parameters
    unknown = sorted(set(kwargs) - set(params))
    if unknown:
        raise ConfigError(
            f"libero:{task} got unknown options {unknown}",
            fix=f"LIBERO envs take {sorted(k for k in params if k != 'task')}",
        )
    return LiberoEnv(task, **kwargs)


def tasks() -> dict[str, str]:
    """``suite`` and ``suite:<index>`` -> description, for every suite."""
    out: dict[str, str] = {}
    for suite, items in all_tasks().items():
        out[suite] = f"LIBERO suite, {len(items)} tasks (alone: task 0)"
        for t in items:
            out[t.env_task] = t.language
    return out


@dataclass(frozen=True)
class LiberoFamily(EnvFamily):
    """The ``libero`` env family, with the hooks the evaluation harness uses."""

    def expand(self, task: str) -> list[str]:
        """Task ids a ``suite[:task]`` names: all tasks of a bare suite, else the one task."""
        return [t.env_task for t in expand(task)]

    def group(self, task: str) -> str:
        """The suite a task belongs to (results are averaged per group)."""
        return f"libero:{resolve_task(task).suite}"

    def num_init_states(self, task: str) -> int:
        """Number of LIBERO's fixed init states of ``task`` (episode i uses i % N)."""
        return len(load_init_states(resolve_task(task).init_states_file()))

    def default_episodes(self, task: str, env_kwargs: Mapping[str, Any] | None = None) -> int:
        """Episodes per task: ``trials_per_task`` of the protocol in ``env_kwargs`` (50)."""
        protocol = (env_kwargs or {}).get("protocol") or LiberoProtocol()
        return int(protocol.trials_per_task)


FAMILY = LiberoFamily("libero", make, tasks)
ENVS.register("libero", lambda: FAMILY, help="LIBERO benchmark (robosuite), 5 suites, 130 tasks")

__all__ = [
    "ASSETS_ENV_VAR",
    "DEFAULT_MAX_STEPS",
    "FAMILY",
    "LIBERO_OBS_KEY_MAP",
    "SUITES",
    "LiberoFamily",
    "LiberoProtocol",
    "LiberoTask",
    "demonstration_files",
    "ensure_config",
    "expand",
    "is_libero_demonstration_file",
    "load_demonstrations",
    "make",
    "resolve_assets",
    "resolve_task",
    "suite_tasks",
    "tasks",
]
