"""Recorded conflict resolutions in a rebase: replayed where the same conflict comes back,
recorded where the user resolved one (the format: series/resolutions.py).

- Replay: when a patch's three-way merge conflicts, every conflict block that has a record
  under `resolutions/<patch id>/` of the series is replaced by the record's resolved text,
  byte for byte. When no block is left the patch is done (`replayed`; the result is checked
  as a hand resolution is); otherwise the rebase stops with only the blocks left.
- Record: `rebase --continue` compares the stop's conflict blocks with the tree it takes and
  stages one record per block it can tell apart, under the rebase's own state directory;
  the records are written into the series directory with the rebased patches when the rebase
  finishes (an --abort drops them with everything else).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from patchctl.fsio import write_atomic
from patchctl.gitlayer.git import Git, Merged
from patchctl.gitlayer.trees import TREE_MODE, Entry, TreeStore
from patchctl.room import rebasestate
from patchctl.room.rebasestate import Stop
from patchctl.series import resolutions
from patchctl.series.resolutions import DIRECTORY as DIRECTORY  # where the rebase keeps them
from patchctl.series.resolutions import Learned, Record
from patchctl.txn.session import SeriesSession

STAGED = "resolutions"  # under the rebase's state directory: <patch id>/<name>.yaml


@dataclass(frozen=True)
class Again:
    """A conflicted merge after the replay: the merge with the recorded blocks put in (its
    conflicts: the paths with anything left), and the records used (their paths under the
    series directory)."""

    merged: Merged
    used: tuple[str, ...]
    notes: tuple[str, ...] = ()  # files left to the user although every block was replayed

    @property
    def whole(self) -> bool:
        """True when records resolved every conflict of the merge."""
        return bool(self.used) and not self.merged.conflicts


def check_records(series_dir: Path, patch_ids: Sequence[str]) -> None:
    """Read every record of `patch_ids` (ResolutionInvalid naming the first that does not
    read): a rebase checks them before it writes anything."""
    for pid in patch_ids:
        resolutions.load_patch_records(series_dir, pid)


def replay_conflict(
    git: Git, store: TreeStore, series_dir: Path, patch_id: str, merged: Merged, enabled: bool
) -> Again:
    """`merged` (a conflicted merge of patch `patch_id`) with the recorded blocks replayed; as
    it was when replay is off or the patch has no records. A path whose conflict is not a
    block of text (modify/delete, a binary file) is always left."""
    records = resolutions.load_patch_records(series_dir, patch_id) if enabled else []
    if not records:
        return Again(merged, ())
    left: list[str] = []
    used: list[Record] = []
    notes: list[str] = []
    changes: dict[bytes, Entry | None] = {}
    for path in merged.conflicts:
        entry = store.find(merged.tree, path.encode("utf-8", "surrogateescape")).entry
        if entry is None or entry[0] == TREE_MODE or entry[0].startswith("12"):
            left.append(path)
            continue
        text = git.cat_file("blob", entry[1])
        again = resolutions.replay(patch_id, path, text, records)
        if again.used:
            changes[path.encode("utf-8", "surrogateescape")] = (
                entry[0],
                git.write_blob(again.text),
            )
            used += again.used
        if again.left or not again.used:
            left.append(path)
        elif any(r.outside_edits for r in again.used):
            left.append(path)
            notes.append(
                f"{path}: every conflict block was replayed from resolutions/, but when they"
                " were recorded the file also needed edits outside its blocks, which no record"
                " holds: make them (the series the records came from has them), then --continue"
            )
    tree = store.edit(merged.tree, changes)
    names = tuple(r.relpath() for r in used)
    return Again(Merged(tree, tuple(left), merged.messages), names, tuple(notes))


def record_resolution(git: Git, room: Path, stop: Stop, pre: str, post: str) -> tuple[Learned, ...]:
    """`--continue`: a record for each conflict block of the stop as the tree `post`
    resolves it, staged under the rebase's state directory (written into the series when the
    rebase finishes). What each file taught. A file the resolved patch no longer changes
    (`post` holds it as the new base `pre` does) gets no record: a record must belong to a
    path its patch changes, or verify calls it stale."""
    found: list[Learned] = []
    for path in stop.files:
        merged = git.maybe_rev(f"{stop.merged}:{path}")
        resolved = git.maybe_rev(f"{post}:{path}")
        if merged is None or resolved is None:
            continue  # deleted on one side: no block to learn
        if git.maybe_rev(f"{pre}:{path}") == resolved:
            continue  # the patch gave this file up: nothing of it is the patch's any more
        learned = resolutions.learn(
            stop.id, path, git.cat_file("blob", merged), git.cat_file("blob", resolved)
        )
        for record in learned.records:
            write_atomic(staged_dir(room) / record.patch / record.name, record.dump())
        found.append(learned)
    return tuple(found)


def staged_dir(room: Path) -> Path:
    """Where a rebase stages the records it learned."""
    return rebasestate.directory(room) / STAGED


def staged_writes(room: Path, series_dir: Path) -> list[tuple[Path, bytes]]:
    """The staged records as (path in the series directory, bytes), to write at the finish."""
    root = staged_dir(room)
    if not root.is_dir():
        return []
    return [
        (series_dir / DIRECTORY / path.parent.name / path.name, path.read_bytes())
        for path in sorted(root.glob("*/*.yaml"))
    ]


def records_of(series_dir: Path, patch_ids: Sequence[str]) -> list[Path]:
    """The record files of `patch_ids` in the series directory (those of dropped patches are
    moved aside with the patch file at the finish)."""
    found: list[Path] = []
    for pid in patch_ids:
        folder = series_dir / DIRECTORY / pid
        if folder.is_dir():
            found += sorted(p for p in folder.iterdir() if p.is_file())
    return found


def move_records(session: SeriesSession, series_dir: Path, patch_id: str, to: Path) -> list[Path]:
    """Move the records of a patch the rebase dropped to `to/<patch id>/` (kept beside the
    dropped patch's file, never deleted); the paths changed."""
    changed: list[Path] = []
    for path in records_of(series_dir, [patch_id]):
        target = to / patch_id / path.name
        if session.write_patch(target, path.read_bytes()):
            changed.append(target)
        session.remove_patch(path)
        changed.append(path)
    return changed
