"""Paper reproductions: PDP, VLA steering, Demo2Reward, shields, RePPO, inference latency.

Each experiment trains and evaluates a component against baselines on seeds kept apart and
writes results.json, results.md and plots (`embodied lab pdp experiment`, `embodied lab steer
experiment`, ...). These are research commands, apart from the product's workflow verbs.
"""

# Each sub-command lives in its own module ``cmd_<name>.py`` here, loaded lazily as the
# product's commands are (``embodied lab --help`` imports none of them).

from __future__ import annotations

from typing import ClassVar

import typer

from embodied.apps.cli import LazyGroup


class LabGroup(LazyGroup):
    """The ``embodied lab`` group: lists this package's ``cmd_*`` modules without importing."""

    package: ClassVar[str] = __name__


lab_app = typer.Typer(cls=LabGroup, help=__doc__, no_args_is_help=True)


@lab_app.callback()
def _lab() -> None:
    # a callback makes typer build a group (LabGroup) although no command is registered here
    pass


def register(app: typer.Typer) -> None:
    """Add the ``lab`` command group to ``app``."""
    app.add_typer(lab_app, name="lab")
