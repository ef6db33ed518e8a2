"""File-system primitives: atomic writes (a reader sees the old bytes or the new ones, never a
partial file), directory locks (two patchctl runs never change the same thing at once) and the
sha256 of a file read in blocks.

The temporary file gets an unpredictable name and is created with O_EXCL and O_NOFOLLOW, so a
planted file or symlink beside the target is never written through. A failure to write (no
permission, a full disk) is an OSError naming the file (the CLI reports it, exit 1), and
commands call `check_writable` before their first write so it rarely gets that far.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import secrets
import stat
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from patchctl.errors import DirtyTree, PatchctlError

_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

BLOCK = 1 << 20


TEMP_MARK = ".tmp"  # `.<name>.tmp<pid>-<hex>`: what `temp_files` finds after a kill


def _write_temp(path: Path, blocks: Iterable[bytes], *, sync: bool = False) -> Path:
    """`blocks` in a new temporary file beside `path` (mode 0666 minus the umask)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}{TEMP_MARK}{os.getpid()}-{secrets.token_hex(4)}")
    fd = os.open(tmp, _NEW, 0o666)
    try:
        with os.fdopen(fd, "wb") as out:
            for block in blocks:
                out.write(block)
            if sync:
                out.flush()
                os.fsync(out.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def write_atomic(path: Path, data: bytes, *, sync: bool = False) -> None:
    """Write `data` to a temporary file beside `path`, then rename it over `path` (`sync`:
    the bytes and the rename reach the disk before this returns)."""
    write_atomic_blocks(path, (data,), sync=sync)


def sync_write(path: Path, data: bytes, *, sync_dir: bool = True) -> None:
    """Create `path` (which must not exist; never through a symlink) with `data`, synced
    (`sync_dir=False`: its folder is not; the caller syncs it, once for many files)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, _NEW, 0o666)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    if sync_dir:
        _sync_dir(path.parent)


def create_file(path: Path, data: bytes) -> None:
    """Create `path` (which must not exist; never through a symlink) with `data`, not synced:
    `sync_file` it before anything relies on it being on disk."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, _NEW, 0o666)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def sync_file(path: Path) -> None:
    """Sync the bytes of the file at `path` to disk (never through a symlink)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_dir(folder: Path) -> None:
    """Sync a folder's entries (the names just created or renamed in it) to disk."""
    _sync_dir(folder)


def _sync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_files(folder: Path, name: str) -> list[Path]:
    """The temporary files `write_atomic` left for `folder/name` (a killed write)."""
    return sorted(folder.glob(f".{name}{TEMP_MARK}*")) if folder.is_dir() else []


def write_atomic_blocks(
    path: Path,
    blocks: Iterable[bytes],
    check: Callable[[], None] | None = None,
    *,
    sync: bool = False,
) -> None:
    """`write_atomic` for data streamed in blocks; `check` (raising to refuse) runs after the
    last block, before the rename, so a refused stream never replaces `path`."""
    tmp = _write_temp(path, blocks, sync=sync)
    try:
        if check is not None:
            check()
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync:
        _sync_dir(path.parent)


def holds(path: Path, data: bytes) -> bool:
    """Whether `path` is a regular file holding exactly `data`: its size is compared first and
    at most that many bytes are read, so a huge file put in its place costs nothing."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as stream:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size != len(data):
            return False
        return stream.read(len(data) + 1) == data


def write_if_changed(path: Path, data: bytes) -> bool:
    """Write `data` atomically unless the file already holds exactly these bytes."""
    if holds(path, data):
        return False
    write_atomic(path, data)
    return True


def write_new(path: Path, data: bytes) -> None:
    """Create `path` with `data`, atomically; DirtyTree (exit 8) if anything is there already.

    The temporary file is hard-linked to its name, which fails instead of replacing an entry
    that appeared meanwhile.
    """
    try:
        tmp = _write_temp(path, (data,))
        try:
            os.link(tmp, path)
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
                raise
            _create_exclusive(path, data)  # a file system without hard links
        finally:
            tmp.unlink(missing_ok=True)
    except FileExistsError:
        raise refuse_overwrite(path) from None


def _create_exclusive(path: Path, data: bytes) -> None:
    fd = os.open(path, _NEW, 0o666)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def refuse_overwrite(path: Path) -> DirtyTree:
    """The error for a write that would replace a file patchctl was not asked to replace."""
    return DirtyTree(
        f"{path} already exists; refusing to overwrite it",
        hint="move it aside (or remove it) and run the command again",
    )


def check_writable(paths: Iterable[Path]) -> None:
    """Before the first write of a command: each file can be created or replaced.

    Checks what can be checked without writing (the nearest existing directory is writable,
    a target is not a directory), so a permission problem stops the command before it has
    changed anything.
    """
    for path in paths:
        if path.is_dir():
            raise PatchctlError(f"cannot write {path}: it is a directory")
        folder = path.parent
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
            raise PatchctlError(
                f"cannot write {path}: {folder} is not a writable directory",
                hint="check the permissions of that directory",
            )


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


def process_alive(pid: int) -> bool:
    """Whether process `pid` exists (someone else's process counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
