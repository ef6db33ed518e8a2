"""`patchctl new ID --title T`: add a patch entry at the top of the stack."""

from __future__ import annotations

from typing import Annotated

import typer

from patchctl.cli.options import DEFAULT_SERIES, JsonOpt, SeriesOpt


def register(app: typer.Typer) -> None:
    """Add `patchctl new` to the app."""
    app.command("new")(new_command)


def new_command(
    patch_id: Annotated[str, typer.Argument(metavar="ID", help="NNNN-slug, e.g. 0079-fix.")],
    title: Annotated[str, typer.Option("--title", help="One-line title of the patch.")],
    marker: Annotated[
        list[str] | None,
        typer.Option("--marker", help="In-tree marker the patch adds (repeatable)."),
    ] = None,
    upstream_status: Annotated[
        str, typer.Option("--upstream-status", help="DEP-3/OE Upstream-Status.")
    ] = "Pending",
    origin: Annotated[str, typer.Option("--origin", help="Provenance.")] = "patchctl",
    series: SeriesOpt = DEFAULT_SERIES,
    as_json: JsonOpt = False,
) -> None:
    """Add patch ID at the top of the stack; edit the clean room, then `patchctl capture ID`."""
    from patchctl.cli.console import out, print_json
    from patchctl.ops.capture import add_patch

    updated, entry = add_patch(
        series,
        patch_id,
        title,
        upstream_status=upstream_status,
        origin=origin,
        markers=tuple(marker or ()),
    )
    if as_json:
        print_json({"ok": True, "id": entry.id, "file": str(updated.patch_path(entry))})
        return
    out.print(f"added {entry.id} at the top of {updated.path}")
    out.print(f"  edit the clean room, then run: patchctl capture {entry.id}")
