"""The on-disk state of a rebase in progress: `<clean room>/.git/patchctl-rebase/`.

    journal.json   where the rebase stands (below); rewritten atomically at every step
    patches/<file> the new bytes of each rebased patch, staged until the rebase completes
    old/<file>     the series files as they were when the rebase started (series.yaml, the
                   patch files, the clean room's marker), to put back on --abort

The series directory is not written until the last patch is rebased, so the old series stays
intact (and usable) meanwhile. Every change of state is one atomic rename of journal.json,
and each step can be redone from the state before it, so a rebase killed at any point is
continued with `--continue` or undone with `--abort`.

States:
    running    patches are being rebased (or the run was killed while they were)
    stopping   a conflict was found and the work tree is being set up for the user
    stopped    the work tree holds a conflict (or an empty patch) for the user to resolve
    finishing  every patch is rebased; the series and the clean room are being switched
    aborting   --abort is putting everything back
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from patchctl.errors import NotFound, PatchctlError
from patchctl.fsio import write_atomic
from patchctl.limits import JOURNAL_BYTES, read_bounded
from patchctl.room.cleanroom import rebase_dir, rebase_in_progress
from patchctl.room.journal import read_journal_bytes

VERSION = 1
STATES = ("running", "stopping", "stopped", "finishing", "aborting")
UNREADABLE_HINT = (
    "the clean room's old branch is untouched: move the clean room aside and run "
    "`patchctl cleanroom apply` again"
)


@dataclass(frozen=True)
class Done:
    """One rebased patch: its new commit and tree, and how it got there."""

    id: str
    commit: str  # the commit on the new base (the previous one for a dropped patch)
    tree: str
    how: str  # "applied" | "unchanged" | "merged" (three-way) | "replayed" (its conflicts
    # resolved by recorded resolutions) | "resolved" | "dropped" (--skip) | "upstreamed" (the
    # new upstream has it; dropped by --drop-merged)
    sha256: str  # of its new bytes
    staged: bool  # new bytes staged under patches/ (False: the old bytes are kept)
    seconds: float = 0.0  # wall time spent moving it, up to its stop (its hand resolution not
    # counted)
    replayed: tuple[str, ...] = ()  # the recorded resolutions replayed (series-relative paths)
    recorded: tuple[str, ...] = ()  # the resolutions recorded from the user's (staged)
    blocks: int = 0  # "resolved": the conflict blocks the user resolved by hand for it
    waited: float = 0.0  # "resolved": wall time from the stop to the --continue that took it


@dataclass(frozen=True)
class Stop:
    """Where the rebase stopped: the patch, what conflicted, and the tree given to the user."""

    id: str
    reason: str  # "conflict" | "empty"
    merged: str  # the tree written to the work tree (conflict markers included)
    files: tuple[str, ...] = ()
    hunks: tuple[tuple[str, int | None], ...] = ()
    markers: tuple[tuple[str, int], ...] = ()  # (file, line of a `<<<<<<<` marker)
    messages: tuple[str, ...] = ()
    replayed: tuple[str, ...] = ()  # recorded resolutions already put in (what is left stays)
    at: float = 0.0  # when the work tree was handed to the user (seconds since the epoch)
    seconds: float = 0.0  # wall time spent moving the patch until it stopped


@dataclass(frozen=True)
class Journal:
    """journal.json: everything a later `--continue` or `--abort` needs."""

    state: str
    series: str  # the series file
    series_sha256: str  # series.yaml when the rebase started
    files_sha256: dict[str, str]  # patch file -> sha256 when the rebase started
    old_upstream: dict[str, Any]
    new_upstream: dict[str, Any]  # pinned, tree included
    old_base: str  # commit of the old pristine upstream
    new_base: str  # commit of the new pristine upstream
    old_commits: tuple[str, ...]  # each patch's commit on the old base, in order
    branch: str  # the clean room's branch head when the rebase started
    ids: tuple[str, ...]
    labels: tuple[str, str]  # (old, new) upstream labels: file names, conflict markers
    worktree: str  # the tree the work tree holds (as patchctl last left it)
    done: tuple[Done, ...] = ()
    stop: Stop | None = None
    dropped: tuple[str, ...] = ()  # names dropped when the new upstream was extracted
    restore_series: bool = False  # set before the series directory is first written
    drop_merged: bool = False  # --drop-merged: a patch the new upstream has is dropped
    upstreamed: tuple[dict[str, Any], ...] = ()  # upstreamed.Upstreamed.to_json of each found
    replay: bool = True  # recorded resolutions are replayed (off: --no-replay)
    # the base blobs a patch's index lines name that its rebuilt old tree does not hold:
    # {"patch", "path", "named", "rebuilt"} each (series/baseblobs.py)
    bases: tuple[dict[str, Any], ...] = ()
    version: int = field(default=VERSION)

    @property
    def head(self) -> str:
        """The tip of the rebased patches so far (the new base before the first)."""
        return self.done[-1].commit if self.done else self.new_base

    @property
    def current(self) -> str | None:
        """The id of the next patch to rebase (None when all are done)."""
        return self.ids[len(self.done)] if len(self.done) < len(self.ids) else None

    def to_json(self) -> dict[str, Any]:
        """Plain data (what journal.json holds): `asdict`'s result, built without its deep
        copy of every field (the journal is written often while patches move)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["done"] = tuple(dict(d.__dict__) for d in self.done)
        data["stop"] = None if self.stop is None else asdict(self.stop)
        return data


def directory(room: Path) -> Path:
    """The rebase state directory of the clean room at `room`."""
    return rebase_dir(room)


