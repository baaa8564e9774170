"""LoggedProgress: plain lines into a log file, rich's own live bar on a terminal."""

from __future__ import annotations

import io

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn

from embodied.progress import LoggedProgress


def _run(console: Console, log_every_s: float, disable: bool = False) -> str:
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with LoggedProgress(
        *columns, console=console, log_every_s=log_every_s, disable=disable, auto_refresh=False
    ) as bar:
        task = bar.add_task("train", total=4)
        for step in range(1, 4):
            bar.update(task, completed=step)
        bar.advance(task)
    return console.file.getvalue()  # type: ignore[attr-defined]


def test_a_log_file_gets_a_line_per_due_update_and_the_final_one() -> None:
    out = _run(Console(file=io.StringIO(), force_terminal=False, width=80), log_every_s=0)
    lines = [ln for ln in out.splitlines() if ln.strip()]
    # three updates and one advance, each due at 0 s, then rich's own line at stop
    assert [ln.split()[-1] for ln in lines] == ["1/4", "2/4", "3/4", "4/4", "4/4"]
    assert all(ln.startswith("train") for ln in lines)


def test_lines_wait_for_the_period() -> None:
    out = _run(Console(file=io.StringIO(), force_terminal=False, width=80), log_every_s=3600)
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert [ln.split()[-1] for ln in lines] == ["4/4"]  # only rich's line at stop


def test_a_terminal_and_a_disabled_bar_get_no_extra_lines() -> None:
    term = _run(Console(file=io.StringIO(), force_terminal=True, width=80), log_every_s=0)
    assert term.count("1/4") == 0  # rich draws the live bar; nothing printed per update
    off = _run(Console(file=io.StringIO(), force_terminal=False, width=80), 0, disable=True)
    assert off == ""
