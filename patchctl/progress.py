"""Progress reporting from the core, without the core knowing about rich or terminals.

Core functions take an optional `progress: Progress | None`; the CLI passes an object that
renders with rich, tests pass `RecordingProgress` or nothing. One-line notes the user must see
whatever the command (what a run recovered of a killed one) go through `notice`, which the CLI
points at stderr (`notice_sink`); without a sink they are dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

# Where `notice` sends its lines: set by the CLI (app.run), None in library use.
notice_sink: Callable[[str], None] | None = None


def notice(text: str) -> None:
    """A one-line note for the user (not progress, not the command's output)."""
    if notice_sink is not None:
        notice_sink(text)


@runtime_checkable
class Progress(Protocol):
    """Receives progress events; `total` None means an indeterminate task."""

    def start(self, task: str, total: int | None) -> None: ...

    def advance(self, task: str, n: int = 1) -> None: ...

    def done(self, task: str) -> None: ...


class NullProgress:
    """Ignores every event."""

    def start(self, task: str, total: int | None) -> None:
        pass

    def advance(self, task: str, n: int = 1) -> None:
        pass

    def done(self, task: str) -> None:
        pass


@dataclass
class RecordingProgress:
    """Records events as tuples; handy in tests."""

    events: list[tuple[str, str, int | None]] = field(default_factory=list)

    def start(self, task: str, total: int | None) -> None:
        self.events.append(("start", task, total))

    def advance(self, task: str, n: int = 1) -> None:
        self.events.append(("advance", task, n))

    def done(self, task: str) -> None:
        self.events.append(("done", task, None))


def or_null(progress: Progress | None) -> Progress:
    """`progress` itself, or a NullProgress when it is None."""
    return NullProgress() if progress is None else progress
