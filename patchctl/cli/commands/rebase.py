"""`patchctl rebase --onto UPSTREAM | --continue | --skip | --abort`: move a series to another
upstream, stopping at conflicts for the user."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from patchctl.cli.options import (
    DEFAULT_SERIES,
    JsonOpt,
    OntoOpt,
    OntoSubdirOpt,
    SeriesOpt,
    WorkdirOpt,
)

if TYPE_CHECKING:
    from patchctl.ops.rebase.rebase import RebaseReport
    from patchctl.ops.rebase.report import Report
    from patchctl.room.rebasestate import Done


def register(app: typer.Typer) -> None:
    """Add `patchctl rebase` to the app."""
    app.command("rebase")(rebase_command)


def rebase_command(
    onto: OntoOpt = None,
    commit: Annotated[
        str | None,
        typer.Option("--commit", help="git: the commit to rebase onto (id, branch or tag)."),
    ] = None,
    subdir: OntoSubdirOpt = None,
    resume: Annotated[
        bool,
        typer.Option("--continue", help="Take the resolved work tree as the patch and go on."),
    ] = False,
    skip: Annotated[
        bool, typer.Option("--skip", help="Drop the patch the rebase stopped at, and go on.")
    ] = False,
    abort: Annotated[
        bool, typer.Option("--abort", help="Put the series and the clean room back as they were.")
    ] = False,
    status: Annotated[
        bool,
        typer.Option(
            "--status", help="Show the rebase in progress (the stop again); change nothing."
        ),
    ] = False,
    drop_merged: Annotated[
        bool,
        typer.Option(
            "--drop-merged",
            help="With --onto: drop each patch the new upstream already has (patch-id, DEP-3"
            " trailers, reverse apply); the report names each, with its evidence.",
        ),
    ] = False,
    no_replay: Annotated[
        bool,
        typer.Option(
            "--no-replay",
            help="With --onto: stop at every conflict, even where resolutions/ of the series"
            " has a recorded resolution for it.",
        ),
    ] = False,
    html: Annotated[
        Path | None,
        typer.Option(
            "--html",
            help="With --status: also write the report as a static HTML page to this file.",
            dir_okay=False,
        ),
    ] = None,
    series: SeriesOpt = DEFAULT_SERIES,
    workdir: WorkdirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Rebase the series onto another upstream (three-way, one patch at a time); stops at a
    conflict with a report."""
    if sum((onto is not None, resume, skip, abort, status)) != 1:
        raise typer.BadParameter(
            "give exactly one of --onto, --continue, --skip, --abort, --status"
        )
    if onto is None and (commit is not None or subdir is not None or drop_merged or no_replay):
        raise typer.BadParameter("--commit, --subdir, --drop-merged and --no-replay go with --onto")
    if html is not None and not status:
        raise typer.BadParameter("--html goes with --status")
    from patchctl.cli.console import RichProgress
    from patchctl.ops.rebase.rebase import (
        rebase,
        rebase_abort,
        rebase_continue,
        rebase_skip,
    )

    if status:
        show_status(series, workdir, as_json, html)
        return

    with RichProgress(enabled=False if as_json else None) as progress:
        if onto is not None:
            report = rebase(
                series,
                onto,
                commit=commit,
                subdir=subdir,
                workdir=workdir,
                progress=progress,
                drop_merged=drop_merged,
                replay=not no_replay,
            )
        elif resume:
            report = rebase_continue(series, workdir, progress)
        elif skip:
            report = rebase_skip(series, workdir, progress)
        else:
            report = rebase_abort(series, workdir)
    render_rebase(report, as_json)


def render_rebase(report: RebaseReport, as_json: bool) -> None:
    """The report; a stopped rebase then raises RebaseStopped (exit 3), whose --json form
    carries the whole report."""
    from patchctl.cli.console import print_json

    if not as_json:
        for line in report_lines(report):
            print_line(line)
    if report.state == "stopped":
        raise stopped_error(report)
    if as_json:
        print_json(report.to_json())


def show_status(series: Path, workdir: Path | None, as_json: bool, html: Path | None) -> None:
    """`rebase --status`: the rebase in progress; once none is, the report the last rebase
    left beside its range-diff (with every changed patch's part of the range-diff)."""
    from patchctl.errors import NotFound
    from patchctl.ops.rebase.rebase import rebase_status
    from patchctl.ops.rebase.report import last_saved, of_rebase, write_html

    try:
        result = rebase_status(series, workdir)
    except NotFound:
        saved = last_saved(series)
        if saved is None:
            raise
        if html is not None:
            write_html(saved, html)
        render_saved(saved, as_json)
        return
    if html is not None:
        write_html(of_rebase(result), html)
    render_status(result, as_json)


def render_saved(saved: Report, as_json: bool) -> None:
    """A saved report: its JSON document, or its text with the range-diff parts."""
    from patchctl.cli.console import print_json
    from patchctl.ops.rebase.report import text_lines

    if as_json:
        print_json(saved.to_json())
        return
    for line in text_lines(saved, diffs=True):
        print_line(line)


