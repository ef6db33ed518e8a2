"""`patchctl capture ID`: the clean room's edits become patch ID."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from patchctl.cli.options import DEFAULT_SERIES, JsonOpt, SeriesOpt, WorkdirOpt

if TYPE_CHECKING:
    from patchctl.ops.capture import CaptureResult


def register(app: typer.Typer) -> None:
    """Add `patchctl capture` to the app."""
    app.command("capture")(capture_command)


def capture_command(
    patch_id: Annotated[str, typer.Argument(metavar="ID", help="The patch to (re)capture.")],
    series: SeriesOpt = DEFAULT_SERIES,
    workdir: WorkdirOpt = None,
    accept_changed: Annotated[
        bool,
        typer.Option(
            "--accept-changed",
            help="Capture even when the patch file or its clean-room commit differs from "
            "the recorded sha256 (a change made on purpose).",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Write everything the clean room changed since the commit before ID as patch ID."""
    from patchctl.ops.capture import capture

    render_capture(capture(series, patch_id, workdir, accept_changed=accept_changed), as_json)


def capture_json(result: CaptureResult) -> dict[str, Any]:
    """The --json form of a capture."""
    captured = result.captured
    return {
        "ok": True,
        "id": captured.patch.id,
        "file": str(result.file),
        "bytes": len(captured.data),
        "written": captured.written,
        "pre_tree": captured.pre_tree,
        "post_tree": captured.post_tree,
        "changed": [str(p) for p in result.changed],
        "later": [p.to_json() for p in result.later],
        "stale": [p.id for p in result.later if p.state == "stale"],
        "refresh_command": result.refresh,
        "stale_hint": result.hint,
        "extending": [
            {"series": str(e.series), "commands": list(e.commands)} for e in result.extending
        ],
    }


def render_capture(result: CaptureResult, as_json: bool) -> None:
    """A capture, as JSON or for humans."""
    from patchctl.cli.console import out, print_json

    if as_json:
        print_json(capture_json(result))
        return
    captured = result.captured
    verb = "wrote" if captured.written else "unchanged:"
    out.print(f"{verb} {result.file} ({len(captured.data)} bytes)")
    out.print(f"  pre  {captured.pre_tree}\n  post {captured.post_tree}")
    for other in result.changed:
        out.print(f"  updated {other}", markup=False)
    redone = [p.id for p in result.later if p.state == "re-recorded"]
    if redone:
        out.print(
            f"  re-recorded the trees of {', '.join(redone)}: each applies exactly on the tree"
            " the one before now leaves (patch files unchanged)",
            markup=False,
        )
    for p in result.later:
        if p.state == "stale":
            out.print(f"  stale: {p.id}: recorded trees left as they were; {p.why}", markup=False)
    if result.hint is not None:
        out.print(
            f"  verify fails the stale patches' chain until they are re-recorded: {result.hint}",
            markup=False,
        )
    for ext in result.extending:
        out.print(
            f"  series {ext.series} extends this one: its own patches were recorded on the"
            f" tree this series leaves, which changed; re-record them: {' ; '.join(ext.commands)}"
            " (that capture re-records its later patches)",
            markup=False,
        )
