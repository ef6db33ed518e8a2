"""One read-modify-write of a series: lock first, recover, read series.yaml, check, then write
everything at once through the journal.

Every command that writes series.yaml, patch files or the generated docs runs its work inside
`series_session` (docs/architecture.md, "The command contract"):

    with series_session(path) as session:          # flock on the series directory; a killed
                                                   # run's journal is finished or rolled back
        room = session.cleanroom(workdir)          # + the clean room's lock (and its recovery)
        ...                                        # session.series was read after the lock
        session.write_patch(file, data)            # staged, refused if series.yaml changed
        session.save(updated)                      # series.yaml + generated docs, staged
                                                   # leaving the block commits them all

So a concurrent patchctl (`new` during a `capture`) is refused at the lock instead of being
overwritten with a stale copy, a hand edit of series.yaml between the read and a write is
reported (SeriesChanged) instead of silently dropped, and a run killed at any point leaves
every file with its old or its new bytes, all old or all new once the next run has recovered
(patchctl/txn/journal.py). An error inside the block writes nothing. Read-only commands (verify,
status, build) load without the lock: every write is an atomic rename, so they see a whole file.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from patchctl.errors import DirtyTree, NotFound, SeriesChanged
from patchctl.fsio import holds, locked_dir, refuse_overwrite
from patchctl.gitlayer.git import Git
from patchctl.gitlayer.runner import sweep_temp_dirs
from patchctl.limits import SERIES_BYTES, read_bounded
from patchctl.room.cleanroom import (
    Cleanroom,
    default_workdir,
    is_cleanroom,
    load_cleanroom,
    locked,
    rebase_in_progress,
)
from patchctl.room.journal import Recovered, RoomJournal, tell
from patchctl.room.recovery import recover_room
from patchctl.series.docs import render_docs
from patchctl.series.model import Series, dump_series, load_series, series_file
from patchctl.txn.journal import JOURNAL, Journal, recover


@dataclass
class SeriesSession:
    """A series loaded under its lock, and the only way a command writes to it."""

    series: Series
    seen: bytes  # series.yaml as read by this session (on disk until the journal commits)
    journal: Journal
    locks: ExitStack = field(default_factory=ExitStack, repr=False)
    recovered: list[Recovered] = field(default_factory=list)
    room_journal: RoomJournal | None = None  # the clean room's, once it is locked

    @property
    def path(self) -> Path:
        """The series file."""
        return self.series.path

    def workdir(self, workdir: Path | None) -> Path:
        """The clean room of this series: `workdir`, else `cleanroom/<series name>`."""
        return workdir if workdir is not None else default_workdir(self.series.dir)

    def lock_cleanroom(self, workdir: Path | None, *, rebasing: bool = False) -> Path:
        """Take the lock of the series' clean room (which may not exist yet) and finish or
        undo what a killed run left in it; its path.

        While a rebase is in progress there (cleanroom.rebase_in_progress), only `rebasing`
        (the rebase command itself) may use it: the work tree holds the rebase's conflict, and
        the series is about to be replaced.
        """
        path = self.workdir(workdir)
        if path.parent.resolve() != self.series.dir.resolve():  # one directory, one lock
            self.locks.enter_context(locked(path))
        found = recover_room(path)
        if found is not None:
            self.recovered.append(found)
            tell(found)
        if not rebasing and rebase_in_progress(path):
            raise DirtyTree(
                f"a rebase is in progress in {path}; not touching the clean room or the series",
                hint="finish it with `patchctl rebase --continue`, or `patchctl rebase --abort`",
            )
        self.room_journal = RoomJournal(path, self.journal.op)
        self.room_journal.record()  # in use: a kill from here on is recovered (git locks too)
        return path

    def cleanroom(self, workdir: Path | None) -> Cleanroom:
        """The series' existing clean room, locked for the rest of the session."""
        return load_cleanroom(self.lock_cleanroom(workdir))

    def check_unchanged(self) -> None:
        """SeriesChanged unless series.yaml still holds the bytes this session read (its size
        compared first: a file grown huge meanwhile is never read)."""
        if not (holds(self.path, self.seen) or (not self.seen and not self.path.is_file())):
            raise SeriesChanged(
                f"{self.path} changed on disk while patchctl was working (edited by hand?); "
                "this run did not overwrite it",
                hint="check the file, then run the command again",
            )

    def _holds(self, path: Path, data: bytes) -> bool:
        """Whether `path` will hold `data` when the session ends as things stand (staged, or
        on disk: compared by size first, so a huge file there is never read)."""
        staged = self.journal.staged_bytes(path)
        if staged is not None:
            return staged == data
        return holds(path, data)

    def write_patch(self, path: Path, data: bytes) -> bool:
        """Stage a patch file of the series (False when it already holds these bytes)."""
        self.check_unchanged()
        if self._holds(path, data):
            return False
        self.journal.stage_file(path, data)
        return True

    def write_patches(self, items: Sequence[tuple[Path, bytes]]) -> list[Path]:
        """`write_patch` for many files, staged with one journal write; the paths staged
        (those that did not already hold their bytes)."""
        self.check_unchanged()
        todo = [(path, data) for path, data in items if not self._holds(path, data)]
        self.journal.stage_files(todo)
        return [path for path, _data in todo]

    def write_new_patch(self, path: Path, data: bytes) -> bool:
        """Stage a patch file that must not exist yet (DirtyTree, exit 8, if it does)."""
        self.check_unchanged()
        if path.exists() or path.is_symlink() or path in self.journal.pending():
            raise refuse_overwrite(path)
        self.journal.stage_file(path, data, create=True)
        return True

    def remove_patch(self, path: Path) -> None:
        """Stage removing a patch file of the series (it must exist)."""
        self.check_unchanged()
        if not path.is_file():
            raise NotFound(f"no patch file at {path}")
        self.journal.stage_remove(path)

    def move_ref(self, git: Git, ref: str, new: str, reason: str) -> None:
        """Stage moving `ref` of the clean room `git` to `new` (its index follows)."""
        self.journal.stage_ref(git, ref, new, reason)

    def save(self, series: Series, *, docs: bool = True) -> list[Path]:
        """Stage series.yaml and (with `docs`) the regenerated docs; the paths that change."""
        self.check_unchanged()
        data = dump_series(series)
        changed = []
        if not self._holds(series.path, data):
            self.journal.stage_file(series.path, data)
            changed.append(series.path)
        self.series = series
        return changed + (self.write_docs() if docs else [])

    def write_docs(self) -> list[Path]:
        """Stage the series' regenerated docs (README, marker registry); those that change."""
        self.check_unchanged()
        staged = self.journal.pending()
        pending = {
            p.id: staged[self.series.patch_path(p)].staged.read_bytes()
            for p in self.series.patches
            if self.series.patch_path(p) in staged
        }
        changed = []
        for path, data in render_docs(self.series, pending).items():
            if not self._holds(path, data):
                self.journal.stage_file(path, data)
                changed.append(path)
        return changed

    def commit(self) -> None:
        """Make everything staged real (the end of a command that succeeded)."""
        self.check_unchanged()
        self.journal.commit()

    def release_room(self, error: BaseException | None) -> None:
        """The command is over: its clean-room journal goes, unless the command failed in
        the middle of changing the work tree (an error, Ctrl-C) and left it with changes,
        which the next run then undoes like a kill's."""
        journal = self.room_journal
        if journal is None:
            return
        midway = error is not None and bool(journal.fields.get("head"))
        if not (midway and is_cleanroom(journal.room) and load_cleanroom(journal.room).is_dirty()):
            journal.end()


