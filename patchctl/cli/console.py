"""Rendering helpers for the CLI: consoles, JSON output and a rich Progress adapter.

Everything printed may contain user text (titles, paths, ids, mail subjects, messages that
quote them): the consoles never interpret rich markup or emoji codes (`[/]` in a subject is
text), and control characters are shown as escapes (`\x1b`), never sent to the terminal.
"""

from __future__ import annotations

import json
import sys
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from patchctl.allowlists import printable, redacted
from patchctl.errors import PatchctlError


class PlainConsole(Console):
    """A rich Console for user text: no markup, no emoji, unsafe characters escaped."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(markup=False, emoji=False, highlight=False, soft_wrap=True, **kwargs)

    def print(self, *objects: Any, **kwargs: Any) -> None:
        kwargs.update(markup=False, emoji=False)
        safe = [printable(o, keep="\n") if isinstance(o, str) else o for o in objects]
        super().print(*safe, **kwargs)


# soft_wrap: never insert line breaks, so one-line messages stay one line in logs.
out = PlainConsole()
err = PlainConsole(stderr=True)


def print_json(data: object) -> None:
    """Write `data` as one JSON document on stdout (sorted keys off: order is meaningful)."""
    sys.stdout.write(redacted(json.dumps(data, indent=2, default=str)) + "\n")
    sys.stdout.flush()


def error_line(exc: PatchctlError) -> str:
    """The one-line `error: ...` text for an error (control characters escaped)."""
    return f"error: {printable(exc.one_line())}"


def print_error(exc: PatchctlError) -> None:
    """Write the one-line error to stderr, without rich markup interpretation."""
    sys.stderr.write(error_line(exc) + "\n")
    sys.stderr.flush()


class CountColumn(ProgressColumn):
    """`done/total`, or nothing for a task without a total (configure, a git step): never
    `0/None`."""

    def render(self, task: Task) -> Text:
        if task.total is None:
            return Text("")
        return Text(f"{int(task.completed)}/{int(task.total)}")


class RichProgress:
    """A `patchctl.progress.Progress` that draws rich progress bars on stderr."""

    def __init__(self, *, enabled: bool | None = None) -> None:
        show = err.is_terminal if enabled is None else enabled
        self._bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            CountColumn(),
            TimeElapsedColumn(),
            console=err,
            transient=True,
            disable=not show,
        )
        self._tasks: dict[str, TaskID] = {}

    def __enter__(self) -> RichProgress:
        self._bar.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._bar.stop()

    def start(self, task: str, total: int | None) -> None:
        self._tasks[task] = self._bar.add_task(task, total=total)

    def advance(self, task: str, n: int = 1) -> None:
        if task in self._tasks:
            self._bar.advance(self._tasks[task], n)

    def done(self, task: str) -> None:
        task_id = self._tasks.pop(task, None)
        if task_id is not None:
            self._bar.remove_task(task_id)
