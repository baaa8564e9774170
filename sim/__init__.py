"""Simulation adapters behind the :class:`embodied.contracts.Env` contract.

Env ids are ``family:task[:variant]``, e.g. ``mujoco:reach_around``,
``robosuite:Lift``, ``libero:libero_spatial:0``. Each family is one module that registers an
:class:`EnvFamily` in :data:`ENVS`; families whose optional extra is missing are listed by
``ENVS.unavailable()`` instead of failing the import.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from embodied.contracts import Env
from embodied.errors import UnknownNameError
from embodied.registry import Registry


@dataclass(frozen=True)
class EnvFamily:
    """A family of envs sharing one simulator.

    Args:
        name: Family prefix of env ids (``mujoco``).
        make: ``make(task, **kwargs) -> Env`` where task is the id part after ``family:``.
        tasks: Returns task name -> one-line description.
    """

    name: str
    make: Callable[..., Env]
    tasks: Callable[[], Mapping[str, str]]


ENVS: Registry[EnvFamily] = Registry(
    "env family", plugins=("sim.mujoco", "sim.robosuite", "sim.libero")
)


def split_env_id(env_id: str) -> tuple[str, str]:
    """Split ``family:task`` into its parts, refusing ids without a family."""
    family, sep, task = env_id.partition(":")
    if not sep or not task:
        raise UnknownNameError(
            f"env id {env_id!r} is not of the form family:task",
            fix="run `embodied envs` to list env ids, e.g. mujoco:reach_around",
        )
    return family, task


def make(env_id: str, **kwargs: Any) -> Env:
    """Build the env ``env_id`` (``family:task``) with family-specific ``kwargs``."""
    family, task = split_env_id(env_id)
    return ENVS.make(family).make(task, **kwargs)


def list_env_ids() -> dict[str, str]:
    """All env ids with one-line descriptions."""
    out: dict[str, str] = {}
    for name in ENVS.names():
        fam = ENVS.make(name)
        for task, desc in fam.tasks().items():
            out[f"{name}:{task}"] = desc
    return out