def render_status(report: RebaseReport, as_json: bool) -> None:
    """`rebase --status`: the report as it stands, exit 0 (a stop is shown, not raised)."""
    from patchctl.cli.console import print_json
    from patchctl.ops.rebase.report import of_rebase, text_lines

    if as_json:
        print_json(report.to_json())
        return
    lines = report_lines(report) if report.state == "stopped" else text_lines(of_rebase(report))
    for line in lines:
        print_line(line)


def print_line(line: str) -> None:
    """One line on stdout, no markup."""
    from patchctl.cli.console import out

    out.print(line, markup=False)


def report_lines(report: RebaseReport) -> list[str]:
    """The human form of a rebase report (of the range-diff, only its pairing lines: the whole
    of it is in the file it names)."""
    from patchctl.ops.rebase.rebase import summary_lines

    if report.state == "aborted":
        lines = ["rebase aborted: the series and the clean room are as they were before it"]
        if report.backup is not None:
            lines.append(f"  the work tree's edits were saved to {report.backup.ref}")
        return lines + [f"  restored {p}" for p in report.changed]
    from patchctl.ops.rebase.report import of_rebase, report_names, text_lines

    lines = [f"rebase {report.series.parent.name}: {report.old} -> {report.new}"]
    lines += text_lines(of_rebase(report))[1:]
    lines += [done_line(d) for d in report.patches if d.replayed or d.recorded]
    lines += upstreamed_lines(report)
    lines += [
        f"  base blob {b['named']} of {b['path']} ({b['patch']}) is not in the rebuilt old tree"
        f" (it has {b['rebuilt'] or 'no such file'}): merged from the version it applied to"
        for b in report.bases
    ]
    lines += [f"  skipped   {p.name}: its file moved to {p}" for p in report.skipped]
    if report.backup is not None:
        lines.append(f"  the work tree's edits were saved to {report.backup.ref}")
    if report.state == "stopped":
        return lines + stop_lines(report)
    lines.append(f"done: {report.series} is on {report.new}")
    if report.patches:
        spent = sum(d.seconds for d in report.patches)
        slowest = sorted(report.patches, key=lambda d: d.seconds, reverse=True)[:3]
        lines.append(
            f"time moving the patches: {spent:.1f} s; slowest: "
            + ", ".join(f"{d.id} {d.seconds:.2f} s" for d in slowest)
        )
    if report.range_diff is not None:
        json_name, html_name = report_names(report.range_diff.name)
        folder = report.range_diff.parent
        lines.append(f"report saved to {folder / html_name} (a page) and {folder / json_name}")
    lines.append(f"range-diff (old vs new patches) saved to {report.range_diff}; in short:")
    lines += ["  " + line.strip() for line in summary_lines(report.range_diff_text)]
    lines.append(f"clean room {report.cleanroom}: new base plus the rebased series")
    return [*lines, "next: `patchctl verify --all`, then build and test"]


def done_line(done: Done) -> str:
    """One moved patch, with the recorded resolutions it replayed or recorded."""
    line = f"  {done.how:10} {done.id}"
    if done.replayed:
        line += f" ({len(done.replayed)} conflict block(s) replayed from resolutions/)"
    if done.recorded:
        line += f" ({len(done.recorded)} resolution(s) recorded in resolutions/)"
    return line


def upstreamed_lines(report: RebaseReport) -> list[str]:
    """The patches the new upstream has, wholly or partly, with the evidence, and what
    --drop-merged did (or would do) with them."""
    from patchctl.ops.rebase.upstreamed import MERGED, report_lines

    if not report.upstreamed:
        return []
    lines = ["upstream already has (wholly or partly):", *report_lines(report.upstreamed)]
    dropped = {d.id for d in report.patches if d.how == "upstreamed"}
    keep = [u.id for u in report.upstreamed if u.state == MERGED and u.id not in dropped]
    if dropped:
        lines.append(f"  dropped by --drop-merged: {', '.join(sorted(dropped))}")
    if keep:
        lines.append(f"  still in the series: {', '.join(keep)} (rebase --drop-merged drops them)")
    return lines


def stop_lines(report: RebaseReport) -> list[str]:
    """What the user must resolve, where, what git placed on its own, and how to go on."""
    from patchctl.ops.rebase.stop import stop_lines as lines_of

    assert report.stop is not None
    return lines_of(report.stop, report.cleanroom)


def stopped_error(report: RebaseReport) -> Exception:
    """RebaseStopped (exit 3) for a stopped rebase."""
    from patchctl.errors import RebaseStopped

    stop = report.stop
    assert stop is not None
    what = "conflict in " + ", ".join(stop.files) if stop.files else "its changes are upstream"
    return RebaseStopped(
        f"rebase stopped at patch {stop.id}: {what}",
        report=report,
        patch=stop.id,
        hint="resolve in the clean room, then `patchctl rebase --continue` (or --skip, --abort)",
    )
