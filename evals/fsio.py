"""The file helpers the evaluations need: atomic writes, write-if-changed, a file's sha256, and
the content-addressed download cache they share with patchctl.

Small copies of patchctl's helpers rather than imports of its internals, so the evaluations
depend on patchctl only as a tool. The cache layout (``<cache>/sha256/<sha256>/<file name>``
under ``$PATCHCTL_CACHE_DIR``, else ``$XDG_CACHE_HOME/patchctl``, else ``~/.cache/patchctl``) is
patchctl's, so a model fetched once is found by both.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path

BLOCK = 1 << 20
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to a temporary file beside `path`, then rename it over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    fd = os.open(tmp, _NEW, 0o666)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def holds(path: Path, data: bytes) -> bool:
    """Whether `path` is a regular file holding exactly `data` (size compared first)."""
    try:
        if not path.is_file() or path.is_symlink() or path.stat().st_size != len(data):
            return False
        return path.read_bytes() == data
    except OSError:
        return False


def write_if_changed(path: Path, data: bytes) -> bool:
    """Write `data` atomically unless the file already holds exactly these bytes."""
    if holds(path, data):
        return False
    write_atomic(path, data)
    return True


def sha256_file(path: Path) -> str:
    """The hex sha256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def cache_dir() -> Path:
    """`$PATCHCTL_CACHE_DIR`, else `$XDG_CACHE_HOME/patchctl`, else `~/.cache/patchctl`."""
    explicit = os.environ.get("PATCHCTL_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "patchctl"


def cached_path(sha256: str, filename: str) -> Path:
    """Where a file with this sha256 lives in the content-addressed store."""
    return cache_dir() / "sha256" / sha256 / filename


def find_cached(sha256: str) -> Path | None:
    """A cached file with this sha256 whose bytes still match, or None."""
    folder = cache_dir() / "sha256" / sha256
    if not folder.is_dir():
        return None
    for candidate in sorted(folder.iterdir()):
        if candidate.is_file() and not candidate.name.startswith(".") and (
            sha256_file(candidate) == sha256
        ):
            return candidate
    return None
