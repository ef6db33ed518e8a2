"""`patchctl cleanroom apply / status`: the clean room of a series."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from patchctl.apply import ApplyReport, cleanroom_apply
from patchctl.cleanroom import Cleanroom, default_workdir, load_cleanroom, same_pin
from patchctl.console import RichProgress, out, print_json
from patchctl.options import DEFAULT_SERIES, JsonOpt, SeriesOpt, WorkdirOpt
from patchctl.patchapply import patch_sha256
from patchctl.series import Series, load_series

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
    with RichProgress(enabled=None if not as_json else False) as progress:
        report = cleanroom_apply(series, workdir, upto, force, progress)
    if as_json:
        print_json(apply_json(report))
    else:
        render_apply(report)


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
    }


def render_apply(report: ApplyReport) -> None:
    """Human output of an apply report."""
    if report.backup is not None:
        b = report.backup
        out.print(f"saved unsaved work ({len(b.paths)} path(s)) to {b.ref} and {b.patch_file}")
    verb = "created" if report.created else "updated"
    out.print(f"clean room {verb}: {report.cleanroom}")
    out.print(f"  base  {report.base_commit[:12]} (tree {report.base_tree})")
    for a in report.applied:
        state = "kept" if a.reused else "applied"
        ladder = "" if a.ladder != "mismatch" else "  [post_tree differs from series.yaml]"
        out.print(f"  {state:7} {a.commit[:12]} {a.id}{ladder}")
    out.print(f"  head  {report.head[:12]} (tree {report.tree})")


@dataclass(frozen=True)
class Status:
    """What `cleanroom status` reports."""

    room: Cleanroom
    series: Series | None
    stack: list[tuple[str, str, str | None]]
    dirty: list[str]


def _status(series_dir: Path, workdir: Path | None) -> Status:
    path = workdir if workdir is not None else default_workdir(series_dir)
    room = load_cleanroom(path)
    series = load_series(series_dir, check_files=False) if _has_series(series_dir) else None
    return Status(room, series, room.stack(), room.dirty_paths())


def _has_series(series_dir: Path) -> bool:
    return (series_dir / "series.yaml").is_file() or series_dir.is_file()


def _pending(status: Status) -> list[str]:
    if status.series is None:
        return []
    applied = [pid for _c, pid, _s in status.stack]
    return [pid for pid in status.series.ids() if pid not in applied]


def _stale(status: Status) -> list[str]:
    """Applied patches whose file changed since they were applied."""
    if status.series is None:
        return []
    stale = []
    for _commit, pid, sha in status.stack:
        if pid in status.series.ids():
            path = status.series.patch_path(pid)
            if not path.is_file() or patch_sha256(path.read_bytes()) != sha:
                stale.append(pid)
    return stale


@group.command("status")
def status_command(
    series: SeriesOpt = DEFAULT_SERIES,
    workdir: WorkdirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show the upstream, the base, the applied stack and unsaved work of the clean room."""
    status = _status(series, workdir)
    if as_json:
        print_json(status_json(status))
    else:
        render_status(status)


def status_json(status: Status) -> dict[str, Any]:
    """The --json form of a status."""
    room = status.room
    return {
        "ok": True,
        "cleanroom": str(room.path),
        "upstream": room.meta.get("upstream"),
        "root": room.root,
        "base_commit": room.base_commit(),
        "base_tree": room.base_tree(),
        "head": room.head(),
        "tree": room.head_tree(),
        "applied": [{"id": pid, "commit": c, "patch_sha256": s} for c, pid, s in status.stack],
        "pin_matches_series": None if status.series is None else same_pin(room, status.series),
        "pending": _pending(status),
        "stale": _stale(status),
        "dirty": status.dirty,
    }


def render_status(status: Status) -> None:
    """Human output of a status."""
    data = status_json(status)
    up = data["upstream"] or {}
    out.print(f"clean room {data['cleanroom']}")
    out.print("  upstream " + " ".join(f"{k}={v}" for k, v in up.items() if k != "kind"))
    if data["pin_matches_series"] is False:
        out.print("  note     series.yaml pins another upstream: `cleanroom apply` will rebuild")
    out.print(f"  base     {data['base_commit'][:12]} (tree {data['base_tree']})")
    for entry in data["applied"]:
        mark = "  (patch file changed)" if entry["id"] in data["stale"] else ""
        out.print(f"  applied  {entry['commit'][:12]} {entry['id'] or '(not patchctl)'}{mark}")
    for pid in data["pending"]:
        out.print(f"  pending  {pid}")
    out.print(f"  head     {data['head'][:12]} (tree {data['tree']})")
    dirty = data["dirty"]
    out.print(f"  unsaved  {len(dirty)} path(s)" + (": " + ", ".join(dirty[:10]) if dirty else ""))
