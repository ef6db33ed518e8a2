"""`patchctl resolutions train / list`: the recorded conflict resolutions of a series."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from patchctl.cli.options import DEFAULT_SERIES, JsonOpt, SeriesOpt

if TYPE_CHECKING:
    from patchctl.series.resolutions import Record

group = typer.Typer(
    help="Recorded conflict resolutions (resolutions/ in the series): learn them from a move"
    " already made, list them.",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    """Add the `resolutions` command group."""
    app.add_typer(group, name="resolutions")


@group.command("train")
def train_command(
    moved: Annotated[
        Path,
        typer.Option(
            "--moved",
            help="The same series already moved to another upstream (its directory or"
            " series.yaml): what it has where a rebase onto that upstream conflicts is recorded.",
        ),
    ],
    series: SeriesOpt = DEFAULT_SERIES,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be recorded; write nothing.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Learn resolutions from a move already made: each patch merged onto the moved series'
    upstream as `rebase` would, each conflict block recorded as the moved series resolves it."""
    from patchctl.cli.console import out, print_json
    from patchctl.ops.rebase.train import train

    report = train(series, moved, dry_run=dry_run)
    if as_json:
        print_json(report.to_json())
        return
    for p in report.patches:
        if p.missing:
            out.print(f"  {p.id}: not in {report.moved.parent}; nothing learned", markup=False)
            continue
        line = f"  {p.id}: {p.blocks} conflict block(s), {len(p.recorded)} recorded"
        line += f", {p.unclear} unclear (lines around them edited too)" if p.unclear else ""
        out.print(line, markup=False)
        for path in p.outside:
            out.print(f"    {path}: also edited outside its conflict blocks (not recorded)",
                      markup=False)  # fmt: skip
        for path in p.other:
            out.print(f"    {path}: a conflict that is not a text block (not recorded)",
                      markup=False)  # fmt: skip
    totals = report.totals()
    verb = "would record" if report.dry_run else "recorded"
    out.print(
        f"{totals['blocks']} conflict block(s) met, {verb} {totals['recorded']},"
        f" {totals['unclear']} unclear; {len(report.written)} file(s) written under"
        f" {report.series.parent / 'resolutions'}",
        markup=False,
    )


@group.command("list")
def list_command(
    patch_id: Annotated[
        str | None, typer.Argument(metavar="[ID]", help="One patch (default: all).")
    ] = None,
    series: SeriesOpt = DEFAULT_SERIES,
    as_json: JsonOpt = False,
) -> None:
    """List the recorded resolutions (each file is a YAML record: review it as text)."""
    from patchctl.cli.console import out, print_json
    from patchctl.ops.rebase.train import list_records

    found = list_records(series, patch_id)
    if as_json:
        print_json(
            {
                "ok": True,
                "records": [
                    {
                        "path": str(path),
                        "patch": r.patch,
                        "file": r.file,
                        "lines": {
                            k: getattr(r, k).count(b"\n")
                            for k in ("ours", "base", "theirs", "resolved")
                        },
                    }
                    for path, r in found
                ],
            }
        )
        return
    for path, r in found:
        sizes = ", ".join(f"{k} {n}" for k, n in line_counts(r).items())
        out.print(f"{path}: {r.patch} {r.file} (lines: {sizes})", markup=False)
    out.print(f"{len(found)} record(s)", markup=False)


def line_counts(record: Record) -> dict[str, int]:
    """The number of lines of each text of a record."""
    return {k: getattr(record, k).count(b"\n") for k in ("ours", "base", "theirs", "resolved")}
