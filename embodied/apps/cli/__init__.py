"""The ``embodied`` command line.

Each command lives in its own module ``embodied/apps/cli/cmd_<name>.py`` exposing
``register(app: typer.Typer) -> None``, which adds the command (or command group) ``<name>``
to ``app``; adding a command is adding one file. The module's docstring is the command's help
text (``help=__doc__``), its first paragraph the one line ``embodied --help`` shows.

Command modules are loaded lazily (:class:`LazyGroup`): ``embodied --help`` lists them from
their file names and docstrings without importing them, and running a command imports only its
own module. So command modules import what they need at the top, torch and all.

The product's commands are the ``cmd_*`` modules here. The lab's paper reproductions are one
group, ``embodied lab`` (:data:`MOUNTED`), whose module this package names but never imports
itself (``pyproject.toml``'s import-linter contract ``lab``); their old top-level names still
run, hidden, with a deprecation note (:data:`DEPRECATED`).
"""

from __future__ import annotations

import ast
import copy
import difflib
import importlib
import importlib.util
import inspect
import pkgutil
import sys
import tokenize
from typing import Any, ClassVar

import typer
import typer.core
import typer.main

from embodied.errors import EmbodiedError

try:  # newer typer runs on its own copy of click, whose exceptions are not click's
    from typer import _click as click
except ImportError:  # older typer runs on the click package
    import click  # type: ignore[no-redef]

_PREFIX = "cmd_"
_loaded: dict[str, click.Command] = {}  # module name -> its click command, once imported

MOUNTED: dict[str, str] = {"lab": "embodied.apps.lab.cli"}
"""Top-level command groups that live outside this package: name -> module. The module is
imported only to run (or show the help of) that group, and left out of the listing when it is
not installed."""

DEPRECATED: dict[str, str] = {
    "pdp": "lab pdp",
    "steer": "lab steer",
    "reward": "lab reward",
    "shield": "lab shield",
    "reppo": "lab reppo",
    "latency": "lab latency",
}
"""Old top-level command -> its new path (``embodied pdp ...`` is now ``embodied lab pdp
...``). The old names still run for one release, hidden from ``embodied --help``, and print a
one-line deprecation note on stderr first; they go in 0.2.0."""


def command_modules(package: str = __name__) -> dict[str, str]:
    """Command name -> its module (``"train"`` -> ``"embodied.apps.cli.cmd_train"``), found
    without importing the command modules.

    Args:
        package: The package whose ``cmd_*`` modules are listed; the top level
            (``embodied.apps.cli``, the default) adds the installed :data:`MOUNTED` groups.
    """
    path = importlib.import_module(package).__path__
    found = {
        info.name.removeprefix(_PREFIX): f"{package}.{info.name}"
        for info in pkgutil.iter_modules(path)
        if info.name.startswith(_PREFIX)
    }
    if package == __name__:
        found.update({k: v for k, v in MOUNTED.items() if _spec_origin(v) is not None})
    return dict(sorted(found.items()))


def _spec_origin(module: str) -> str | None:
    """The file of ``module``, without importing it (its parent packages are imported)."""
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:
        return None
    return None if spec is None else spec.origin


def command_help(name: str, package: str = __name__) -> str:
    """The help text of command ``name``: its module's docstring, read without importing it.

    Only the first tokens of the file are read (as ``ast.get_docstring`` would see them), not the
    whole module parsed: ``embodied --help`` does this for every command.

    Args:
        name: The command, e.g. ``"train"``.
        package: The package listing it (see :func:`command_modules`).
    """
    origin = _spec_origin(command_modules(package)[name])
    if origin is None:
        return ""
    with tokenize.open(origin) as f:
        for tok in tokenize.generate_tokens(f.readline):
            if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE):
                continue
            if tok.type == tokenize.STRING:
                return inspect.cleandoc(ast.literal_eval(tok.string))
            break
    return ""


def _load(name: str, module_name: str) -> click.Command:
    """Import ``module_name``, let it register on a throwaway app, return its command ``name``."""
    if module_name not in _loaded:
        module = importlib.import_module(module_name)
        scratch = typer.Typer()
        module.register(scratch)
        group = typer.main.get_group(scratch)
        command = group.commands.get(name)
        if command is None:
            raise RuntimeError(
                f"{module.__name__}.register() added {sorted(group.commands)}, not {name!r}"
            )
        _loaded[module_name] = command
    return _loaded[module_name]


def _deprecated(old: str, new: str, command: click.Command) -> click.Command:
    """``command`` under its old name ``old``: hidden, and noting ``new`` on stderr when run."""
    alias = copy.copy(command)
    alias.hidden = True
    alias.help = f"Deprecated: use `embodied {new}`. {command.help or ''}"
    invoke = command.invoke

    def invoke_noting(ctx: click.Context) -> Any:
        print(
            f"note: `embodied {old}` is deprecated and goes in 0.2.0; use `embodied {new}`",
            file=sys.stderr,
        )
        return invoke(ctx)

    alias.invoke = invoke_noting  # type: ignore[method-assign]
    return alias


class LazyGroup(typer.core.TyperGroup):
    """A group that lists the ``cmd_*`` modules of :attr:`package` by name and imports one only
    to run it (the top level: ``embodied.apps.cli``, plus :data:`MOUNTED` and the hidden
    :data:`DEPRECATED` names).

    While the group's own help is drawn, :meth:`get_command` answers with placeholders that
    carry each module's docstring, so ``embodied --help`` imports no command module.
    """

    package: ClassVar[str] = __name__
    """The package holding this group's ``cmd_*`` modules."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._listing = False

    def _deprecated_names(self) -> dict[str, str]:
        return DEPRECATED if self.package == __name__ else {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(command_modules(self.package))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module_name = command_modules(self.package).get(cmd_name)
        if module_name is None:
            new = self._deprecated_names().get(cmd_name)
            if new is None or self._listing:
                return None
            command: click.Command | None = self
            for part in new.split():
                assert isinstance(command, typer.core.TyperGroup)
                command = command.get_command(ctx, part)
            return None if command is None else _deprecated(cmd_name, new, command)
        if self._listing:
            return typer.core.TyperCommand(cmd_name, help=command_help(cmd_name, self.package))
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
        known = command_modules(self.package)
        if (
            name
            and not name.startswith("-")
            and name not in known
            and name not in self._deprecated_names()
        ):
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
