"""Descriptor-relative writing: every directory under a root opened relative to its parent's
with O_NOFOLLOW (and made when missing), every file created relative to its directory's
descriptor with O_EXCL, so nothing is ever written through a symlink or outside the root.
Extraction (archive.py) writes an archive's members through these.
"""

from __future__ import annotations

import errno
import os
from collections import OrderedDict
from contextlib import suppress
from pathlib import Path

from patchctl.upstream.archive_formats import unsafe

NOFOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
OLD_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC


class Dirs:
    """Descriptors of the directories under a root, each opened relative to its parent's with
    O_NOFOLLOW (and made when missing), so nothing is reached through a symlink on disk. The
    most recent ones stay open: archive members come grouped by directory."""

    KEEP = 64

    def __init__(self, archive: Path, root_fd: int) -> None:
        self.archive = archive
        self.root_fd = root_fd
        self.open: OrderedDict[str, int] = OrderedDict()

    def fd(self, path: str, member: str) -> int:
        """The descriptor of directory `path` ('' is the root), made as needed for `member`."""
        if not path:
            return self.root_fd
        found = self.open.get(path)
        if found is not None:
            self.open.move_to_end(path)
            return found
        parent, _sep, leaf = path.rpartition("/")
        parent_fd = self.fd(parent, member)
        with suppress(FileExistsError):
            os.mkdir(leaf, 0o755, dir_fd=parent_fd)
        try:
            fd = os.open(leaf, NOFOLLOW_DIR, dir_fd=parent_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise unsafe(
                    self.archive,
                    member,
                    f"would be written through {leaf!r}, a symlink or file on disk",
                ) from None
            raise
        self.open[path] = fd
        if len(self.open) > self.KEEP:
            os.close(self.open.popitem(last=False)[1])
        return fd

    def close(self) -> None:
        for fd in self.open.values():
            os.close(fd)
        self.open.clear()


def split_name(name: str) -> tuple[str, str]:
    parent, _sep, leaf = name.rpartition("/")
    return parent, leaf


def write_fully(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
