"""`patchctl cleanroom apply`: a series applied strictly onto its clean room.

No fuzz, no offsets, whitespace untouched: each patch is first checked (patchapply.check_patch:
conflict, drift and already-applied are told apart there), and nothing is written until the
check passes, so the tree stays at the last good patch. Each applied patch becomes one commit
with the `Patchctl-Id:` and `Patchctl-Patch-Sha256:` trailers (patchapply.commit_message).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from patchctl.cleanroom import (
    BACKUP_REFS,
    Backup,
    Cleanroom,
    create_cleanroom,
    is_cleanroom,
    load_cleanroom,
    same_pin,
)
from patchctl.errors import DirtyTree
from patchctl.patchapply import apply_in_tree, check_patch, commit_message, patch_sha256
from patchctl.progress import Progress, or_null
from patchctl.series import Series
from patchctl.session import series_session
from patchctl.stack import Entry, check_base_tree, load_stack


@dataclass(frozen=True)
class AppliedPatch:
    """One patch in the resulting stack."""

    id: str
    commit: str
    tree: str
    reused: bool  # already in the clean room with the same bytes: kept, not re-applied
    ladder: str  # "ok" | "mismatch" | "unrecorded": the tree vs the recorded post_tree


@dataclass(frozen=True)
class ApplyReport:
    """What `cleanroom apply` did."""

    cleanroom: Path
    base_commit: str
    base_tree: str
    head: str
    tree: str
    applied: tuple[AppliedPatch, ...]
    created: bool = False
    backup: Backup | None = None


def apply_patch(room: Cleanroom, entry: Entry) -> AppliedPatch:
    """Check, apply and commit one patch of the stack on top of HEAD."""
    patch = entry.patch
    data = entry.file.read_bytes()
    head_tree = room.head_tree()
    local = entry.local_tree(room.git, head_tree) or head_tree
    check_patch(room.git, patch, data, entry.root, local)
    apply_in_tree(room.git, data, entry.root)
    tree = room.git.write_tree()
    commit = room.git.commit_tree(tree, commit_message(patch, patch_sha256(data)), (room.head(),))
    room.git.update_ref("HEAD", commit, f"patchctl apply {patch.id}")
    return AppliedPatch(patch.id, commit, tree, False, _ladder(room, entry, tree))


def _ladder(room: Cleanroom, entry: Entry, tree: str) -> str:
    """The tree vs the recorded post_tree (an inherited patch: the subtree it records)."""
    if entry.patch.post_tree is None:
        return "unrecorded"
    return "ok" if entry.patch.post_tree == entry.local_tree(room.git, tree) else "mismatch"


def reusable_prefix(room: Cleanroom, targets: Sequence[Entry]) -> list[AppliedPatch]:
    """The applied commits that already match the first target patches byte for byte."""
    kept: list[AppliedPatch] = []
    for (commit, pid, sha), entry in zip(room.stack(), targets, strict=False):
        path = entry.file
        if pid != entry.id or not path.is_file() or sha != patch_sha256(path.read_bytes()):
            break
        tree = room.git.tree_of(commit)
        kept.append(AppliedPatch(entry.id, commit, tree, True, _ladder(room, entry, tree)))
    return kept


def apply_series(
    series: Series,
    cleanroom: Cleanroom,
    upto: str | None = None,
    progress: Progress | None = None,
) -> ApplyReport:
    """Bring a clean (no unsaved work) clean room to base + the series' stack up to `upto`
    (stack.py: the patches of an extended series first, under its root).

    Commits that already match a prefix of the stack are kept (their files are untouched,
    so incremental builds stay incremental); the rest is reset with `reset --keep` and applied.
    """
    if cleanroom.is_dirty():
        raise DirtyTree(f"{cleanroom.path} has unsaved work", hint="pass --force to back it up")
    stack = load_stack(series)
    check_base_tree(stack, cleanroom.git, cleanroom.base_tree())
    targets = stack.upto(upto)
    kept = reusable_prefix(cleanroom, targets)
    cleanroom.reset_to(kept[-1].commit if kept else cleanroom.base_commit())
    cleanroom.git.refresh_index()
    report = or_null(progress)
    report.start("apply", len(targets))
    report.advance("apply", len(kept))
    applied = list(kept)
    for entry in targets[len(kept) :]:
        applied.append(apply_patch(cleanroom, entry))
        report.advance("apply")
    report.done("apply")
    return _report(cleanroom, tuple(applied))


def _report(room: Cleanroom, applied: tuple[AppliedPatch, ...]) -> ApplyReport:
    return ApplyReport(
        cleanroom=room.path,
        base_commit=room.base_commit(),
        base_tree=room.base_tree(),
        head=room.head(),
        tree=room.head_tree(),
        applied=applied,
    )


# ----------------------------------------------------------------------------- the command


def _unsaved_commits(room: Cleanroom) -> bool:
    return any(not pid for _c, pid, _s in room.stack())


def _protect(room: Cleanroom, force: bool) -> Backup | None:
    """Refuse on unsaved work unless `force`; with `force`, save it first."""
    dirty = room.dirty_paths()
    foreign = _unsaved_commits(room)
    if not dirty and not foreign:
        return None
    if not force:
        what = "commits not made by patchctl"
        if dirty:
            what = f"{len(dirty)} changed path(s): " + ", ".join(dirty[:3])
            what += " ..." if len(dirty) > 3 else ""
        raise DirtyTree(
            f"{room.path} has unsaved work ({what}); not touching it",
            hint="capture it with `patchctl capture`, or pass --force to back it up and reset",
        )
    backup = room.save_unsaved_work()
    room.discard_saved(backup)
    return backup


def cleanroom_apply(
    series_path: Path,
    workdir: Path | None = None,
    upto: str | None = None,
    force: bool = False,
    progress: Progress | None = None,
) -> ApplyReport:
    """`patchctl cleanroom apply`: create or update the clean room and apply the series."""
    with series_session(series_path) as session:
        series = session.series
        if upto is not None:
            load_stack(series).index(upto)  # NotFound before anything is touched
        path = session.lock_cleanroom(workdir)
        return _apply_locked(series, path, upto, force, progress)


def _apply_locked(
    series: Series, path: Path, upto: str | None, force: bool, progress: Progress | None
) -> ApplyReport:
    created = False
    backup: Backup | None = None
    if is_cleanroom(path):
        room = load_cleanroom(path)
        backup = _protect(room, force)
        if not same_pin(room, series):
            room = _repin(room, series, progress)
            created = True
    else:
        room = create_cleanroom(series, path, progress)
        created = True
    result = apply_series(series, room, upto, progress)
    return replace(result, created=created, backup=backup)


def _repin(room: Cleanroom, series: Series, progress: Progress | None) -> Cleanroom:
    """Replace a clean room made from another upstream pin (its unsaved work is saved).

    The old clean room is moved aside first and restored if the new one cannot be made.
    """
    old = room.path.with_name(f".{room.path.name}.old-{os.getpid()}")
    room.path.rename(old)
    try:
        new = create_cleanroom(series, room.path, progress)
    except BaseException:
        old.rename(room.path)
        raise
    # Backups live on in the new clean room (their objects are fetched along).
    new.git.fetch(str(old), f"+{BACKUP_REFS}*:{BACKUP_REFS}*")
    shutil.rmtree(old)
    return new
