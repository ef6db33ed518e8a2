"""console: the progress bar's counter column."""

from __future__ import annotations

from rich.progress import Progress

from patchctl.cli.console import CountColumn


def rendered(total: float | None, completed: int) -> str:
    bar = Progress(CountColumn(), disable=True)
    task_id = bar.add_task("configure", total=total, completed=completed)
    return CountColumn().render(bar.tasks[task_id]).plain


def test_a_task_with_a_total_shows_done_of_total() -> None:
    assert rendered(256, 17) == "17/256"


def test_a_task_without_a_total_shows_no_count() -> None:
    assert rendered(None, 0) == ""
