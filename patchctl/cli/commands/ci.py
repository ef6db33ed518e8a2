"""`patchctl ci`: the round-trip gate for a CI job or a pre-commit hook, one exit code."""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from patchctl.cli.options import DEFAULT_SERIES, JsonOpt, check_path
from patchctl.ops.build import Launcher

if TYPE_CHECKING:
    from patchctl.ops.ci.gate import GateReport


class Format(StrEnum):
    """How findings are printed besides the summary."""

    text = "text"
    github = "github"
    gitlab = "gitlab"


def _series_list(values: list[Path] | None) -> list[Path] | None:
    return None if values is None else [check_path(v) for v in values]


SeriesListOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--series",
        metavar="DIR",
        help="Series directory (or its series.yaml); repeatable, checked in the order given "
        "(default: every patches/*/series.yaml here, else patches/llamafile).",
        callback=_series_list,
    ),
]


def register(app: typer.Typer) -> None:
    """Add `patchctl ci` to the app."""
    app.command("ci")(ci_command)


def ci_command(
    series: SeriesListOpt = None,
    fast: Annotated[
        bool,
        typer.Option(
            "--fast",
            help="Only the checks that need no upstream: series.yaml, the patch files and "
            "their recorded sha256, the generated docs (the pre-commit hook).",
        ),
    ] = False,
    build: Annotated[
        bool, typer.Option("--build", help="Also build each clean room (patchctl build).")
    ] = False,
    launcher: Annotated[
        Launcher | None,
        typer.Option("--launcher", help="With --build: the compiler launcher (ccache, sccache)."),
    ] = None,
    target: Annotated[
        list[str] | None,
        typer.Option("--target", "-t", help="With --build: a target to build (repeatable)."),
    ] = None,
    output: Annotated[
        Format,
        typer.Option(
            "--format",
            help="Findings as text (path:line:), GitHub workflow commands (::error), or "
            "GitLab's code-quality JSON on stdout (the summary then goes to stderr).",
        ),
    ] = Format.text,
    as_json: JsonOpt = False,
) -> None:
    """The CI gate: apply strictly, verify --all, docs current, optionally build."""
    if as_json and output is not Format.text:
        raise typer.BadParameter("--json prints one JSON document; leave out --format")
    if fast and (build or launcher or target):
        raise typer.BadParameter("--fast checks without an upstream: it cannot --build")
    if not build and (launcher or target):
        raise typer.BadParameter("--launcher and --target go with --build")
    from patchctl.cli.console import RichProgress
    from patchctl.ops.build.config import BuildConfig
    from patchctl.ops.ci.gate import GateOptions, project_series, run_gate

    config = None
    if build:
        config = BuildConfig(
            launcher=None if launcher is None else launcher.value, targets=tuple(target or ())
        )
    options = GateOptions(fast=fast, build=config)
    quiet = as_json or output is Format.gitlab
    with RichProgress(enabled=False if quiet else None) as progress:
        chosen = series or project_series(Path.cwd()) or [DEFAULT_SERIES]
        report = run_gate(chosen, options, progress)
    render_ci(report, output, as_json)


def render_ci(report: GateReport, output: Format, as_json: bool) -> None:
    """The summary and the findings in the chosen form; then the first failure's error."""
    from patchctl.cli.console import print_json
    from patchctl.ops.ci import findings

    if as_json:
        report.raise_if_failed()
        print_json(report.to_json())
        return
    stream = sys.stderr if output is Format.gitlab else sys.stdout
    stream.write(summary(report))
    if output is Format.github:
        sys.stdout.write(findings.github(report.findings))
    elif output is Format.gitlab:
        sys.stdout.write(findings.gitlab(report.findings))
    stream.flush()
    sys.stdout.flush()
    report.raise_if_failed()


def summary(report: GateReport) -> str:
    """One screen: each series' checks, the findings as `path:line:`, the verdict."""
    from patchctl.allowlists import printable
    from patchctl.ops.ci import findings

    lines = []
    for gate in report.series:
        lines.append(f"series {gate.series}")
        for check in gate.checks:
            mark = {"ok": "ok", "failed": "FAILED", "skipped": "skipped"}[check.status]
            lines.append(f"  {mark:8} {check.check:8} {check.detail}")
    text = "\n".join(printable(line) for line in lines) + "\n"
    if report.findings:
        text += printable(findings.text(report.findings), keep="\n")
    if report.ok:
        return text + "patchctl ci: all checks passed\n"
    count = len(report.findings)
    return text + f"patchctl ci: {count} problem(s); exit {report.exit_code} (the first one's)\n"
