"""`patchctl status --upstreamed --onto UPSTREAM`: which patches another upstream already has."""

from __future__ import annotations

from typing import Annotated

import typer

from patchctl.cli.options import (
    DEFAULT_SERIES,
    JsonOpt,
    OntoOpt,
    OntoSubdirOpt,
    SeriesOpt,
    WorkdirOpt,
)


def register(app: typer.Typer) -> None:
    """Add `patchctl status` to the app."""
    app.command("status")(status_command)


def status_command(
    upstreamed: Annotated[
        bool,
        typer.Option(
            "--upstreamed",
            help="Report each patch as merged, partly merged or needed in the --onto upstream.",
        ),
    ] = False,
    onto: OntoOpt = None,
    commit: Annotated[
        str | None,
        typer.Option("--commit", help="git: the commit to compare with (id, branch or tag)."),
    ] = None,
    subdir: OntoSubdirOpt = None,
    series: SeriesOpt = DEFAULT_SERIES,
    workdir: WorkdirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Which patches of the series another upstream already has (patch-id, DEP-3 trailers,
    reverse apply); the clean room's own state is `patchctl cleanroom status`."""
    if not upstreamed:
        raise typer.BadParameter("give --upstreamed (the clean room: `patchctl cleanroom status`)")
    if onto is None:
        raise typer.BadParameter("--upstreamed needs --onto UPSTREAM (e.g. NAME==VERSION)")
    from patchctl.cli.console import RichProgress, out, print_json
    from patchctl.ops.rebase.upstreamed import report_lines, series_upstreamed, summary

    with RichProgress(enabled=False if as_json else None) as progress:
        report = series_upstreamed(
            series, onto, commit=commit, subdir=subdir, workdir=workdir, progress=progress
        )
    if as_json:
        print_json(report.to_json())
        return
    out.print(f"upstreamed {report.series.parent.name}: {report.old} -> {report.new}", markup=False)
    for line in report_lines(report.results):
        out.print(line, markup=False)
    counts = summary(report.results)
    history = "" if report.history else " (no upstream history compared: not a git upstream)"
    out.print(
        f"{counts['merged']} merged, {counts['partly merged']} partly merged, "
        f"{counts['needed']} needed{history}",
        markup=False,
    )
