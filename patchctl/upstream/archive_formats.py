"""Archive formats: the members of a .tar.* (gzip, bzip2, xz, zstd) or .zip file, each
checked as its header is read: the limits of patchctl.limits (member count, total size,
compression ratio, so a bomb stops at its first header past a limit), its name (no `..`, no
absolute path, no control characters, within the length limits) and its link target. A
corrupt or truncated archive is reported with the archive library's message. Nothing is
written here: archive.py writes the members and checks the tree they make.
"""

from __future__ import annotations

import io
import lzma
import os
import re
import shutil
import stat
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol, Self, cast

from patchctl.allowlists import ZSTD_SUFFIX
from patchctl.errors import PatchctlError, ToolchainMissing, UnsafeArchive
from patchctl.gitlayer.runner import streamed
from patchctl.limits import ARCHIVE_BYTES, ARCHIVE_MEMBERS, ARCHIVE_RATIO, RATIO_FLOOR, human

CHUNK = 1 << 20
MAX_NAME = 4096  # bytes of a member path
MAX_COMPONENT = 255  # bytes of one path component (NAME_MAX)
MAX_DEPTH = 256  # components of a member path (directories are opened one by one, recursively)
MAX_LINK = 4096  # bytes of a symlink target
CONTROL = re.compile("[\x00-\x1f\x7f]")  # refused in member names
# What the archive libraries raise for damaged input (gzip's BadGzipFile is an OSError).
READ_ERRORS = (
    tarfile.TarError,
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    EOFError,
    zlib.error,
    lzma.LZMAError,
    OSError,
    NotImplementedError,
    RuntimeError,
    ValueError,
)


@dataclass(frozen=True)
class Member:
    """One archive entry, normalised: `name` relative to the archive's top."""

    name: str
    kind: str  # "file" | "dir" | "symlink" | "hardlink"
    executable: bool = False
    target: str = ""  # link target (symlink: as stored; hardlink: archive path)
    size: int = 0


def unsafe(archive: Path, name: str, why: str) -> UnsafeArchive:
    return UnsafeArchive(
        f"{archive.name}: member {show_name(name)} {why}; nothing was extracted",
        hint="use a trusted archive (or re-pack it without that member)",
    )


def show_name(name: str) -> str:
    text = repr(name)
    return text if len(text) <= 120 else text[:117] + "..."


def corrupt(archive: Path, exc: BaseException) -> UnsafeArchive:
    reason = " ".join(str(exc).split())[:200] or type(exc).__name__
    return UnsafeArchive(
        f"{archive.name}: corrupt or truncated archive ({type(exc).__name__}: {reason})",
        hint="the archive file is damaged: fetch or re-create it (and its upstream.sha256)",
    )


# ----------------------------------------------------------------------------- names


