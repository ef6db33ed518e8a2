"""`patchctl split ID --part NEW_ID=PATTERN[,PATTERN...] ...`: one patch -> consecutive parts."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from patchctl.cli.options import DEFAULT_SERIES, JsonOpt, SeriesOpt, WorkdirOpt

if TYPE_CHECKING:
    from patchctl.ops.split import Change, Part, SplitResult


def register(app: typer.Typer) -> None:
    """Add `patchctl split` to the app."""
    app.command("split")(split_command)


def split_command(
    patch_id: Annotated[str, typer.Argument(metavar="ID", help="The patch to split.")],
    part: Annotated[
        list[str] | None,
        typer.Option(
            "--part",
            metavar="NEW_ID[=PATTERN,...]",
            help="A part, in order (repeat): globs over the patch's file paths, or PATH:N / "
            "PATH:N-M for hunks of one file; a part without patterns takes the rest.",
        ),
    ] = None,
    parts_from: Annotated[
        Path | None,
        typer.Option(
            "--parts-from",
            metavar="FILE",
            help="Read parts from FILE, one NEW_ID[=PATTERN,...] per line (# comments), "
            "before any --part.",
        ),
    ] = None,
    title: Annotated[
        list[str] | None,
        typer.Option(
            "--title",
            metavar="NEW_ID=TEXT",
            help="A part's title (default: the original's with ' (k/n)' appended).",
        ),
    ] = None,
    list_only: Annotated[
        bool, typer.Option("--list", help="Show the patch's files and hunk numbers; split nothing.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Check and show the parts; write nothing.")
    ] = False,
    series: SeriesOpt = DEFAULT_SERIES,
    workdir: WorkdirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Split patch ID into consecutive patches by files (globs) and hunks."""
    if list_only:
        from patchctl.ops.split import list_changes

        render_changes(list_changes(series, patch_id, workdir), as_json)
        return
    if not part and parts_from is None:
        raise typer.BadParameter("give --part NEW_ID=PATTERN,... twice or more (or --list)")
    from patchctl.ops.split import parse_part, read_parts, split, with_titles

    given = read_parts(parts_from) if parts_from is not None else []
    specs = with_titles([*given, *(parse_part(p) for p in part or [])], title or [])
    render_split(split(series, patch_id, specs, workdir, dry_run=dry_run), as_json)


def change_json(change: Change) -> dict[str, Any]:
    """One file of the patch, for --json."""
    return {
        "path": change.path,
        "status": _status(change),
        "hunks": [h.header for h in change.hunks],
    }


def _status(change: Change) -> str:
    if change.pre is None:
        return "added"
    if change.post is None:
        return "deleted"
    return "modified" if change.hunks else "changed"


def render_changes(changes: list[Change], as_json: bool) -> None:
    """`--list`: each file with its status and numbered hunks."""
    from patchctl.cli.console import out, print_json

    if as_json:
        print_json({"ok": True, "files": [change_json(c) for c in changes]})
        return
    for change in changes:
        out.print(f"{_status(change):9} {change.path}", markup=False)
        for hunk in change.hunks:
            out.print(f"  {change.path}:{hunk.number}  {hunk.header}", markup=False)


def part_json(part: Part) -> dict[str, Any]:
    """One part of a split, for --json."""
    return {
        "id": part.patch.id,
        "title": part.patch.title,
        "file": part.patch.file,
        "files": list(part.files),
        "hunks": [f"{path}:{number}" for path, number in part.hunks],
        "markers": list(part.patch.markers),
        "pre_tree": part.patch.pre_tree,
        "post_tree": part.patch.post_tree,
        "bytes": len(part.data),
    }


def render_split(result: SplitResult, as_json: bool) -> None:
    """A split, as JSON or for humans: the parts in order and the files written."""
    from patchctl.cli.console import out, print_json

    if as_json:
        print_json(
            {
                "ok": True,
                "dry_run": result.dry_run,
                "original": result.original.id,
                "parts": [part_json(p) for p in result.parts],
                "removed": None if result.removed is None else str(result.removed),
                "changed": [str(p) for p in result.changed],
            }
        )
        return
    verb = "would split" if result.dry_run else "split"
    out.print(f"{verb} {result.original.id} into {len(result.parts)} patches:", markup=False)
    for part in result.parts:
        claimed = [*part.files, *(f"{p}:{n}" for p, n in part.hunks)]
        shown = ", ".join(claimed[:6]) + (" ..." if len(claimed) > 6 else "")
        out.print(f"  {part.patch.id}: {shown}", markup=False)
    for path in result.changed:
        out.print(f"  updated {path}", markup=False)
    if result.removed is not None and not result.dry_run:
        out.print(f"  removed {result.removed}", markup=False)
    if not result.dry_run:
        out.print(
            "  the clean room is unchanged: `patchctl cleanroom apply` brings it to the parts"
        )
