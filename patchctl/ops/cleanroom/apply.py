"""`patchctl cleanroom apply`: a series applied strictly onto its clean room.

No fuzz, no offsets, whitespace untouched: each patch is applied to the tree of the commit
before it (series.gitapply.strict_apply: conflict, drift and already-applied are told apart there)
and becomes one commit with the `Patchctl-Id:` and `Patchctl-Patch-Sha256:` trailers
(series.gitapply.commit_message). Trees and commits are made in the object store, a patch costing
only the paths it touches; the clean room's index and files follow once, at the end (or at
the last good patch when one fails), with `reset --keep`, which touches only files that differ.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from patchctl import killpoint
from patchctl.errors import DirtyTree
from patchctl.gitlayer.git import Git
from patchctl.progress import Progress, or_null
from patchctl.room.cleanroom import (
    BACKUP_REFS,
    Backup,
    Cleanroom,
    build_partial,
    create_cleanroom,
    is_cleanroom,
    load_cleanroom,
    not_patchctls,
    same_pin,
)
from patchctl.room.journal import RoomJournal
from patchctl.series.gitapply import (
    TreePatcher,
    check_recorded_sha256,
    commit_message,
    patch_sha256,
    strict_apply,
    warn_ambiguous_names,
)
from patchctl.series.model import Series, read_patch_file
from patchctl.series.stack import Entry, check_base_tree, load_stack
from patchctl.txn.session import series_session


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
    old_cleanroom: OldCleanroom | None = None  # kept by a pin change (see `_repin`)


def apply_patch(
    room: Cleanroom, patcher: TreePatcher, entry: Entry, parent: AppliedPatch | None
) -> AppliedPatch:
    """Apply one patch of the stack strictly to the tree of `parent` (the base when None),
    under the entry's root, and commit it.

    Only objects are written: the clean room's HEAD, index and files do not move here.
    """
    patch = entry.patch
    data = read_patch_file(entry.file)
    warn_ambiguous_names(patch.id, data)
    pre = parent.tree if parent is not None else room.base_tree()
    recorded = entry.local_tree(room.git, pre) or pre
    tree = strict_apply(patcher, patch, data, entry.root, pre, recorded=recorded)
    head = parent.commit if parent is not None else room.base_commit()
    commit = room.git.commit_tree(tree, commit_message(patch, patch_sha256(data)), (head,))
    return AppliedPatch(patch.id, commit, tree, False, _ladder(room, entry, tree))


def _ladder(room: Cleanroom, entry: Entry, tree: str) -> str:
    """The tree vs the recorded post_tree (an inherited patch: the subtree it records)."""
    if entry.patch.post_tree is None:
        return "unrecorded"
    return "ok" if entry.patch.post_tree == entry.local_tree(room.git, tree) else "mismatch"


def reusable_prefix(room: Cleanroom, targets: Sequence[Entry]) -> list[AppliedPatch]:
    """The applied commits that already match the first target patches byte for byte."""
    kept: list[AppliedPatch] = []
    matching: list[tuple[str, Entry]] = []
    for (commit, pid, sha), entry in zip(room.stack(), targets, strict=False):
        path = entry.file
        if pid != entry.id or not path.is_file() or sha != patch_sha256(read_patch_file(path)):
            break
        matching.append((commit, entry))
    trees = room.git.trees_of([commit for commit, _entry in matching])
    for (commit, entry), tree in zip(matching, trees, strict=True):
        kept.append(AppliedPatch(entry.id, commit, tree, True, _ladder(room, entry, tree)))
    return kept


def apply_series(
    series: Series,
    cleanroom: Cleanroom,
    upto: str | None = None,
    progress: Progress | None = None,
    journal: RoomJournal | None = None,
    *,
    known_clean: bool = False,
) -> ApplyReport:
    """Bring a clean (no unsaved work) clean room to base + the series' stack up to `upto`
    (stack.py: the patches of an extended series first, under its root).

    Commits that already match a prefix of the stack are kept; the rest are made in the
    object store, and the clean room moves once from its HEAD to the last of them with
    `reset --keep`, which rewrites only files that differ (incremental builds stay
    incremental). When a patch fails, the clean room moves to the last good patch instead.
    `journal` records where the clean room is and where that one `reset --keep` takes it (and
    the plan), before the move, so a run killed mid-move is undone by the next one
    (recovery.py). `known_clean`: the caller has just checked that there is no unsaved work
    (a `git status` of a large tree is not free).
    """
    if not known_clean and cleanroom.is_dirty():
        raise DirtyTree(f"{cleanroom.path} has unsaved work", hint="pass --force to back it up")
    stack = load_stack(series)
    check_base_tree(stack, cleanroom.git, cleanroom.base_tree())
    targets = stack.upto(upto)
    for entry in targets:  # before anything moves: a changed patch never becomes a commit
        if entry.patch.sha256 is not None:
            check_recorded_sha256(entry.patch, read_patch_file(entry.file), entry.file)
    kept = reusable_prefix(cleanroom, targets)
    report = or_null(progress)
    report.start("apply", len(targets))
    report.advance("apply", len(kept))
    applied = list(kept)
    try:
        with TreePatcher(cleanroom.git) as patcher:
            for entry in targets[len(kept) :]:
                parent = applied[-1] if applied else None
                applied.append(apply_patch(cleanroom, patcher, entry, parent))
                report.advance("apply")
    finally:
        target = applied[-1].commit if applied else cleanroom.base_commit()
        if journal is not None:
            journal.record(
                head=cleanroom.head(),
                reset_to=target,
                plan=[_planned(entry) for entry in targets],
                root=series.root,
            )
        cleanroom.reset_to(target)
    report.done("apply")
    return _report(cleanroom, tuple(applied))


def _planned(entry: Entry) -> list[str]:
    """(id, sha256, file, root) of a patch about to be applied, as the journal records it
    (root: the directory it applies under; an extended series' patch has its own)."""
    path = entry.file
    sha = patch_sha256(read_patch_file(path)) if path.is_file() else ""
    return [entry.id, sha, os.fsdecode(path.resolve()), entry.root]


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


def _protect(room: Cleanroom, force: bool, journal: RoomJournal) -> Backup | None:
    """Refuse on unsaved work unless `force`; with `force`, save it first."""
    dirty = room.dirty_paths()
    foreign = _unsaved_commits(room)
    if not dirty and not foreign:
        return None
    nested = [p for p in dirty if p.endswith("/")]  # git lists a nested repository as "x/"
    if nested:
        raise DirtyTree(
            f"{room.path} holds git repositories of its own ({', '.join(nested[:3])}"
            f"{' ...' if len(nested) > 3 else ''}); a backup could keep only a link to their "
            "commit, not their files, so patchctl does not touch the clean room",
            hint=f"move them out of {room.path}, then run the command again",
        )
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
    journal.record(head=room.head(), backup=asdict(backup))
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
    with series_session(series_path, op="cleanroom apply") as session:
        series = session.series
        if upto is not None:
            load_stack(series).index(upto)  # NotFound before anything is touched
        path = session.lock_cleanroom(workdir)
        assert session.room_journal is not None
        return _apply_locked(series, path, upto, force, progress, session.room_journal)


def _apply_locked(
    series: Series,
    path: Path,
    upto: str | None,
    force: bool,
    progress: Progress | None,
    journal: RoomJournal,
) -> ApplyReport:
    created = False
    backup: Backup | None = None
    kept: OldCleanroom | None = None
    if is_cleanroom(path):
        room = load_cleanroom(path)
        backup = _protect(room, force, journal)
        if not same_pin(room, series):
            room, kept = _repin(room, series, progress, journal)
            created = True
    else:
        room = create_cleanroom(series, path, progress, journal)
        created = True
    result = apply_series(series, room, upto, progress, journal, known_clean=True)
    return replace(result, created=created, backup=backup, old_cleanroom=kept)


# ----------------------------------------------------------------------------- pin change


@dataclass(frozen=True)
class OldCleanroom:
    """A clean room replaced by a pin change and kept: it held things that are not patchctl's."""

    path: Path
    holds: tuple[str, ...]  # what is in it: "ignored files: build/", "branch refs/heads/wip"


def aside_path(room: Path) -> Path:
    """A free name beside the clean room for the old one: `<name>.old`, `<name>.old-2`, ..."""
    candidate = room.with_name(f"{room.name}.old")
    number = 1
    while candidate.exists() or candidate.is_symlink():
        number += 1
        candidate = room.with_name(f"{room.name}.old-{number}")
    return candidate


def _repin(
    room: Cleanroom, series: Series, progress: Progress | None, journal: RoomJournal
) -> tuple[Cleanroom, OldCleanroom | None]:
    """Replace a clean room made from another upstream pin (its unsaved work is saved).

    The new clean room is built beside the old one and swapped in only when complete. The
    old one is deleted only when it holds nothing patchctl did not make (`not_patchctls`);
    otherwise it is kept at `<name>.old` and reported, so a pin change never loses a build
    tree, a branch, the stash or a nested repository.
    """
    holds = not_patchctls(room)
    aside = aside_path(room.path)
    journal.record(aside=aside, discard=not holds)
    partial = build_partial(series, room.path, progress, journal)
    try:
        # Backups live on in the new clean room (their objects are fetched along).
        Git(partial).fetch(str(room.path), f"+{BACKUP_REFS}*:{BACKUP_REFS}*")
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    journal.record(stage="swapping")
    room.path.rename(aside)
    killpoint.reached("old clean room aside")
    partial.rename(room.path)
    if not holds:
        shutil.rmtree(aside)
    journal.record(stage=None, partial=None, aside=None, discard=None, head=None, backup=None)
    return load_cleanroom(room.path), (OldCleanroom(aside, tuple(holds)) if holds else None)
