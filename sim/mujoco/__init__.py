"""MuJoCo tasks behind the :class:`embodied.contracts.Env` contract (family ``mujoco``).

Tasks: ``mujoco:reach_around`` (multimodal reach around obstacles, the PDP benchmark task)
and ``mujoco:arm_reach`` (table-top arm with a camera, target named in the instruction)::

    import sim
    env = sim.make("mujoco:reach_around", camera=True)
    obs, info = env.reset(seed=0, options={"scene": "block_left"})
    expert = env.unwrapped.expert(route="right", speed=0.3)

Rendering is headless: ``MUJOCO_GL`` defaults to ``egl`` (set before ``mujoco`` is imported).
"""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])

from collections.abc import Callable, Sequence
from typing import Any

from embodied.errors import UnknownNameError
from sim import ENVS, EnvFamily
from sim.mujoco.arm_reach import COLORS, ArmReachTask
from sim.mujoco.env import CameraArg, MujocoEnv
from sim.mujoco.reach_around import ROUTES, SCENES, ReachAroundTask, classify_route
from sim.mujoco.task import Task

TASKS: dict[str, type[Task]] = {cls.name: cls for cls in (ReachAroundTask, ArmReachTask)}
"""Task name -> task class; ``make`` passes task-specific kwargs to the class."""


def make(
    task: str,
    *,
    camera: CameraArg = None,
    image_size: int | Sequence[int] | None = None,
    max_episode_steps: int | None = None,
    terminate_on_success: bool = True,
    scene: str | None = None,
    **task_kwargs: Any,
) -> MujocoEnv:
    """Build ``mujoco:<task>``.

    Args:
        task: Task name (see :func:`tasks`).
        camera: Cameras in observations (True: the task's default camera; False: none).
        image_size: Camera image size in pixels (int or (H, W)).
        max_episode_steps: Horizon in control steps (default: the task's).
        terminate_on_success: End episodes at success.
        scene: Default reset scene (reach_around: one of ``SCENES``).
        **task_kwargs: Task options (e.g. reach_around ``terminate_on_block``).

    Raises:
        UnknownNameError: ``task`` is not a MuJoCo task (the message lists them).
    """
    if task not in TASKS:
        raise UnknownNameError(
            f"unknown mujoco task {task!r}; tasks: {sorted(TASKS)}",
            fix="use e.g. mujoco:reach_around or mujoco:arm_reach (see `embodied envs`)",
        )
    try:
        task_obj = TASKS[task](**task_kwargs)
    except TypeError as exc:
        raise UnknownNameError(
            f"mujoco:{task} got unknown options {sorted(task_kwargs)}: {exc}",
            fix="pass camera/image_size/max_episode_steps/scene or the task's own options",
        ) from exc
    return MujocoEnv(
        task_obj,
        camera=camera,
        image_size=image_size,
        max_episode_steps=max_episode_steps,
        terminate_on_success=terminate_on_success,
        scene=scene,
    )


def tasks() -> dict[str, str]:
    """Task name -> one-line description."""
    return {name: cls.description for name, cls in sorted(TASKS.items())}


FAMILY = EnvFamily(name="mujoco", make=make, tasks=tasks)
_factory: Callable[[], EnvFamily] = lambda: FAMILY  # noqa: E731
ENVS.register("mujoco", _factory, help="MuJoCo tasks with scripted experts")

__all__ = [
    "COLORS",
    "FAMILY",
    "ROUTES",
    "SCENES",
    "TASKS",
    "ArmReachTask",
    "MujocoEnv",
    "ReachAroundTask",
    "Task",
    "classify_route",
    "make",
    "tasks",
]
