"""Progress bars that also report into log files.

rich draws a :class:`~rich.progress.Progress` live only on an interactive terminal; written to
a file (a run under ``nohup``, a CI log) it prints the bar once, when it stops. An hours-long
collection or training then leaves an empty log until it ends, and a user cannot tell a slow
run from a stuck one. :class:`LoggedProgress` prints the bar as a plain line every
``log_every_s`` seconds on such a console instead.
"""

from __future__ import annotations

import time
from typing import Any

from rich.progress import Progress, TaskID

#: Seconds between two progress lines on a console that is not a terminal.
LOG_EVERY_S = 60.0


class LoggedProgress(Progress):
    """A rich progress display that prints a line every ``log_every_s`` s into a log file.

    On an interactive terminal it is rich's own live bar, unchanged.

    Args:
        *columns: rich progress columns, as for :class:`~rich.progress.Progress`.
        log_every_s: Seconds between two printed lines when the console is not a terminal
            (s; 0 prints on every update).
        **kwargs: Further :class:`~rich.progress.Progress` options (``console``, ``disable``,
            ``transient``...).
    """

    def __init__(self, *columns: Any, log_every_s: float = LOG_EVERY_S, **kwargs: Any) -> None:
        super().__init__(*columns, **kwargs)
        self.log_every_s = log_every_s
        self._last_line = time.monotonic()

    def _drawn_live(self) -> bool:
        """Whether rich itself redraws the bar as it goes (a terminal or a notebook)."""
        c = self.console
        return c.is_jupyter or (c.is_terminal and not c.is_dumb_terminal)

    def _line_if_due(self) -> None:
        if self.disable or self._drawn_live():
            return
        now = time.monotonic()
        if now - self._last_line < self.log_every_s:
            return
        self._last_line = now
        self.console.print(self.make_tasks_table(self.tasks))

    def update(self, task_id: TaskID, **kwargs: Any) -> None:  # type: ignore[override]
        """Update a task as :meth:`rich.progress.Progress.update`; print a line when due."""
        super().update(task_id, **kwargs)
        self._line_if_due()

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        """Advance a task as :meth:`rich.progress.Progress.advance`; print a line when due."""
        super().advance(task_id, advance)
        self._line_if_due()
