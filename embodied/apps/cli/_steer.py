"""Helpers shared by ``embodied steer`` and ``embodied train vla`` (not a command module)."""

from __future__ import annotations

from typing import Any

from rich.console import Console

import sim
from embodied.apps.experiments.steer import FIXED_LAYOUT
from embodied.errors import ConfigError
from sim.mujoco.arm_reach import COLORS


def log(msg: str) -> None:
    """Print a progress line on stderr."""
    Console(stderr=True).print(msg, highlight=False)


def steer_env(
    env_id: str, image_size: int | None, layout: str
) -> tuple[Any, dict[str, Any], list[str]]:
    """The env, its reset options and the speed-demo targets (arm_reach: the cube colours).

    Args:
        env_id: Env id, e.g. ``mujoco:arm_reach`` or ``libero:...``.
        image_size: Camera size in pixels (mujoco envs; falsy = the env's default).
        layout: arm_reach cube layout, ``fixed`` or ``random``.

    Raises:
        ConfigError: An unknown ``layout`` (arm_reach).
    """
    kwargs: dict[str, Any] = {}
    if env_id.startswith("mujoco:") and image_size:
        kwargs["image_size"] = image_size
    env = sim.make(env_id, **kwargs)
    reset: dict[str, Any] = {}
    targets: list[str] = []
    if env_id == "mujoco:arm_reach":
        targets = list(COLORS)
        if layout == "fixed":
            reset["cubes"] = {k: list(v) for k, v in FIXED_LAYOUT.items()}
        elif layout != "random":
            raise ConfigError(f"unknown --layout {layout!r}", fix="use 'fixed' or 'random'")
    return env, reset, targets