def check_name(archive: Path, name: str) -> str:
    """The member path without leading './', or UnsafeArchive."""
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise unsafe(archive, name, "has an absolute path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts or ("\\" in name and ".." in name.split("\\")):
        raise unsafe(archive, name, "contains '..'")
    if CONTROL.search(name):
        raise unsafe(archive, name, "has a control character in its name")
    if len(parts) > MAX_DEPTH:
        raise unsafe(archive, name, f"is nested deeper than {MAX_DEPTH} directories")
    encoded = name.encode("utf-8", "surrogateescape")
    if len(encoded) > MAX_NAME or (
        len(encoded) > MAX_COMPONENT
        and any(len(p.encode("utf-8", "surrogateescape")) > MAX_COMPONENT for p in parts)
    ):
        raise unsafe(archive, name, "has a name longer than the file system allows")
    return "/".join(parts)


def check_link_target(archive: Path, member: Member) -> None:
    if member.target == "" or "\0" in member.target:
        raise unsafe(archive, member.name, "is a link with an empty target")
    if member.target.startswith("/"):
        raise unsafe(archive, member.name, f"links to absolute path {show_name(member.target)}")
    if len(member.target.encode("utf-8", "surrogateescape")) > MAX_LINK:
        raise unsafe(archive, member.name, "is a link with an over-long target")


# ----------------------------------------------------------------------------- scanning


class _Budget:
    """The archive limits, checked as member headers are read (before any data is)."""

    def __init__(self, archive: Path) -> None:
        self.archive = archive
        self.max_members = ARCHIVE_MEMBERS.value()
        self.max_bytes = ARCHIVE_BYTES.value()
        self.max_ratio = ARCHIVE_RATIO.value()
        self.packed = max(archive.stat().st_size, 1)
        self.members = 0
        self.bytes = 0

    def add(self, size: int, members: int = 1) -> None:
        self.members += members
        self.bytes += max(size, 0)
        name = self.archive.name
        if self.members > self.max_members:
            raise UnsafeArchive(
                f"{name}: more than {self.max_members} members (limit {ARCHIVE_MEMBERS.env}); "
                "nothing was extracted",
                hint=ARCHIVE_MEMBERS.hint(),
            )
        if self.bytes > self.max_bytes:
            raise UnsafeArchive(
                f"{name}: members add up to more than {human(self.max_bytes)} "
                f"(limit {ARCHIVE_BYTES.env}); nothing was extracted",
                hint=ARCHIVE_BYTES.hint(),
            )
        if self.bytes > RATIO_FLOOR and self.bytes > self.max_ratio * self.packed:
            raise UnsafeArchive(
                f"{name}: expands more than {self.max_ratio}x its {human(self.packed)} "
                f"(limit {ARCHIVE_RATIO.env}); nothing was extracted",
                hint=ARCHIVE_RATIO.hint(),
            )


Opener = Callable[[], IO[bytes]]


@dataclass(frozen=True)
class Raw:
    """A scanned member: how to open its bytes, and its tar header (None in a zip)."""

    member: Member
    open: Opener
    info: tarfile.TarInfo | None = None


def _tar_members(archive: Path, tar: tarfile.TarFile) -> Iterator[Raw]:
    budget = _Budget(archive)
    sizes: dict[str, int] = {}  # a hard link is written as a copy: it costs its target's size
    while (info := tar.next()) is not None:
        budget.add(info.size if info.isreg() else 0)
        member = _tar_member(archive, info)
        if member.kind == "file":
            sizes[member.name] = member.size
        elif member.kind == "hardlink":
            budget.add(sizes.get(member.target, 0), members=0)
        yield Raw(member, _tar_opener(tar, info), info)
    # Read the compressed stream to its end: gzip checks its CRC (xz its block checks) only
    # there, and the scan above may stop at the end-of-archive blocks just before it.
    assert tar.fileobj is not None
    while tar.fileobj.read(CHUNK):
        pass


def _tar_member(archive: Path, info: tarfile.TarInfo) -> Member:
    name = check_name(archive, info.name)
    if not info.isdir() and info.name.rstrip("/") != info.name:
        # GNU tar makes a directory of `top/a/` and fails to write the file's bytes into it:
        # which one the tree should hold is not the archive's to decide
        raise unsafe(archive, info.name, "is not a directory but its name ends in '/'")
    if info.isreg():
        return Member(name, "file", bool(info.mode & 0o111), size=info.size)
    if info.isdir():
        return Member(name, "dir")
    if info.issym():
        member = Member(name, "symlink", target=info.linkname)
        check_link_target(archive, member)
        return member
    if info.islnk():
        return Member(name, "hardlink", target=check_name(archive, info.linkname))
    raise unsafe(archive, info.name, "is a device, fifo or other special file")


def _tar_opener(tar: tarfile.TarFile, info: tarfile.TarInfo) -> Opener:
    def opener() -> IO[bytes]:
        source = tar.fileobj
        if info.isreg() and not info.issparse() and source and source.tell() == info.offset_data:
            # the stream is at the member's bytes (its header was just read): read them from
            # it directly, without tarfile's per-member file object (80,000 in a kernel)
            return cast(IO[bytes], _Slice(source, info.size))
        stream = tar.extractfile(info)
        if stream is None:
            raise tarfile.ReadError(f"cannot read {info.name!r}")
        return stream

    return opener


class _Reads(Protocol):
    def read(self, size: int, /) -> bytes: ...


class _Slice(io.RawIOBase):
    """The next `size` bytes of a stream, read from where it is (a short read at its end)."""

    def __init__(self, stream: _Reads, size: int) -> None:
        super().__init__()
        self._stream = stream
        self._left = size

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        want = self._left if size < 0 else min(size, self._left)
        data = self._stream.read(want) if want else b""
        self._left -= len(data)
        return data


def _zip_members(archive: Path, zf: zipfile.ZipFile) -> Iterator[Raw]:
    budget = _Budget(archive)
    for info in zf.infolist():
        budget.add(info.file_size)
        yield Raw(_zip_member(archive, zf, info), _zip_opener(zf, info))


def _zip_member(archive: Path, zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> Member:
    name = check_name(archive, info.filename)
    mode = info.external_attr >> 16
    if info.is_dir() or stat.S_ISDIR(mode):
        return Member(name, "dir")
    if stat.S_ISLNK(mode):
        if info.file_size > MAX_LINK:
            raise unsafe(archive, info.filename, "is a link with an over-long target")
        target = zf.read(info).decode("utf-8", "surrogateescape")
        member = Member(name, "symlink", target=target)
        check_link_target(archive, member)
        return member
    if stat.S_IFMT(mode) not in (0, stat.S_IFREG):  # 0: no type bits (many zip writers)
        raise unsafe(archive, info.filename, "is a device, fifo or other special file")
    return Member(name, "file", bool(mode & 0o111), size=info.file_size)


def _zip_opener(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> Opener:
    return lambda: zf.open(info)


class _HugeHeader(Exception):
    """A tar extension header too large to read (raised before tarfile reads it)."""


class _BoundedTarInfo(tarfile.TarInfo):
    """A TarInfo that refuses an over-long extension header before tarfile reads it into
    memory: a pax or GNU long-name header declares its size, and a few KiB of gzip can
    declare gigabytes of header. A header after the first that fails its checksum or is cut
    short is damage: tarfile would end the archive there and silently leave out every member
    after it (GNU tar reports it); only zero blocks or the file's end end an archive."""

    @classmethod
    def fromtarfile(cls, tarfile_: tarfile.TarFile) -> Self:
        try:
            return super().fromtarfile(tarfile_)
        except DAMAGED_HEADER as exc:
            if tarfile_.offset == 0:
                raise  # the first block: tarfile.open is still trying the formats
            raise tarfile.ReadError(f"bad member header at byte {tarfile_.offset}: {exc}") from None

    def _proc_member(self, source: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in EXTENSION_HEADERS and self.size > MAX_HEADER:
            raise _HugeHeader(f"an extension header of {human(self.size)}")
        return super()._proc_member(source)  # type: ignore[misc,no-any-return]


# tarfile's errors for a header block that is neither a header nor zeros, or cut short
# (private names: not in the type stubs).
DAMAGED_HEADER: tuple[type[Exception], ...] = tuple(
    getattr(tarfile, name) for name in ("InvalidHeaderError", "TruncatedHeaderError")
)
EXTENSION_HEADERS = (
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
)
MAX_HEADER = 1 << 20  # a pax header or GNU long name (real ones are well under 64 KiB)


def open_archive(archive: Path) -> IO[bytes]:
    """The archive file, opened for reading (the one place its bytes are read from)."""
    return archive.open("rb")


@contextmanager
def read_members(archive: Path) -> Iterator[Iterator[Raw]]:
    """The members of the archive, in order, scanned within the limits as they are read.

    One pass: a tar member's bytes can be read (its opener) until the next member is asked
    for, and then only by seeking back (a second decompression, which extraction avoids).
    The archive stays open until the context ends; read errors become UnsafeArchive.
    """
    try:
        if archive.name.lower().endswith(".zip"):
            _check_zip_directory(archive)
            with open_archive(archive) as raw, zipfile.ZipFile(raw) as zf:
                yield _zip_members(archive, zf)
            return
        if archive.name.lower().endswith(ZSTD_SUFFIX):
            with (
                _zstd_decoded(archive) as plain,
                tarfile.open(fileobj=plain, mode="r:", tarinfo=_BoundedTarInfo) as tar,
            ):
                yield _tar_members(archive, tar)
            return
        with (
            open_archive(archive) as raw,
            tarfile.open(fileobj=raw, mode="r:*", tarinfo=_BoundedTarInfo) as tar,
        ):
            yield _tar_members(archive, tar)
    except PatchctlError:
        raise
    except _HugeHeader as exc:
        raise UnsafeArchive(
            f"{archive.name}: {exc} (at most {human(MAX_HEADER)}); nothing was extracted",
            hint="use a trusted archive",
        ) from None
    except READ_ERRORS as exc:
        raise corrupt(archive, exc) from None


@contextmanager
def _zstd_decoded(archive: Path) -> Iterator[IO[bytes]]:
    """The tar inside a .tar.zst, decoded by the `zstd` command into an unnamed temporary file
    (Python before 3.14 has no zstd). The archive limits bound the decoded bytes as they come,
    the ratio against the compressed size, so a zstd bomb stops early."""
    zstd = shutil.which("zstd")
    if zstd is None:
        raise ToolchainMissing(
            f"{archive.name}: reading a .tar.zst archive needs the zstd command",
            hint="install zstd (e.g. `apt-get install zstd`), or pin a .tar.gz/.tar.xz archive",
        )
    budget = _Budget(archive)
    with tempfile.TemporaryFile() as plain:
        command = [zstd, "-d", "-c", "-q", "--no-progress", "--", str(archive)]
        with streamed(command) as child:  # killed when a limit stops the reading
            while block := child.stdout.read(CHUNK):
                budget.add(len(block), members=0)
                plain.write(block)
        if child.returncode != 0:
            message = child.stderr.decode("utf-8", "replace")
            raise corrupt(archive, _ZstdError(message or f"zstd exited {child.returncode}"))
        plain.seek(0)
        yield plain


class _ZstdError(Exception):
    """What the zstd command said about a damaged archive."""


def _check_zip_directory(archive: Path) -> None:
    """The member count a zip declares, checked before zipfile reads its whole directory
    into memory (tens of bytes of directory per member: a big zip could hold millions)."""
    with archive.open("rb") as stream:
        stream.seek(0, os.SEEK_END)
        size = stream.tell()
        stream.seek(max(0, size - (1 << 16) - 22))
        tail = stream.read()
        end = tail.rfind(b"PK\x05\x06")
        if end < 0 or len(tail) < end + 22:
            return  # no end record: zipfile reports the damage itself
        declared = int.from_bytes(tail[end + 10 : end + 12], "little")
        locator = tail.rfind(b"PK\x06\x07", 0, end)
        if declared == 0xFFFF and locator >= 0:
            stream.seek(int.from_bytes(tail[locator + 8 : locator + 16], "little") + 32)
            declared = int.from_bytes(stream.read(8), "little")
    limit = ARCHIVE_MEMBERS.value()
    if declared > limit:
        raise UnsafeArchive(
            f"{archive.name}: more than {limit} members ({declared} declared; "
            f"limit {ARCHIVE_MEMBERS.env}); nothing was extracted",
            hint=ARCHIVE_MEMBERS.hint(),
        )
