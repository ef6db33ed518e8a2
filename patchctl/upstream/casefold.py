"""Case-folding probes: how the file system of a directory compares names (`name_folding`:
bytes, case, Unicode normalization), whether it takes two names for one (`same_name`), and
the paths such a file system sees as one (`Spellings`). Found by making probe files in the
directory and looking them up under other spellings; every probe is removed again.

Extraction (archive.py) and a git checkout (materialize.py) refuse two names the clean room's
file system would take for one, before writing either.
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Callable

Fold = Callable[[str], str]
Same = Callable[[str, str], bool]  # whether the file system takes two names for one
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

FOLDED = "name one file on this file system, which ignores case (or Unicode normalization)"
FOLDING_FIX = (
    "put the clean room on a case-sensitive file system (`--workdir`: on macOS a "
    "case-sensitive APFS volume, on Windows a directory after "
    "`fsutil file setCaseSensitiveInfo DIR enable`)"
)


class Spellings:
    """Paths as a file system that folds names (`name_folding`) sees them.

    `fold` finds the candidates: two spellings of one folded path. `same`, when given, asks the
    file system itself about each candidate's last names (`same_name`), since `fold` can only
    approximate its rules (`str.casefold` takes "Straße" for "Strasse"; APFS and NTFS do not).
    """

    def __init__(self, fold: Fold, same: Same | None = None) -> None:
        self.fold = fold
        self.same = same
        self.spelled: dict[str, list[str]] = {}  # folded path -> its spellings, distinct here

    def add(self, name: str) -> tuple[str, str] | None:
        """(earlier spelling, this one) of the first of `name` and the directories above it
        that this file system takes for a path seen under another spelling; None when there
        is none."""
        parts = name.split("/")
        for i in range(1, len(parts) + 1):
            path = "/".join(parts[:i])
            spellings = self.spelled.setdefault(self.fold(path), [])
            if path in spellings:
                continue
            for seen in spellings:
                if self._one_file(seen, path):
                    return seen, path
            spellings.append(path)
        return None

    def _one_file(self, seen: str, path: str) -> bool:
        """Whether `seen` and `path` (folded alike) name one file: in one directory (the
        directories above were checked first, so differing ones are distinct there) and with
        last names the file system takes for one."""
        head, _, last = path.rpartition("/")
        seen_head, _, seen_last = seen.rpartition("/")
        if head != seen_head:
            return False
        return self.same is None or self.same(seen_last, last)


PROBE = "patchctl-probe-\u00e9A"  # an uppercase letter and a precomposed e-acute (NFC)
ASCII_PROBE = "patchctl-probe-A"  # where a file system refuses that name: case only


def name_folding(dir_fd: int) -> Fold | None:
    """How the file system of directory `dir_fd` compares names: None when it compares bytes
    (Linux file systems), else the folding it applies (case, as on macOS and Windows;
    Unicode normalization, as on macOS). Found by creating a probe file there and looking it
    up under other spellings; the probe is removed before this returns."""
    try:
        case, form = _looked_up(dir_fd, PROBE, PROBE.lower(), unicodedata.normalize("NFD", PROBE))
    except _NameRefused:  # the file system refuses that name: case only
        (case,), form = _looked_up(dir_fd, ASCII_PROBE, ASCII_PROBE.lower()), False
    if case and form:
        return lambda name: unicodedata.normalize("NFC", name).casefold()
    if case:
        return str.casefold
    if form:
        return lambda name: unicodedata.normalize("NFC", name)
    return None


def same_name(dir_fd: int, first: str, second: str) -> bool:
    """Whether the file system of directory `dir_fd` takes the names `first` and `second` for
    one: a file named `first` is made in a fresh probe directory there and looked up as
    `second`; the probe is removed before this returns. A name the file system refuses, or a
    probe that cannot be made, counts as one file (the refusal then stands)."""
    probe = f"patchctl-probe-{os.getpid()}-{os.urandom(4).hex()}"
    try:
        os.mkdir(probe, 0o700, dir_fd=dir_fd)
    except OSError:
        return True
    try:
        fd = os.open(probe, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            return _looked_up(fd, first, second)[0]
        except _NameRefused:
            return True
        finally:
            os.close(fd)
    finally:
        os.rmdir(probe, dir_fd=dir_fd)


class _NameRefused(OSError):
    """The file system would not make a probe file of that name (its OSError)."""


def _looked_up(dir_fd: int, made: str, *others: str) -> list[bool]:
    """Make an empty file `made` in directory `dir_fd` (_NameRefused when that fails), then
    whether each of `others` finds it there; the file is removed before this returns."""
    try:
        os.close(os.open(made, _NEW_FILE, 0o600, dir_fd=dir_fd))
    except OSError as exc:
        raise _NameRefused(exc.errno, exc.strerror, made) from exc
    try:
        return [_exists(name, dir_fd) for name in others]
    finally:
        os.unlink(made, dir_fd=dir_fd)


def _exists(name: str, dir_fd: int) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True
