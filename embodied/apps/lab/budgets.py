"""Budget presets of the lab's experiments: the one lookup they all share.

Each experiment keeps a ``BUDGETS`` table (``"smoke"``, ``"cpu"``, ...) of config fields; an
unknown name is a usage error that lists the known ones, worded the same for every experiment.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from embodied.errors import ConfigError


def budget_preset(
    budgets: Mapping[str, Mapping[str, Any]], budget: str, experiment: str
) -> dict[str, Any]:
    """A copy of the preset ``budget`` of ``budgets``, safe to change.

    Args:
        budgets: The experiment's presets by name.
        budget: The name asked for.
        experiment: What the presets belong to, for the message (``"shield experiment"``).

    Raises:
        ConfigError: ``budget`` is unknown.
    """
    if budget not in budgets:
        raise ConfigError(
            f"unknown {experiment} budget {budget!r}", fix=f"use one of {sorted(budgets)}"
        )
    return dict(budgets[budget])
