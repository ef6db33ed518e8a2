"""`patchctl import SOURCE`: an existing series (quilt, format-patch, mbox) on top of the stack.

(The module is `import_` because `import` is a Python keyword.)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from patchctl.cli.commands._drift import drift_json, drift_lines
from patchctl.cli.options import DEFAULT_SERIES, JsonOpt, SeriesOpt, WorkdirOpt

if TYPE_CHECKING:
    from patchctl.ops.import_.record import ImportResult
    from patchctl.series.model import Patch


def register(app: typer.Typer) -> None:
    """Add `patchctl import` to the app."""
    app.command("import")(import_command)


def import_command(
    source: Annotated[
        Path,
        typer.Argument(help="A quilt series file or directory, a format-patch dir or an mbox."),
    ],
    refresh: Annotated[
        bool,
        typer.Option(
            "--refresh",
            help="Rewrite the diff of patches that need an offset or fuzz (headers kept).",
        ),
    ] = False,
    series: SeriesOpt = DEFAULT_SERIES,
    workdir: WorkdirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Import an existing series on top of the stack, keeping every patch's bytes."""
    from patchctl.cli.console import RichProgress
    from patchctl.ops.import_.record import import_series

    with RichProgress(enabled=False if as_json else None) as progress:
        result = import_series(series, source, workdir, progress, refresh=refresh)
    render_import(result, as_json)


def entry_json(patch: Patch) -> dict[str, Any]:
    """One imported entry, for --json."""
    return {
        "id": patch.id,
        "file": patch.file,
        "title": patch.title,
        "pre_tree": patch.pre_tree,
        "post_tree": patch.post_tree,
    }


def render_import(result: ImportResult, as_json: bool) -> None:
    """An import, as JSON or for humans."""
    from patchctl.cli.console import out, print_json

    if as_json:
        added = [
            {
                **entry_json(p),
                "drift": result.drift.get(p.id),
                "hunks": drift_json(result.hunks.get(p.id, ())),
                "refreshed": p.id in result.refreshed,
            }
            for p in result.added
        ]
        print_json({"ok": True, "imported": added})
        return
    for patch in result.added:
        out.print(f"imported {patch.id}: {patch.title}", markup=False)
        for line in drift_lines(result.hunks.get(patch.id, ())):
            out.print(f"  {line}", markup=False)
        if patch.id in result.refreshed:
            out.print("  -> refreshed: its diff now applies exactly (header kept)", markup=False)
        elif patch.id in result.hunks:
            out.print(
                f"  -> strict `cleanroom apply` refuses it: `patchctl refresh {patch.id}`",
                markup=False,
            )
    path = result.series.path
    out.print(
        f"{len(result.added)} patch(es) added to {path}; {len(result.changed)} file(s) updated"
    )
    out.print("  run `patchctl cleanroom apply` to apply them, `patchctl verify` to check them")
