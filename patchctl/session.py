"""One read-modify-write of a series: lock first, read series.yaml after, check before writing.

Every command that writes series.yaml, patch files or the generated docs runs its work inside
`series_session` (docs/architecture.md, "The command contract"):

    with series_session(path) as session:          # flock on the series directory
        room = session.cleanroom(workdir)          # + the clean room's lock, when one is used
        ...                                        # session.series was read after the lock
        session.write_patch(file, data)            # refused if series.yaml changed meanwhile
        session.save(updated)                      # series.yaml + generated docs

So a concurrent patchctl (`new` during a `capture`) is refused at the lock instead of being
overwritten with a stale copy, and a hand edit of series.yaml between the read and a write is
reported (SeriesChanged) instead of silently dropped. Read-only commands (verify, status,
build) load without the lock: every write is an atomic rename, so they see a whole file.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from patchctl.cleanroom import Cleanroom, default_workdir, load_cleanroom, locked
from patchctl.docs import write_docs
from patchctl.errors import NotFound, SeriesChanged
from patchctl.fsio import locked_dir, write_if_changed, write_new
from patchctl.series import Series, dump_series, load_series, series_file


@dataclass
class SeriesSession:
    """A series loaded under its lock, and the only way a command writes to it."""

    series: Series
    seen: bytes  # series.yaml as read (or last written) by this session
    locks: ExitStack = field(default_factory=ExitStack, repr=False)

    @property
    def path(self) -> Path:
        """The series file."""
        return self.series.path

    def workdir(self, workdir: Path | None) -> Path:
        """The clean room of this series: `workdir`, else `cleanroom/<series name>`."""
        return workdir if workdir is not None else default_workdir(self.series.dir)

    def lock_cleanroom(self, workdir: Path | None) -> Path:
        """Take the lock of the series' clean room (which may not exist yet); its path."""
        path = self.workdir(workdir)
        if path.parent.resolve() != self.series.dir.resolve():  # one directory, one lock
            self.locks.enter_context(locked(path))
        return path

    def cleanroom(self, workdir: Path | None) -> Cleanroom:
        """The series' existing clean room, locked for the rest of the session."""
        return load_cleanroom(self.lock_cleanroom(workdir))

    def check_unchanged(self) -> None:
        """SeriesChanged unless series.yaml still holds the bytes this session read."""
        now = self.path.read_bytes() if self.path.is_file() else b""
        if now != self.seen:
            raise SeriesChanged(
                f"{self.path} changed on disk while patchctl was working (edited by hand?); "
                "this run did not overwrite it",
                hint="check the file, then run the command again",
            )

    def write_patch(self, path: Path, data: bytes) -> bool:
        """Write a patch file of the series (atomically; False when the bytes were equal)."""
        self.check_unchanged()
        return write_if_changed(path, data)

    def write_new_patch(self, path: Path, data: bytes) -> bool:
        """Create a patch file of the series that must not exist yet (DirtyTree if it does)."""
        self.check_unchanged()
        write_new(path, data)
        return True

    def save(self, series: Series, *, docs: bool = True) -> list[Path]:
        """Write series.yaml and (with `docs`) regenerate the docs; the paths that changed."""
        self.check_unchanged()
        data = dump_series(series)
        changed = [series.path] if write_if_changed(series.path, data) else []
        self.seen, self.series = data, series
        return changed + (self.write_docs() if docs else [])

    def write_docs(self) -> list[Path]:
        """Regenerate the series' docs (README, marker registry); the paths that changed."""
        self.check_unchanged()
        return write_docs(self.series)


@contextmanager
def series_session(dir_or_file: Path, *, check_files: bool = True) -> Iterator[SeriesSession]:
    """Lock the series directory, then load the series (`--series DIR` or `DIR/series.yaml`).

    The clean-room lock a command takes through the session is released with it.
    """
    path = series_file(Path(dir_or_file))
    if not path.parent.is_dir():  # never create a directory for a mistyped --series
        raise NotFound(f"no series file at {path}", hint="pass --series DIR")
    with locked_dir(path.parent), ExitStack() as locks:
        seen = path.read_bytes() if path.is_file() else b""
        series = load_series(path, check_files=check_files)
        session = SeriesSession(series, seen, locks)
        session.check_unchanged()  # the file was read whole, once: not mid-edit
        yield session
