"""The ``embodied`` command line.

Each subcommand lives in its own module ``embodied/apps/cli/cmd_<name>.py`` exposing
``register(app: typer.Typer) -> None``; modules are discovered automatically, so adding a
command is adding one file. Command modules import heavy libraries inside the command
functions, keeping ``embodied --help`` fast.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import typer

from embodied.errors import EmbodiedError

app = typer.Typer(
    name="embodied",
    help="Robot learning and control: simulate, train, steer, judge, tune, deploy.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register_commands() -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("cmd_"):
            module = importlib.import_module(f"{__name__}.{info.name}")
            module.register(app)


_register_commands()


def main() -> None:
    """Entry point: run the app; print ``EmbodiedError``s as one clean line and exit 2."""
    try:
        code = app(standalone_mode=False)
        if isinstance(code, int) and code:  # typer.Exit(code) returns its code here
            sys.exit(code)
    except EmbodiedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except (typer.Abort, KeyboardInterrupt):
        print("aborted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:  # click usage errors carry their own exit code
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        raise
