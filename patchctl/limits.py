"""Size and count limits on untrusted inputs, each with an environment variable to raise it.

Every input patchctl reads may come from someone else (an archive from the internet, a series
file from a shared repository, an mbox from a mailing list); these limits keep a hostile one
from exhausting memory or disk. A limit that is hit names itself and the variable that raises
it (docs/reliability.md lists them all).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from patchctl.errors import ConfigError, PatchctlError

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30


@dataclass(frozen=True)
class Limit:
    """One limit: its environment variable, default value, unit and what it bounds."""

    env: str
    default: int
    unit: str  # "bytes" | "members" | "x" (a ratio)
    what: str

    def value(self) -> int:
        """The limit in force: the environment variable when set, else the default."""
        raw = os.environ.get(self.env)
        if raw is None or raw.strip() == "":
            return self.default
        try:
            value = int(raw.strip())
        except ValueError:
            value = 0
        if value <= 0:
            raise ConfigError(
                f"{raw[:40]!r} is not a positive integer",
                key=self.env,
                hint=f"set {self.env} to a positive whole number of {self.unit} (or unset it)",
            )
        return value

    def hint(self, needed: int | None = None) -> str:
        """How to raise the limit (for the error that reports it)."""
        suggestion = f"{self.env}={needed}" if needed is not None else f"{self.env}=<{self.unit}>"
        return f"if the input is trusted, raise the limit: {suggestion} (default {self.default})"


ARCHIVE_BYTES = Limit(
    "PATCHCTL_MAX_ARCHIVE_BYTES",
    8 * GIB,
    "bytes",
    "total size of an archive's members (or of a git upstream tree's files)",
)
ARCHIVE_MEMBERS = Limit(
    "PATCHCTL_MAX_ARCHIVE_MEMBERS",
    250_000,
    "members",
    "number of members of an archive (or of files of a git upstream tree)",
)
ARCHIVE_RATIO = Limit(
    "PATCHCTL_MAX_ARCHIVE_RATIO", 100, "x", "expanded size / archive size (above 64 MiB)"
)
# Below this expanded size the ratio is not checked: small archives of repetitive text can
# compress 1000:1 and cost nothing.
RATIO_FLOOR = 64 * MIB
SERIES_BYTES = Limit("PATCHCTL_MAX_SERIES_BYTES", 1 * MIB, "bytes", "size of series.yaml")
PATCH_BYTES = Limit(
    "PATCHCTL_MAX_PATCH_BYTES", 256 * MIB, "bytes", "size of a patch file or an import source"
)
IMPORT_BYTES = Limit(
    "PATCHCTL_MAX_IMPORT_BYTES", 1 * GIB, "bytes", "total size of the patch files one import reads"
)
BLOB_BYTES = Limit(
    "PATCHCTL_MAX_BLOB_BYTES", 1 * GIB, "bytes", "size of a file a binary patch hunk makes"
)
DOWNLOAD_BYTES = Limit("PATCHCTL_MAX_DOWNLOAD_BYTES", 4 * GIB, "bytes", "size of a download")
REGISTRY_BYTES = Limit(
    "PATCHCTL_MAX_REGISTRY_BYTES", 16 * MIB, "bytes", "size of the marker registry read back"
)
JOURNAL_BYTES = Limit(
    "PATCHCTL_MAX_JOURNAL_BYTES",
    16 * MIB,
    "bytes",
    "a journal read back for recovery (series, clean room or rebase journal)",
)
INDEX_BYTES = 64 * MIB  # a package index JSON answer (not configurable: real ones are < 1 MiB)

ALL_LIMITS = (
    ARCHIVE_BYTES,
    ARCHIVE_MEMBERS,
    ARCHIVE_RATIO,
    SERIES_BYTES,
    PATCH_BYTES,
    IMPORT_BYTES,
    BLOB_BYTES,
    DOWNLOAD_BYTES,
    REGISTRY_BYTES,
    JOURNAL_BYTES,
)


def human(n: int) -> str:
    """A byte count for messages: `1.5 GiB`, `300 KiB`, `12 bytes`."""
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


def read_bounded(path: Path, limit: Limit, what: str, *, fix: str | None = None) -> bytes:
    """The bytes of input file `path` (`what` names it in messages: "series file"), refused
    beyond `limit` without reading more than one byte past it. Every error names the file and
    the fix: over the limit ConfigError (exit 5; `fix`, when given, comes before the way to
    raise the limit); a file that cannot be read (no permission, a directory, a read error)
    PatchctlError (exit 1, an operating-system error on a path)."""
    bound = limit.value()
    try:
        data = _read_regular(path, bound + 1)
    except OSError as exc:
        raise unreadable(path, what, exc) from None
    if len(data) > bound:
        hint = limit.hint() if fix is None else f"{fix}; {limit.hint()}"
        raise ConfigError(f"the {what} is larger than {human(bound)}", path=path, hint=hint)
    return data


def _read_regular(path: Path, size: int) -> bytes:
    """Up to `size` bytes of regular file `path`; OSError for anything else. Opened without
    blocking, so a fifo put in a file's place is refused instead of waiting for a writer."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as stream:
        kind = stat.S_IFMT(os.fstat(fd).st_mode)
        if kind == stat.S_IFDIR:
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        if kind != stat.S_IFREG:
            raise OSError(errno.EINVAL, "not a regular file (a fifo, socket or device)")
        return stream.read(size)


def unreadable(path: Path, what: str, exc: OSError) -> PatchctlError:
    """The error for input file `path` that could not be opened or read (exit 1)."""
    reason = exc.strerror or type(exc).__name__
    if exc.errno in (errno.EACCES, errno.EPERM):
        hint = f"give yourself read permission (e.g. `chmod u+r {path}`) or run as its owner"
    elif exc.errno == errno.EISDIR:
        hint = f"{path} must be the {what} itself, not a directory"
    else:
        hint = f"check {path} is a regular file you can read, and the disk it is on"
    return PatchctlError(f"cannot read the {what} {path}: {reason}", hint=hint)
