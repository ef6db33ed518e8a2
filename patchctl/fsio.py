"""File-system primitives: atomic writes (a reader sees the old bytes or the new ones, never a
partial file), directory locks (two patchctl runs never change the same thing at once) and the
sha256 of a file read in blocks."""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from patchctl.errors import PatchctlError

BLOCK = 1 << 20


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to a temporary file beside `path`, then rename it over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_if_changed(path: Path, data: bytes) -> bool:
    """Write `data` atomically unless the file already holds exactly these bytes."""
    if path.is_file() and path.read_bytes() == data:
        return False
    write_atomic(path, data)
    return True


@contextmanager
def locked_dir(directory: Path) -> Iterator[None]:
    """Hold an exclusive flock on `directory` (made if missing) for the duration.

    Refuses at once when another process holds it. The lock is on the directory itself, so no
    lock file is ever left behind, and the kernel releases it when the holder dies (even on
    SIGKILL).
    """
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise PatchctlError(
                f"another patchctl is working in {directory}", hint="wait for it to finish"
            ) from None
        yield
    finally:
        os.close(fd)  # closing releases the lock


def sha256_file(path: Path) -> str:
    """The hex sha256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()
