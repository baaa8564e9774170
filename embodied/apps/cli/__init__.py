"""The ``embodied`` command line.

Each command lives in its own module ``embodied/apps/cli/cmd_<name>.py`` exposing
``register(app: typer.Typer) -> None``, which adds the command (or command group) ``<name>``
to ``app``; adding a command is adding one file. The module's docstring is the command's help
text (``help=__doc__``), its first paragraph the one line ``embodied --help`` shows.

Command modules are loaded lazily (:class:`LazyGroup`): ``embodied --help`` lists them from
their file names and docstrings without importing them, and running a command imports only its
own module. So command modules import what they need at the top, torch and all.
"""

from __future__ import annotations

import ast
import difflib
import importlib
import inspect
import pkgutil
import sys
import tokenize
from pathlib import Path
from typing import Any

import typer
import typer.core
import typer.main

from embodied.errors import EmbodiedError

try:  # newer typer runs on its own copy of click, whose exceptions are not click's
    from typer import _click as click
except ImportError:  # older typer runs on the click package
    import click  # type: ignore[no-redef]

_PREFIX = "cmd_"
_loaded: dict[str, click.Command] = {}  # command name -> its click command, once imported


def command_modules() -> dict[str, str]:
    """Command name -> module name (``"train"`` -> ``"cmd_train"``), found without importing."""
    return {
        info.name.removeprefix(_PREFIX): info.name
        for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name)
        if info.name.startswith(_PREFIX)
    }


def command_help(name: str) -> str:
    """The help text of command ``name``: its module's docstring, read without importing it.

    Only the first tokens of the file are read (as ``ast.get_docstring`` would see them), not the
    whole module parsed: ``embodied --help`` does this for every command.
    """
    with tokenize.open(Path(__file__).parent / f"{_PREFIX}{name}.py") as f:
        for tok in tokenize.generate_tokens(f.readline):
            if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE):
                continue
            if tok.type == tokenize.STRING:
                return inspect.cleandoc(ast.literal_eval(tok.string))
            break
    return ""


def _load(name: str, module_name: str) -> click.Command:
    """Import ``module_name``, let it register on a throwaway app, return its command ``name``."""
    if name not in _loaded:
        module = importlib.import_module(f"{__name__}.{module_name}")
        scratch = typer.Typer()
        module.register(scratch)
        group = typer.main.get_group(scratch)
        command = group.commands.get(name)
        if command is None:
            raise RuntimeError(
                f"{module.__name__}.register() added {sorted(group.commands)}, not {name!r}"
            )
        _loaded[name] = command
    return _loaded[name]


class LazyGroup(typer.core.TyperGroup):
    """The top-level group: lists ``cmd_*`` modules by name, imports one only to run it.

    While the group's own help is drawn, :meth:`get_command` answers with placeholders that
    carry each module's docstring, so ``embodied --help`` imports no command module.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._listing = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(command_modules())

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module_name = command_modules().get(cmd_name)
        if module_name is None:
            return None
        if self._listing:
            return typer.core.TyperCommand(cmd_name, help=command_help(cmd_name))
        return _load(cmd_name, module_name)

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        # TyperGroup suggests close names from self.commands, which is empty here
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in command_modules():
            matches = difflib.get_close_matches(name, self.list_commands(ctx))
            if matches and getattr(self, "suggest_commands", True):
                ctx.fail(f"No such command {name!r}. Did you mean {', '.join(map(repr, matches))}?")
        return super().resolve_command(ctx, args)


app = typer.Typer(
    name="embodied",
    cls=LazyGroup,
    help="Robot learning and control: simulate, train, steer, judge, tune, deploy.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    # a callback makes typer build a group (LazyGroup) although no command is registered here
    pass


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
    except click.ClickException as exc:  # usage errors carry their own exit code
        exc.show()
        sys.exit(exc.exit_code)
