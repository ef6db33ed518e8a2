"""`patchctl cleanroom apply / status`: the clean room of a series."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from patchctl.cli.options import DEFAULT_SERIES, JsonOpt, SeriesOpt, WorkdirOpt

if TYPE_CHECKING:
    from patchctl.ops.cleanroom.apply import ApplyReport
    from patchctl.ops.cleanroom.status import CleanroomStatus

group = typer.Typer(
    help="Create, update and inspect the clean room of a series.", no_args_is_help=True
)


def register(app: typer.Typer) -> None:
    """Add the `cleanroom` command group."""
    app.add_typer(group, name="cleanroom")


@group.command("apply")
def apply_command(
    series: SeriesOpt = DEFAULT_SERIES,
    upto: Annotated[str | None, typer.Option("--upto", help="Stop after this patch id.")] = None,
    workdir: WorkdirOpt = None,
    force: Annotated[
        bool,
        typer.Option("--force", help="Back up unsaved work in the clean room, then reset it."),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Materialize the pinned upstream and apply the series strictly (no fuzz, no offsets)."""
    from patchctl.cli.console import RichProgress
    from patchctl.ops.cleanroom.apply import cleanroom_apply

    with RichProgress(enabled=False if as_json else None) as progress:
        report = cleanroom_apply(series, workdir, upto, force, progress)
    render_apply(report, as_json)


def apply_json(report: ApplyReport) -> dict[str, Any]:
    """The --json form of an apply report."""
    backup = report.backup
    return {
        "ok": True,
        "cleanroom": str(report.cleanroom),
        "created": report.created,
        "base_commit": report.base_commit,
        "base_tree": report.base_tree,
        "head": report.head,
        "tree": report.tree,
        "applied": [
            {"id": a.id, "commit": a.commit, "tree": a.tree, "reused": a.reused, "ladder": a.ladder}
            for a in report.applied
        ],
        "backup": None
        if backup is None
        else {"ref": backup.ref, "patch_file": str(backup.patch_file), "paths": list(backup.paths)},
        "old_cleanroom": None
        if report.old_cleanroom is None
        else {"path": str(report.old_cleanroom.path), "holds": list(report.old_cleanroom.holds)},
    }


def render_apply(report: ApplyReport, as_json: bool) -> None:
    """An apply report, as JSON or for humans."""
    from patchctl.cli.console import out, print_json

    if as_json:
        print_json(apply_json(report))
        return
    if report.backup is not None:
        b = report.backup
        out.print(f"saved unsaved work ({len(b.paths)} path(s)) to {b.ref} and {b.patch_file}")
    if report.old_cleanroom is not None:
        old = report.old_cleanroom
        out.print(
            f"the pin changed: the old clean room is kept at {old.path}, because it holds "
            f"what patchctl did not make ({'; '.join(old.holds)}); remove it when done with it"
        )
    verb = "created" if report.created else "updated"
    out.print(f"clean room {verb}: {report.cleanroom}")
    out.print(f"  base  {report.base_commit[:12]} (tree {report.base_tree})")
    for a in report.applied:
        state = "kept" if a.reused else "applied"
        ladder = "" if a.ladder != "mismatch" else "  [post_tree differs from series.yaml]"
        out.print(f"  {state:7} {a.commit[:12]} {a.id}{ladder}")
    out.print(f"  head  {report.head[:12]} (tree {report.tree})")


@group.command("status")
def status_command(
    series: SeriesOpt = DEFAULT_SERIES,
    workdir: WorkdirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show the upstream, the base, the applied stack and unsaved work of the clean room."""
    from patchctl.ops.cleanroom.status import cleanroom_status

    render_status(cleanroom_status(series, workdir), as_json)


def rebase_line(rebase: dict[str, Any]) -> str:
    """The `rebase` line of a clean room's status while a rebase is in progress."""
    if rebase["state"] == "unreadable":
        return "  rebase   in progress (its journal is unreadable): `patchctl rebase --abort`"
    where = f"{rebase['moved']} of {rebase['patches']} patch(es) moved"
    if rebase["stopped_at"]:
        files = ", ".join(rebase["files"])
        what = f"{rebase['reason']}: {files}" if files else rebase["reason"]
        where += f"; stopped at {rebase['stopped_at']} ({what})"
    return (
        f"  rebase   in progress ({rebase['state']}): {rebase['old']} -> {rebase['new']}; {where};"
        " `patchctl rebase --status` shows the stop, `--continue` / `--skip` / `--abort` go on"
    )


def render_status(status: CleanroomStatus, as_json: bool) -> None:
    """A clean-room status, as JSON or for humans."""
    from patchctl.cli.console import out, print_json

    data = status.to_json()
    if as_json:
        print_json(data)
        return
    up = data["upstream"] or {}
    out.print(f"clean room {data['cleanroom']}")
    out.print("  upstream " + " ".join(f"{k}={v}" for k, v in up.items() if k != "kind"))
    if data["pin_matches_series"] is False:
        out.print("  note     series.yaml pins another upstream: `cleanroom apply` will rebuild")
    out.print(f"  base     {data['base_commit'][:12]} (tree {data['base_tree']})")
    rebase = data["rebase"]
    if rebase is not None:
        out.print(rebase_line(rebase), markup=False)
    for entry in data["applied"]:
        mark = "  (patch file changed)" if entry["id"] in data["stale"] else ""
        out.print(f"  applied  {entry['commit'][:12]} {entry['id'] or '(not patchctl)'}{mark}")
    for pid in data["pending"]:
        out.print(f"  pending  {pid}")
    out.print(f"  head     {data['head'][:12]} (tree {data['tree']})")
    dirty = data["dirty"]
    what = "  unsaved " if rebase is None else "  rebase work"  # the stop's files, not lost work
    out.print(f"{what} {len(dirty)} path(s)" + (": " + ", ".join(dirty[:10]) if dirty else ""))
    if data["interrupted"]:
        from patchctl.room.journal import command

        out.print(
            f"  note     a {command(data['interrupted'])} is running here or was killed; "
            "if killed, the next `cleanroom apply`, `capture` or `import` finishes or undoes it"
        )
