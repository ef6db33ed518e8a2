"""`patchctl cleanroom status`: a clean room measured against its series (read-only).

What is applied (from the commits' trailers), what is pending, which applied patches changed
on disk since, unsaved work, and whether series.yaml still pins the clean room's upstream.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchctl.limits import JOURNAL_BYTES, read_bounded
from patchctl.room.cleanroom import (
    BASE_REF,
    Cleanroom,
    default_workdir,
    load_cleanroom,
    same_pin,
)
from patchctl.room.journal import room_journal_path
from patchctl.series.gitapply import patch_sha256
from patchctl.series.model import Series, load_series, read_patch_file, series_dir, series_file
from patchctl.series.stack import Entry, load_stack
from patchctl.txn.journal import JOURNAL


@dataclass(frozen=True)
class CleanroomStatus:
    """What `cleanroom status` reports."""

    room: Cleanroom
    series: Series | None  # None when there is no series file (a clean room on its own)
    stack: list[tuple[str, str, str | None]]
    dirty: list[str]
    entries: tuple[Entry, ...] = ()  # the series' stack (stack.py), extended series first
    rebase: dict[str, Any] | None = None  # a rebase in progress (rebase_summary)

    def pending(self) -> list[str]:
        """Patches of the series' stack not applied in the clean room."""
        applied = [pid for _c, pid, _s in self.stack]
        return [e.id for e in self.entries if e.id not in applied]

    def stale(self) -> list[str]:
        """Applied patches whose file changed since they were applied."""
        files = {e.id: e.file for e in self.entries}
        stale = []
        for _commit, pid, sha in self.stack:
            if pid in files:
                path = files[pid]
                if not path.is_file() or patch_sha256(read_patch_file(path)) != sha:
                    stale.append(pid)
        return stale

    def to_json(self) -> dict[str, Any]:
        """Plain data for --json (and for the human rendering)."""
        room = self.room
        return {
            "ok": True,
            "cleanroom": str(room.path),
            "upstream": room.meta.get("upstream"),
            "root": room.root,
            "base_commit": room.base_commit(),
            "base_tree": room.base_tree(),
            "head": room.head(),
            "tree": room.head_tree(),
            "applied": [{"id": pid, "commit": c, "patch_sha256": s} for c, pid, s in self.stack],
            "pin_matches_series": None if self.series is None else same_pin(room, self.series),
            "pending": self.pending(),
            "stale": self.stale(),
            "dirty": self.dirty,
            "interrupted": self.interrupted(),
            "rebase": self.rebase,
        }

    def interrupted(self) -> str | None:
        """The command whose journal is in this clean room or its series: running now, or
        killed (the next command that writes recovers it); None when there is none."""
        journals = [room_journal_path(self.room.path)]
        if self.series is not None:
            journals.append(self.series.dir / JOURNAL)
        for path in journals:
            if path.is_file():
                try:
                    raw = read_bounded(path, JOURNAL_BYTES, "journal")
                    return str(json.loads(raw).get("op", "patchctl"))
                except (ValueError, AttributeError):
                    return "patchctl"
        return None


def cleanroom_status(series_path: Path, workdir: Path | None = None) -> CleanroomStatus:
    """The status of the clean room of `series_path` (`--series DIR` or `DIR/series.yaml`)."""
    path = series_file(Path(series_path))
    room = load_cleanroom(workdir if workdir is not None else default_workdir(series_dir(path)))
    # anything at series.yaml is read as one (a fifo or a link to a device is refused there);
    # only nothing at all means a clean room on its own
    there = path.exists() or path.is_symlink()
    series = load_series(path, check_files=False) if there else None
    entries = () if series is None else load_stack(series).entries
    rebase = rebase_summary(room)
    # During a rebase the stack is the patches moved so far, on the new base.
    stack = room.stack() if rebase is None else room.stack(rebase["new_base"])
    return CleanroomStatus(room, series, stack, room.dirty_paths(), entries, rebase)


def rebase_summary(room: Cleanroom) -> dict[str, Any] | None:
    """Where a rebase in progress in `room` stands (None when there is none): its state, the
    old and new upstream, the patches moved of all, and the patch it stopped at."""
    from patchctl.errors import PatchctlError
    from patchctl.room import rebasestate
    from patchctl.series.model import Upstream

    if not rebasestate.in_progress(room.path):
        return None
    try:
        journal = rebasestate.load(room.path)
    except PatchctlError:
        return {"state": "unreadable", "new_base": BASE_REF, "stopped_at": None}
    return {
        "state": journal.state,
        "old": Upstream(**journal.old_upstream).describe(),
        "new": Upstream(**journal.new_upstream).describe(),
        "new_base": journal.new_base,
        "moved": len(journal.done),
        "patches": len(journal.ids),
        "stopped_at": None if journal.stop is None else journal.stop.id,
        "reason": None if journal.stop is None else journal.stop.reason,
        "files": [] if journal.stop is None else list(journal.stop.files),
    }
