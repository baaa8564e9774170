"""Helpers shared by CLI commands (not a command: only ``cmd_*`` modules are registered)."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TimeElapsedColumn

from embodied.errors import ConfigError
from embodied.progress import LoggedProgress


def parse_kv(items: list[str], what: str, example: str) -> dict[str, Any]:
    """``key=value`` pairs; values parsed as JSON when possible (numbers, lists, bools).

    Args:
        items: The raw ``key=value`` strings, e.g. from a repeatable option.
        what: The option name, used in the error message (e.g. ``"--env-arg"``).
        example: A valid ``key=value`` shown in the fix (e.g. ``"seed=3"``).

    Raises:
        ConfigError: An item has no ``=`` or an empty key.
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"{what} {item!r} is not key=value", fix=f"e.g. {what} {example}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def episode_progress(console: Console, quiet: bool) -> LoggedProgress:
    """A rich progress display (description, bar, done/total, elapsed) for episode counts.

    Written to a log file rather than a terminal, it prints a line every minute.

    Args:
        console: Where to draw (usually stderr).
        quiet: Disable drawing (e.g. under ``--json``).
    """
    return LoggedProgress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=quiet,
    )


def log(msg: str) -> None:
    """Print a progress line on stderr."""
    Console(stderr=True).print(msg, highlight=False)
