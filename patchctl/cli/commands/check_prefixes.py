"""`patchctl check-prefixes`: apply, build (and optionally test) every prefix of the series."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from patchctl.cli.commands.build import (
    BackendOpt,
    CosmoccOpt,
    CpuOpt,
    CudaOpt,
    DefineOpt,
    JobsOpt,
    LauncherOpt,
    TargetOpt,
    build_config,
)
from patchctl.cli.options import DEFAULT_SERIES, JsonOpt, SeriesOpt, WorkdirOpt
from patchctl.ops.build import Backend, CpuMode

if TYPE_CHECKING:
    from patchctl.ops.prefixes import PrefixReport, PrefixResult


def register(app: typer.Typer) -> None:
    """Add `patchctl check-prefixes` to the app."""
    app.command("check-prefixes")(check_prefixes_command)


def check_prefixes_command(
    series: SeriesOpt = DEFAULT_SERIES,
    workdir: WorkdirOpt = None,
    run: Annotated[
        str | None,
        typer.Option(
            "--run",
            metavar="CMD",
            help="After each build, run CMD with /bin/sh in the clean room "
            "($PATCHCTL_BUILD_DIR, $PATCHCTL_BIN_DIR, $PATCHCTL_PATCH_ID set); non-zero fails.",
        ),
    ] = None,
    keep_going: Annotated[
        bool, typer.Option("--keep-going", help="Check every prefix, even after a failure.")
    ] = False,
    start: Annotated[
        str | None,
        typer.Option("--from", metavar="ID", help="Start at the prefix ending with patch ID."),
    ] = None,
    cuda: CudaOpt = None,
    backend: BackendOpt = Backend.auto,
    target: TargetOpt = None,
    jobs: JobsOpt = None,
    launcher: LauncherOpt = None,
    cosmocc: CosmoccOpt = None,
    define: DefineOpt = None,
    cpu: CpuOpt = CpuMode.native,
    as_json: JsonOpt = False,
) -> None:
    """Apply and build the series up to each patch in turn; stop at the first that fails."""
    from patchctl.cli.console import RichProgress
    from patchctl.errors import PrefixFailed
    from patchctl.ops.prefixes import PrefixReport, check_prefixes

    config = build_config(backend, cuda, target, jobs, launcher, cosmocc, define, None, cpu)
    try:
        with RichProgress(enabled=False if as_json else None) as progress:
            report = check_prefixes(
                series,
                workdir,
                config,
                command=run,
                keep_going=keep_going,
                start=start,
                progress=progress,
                report=None if as_json else render_line,
            )
    except PrefixFailed as exc:
        if not as_json and isinstance(exc.report, PrefixReport):
            render_summary(exc.report)
        raise
    render_report(report, as_json)


def render_line(result: PrefixResult) -> None:
    """One prefix as it finishes: ok/FAILED, the times, the failing step."""
    from patchctl.cli.console import out

    times = f"apply {result.apply_s:.1f} s, build {result.build_s:.1f} s"
    times += f", run {result.run_s:.1f} s" if result.run_s else ""
    if result.ok:
        out.print(f"ok      {result.id}  ({times})", markup=False)
        return
    out.print(f"FAILED  {result.id}  at {result.step} ({times})", markup=False)
    sys.stderr.write(f"  {result.error}\n")


def render_summary(report: PrefixReport) -> None:
    """The closing line: how many prefixes passed, failed, were not checked."""
    from patchctl.cli.console import out

    failed = len(report.failed())
    passed = len(report.results) - failed
    line = f"{passed} prefix(es) ok, {failed} failed"
    if report.skipped:
        line += f", {len(report.skipped)} not checked ({', '.join(report.skipped[:3])}"
        line += " ...)" if len(report.skipped) > 3 else ")"
    out.print(line, markup=False)


def render_report(report: PrefixReport, as_json: bool) -> None:
    """All prefixes passed: the report as JSON, or the summary line."""
    from patchctl.cli.console import print_json

    if as_json:
        print_json({"ok": True, **report.to_json()})
        return
    render_summary(report)
