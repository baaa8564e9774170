"""Helpers shared by ``embodied steer`` and ``embodied train vla`` (not a command module)."""

from __future__ import annotations

from rich.console import Console

from embodied.apps.experiments.steer import steer_env

__all__ = ["log", "steer_env"]


def log(msg: str) -> None:
    """Print a progress line on stderr."""
    Console(stderr=True).print(msg, highlight=False)
