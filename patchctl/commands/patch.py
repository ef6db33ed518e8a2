"""`patchctl new / capture / verify / docs / import`: author, check and document patches."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Any

import typer

from patchctl.capture import Captured, capture_patch, new_patch
from patchctl.cleanroom import Cleanroom, locked, open_cleanroom
from patchctl.console import RichProgress, out, print_json
from patchctl.docs import DocsOutOfDate, check_docs, doc_paths, stale_docs, write_docs
from patchctl.errors import NotFound
from patchctl.importer import import_patches
from patchctl.options import DEFAULT_SERIES, JsonOpt, SeriesOpt, WorkdirOpt
from patchctl.series import Patch, Series, load_series, save_series
from patchctl.verify import VerifyReport, verify_series


def register(app: typer.Typer) -> None:
    """Add new, capture, verify, docs and import to the app."""
    app.command("new")(new_command)
    app.command("capture")(capture_command)
    app.command("verify")(verify_command)
    app.command("docs")(docs_command)
    app.command("import")(import_command)


def _series_dir(series: Path) -> Path:
    return series.parent if series.is_file() else series


def _save(series: Series) -> list[Path]:
    """Save series.yaml and regenerate the docs; return the files whose bytes changed."""
    changed = [series.path] if save_series(series) else []
    return changed + write_docs(series)


# ----------------------------------------------------------------------------- new


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
    loaded = load_series(_series_dir(series), check_files=False)
    updated, entry = new_patch(
        loaded,
        patch_id,
        title,
        upstream_status=upstream_status,
        origin=origin,
        markers=tuple(marker or ()),
    )
    save_series(updated)
    if as_json:
        print_json({"ok": True, "id": entry.id, "file": str(updated.patch_path(entry))})
        return
    out.print(f"added {entry.id} at the top of {updated.path}")
    out.print(f"  edit the clean room, then run: patchctl capture {entry.id}")


# ----------------------------------------------------------------------------- capture


def capture_command(
    patch_id: Annotated[str, typer.Argument(metavar="ID", help="The patch to (re)capture.")],
    series: SeriesOpt = DEFAULT_SERIES,
    workdir: WorkdirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write everything the clean room changed since the commit before ID as patch ID."""
    directory = _series_dir(series)
    loaded = load_series(directory, check_files=False)
    room = open_cleanroom(loaded.dir, workdir)
    with locked(room.path):  # never two patchctl runs changing one clean room
        updated, captured = capture_patch(loaded, room, patch_id)
        changed = _save(updated)
    if as_json:
        print_json(_capture_json(updated, captured, changed))
        return
    _render_capture(updated, captured, changed)


def _capture_json(series: Series, captured: Captured, changed: list[Path]) -> dict[str, Any]:
    return {
        "ok": True,
        "id": captured.patch.id,
        "file": str(series.patch_path(captured.patch)),
        "bytes": len(captured.data),
        "written": captured.written,
        "pre_tree": captured.pre_tree,
        "post_tree": captured.post_tree,
        "changed": [str(p) for p in changed],
    }


def _render_capture(series: Series, captured: Captured, changed: list[Path]) -> None:
    path = series.patch_path(captured.patch)
    verb = "wrote" if captured.written else "unchanged:"
    out.print(f"{verb} {path} ({len(captured.data)} bytes)")
    out.print(f"  pre  {captured.pre_tree}\n  post {captured.post_tree}")
    for other in changed:
        out.print(f"  updated {other}")


# ----------------------------------------------------------------------------- verify


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
    """Round-trip check (forward, reverse, re-export, markers) in a scratch repository."""
    if patch_id is not None and all_patches:
        raise typer.BadParameter("give an ID or --all, not both")
    loaded = load_series(_series_dir(series))
    room = _cleanroom(loaded, workdir, required=not objects)
    sources = [*([] if room is None else [room.path]), *(objects or [])]
    base = None if room is None else room.base_tree()
    ids = None if patch_id is None else [patch_id]
    with ThreadPoolExecutor(max_workers=1) as pool:
        docs = pool.submit(stale_docs, loaded)  # pure Python: overlaps the git processes
        with RichProgress(enabled=False if as_json else None) as progress:
            report = verify_series(loaded, sources, ids, progress, base)
        stale = docs.result()
    if not as_json:
        _render_verify(report, stale)
    report.raise_if_failed()  # with --json the handler prints the report inside the error
    if stale:
        raise DocsOutOfDate(stale, {"report": report.to_json()})
    if as_json:
        print_json({**report.to_json(), "stale_docs": []})


def _cleanroom(series: Series, workdir: Path | None, *, required: bool) -> Cleanroom | None:
    try:
        return open_cleanroom(series.dir, workdir)
    except NotFound:
        if required:
            raise
        return None


def _render_verify(report: VerifyReport, stale: list[Path]) -> None:
    for patch in report.patches:
        mark = "ok  " if patch.ok else "FAIL"
        out.print(f"{mark} {patch.id}")
        for step in patch.steps:
            if not step.ok:
                out.print(f"       {step.step}: {step.detail}")
    for path in stale:
        out.print(f"STALE {path} (run `patchctl docs`)")
    total = len(report.patches)
    bad = sum(not p.ok for p in report.patches)
    out.print(f"{total - bad}/{total} patch(es) verified" + ("" if not bad else f", {bad} failed"))


# ----------------------------------------------------------------------------- docs


def docs_command(
    series: SeriesOpt = DEFAULT_SERIES,
    check: Annotated[
        bool, typer.Option("--check", help="Write nothing; exit 16 when the docs are stale.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Regenerate the series README (## Current series) and docs/UPSTREAM_SYNC.md."""
    loaded = load_series(_series_dir(series))
    if check:
        check_docs(loaded)  # with --json the handler prints the stale list inside the error
        if as_json:
            print_json({"ok": True, "stale": []})
        return
    changed = write_docs(loaded)
    if as_json:
        print_json(
            {
                "ok": True,
                "docs": [str(p) for p in doc_paths(loaded)],
                "changed": [str(p) for p in changed],
            }
        )
        return
    for path in doc_paths(loaded):
        out.print(f"{'wrote' if path in changed else 'unchanged:'} {path}")


# ----------------------------------------------------------------------------- import


def import_command(
    source: Annotated[
        Path,
        typer.Argument(help="A quilt series file or directory, a format-patch dir or an mbox."),
    ],
    series: SeriesOpt = DEFAULT_SERIES,
    workdir: WorkdirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Import an existing series on top of the stack, keeping every patch's bytes."""
    loaded = load_series(_series_dir(series))
    room = open_cleanroom(loaded.dir, workdir)
    with locked(room.path), RichProgress(enabled=False if as_json else None) as progress:
        result = import_patches(loaded, source, room.git, room.base_tree(), progress)
        changed = _save(result.series)
    if as_json:
        added = [{**_entry_json(p), "drift": result.drift.get(p.id)} for p in result.added]
        print_json({"ok": True, "imported": added})
        return
    for patch in result.added:
        out.print(f"imported {patch.id}: {patch.title}")
        if patch.id in result.drift:
            out.print(f"  note: {result.drift[patch.id]}; strict `cleanroom apply` refuses it")
    path = result.series.path
    out.print(f"{len(result.added)} patch(es) added to {path}; {len(changed)} file(s) updated")
    out.print("  run `patchctl cleanroom apply` to apply them, `patchctl verify` to check them")


def _entry_json(patch: Patch) -> dict[str, Any]:
    return {
        "id": patch.id,
        "file": patch.file,
        "title": patch.title,
        "pre_tree": patch.pre_tree,
        "post_tree": patch.post_tree,
    }
