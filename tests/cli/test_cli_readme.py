"""Every ``embodied`` command line README and the documentation pages show is accepted by the CLI.

The code blocks and the first column of the command tables of README.md and every
``docs/**/*.md`` page are read, shell loop variables
(``$k``, ``$s``) and ``<placeholders>`` are filled, optional ``[...]`` parts are kept (both with
and without them), and each command line is parsed by the real command: option names, required
options and arguments, and value types are checked as when it runs, without running the work
(collecting, training or evaluating takes minutes to hours; the commands' behaviour has its own
tests). A README line with a renamed or missing option, or a missing required ``--out``, fails
here. A test's id is the command line, whichever file shows it.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer.core

from embodied.apps.cli import _load, command_modules
from tests.conftest import documentation_files

try:  # newer typer runs on its own copy of click
    from typer import _click as click
except ImportError:  # older typer runs on the click package
    import click  # type: ignore[no-redef]

README = Path(__file__).resolve().parents[2] / "README.md"
FILL = {"$k": "0", "$s": "0", "$q": "0.99", "<area>": "policy"}
"""Shell loop variables and placeholders of the documented commands -> a value they take."""


def _fenced_commands(text: str) -> list[str]:
    found = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()  # a trailing comment is not part of the command
            match = re.search(r"(?:^|[;&|]\s*|\bdo\s+|\bthen\s+|-m\s+)(embodied\s.*)", line)
            if match:
                found.append(match.group(1))
    return found


def _table_commands(text: str) -> list[str]:
    found = []
    for row in re.findall(r"^\| (`embodied .*?) \|", text, re.M):
        found += re.findall(r"`(embodied [^`]*)`", row)
    return [c for c in found if "..." not in c]  # `embodied sweep ...`: a pointer, not a line


def _variants(command: str) -> list[str]:
    """``command`` without its optional ``[...]`` parts, and with all of them."""
    bare = re.sub(r"\s*\[[^\]]*\]", "", command)
    full = re.sub(r"\[([^\]]*)\]", r"\1", command)
    return sorted({bare, full})


def readme_commands(files: list[Path] | None = None) -> list[str]:
    """The command lines of ``files`` (default: README.md and every documentation page)."""
    lines = []
    for file in documentation_files() if files is None else files:
        text = file.read_text(encoding="utf-8")
        for command in _fenced_commands(text) + _table_commands(text):
            for key, value in FILL.items():
                command = command.replace(key, value)
            lines += _variants(command)
    return list(dict.fromkeys(lines))


def _verb(command: str) -> str:
    """``embodied eval ...`` -> ``eval``; the lab's ``embodied lab steer ...`` -> ``lab steer``."""
    words = command.split()
    return " ".join(words[1:3]) if words[1] == "lab" else words[1]


def test_readme_commands_are_found() -> None:
    commands = readme_commands()
    assert len(commands) >= 30
    verbs = {_verb(c) for c in commands}
    assert {"collect", "train", "eval", "deploy", "demo", "bench", "tune", "lab steer"} <= verbs
    # the README's tour runs each of the main commands itself
    tour = {_verb(c) for c in readme_commands([README])}
    assert {"collect", "train", "eval", "lab steer", "judge", "deploy", "tune", "serve"} <= tour


@pytest.mark.parametrize("line", readme_commands())
def test_readme_command_parses(line: str) -> None:
    argv = shlex.split(line)[1:]
    modules = command_modules()
    assert argv[0] in modules, f"the documentation runs `embodied {argv[0]}`, which does not exist"
    command: click.Command = _load(argv[0], modules[argv[0]])
    args = argv[1:]
    name = argv[0]
    while isinstance(command, typer.core.TyperGroup):  # a group (the lab's lists lazily)
        ctx = command.make_context(name, [], resilient_parsing=True)
        subs = command.list_commands(ctx)
        assert args and args[0] in subs, (
            f"`embodied {name} {args[:1]}`: no such sub-command, use one of {sorted(subs)}"
        )
        sub = command.get_command(ctx, args[0])
        assert sub is not None
        name, command, args = args[0], sub, args[1:]
    try:
        command.make_context(name, list(args))
    except click.ClickException as exc:  # usage errors: unknown option, missing --out, type
        pytest.fail(
            f"documented line does not parse (README.md or docs/): {line}\n{exc.format_message()}"
        )