def in_progress(room: Path) -> bool:
    """True when a rebase of the clean room at `room` has started and not finished."""
    return rebase_in_progress(room)


def load(room: Path) -> Journal:
    """The journal of the rebase in progress (NotFound when there is none)."""
    path = directory(room) / "journal.json"
    if not path.is_file():
        raise NotFound(
            f"no rebase is in progress in {room}", hint="start one with `patchctl rebase --onto`"
        )
    raw = read_journal_bytes(path, UNREADABLE_HINT)
    try:
        return _journal(json.loads(raw))
    except (ValueError, KeyError, TypeError) as exc:
        raise PatchctlError(
            f"rebase journal {path} is unreadable: {exc}",
            hint=UNREADABLE_HINT,
        ) from None


def _journal(data: Any) -> Journal:
    if not isinstance(data, dict):
        raise ValueError(f"a JSON object was expected, not {type(data).__name__}")
    if data.get("version") != VERSION or data.get("state") not in STATES:
        raise ValueError(f"unknown version or state: {data.get('version')}, {data.get('state')}")
    stop = data.get("stop")
    return Journal(
        **{
            **data,
            "old_commits": tuple(data["old_commits"]),
            "ids": tuple(data["ids"]),
            "labels": tuple(data["labels"]),
            "dropped": tuple(data.get("dropped", ())),
            "upstreamed": tuple(data.get("upstreamed", ())),
            "bases": tuple(data.get("bases", ())),
            "done": tuple(_done(d) for d in data["done"]),
            "stop": None if stop is None else _stop(stop),
        }
    )


def _done(data: dict[str, Any]) -> Done:
    extra = {k: tuple(data.get(k, ())) for k in ("replayed", "recorded")}
    return Done(**{**data, **extra})


def _stop(data: dict[str, Any]) -> Stop:
    return Stop(
        **{
            **data,
            "files": tuple(data["files"]),
            "hunks": tuple((f, h) for f, h in data["hunks"]),
            "markers": tuple((f, n) for f, n in data["markers"]),
            "messages": tuple(data["messages"]),
            "replayed": tuple(data.get("replayed", ())),
        }
    )


def save(room: Path, journal: Journal) -> Journal:
    """Write journal.json atomically; the journal itself."""
    # Compact: json's C encoder (an indented dump runs the pure-Python one, and the journal
    # is written often while patches move).
    data = json.dumps(journal.to_json(), separators=(",", ":")).encode("utf-8") + b"\n"
    write_atomic(directory(room) / "journal.json", data)
    return journal


def moved(room: Path, journal: Journal, state: str, **changes: Any) -> Journal:
    """The journal in `state` (with `changes`), saved."""
    return save(room, replace(journal, state=state, **changes))


def stage(room: Path, name: str, data: bytes) -> None:
    """Keep the new bytes of patch file `name` until the rebase completes."""
    write_atomic(directory(room) / "patches" / name, data)


def staged(room: Path, name: str) -> bytes:
    """The staged new bytes of patch file `name`."""
    return (directory(room) / "patches" / name).read_bytes()


def keep_old(room: Path, name: str, data: bytes) -> None:
    """Keep a copy of a file as it was when the rebase started (for --abort)."""
    write_atomic(directory(room) / "old" / name, data)


def old(room: Path, name: str) -> bytes | None:
    """The copy of `name` kept when the rebase started (None when there was no such file)."""
    path = directory(room) / "old" / name
    return path.read_bytes() if path.is_file() else None


MTIMES = "mtimes"  # `<mtime_ns> <path>\0` per tracked regular file, as the rebase began


def keep_mtimes(room: Path, paths: Iterable[bytes]) -> None:
    """Record the mtime of each of `paths` (the clean room's tracked files) as the rebase
    starts, so that --abort gives each file it puts back its old mtime too."""
    lines = []
    top = os.fsencode(room) + b"/"  # joined as bytes: a Path per file costs more than its lstat
    for rel in sorted(paths):
        try:
            info = os.lstat(top + rel)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode):
            lines.append(b"%d %s\0" % (info.st_mtime_ns, rel))
    write_atomic(directory(room) / MTIMES, b"".join(lines))


def restore_mtimes(room: Path) -> int:
    """After --abort put the work tree back to the tree the rebase started from: give every
    regular file recorded by keep_mtimes its mtime back (its content is the one it had: the
    clean room was clean when the rebase began), so a build sees no change. The number of
    files touched; 0 when nothing was recorded or the record is over its size limit."""
    path = directory(room) / MTIMES
    if not path.is_file():
        return 0
    try:
        data = read_bounded(path, JOURNAL_BYTES, "rebase's record of file times")
    except PatchctlError:
        return 0  # the times are a convenience: an abort never fails on them
    restored = 0
    for record in data.split(b"\0"):
        stamp, _, rel = record.partition(b" ")
        if not rel or not stamp.isdigit():
            continue
        target = room / os.fsdecode(rel)
        try:
            info = os.lstat(target)
            if stat.S_ISREG(info.st_mode) and info.st_mtime_ns != int(stamp):
                os.utime(target, ns=(info.st_atime_ns, int(stamp)), follow_symlinks=False)
                restored += 1
        except OSError:
            continue
    return restored


def remove(room: Path) -> None:
    """Remove the rebase state: the last step of a completed or aborted rebase."""
    journal = directory(room) / "journal.json"
    journal.unlink(missing_ok=True)  # first: once it is gone, no rebase is in progress
    shutil.rmtree(directory(room), ignore_errors=True)
