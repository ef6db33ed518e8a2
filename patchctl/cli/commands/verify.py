"""`patchctl verify [ID | --all]`: the byte-for-byte round trip of the series."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from patchctl.cli.options import DEFAULT_SERIES, JsonOpt, SeriesOpt, WorkdirOpt

if TYPE_CHECKING:
    from patchctl.ops.verify import VerifyOutcome


def register(app: typer.Typer) -> None:
    """Add `patchctl verify` to the app."""
    app.command("verify")(verify_command)


def verify_command(
    patch_id: Annotated[
        str | None, typer.Argument(metavar="[ID]", help="One patch (default: all).")
    ] = None,
    all_patches: Annotated[bool, typer.Option("--all", help="Verify every patch.")] = False,
    series: SeriesOpt = DEFAULT_SERIES,
    workdir: WorkdirOpt = None,
    objects: Annotated[
        list[Path] | None,
        typer.Option("--objects", help="Extra repository to read objects from (repeatable)."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Round-trip check (forward, reverse, re-export, markers, bases) in a scratch repository."""
    if patch_id is not None and all_patches:
        raise typer.BadParameter("give an ID or --all, not both")
    from patchctl.cli.console import RichProgress
    from patchctl.ops.verify import verify

    ids = None if patch_id is None else [patch_id]
    with RichProgress(enabled=False if as_json else None) as progress:
        outcome = verify(series, ids, workdir, tuple(objects or ()), progress)
    render_verify(outcome, as_json)


def render_verify(outcome: VerifyOutcome, as_json: bool) -> None:
    """The report (every check of every patch), then the verdict: a failure or stale docs
    raise, and under --json the error handler prints the report inside the error."""
    from patchctl.cli.console import out, print_json

    if not as_json:
        for patch in outcome.report.patches:
            out.print(f"{'ok  ' if patch.ok else 'FAIL'} {patch.id}", markup=False)
            for step in patch.steps:
                if not step.ok:
                    out.print(f"       {step.step}: {step.detail}", markup=False)
            for name, note in patch.notes:
                out.print(f"       note ({name}): {note}", markup=False)
        # docs regenerated from failing patches would record their bytes: no such advice then
        fix = "run `patchctl docs`" if outcome.report.ok else "fix the failing patches first"
        for path in outcome.stale_docs:
            out.print(f"STALE {path} ({fix})", markup=False)
        for problem in outcome.resolutions:
            out.print(f"RECORD {problem}", markup=False)
        out.print(_summary(outcome), markup=False)
    outcome.raise_if_failed()
    if as_json:
        print_json(outcome.to_json())


def _summary(outcome: VerifyOutcome) -> str:
    patches = outcome.report.patches
    bad = sum(not p.ok for p in patches)
    noted = sum(any(step == "forward" for step, _n in p.notes) for p in patches)
    bases = sum(any(step == "bases" for step, _n in p.notes) for p in patches)
    line = f"{len(patches) - bad}/{len(patches)} patch(es) verified"
    line += f", {bad} failed" if bad else ""
    if noted:
        line += (
            f"; {noted} with hunks at an offset (noted above): strict `cleanroom apply` "
            "refuses those until their hunks are regenerated"
        )
    if bases:
        line += f"; {bases} whose index lines name base blobs not reproduced or abbreviated"
    return line
