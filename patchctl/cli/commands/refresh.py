"""`patchctl refresh ID... | --all`: rewrite drifted patches so they apply exactly again."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from patchctl.cli.commands._drift import drift_json, drift_lines
from patchctl.cli.options import DEFAULT_SERIES, JsonOpt, SeriesOpt, WorkdirOpt

if TYPE_CHECKING:
    from patchctl.ops.refresh import RefreshedPatch, RefreshResult


def register(app: typer.Typer) -> None:
    """Add `patchctl refresh` to the app."""
    app.command("refresh")(refresh_command)


def refresh_command(
    patch_ids: Annotated[
        list[str] | None,
        typer.Argument(metavar="[ID]...", help="The patches to refresh (or --all)."),
    ] = None,
    all_patches: Annotated[bool, typer.Option("--all", help="Refresh every patch.")] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Report what would change; write nothing.")
    ] = False,
    git_style: Annotated[
        bool,
        typer.Option(
            "--git-style",
            help="Write refreshed diffs as git diffs (default: each patch's own dialect).",
        ),
    ] = False,
    series: SeriesOpt = DEFAULT_SERIES,
    workdir: WorkdirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Rewrite drifted patches (offset, fuzz) from the clean room's base, keeping headers."""
    if bool(patch_ids) == all_patches:
        raise typer.BadParameter("give one or more IDs, or --all")
    from patchctl.cli.console import RichProgress
    from patchctl.ops.refresh import refresh

    with RichProgress(enabled=False if as_json else None) as progress:
        result = refresh(
            series,
            None if all_patches else patch_ids,
            workdir,
            progress,
            dry_run=dry_run,
            git_style=git_style,
        )
    render_refresh(result, as_json)


def patch_json(patch: RefreshedPatch) -> dict[str, Any]:
    """One patch of a refresh, for --json."""
    return {
        "id": patch.id,
        "file": str(patch.file),
        "refreshed": patch.refreshed,
        "drift": drift_json(patch.drift),
        "old_sha256": patch.old_sha256,
        "new_sha256": patch.new_sha256,
        "old_bytes": patch.old_bytes,
        "new_bytes": patch.new_bytes,
        "kept_bytes": patch.kept_bytes,
        "pre_tree": patch.pre_tree,
        "post_tree": patch.post_tree,
    }


def render_refresh(result: RefreshResult, as_json: bool) -> None:
    """A refresh, as JSON or for humans: per patch, what drifted and what was rewritten."""
    from patchctl.cli.console import out, print_json

    if as_json:
        print_json(
            {
                "ok": True,
                "dry_run": result.dry_run,
                "patches": [patch_json(p) for p in result.patches],
                "changed": [str(p) for p in result.changed],
            }
        )
        return
    verb = "would refresh" if result.dry_run else "refreshed"
    for patch in result.patches:
        if not patch.refreshed:
            out.print(f"unchanged {patch.id} (applies exactly)", markup=False)
            continue
        out.print(
            f"{verb} {patch.id}: {patch.old_bytes} -> {patch.new_bytes} bytes, "
            f"{patch.kept_bytes} header/trailer bytes kept",
            markup=False,
        )
        for line in drift_lines(patch.drift):
            out.print(f"  was {line}", markup=False)
    done = len(result.refreshed)
    out.print(f"{done} of {len(result.patches)} patch(es) {verb}", markup=False)
    for path in result.changed:
        out.print(f"  updated {path}", markup=False)