@contextmanager
def series_session(
    dir_or_file: Path, *, check_files: bool = True, op: str = "patchctl"
) -> Iterator[SeriesSession]:
    """Lock the series directory, recover a killed run's journal, then load the series
    (`--series DIR` or `DIR/series.yaml`). Leaving the block normally commits what was
    staged; an exception drops it.

    The clean-room lock a command takes through the session is released with it.
    """
    path = series_file(Path(dir_or_file))
    if not path.parent.is_dir():  # never create a directory for a mistyped --series
        raise NotFound(f"no series file at {path}", hint="pass --series DIR")
    with locked_dir(path.parent), ExitStack() as locks:
        sweep_temp_dirs()
        found = recover(path.parent)
        if found is not None:
            tell(found)
        seen = read_bounded(path, SERIES_BYTES, "series file") if path.is_file() else b""
        series = load_series(path, check_files=check_files)
        journal = Journal(path.parent / JOURNAL, op)
        session = SeriesSession(series, seen, journal, locks, [] if found is None else [found])
        session.check_unchanged()  # the file was read whole, once: not mid-edit
        try:
            yield session
            session.commit()
        except BaseException as exc:
            journal.abandon()  # a no-op once the journal is committed (recovery finishes it)
            session.release_room(exc)
            raise
        session.release_room(None)
