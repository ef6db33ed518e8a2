"""Safe extraction of upstream archives (.tar.* and .zip), which may come from the internet.

One pass over the archive (a .tar.xz is decompressed once), every member checked as it comes
and before its bytes are written, into a private staging directory inside the destination;
the tree becomes visible (is moved into place) only after the checks that need the whole
archive have passed:
1. as each member's header is read: the limits of patchctl.limits (member count, total size,
   compression ratio), so a bomb stops at its first header past a limit; its name (no `..`, no
   absolute path, no control characters, no file or link named with a trailing `/`, which
   GNU tar makes a directory of); its type (files, dirs and symlinks; hard links
   become copies; devices and fifos are refused); its place in the tree so far (a path named
   twice with differing copies, a member under a file or a symlink, a member that changes
   type, and on a file system that ignores case or Unicode normalization in names, as macOS
   and Windows do, two names it takes for one: `src/A.c` and `src/a.c`, asked of the file
   system by casefold.py's probes). A path named twice
   is taken once when both copies are the same (type, mode, link target, bytes: the second
   is compared with the first as it is read) and refused otherwise. A regular file is then
   written, its size bounded by its header; symlinks and hard links are only recorded;
2. at the end of the archive (a corrupt or truncated one stops with the archive library's
   message; gzip's CRC and xz's block checks are read to the end): the single top directory
   and `subdir` are resolved, every hard link must name a regular file of the archive, and
   every symlink is resolved through the other symlinks of the tree (a chain of links that each
   look internal but climb out together is refused). Python's own `tarfile.data_filter`
   (3.11.4+, 3.12) is applied to the links as well where it exists (for files and
   directories it checks only what the name checks above already refuse); these checks do not
   rely on it. Then the links are made and the selected tree is moved into the destination.

Writing never follows a symlink: every member is created relative to a directory descriptor
opened component by component with O_NOFOLLOW, with O_EXCL, and no symlink exists in the
staging directory before the checks of stage 2 have passed. Any failure (a hostile member
late in the archive, a checksum error in the last member, a full disk) removes everything
written; nothing is ever written outside the destination.

A `.tar.zst` is decoded by the `zstd` command first (bounded by the same limits as it is
decoded; started by gitlayer/runner.py's `streamed`, the one runner of a tool other than
git); the same pass then runs on the decoded tar.

Members are written with git's view of modes: regular files 0644 or 0755, symlinks as
symlinks, hard links as copies, directories 0755. A `Sink` (git's index: materialize.py
passes a `gitlayer.pipes.IndexFeed`) can be told of each file as it is written, so that
hashing the tree overlaps reading the archive.
"""

from __future__ import annotations

import errno
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
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import IO, Protocol, Self, cast

from patchctl.allowlists import ZSTD_SUFFIX
from patchctl.errors import NotFound, PatchctlError, ToolchainMissing, UnsafeArchive
from patchctl.gitlayer.runner import streamed
from patchctl.limits import ARCHIVE_BYTES, ARCHIVE_MEMBERS, ARCHIVE_RATIO, RATIO_FLOOR, human
from patchctl.progress import Progress, or_null
from patchctl.upstream.casefold import (
    FOLDED,
    FOLDING_FIX,
    Fold,
    Same,
    Spellings,
    name_folding,
    same_name,
)

# Components dropped on extraction: a vendored `.git` (a gitlink file in the sdist) would make
# git treat the tree as a submodule. Compared as git's verify_path does (`is_git_dir_name`):
# in any case, and in the spellings NTFS and HFS+ read as `.git`, which git refuses to stage.
DROPPED_NAMES = frozenset({".git"})
# Code points HFS+ ignores in names (git's is_hfs_dotgit): `.g\u200cit` is `.git` there.
HFS_IGNORED = re.compile("[\u200c-\u200f\u202a-\u202e\u206a-\u206f\ufeff]")
# git refuses these as symlinks (verify_path): refused up front instead of failing `git add`,
# with the short names NTFS gives them (`GITMOD~1`, or the hashed fallback `gi7eba~1`).
NO_SYMLINK_NAMES = {
    "gitmodules": "gi7eba",
    "gitattributes": "gi7d29",
    "gitignore": "gi250a",
    "mailmap": "maba30",
}
NO_SYMLINK = re.compile(
    "(?:"
    + "|".join(
        rf"\.{name}|{name[:6]}~[1-4]|"
        + "|".join(f"{short[:k]}~[1-9][0-9]{{{6 - k}}}" for k in range(1, 7))
        for name, short in NO_SYMLINK_NAMES.items()
    )
    + ")[. ]*(?::.*)?",
    re.DOTALL,
)
CHUNK = 1 << 20
MAX_NAME = 4096  # bytes of a member path
MAX_COMPONENT = 255  # bytes of one path component (NAME_MAX)
MAX_DEPTH = 256  # components of a member path (directories are opened one by one, recursively)
MAX_LINK = 4096  # bytes of a symlink target
MAX_HOPS = 40  # symlinks followed while resolving one target (the kernel's limit)
CONTROL = re.compile("[\x00-\x1f\x7f]")  # refused in member names
PROGRESS_STEP = 256  # members read between two progress events
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


@dataclass(frozen=True)
class ExtractResult:
    """What `extract_archive` wrote."""

    files: int
    dropped: tuple[str, ...]
    sunk: bool = False  # the sink was told of every file and symlink, named as in the tree


class Sink(Protocol):
    """Told of each regular file and symlink as extraction writes it.

    `start(root)` comes first, once: the directory the paths given to `add` are relative to
    (a staging directory, predicted from the first member to become the tree's top). `flush`
    comes before that directory's contents move into place: the sink must be done reading
    them. Whether the prediction held (every path named as in the final tree) is
    `ExtractResult.sunk`; when it did not, the sink's view is to be thrown away.
    """

    def start(self, root: Path) -> None: ...

    def add(self, path: str) -> None: ...

    def flush(self) -> None: ...


def _unsafe(archive: Path, name: str, why: str) -> UnsafeArchive:
    return UnsafeArchive(
        f"{archive.name}: member {_show(name)} {why}; nothing was extracted",
        hint="use a trusted archive (or re-pack it without that member)",
    )


def _show(name: str) -> str:
    text = repr(name)
    return text if len(text) <= 120 else text[:117] + "..."


def _corrupt(archive: Path, exc: BaseException) -> UnsafeArchive:
    reason = " ".join(str(exc).split())[:200] or type(exc).__name__
    return UnsafeArchive(
        f"{archive.name}: corrupt or truncated archive ({type(exc).__name__}: {reason})",
        hint="the archive file is damaged: fetch or re-create it (and its upstream.sha256)",
    )


# ----------------------------------------------------------------------------- names


def _check_name(archive: Path, name: str) -> str:
    """The member path without leading './', or UnsafeArchive."""
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise _unsafe(archive, name, "has an absolute path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts or ("\\" in name and ".." in name.split("\\")):
        raise _unsafe(archive, name, "contains '..'")
    if CONTROL.search(name):
        raise _unsafe(archive, name, "has a control character in its name")
    if len(parts) > MAX_DEPTH:
        raise _unsafe(archive, name, f"is nested deeper than {MAX_DEPTH} directories")
    encoded = name.encode("utf-8", "surrogateescape")
    if len(encoded) > MAX_NAME or (
        len(encoded) > MAX_COMPONENT
        and any(len(p.encode("utf-8", "surrogateescape")) > MAX_COMPONENT for p in parts)
    ):
        raise _unsafe(archive, name, "has a name longer than the file system allows")
    return "/".join(parts)


def _check_link_target(archive: Path, member: Member) -> None:
    if member.target == "" or "\0" in member.target:
        raise _unsafe(archive, member.name, "is a link with an empty target")
    if member.target.startswith("/"):
        raise _unsafe(archive, member.name, f"links to absolute path {_show(member.target)}")
    if len(member.target.encode("utf-8", "surrogateescape")) > MAX_LINK:
        raise _unsafe(archive, member.name, "is a link with an over-long target")


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
class _Raw:
    """A scanned member: how to open its bytes, and its tar header (None in a zip)."""

    member: Member
    open: Opener
    info: tarfile.TarInfo | None = None


def _tar_members(archive: Path, tar: tarfile.TarFile) -> Iterator[_Raw]:
    budget = _Budget(archive)
    sizes: dict[str, int] = {}  # a hard link is written as a copy: it costs its target's size
    while (info := tar.next()) is not None:
        budget.add(info.size if info.isreg() else 0)
        member = _tar_member(archive, info)
        if member.kind == "file":
            sizes[member.name] = member.size
        elif member.kind == "hardlink":
            budget.add(sizes.get(member.target, 0), members=0)
        yield _Raw(member, _tar_opener(tar, info), info)
    # Read the compressed stream to its end: gzip checks its CRC (xz its block checks) only
    # there, and the scan above may stop at the end-of-archive blocks just before it.
    assert tar.fileobj is not None
    while tar.fileobj.read(CHUNK):
        pass


def _tar_member(archive: Path, info: tarfile.TarInfo) -> Member:
    name = _check_name(archive, info.name)
    if not info.isdir() and info.name.rstrip("/") != info.name:
        # GNU tar makes a directory of `top/a/` and fails to write the file's bytes into it:
        # which one the tree should hold is not the archive's to decide
        raise _unsafe(archive, info.name, "is not a directory but its name ends in '/'")
    if info.isreg():
        return Member(name, "file", bool(info.mode & 0o111), size=info.size)
    if info.isdir():
        return Member(name, "dir")
    if info.issym():
        member = Member(name, "symlink", target=info.linkname)
        _check_link_target(archive, member)
        return member
    if info.islnk():
        return Member(name, "hardlink", target=_check_name(archive, info.linkname))
    raise _unsafe(archive, info.name, "is a device, fifo or other special file")


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


def _zip_members(archive: Path, zf: zipfile.ZipFile) -> Iterator[_Raw]:
    budget = _Budget(archive)
    for info in zf.infolist():
        budget.add(info.file_size)
        yield _Raw(_zip_member(archive, zf, info), _zip_opener(zf, info))


def _zip_member(archive: Path, zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> Member:
    name = _check_name(archive, info.filename)
    mode = info.external_attr >> 16
    if info.is_dir() or stat.S_ISDIR(mode):
        return Member(name, "dir")
    if stat.S_ISLNK(mode):
        if info.file_size > MAX_LINK:
            raise _unsafe(archive, info.filename, "is a link with an over-long target")
        target = zf.read(info).decode("utf-8", "surrogateescape")
        member = Member(name, "symlink", target=target)
        _check_link_target(archive, member)
        return member
    if stat.S_IFMT(mode) not in (0, stat.S_IFREG):  # 0: no type bits (many zip writers)
        raise _unsafe(archive, info.filename, "is a device, fifo or other special file")
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


def _open_archive(archive: Path) -> IO[bytes]:
    """The archive file, opened for reading (the one place its bytes are read from)."""
    return archive.open("rb")


@contextmanager
def _members(archive: Path) -> Iterator[Iterator[_Raw]]:
    """The members of the archive, in order, scanned within the limits as they are read.

    One pass: a tar member's bytes can be read (its opener) until the next member is asked
    for, and then only by seeking back (a second decompression, which extraction avoids).
    The archive stays open until the context ends; read errors become UnsafeArchive.
    """
    try:
        if archive.name.lower().endswith(".zip"):
            _check_zip_directory(archive)
            with _open_archive(archive) as raw, zipfile.ZipFile(raw) as zf:
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
            _open_archive(archive) as raw,
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
        raise _corrupt(archive, exc) from None


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
            raise _corrupt(archive, _ZstdError(message or f"zstd exited {child.returncode}"))
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


# ----------------------------------------------------------------------------- checking




class _TreeCheck:
    """The tree so far, as members come: refuses a path named twice, a member under a file or
    link, and a change of type; with `fold` (how the file system compares names, when it does
    not compare bytes), also two paths it takes for one."""

    def __init__(self, archive: Path, fold: Fold | None = None, same: Same | None = None) -> None:
        self.archive = archive
        self.kinds: dict[str, str] = {}
        self.firsts: dict[str, Member] = {}  # each file and link as first named
        self.spellings = None if fold is None else Spellings(fold, same)

    def add(self, member: Member) -> Member | None:
        """Check `member` against the tree so far; the member of the same name and type met
        before (a repeated file or link, which the caller must find identical), else None."""
        kinds = self.kinds
        parts = member.name.split("/") if member.name else []
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            kind = kinds.setdefault(parent, "dir")
            if kind != "dir":
                raise _unsafe(self.archive, member.name, f"lies under {_show(parent)}, a {kind}")
        if self.spellings is not None and not _is_dropped(member.name):
            self._check_spelling(member.name)
        kind = "file" if member.kind == "hardlink" else member.kind
        seen = kinds.get(member.name)
        if seen is None:
            kinds[member.name] = kind
            if kind != "dir":
                self.firsts[member.name] = member
            return None
        if seen != kind:
            raise _unsafe(self.archive, member.name, f"changes type from {seen} to {kind}")
        if kind == "dir":
            return None
        first = self.firsts[member.name]
        if (first.kind, first.executable, first.target) != (
            member.kind,
            member.executable,
            member.target,
        ) or (member.kind == "file" and first.size != member.size):
            raise _unsafe(self.archive, member.name, TWICE)
        return first

    def _check_spelling(self, name: str) -> None:
        """Refuse a path (or a directory above it) that this file system takes for one seen
        under another spelling: one would be written over the other, or two directories
        merged, before git ever saw them."""
        assert self.spellings is not None
        found = self.spellings.add(name)
        if found is not None:
            raise UnsafeArchive(
                f"{self.archive.name}: members {_show(found[0])} and {_show(found[1])} "
                f"{FOLDED}; nothing was extracted",
                hint=f"{FOLDING_FIX}, or re-pack the archive without one of them",
            )


TWICE = "appears twice in the archive, the copies differing (in type, mode, target or bytes)"



def _check_hardlinks(archive: Path, members: list[Member]) -> dict[str, Member]:
    """The regular files by archive name; every hard link must name one of them."""
    files = {m.name: m for m in members if m.kind == "file"}
    for member in members:
        if member.kind == "hardlink" and member.target not in files:
            raise _unsafe(
                archive,
                member.name,
                f"is a hard link to {_show(member.target)}, "
                "which is not a regular file of the archive",
            )
    return files


def _check_symlinks(archive: Path, plans: list[_Plan]) -> None:
    """Resolve every symlink through the tree being written: it must stay inside it."""
    links = {p.dest: p.member.target for p in plans if p.member.kind == "symlink"}
    for plan in plans:
        member = plan.member
        if member.kind == "symlink":
            if NO_SYMLINK.fullmatch(HFS_IGNORED.sub("", Path(plan.dest).name).lower()):
                raise _unsafe(archive, member.name, "is a symlink git refuses to store")
            why = _escapes(plan.dest, links)
            if why is not None:
                raise _unsafe(archive, member.name, f"links outside the tree ({why})")


def _escapes(name: str, links: dict[str, str]) -> str | None:
    """None when symlink `name` resolves inside the tree, else how it gets out."""
    here = name.split("/")[:-1]
    pending = deque(links[name].split("/"))
    hops = 0
    while pending:
        part = pending.popleft()
        if part in ("", "."):
            continue
        if part == "..":
            if not here:
                return f"{links[name]!r} climbs above the top"
            here.pop()
            continue
        path = "/".join([*here, part])
        if path in links:
            hops += 1
            if hops > MAX_HOPS:
                return "a loop of symlinks"
            if links[path].startswith("/"):
                return f"through {path!r}, an absolute link"
            pending.extendleft(reversed(links[path].split("/")))
            continue
        here.append(part)
    return None


def _data_filter(archive: Path, plans: list[_Plan], dest: Path) -> None:
    """Python's own tarfile `data` filter on every tar link written (where Python has it).

    Files and directories are left out: for them the filter checks only the name (absolute,
    or outside `dest` once resolved, which nothing on disk can change here: the tree is not in
    place yet), and `_check_name` refuses more than it does; resolving 80,000 names took
    seconds of a kernel-sized extraction.
    """
    data_filter = getattr(tarfile, "data_filter", None)
    if data_filter is None:
        return  # Python < 3.11.4: the checks above stand alone
    for plan in plans:
        if plan.info is None or plan.member.kind not in ("symlink", "hardlink"):
            continue
        try:
            data_filter(plan.info.replace(name=plan.dest, deep=False), str(dest))
        except tarfile.FilterError as exc:
            why = f"is refused by tarfile's data filter ({exc})"
            raise _unsafe(archive, plan.member.name, why) from None


# ----------------------------------------------------------------------------- selecting


@dataclass(frozen=True)
class _Plan:
    """A member of the tree: its destination name (and its tar header, for the data filter)."""

    member: Member
    dest: str
    info: tarfile.TarInfo | None = None


def _strip_top(names: list[str]) -> str:
    """The single top-level directory shared by every member ('' if there is none)."""
    tops = {n.split("/", 1)[0] for n in names if n}
    if len(tops) != 1:
        return ""
    top = next(iter(tops))
    return top if any("/" in n for n in names) else ""


def _relocate(name: str, prefix: str) -> str | None:
    """`name` relative to `prefix`, or None when it lies outside it."""
    if not prefix:
        return name
    if name == prefix:
        return ""
    return name[len(prefix) + 1 :] if name.startswith(prefix + "/") else None


def is_git_dir_name(part: str) -> bool:
    """True for a path component git reads as `.git` (verify_path with core.protectNTFS and
    core.protectHFS, both pinned): `.git` in any case; on NTFS also with trailing dots and
    spaces, an alternate stream (`.git::$INDEX_ALLOCATION`) or as its short name `git~1`; on
    HFS+ with ignored code points anywhere (`.g\u200cit`)."""
    lowered = HFS_IGNORED.sub("", part).lower()
    for name in (*DROPPED_NAMES, "git~1"):
        if lowered.startswith(name):
            rest = re.split(r"[:\\]", lowered[len(name) :], maxsplit=1)[0]
            if not rest.strip(". "):
                return True
    return False


def _may_name_git(lowered: str) -> bool:
    """False for the common name that cannot hold a `.git` component (no split needed)."""
    return "git" in lowered or not lowered.isascii()


def _is_dropped(name: str) -> bool:
    if not _may_name_git(name.lower()):
        return False  # the common case, without splitting the name
    return any(is_git_dir_name(part) for part in name.split("/"))


def relative_subdir(names: Sequence[str], subdir: str | None) -> str:
    """`subdir` relative to the archive's single top directory, which extraction strips.

    `vendor/llama.cpp` names `llama_cpp_python-0.3.36/vendor/llama.cpp`; so does the
    spelling with the top directory (`llama_cpp_python-0.3.36/vendor/llama.cpp`), unless the
    archive really has that path below its top directory.
    """
    top = _strip_top(list(names))
    sub = (subdir or "").strip("/")
    if not top or not (sub == top or sub.startswith(top + "/")):
        return sub
    below = f"{top}/{sub}/"
    if any(n.startswith(below) for n in names):
        return sub
    return sub[len(top) :].strip("/")


def archive_subdir(archive: Path, subdir: str | None) -> str:
    """`relative_subdir` for an archive file (scans its members within the limits, reads no
    member's bytes)."""
    with _members(archive) as raw:
        names = [r.member.name for r in raw]  # as stored: the top directory included
    return relative_subdir(names, subdir)


def _select(
    archive: Path,
    members: list[Member],
    subdir: str | None,
    infos: Mapping[str, tarfile.TarInfo],
) -> tuple[str, list[_Plan], list[str]]:
    """The archive path of the tree's top (`prefix`), the members under it (with their tar
    headers where `infos` has them), and the names dropped."""
    names = [m.name for m in members]
    top = _strip_top(names)
    prefix = "/".join(p for p in (top, relative_subdir(names, subdir)) if p)
    plans: list[_Plan] = []
    dropped: list[str] = []
    for member in members:
        dest = _relocate(member.name, prefix)
        if dest is None or dest == "":
            continue
        if _is_dropped(dest):
            dropped.append(dest)
            continue
        plans.append(_Plan(member, dest, infos.get(member.name)))
    if subdir and (not plans or _unwritten(prefix)):
        stripped = f" (its single top directory {top + '/'!r} is stripped first)" if top else ""
        raise NotFound(
            f"{archive.name}: no member under {subdir!r}{stripped}",
            hint="upstream.subdir is the path inside the archive's top directory, "
            "e.g. vendor/llama.cpp",
        )
    return prefix, plans, dropped


def _unwritten(name: str) -> bool:
    """True for a member not written while streaming: a dropped name below the first
    component (the first may be the top directory, which is stripped)."""
    if not _may_name_git(name.lower()):
        return False  # the common case, without splitting the name
    return any(is_git_dir_name(part) for part in name.split("/")[1:])


# ----------------------------------------------------------------------------- writing


_NOFOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_OLD_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC


class _Dirs:
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
            fd = os.open(leaf, _NOFOLLOW_DIR, dir_fd=parent_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise _unsafe(
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


def _split(name: str) -> tuple[str, str]:
    parent, _sep, leaf = name.rpartition("/")
    return parent, leaf


class _Extraction:
    """One pass over the members into the staging directory `dirs.root_fd`, then the checks
    that need the whole archive, the links, and the move of the tree into `dest`."""

    def __init__(
        self, archive: Path, root: Path, dirs: _Dirs, report: Progress, sink: Sink | None
    ) -> None:
        self.archive = archive
        self.root = root  # the staging directory (dirs.root_fd)
        self.dirs = dirs
        self.report = report
        self.sink = sink  # None once the guess below failed
        self.started: Sink | None = None
        fold = name_folding(dirs.root_fd)
        self.tree = _TreeCheck(archive, fold, partial(same_name, dirs.root_fd))
        self.members: list[Member] = []
        self.infos: dict[str, tarfile.TarInfo] = {}  # the links' tar headers (data filter)
        self.unwritten: dict[str, Opener] = {}  # files not written (dropped names)
        self.guess: str | None = None  # the predicted top (sink paths are relative to it)

    # ----- the pass

    def take(self, raw: _Raw) -> None:
        """Check one member against the tree so far; write it if it is a file."""
        member = raw.member
        first = self.tree.add(member)
        if first is not None:  # a repeated file or link, identical so far
            self._check_repeated(first, raw)
            return
        self.members.append(member)
        self._predict(member)
        if member.kind == "dir":
            self.dirs.fd(member.name, member.name)
        elif member.kind == "file":
            if _unwritten(member.name):
                self.unwritten[member.name] = raw.open
            else:
                self._write_file(member.name, member, raw.open)
                self._tell(member.name)
        elif raw.info is not None:
            self.infos[member.name] = raw.info
        if len(self.members) % PROGRESS_STEP == 0:
            self.report.advance("extract", PROGRESS_STEP)

    def _check_repeated(self, first: Member, raw: _Raw) -> None:
        """Accept a member named twice only when the copies are the same (GNU tar writes the
        second over the first): a file's bytes are compared with the copy written (a file not
        written, a dropped name, cannot be compared and is refused); links were compared by
        target. Differing copies would make the tree depend on the extractor."""
        if first.kind != "file":
            return
        if first.name in self.unwritten:
            raise _unsafe(self.archive, first.name, "appears twice in the archive")
        parent, leaf = _split(first.name)
        fd = os.open(leaf, _OLD_FILE, dir_fd=self.dirs.fd(parent, first.name))
        with os.fdopen(fd, "rb") as written, _reading(self.archive), raw.open() as stream:
            while block := stream.read(CHUNK):
                if written.read(len(block)) != block:
                    raise _unsafe(self.archive, first.name, TWICE)
            if written.read(1):
                raise _unsafe(self.archive, first.name, TWICE)

    def _predict(self, member: Member) -> None:
        """Guess the tree's top from the first member (a directory, or a name with a `/`,
        names it; a top-level file means there is none); give up at the first member outside
        it."""
        if self.sink is None:
            return
        if self.guess is None:
            first, slash, _rest = member.name.partition("/")
            self.guess = first if (slash or member.kind == "dir") else ""
            self.dirs.fd(self.guess, member.name)  # the sink's work tree must exist
            self.sink.start(self.root / self.guess)
            self.started = self.sink
        elif self.guess and not (
            member.name == self.guess or member.name.startswith(self.guess + "/")
        ):
            self.sink = None  # not the top: the final names will differ from those told

    def _tell(self, name: str) -> None:
        if self.sink is None or self.guess is None:
            return
        path = name[len(self.guess) + 1 :] if self.guess else name
        if not _is_dropped(path):
            self.sink.add(path)

    def _write_file(self, name: str, source: Member, opener: Opener) -> None:
        parent, leaf = _split(name)
        out = os.open(leaf, _NEW_FILE, 0o600, dir_fd=self.dirs.fd(parent, name))
        try:
            written = 0
            with _reading(self.archive), opener() as stream:
                while block := stream.read(CHUNK):
                    written += len(block)
                    if written > source.size:
                        raise _unsafe(self.archive, source.name, "holds more bytes than declared")
                    _write_fully(out, block)
            os.fchmod(out, 0o755 if source.executable else 0o644)
        finally:
            os.close(out)

    # ----- the end

    def finish(self, dest: Path, dest_fd: int, subdir: str | None) -> ExtractResult:
        """The checks that need every member, then the links, then the tree moved into
        `dest` (descriptor `dest_fd`)."""
        members = self.members
        self.report.advance("extract", len(members) % PROGRESS_STEP)
        files = _check_hardlinks(self.archive, members)
        prefix, plans, dropped = _select(self.archive, members, subdir, self.infos)
        _check_symlinks(self.archive, plans)
        _data_filter(self.archive, plans, dest)
        sunk = self.sink is not None and subdir is None and prefix == self.guess
        for plan in plans:
            self._write_link(plan.member, files)
            if plan.member.kind in ("symlink", "hardlink"):
                self._tell(plan.member.name)
        if self.started is not None:
            self.started.flush()  # done reading the staging directory, whatever it was told
        self._move(prefix, dest_fd)
        return ExtractResult(sum(p.member.kind != "dir" for p in plans), tuple(dropped), sunk)

    def _write_link(self, member: Member, files: dict[str, Member]) -> None:
        if member.kind == "symlink":
            parent, leaf = _split(member.name)
            os.symlink(member.target, leaf, dir_fd=self.dirs.fd(parent, member.name))
        elif member.kind == "hardlink":
            source = files[member.target]
            self._write_file(member.name, source, self._opener(source.name))

    def _opener(self, name: str) -> Opener:
        """How to read the bytes of regular file `name` again: from its copy written in the
        staging directory, or (a file that was not written) from the archive."""
        if name in self.unwritten:
            return self.unwritten[name]
        parent, leaf = _split(name)

        def opener() -> IO[bytes]:
            return os.fdopen(os.open(leaf, _OLD_FILE, dir_fd=self.dirs.fd(parent, name)), "rb")

        return opener

    def _move(self, prefix: str, dest_fd: int) -> None:
        """Rename the entries of staging directory `prefix` into `dest_fd`."""
        source = self.dirs.fd(prefix, prefix)
        staging = self.root.name
        for entry in os.listdir(source):
            if not prefix and is_git_dir_name(entry):
                continue  # a top-level .git of an archive without a top directory
            if entry == staging:
                raise _unsafe(self.archive, entry, "has the name of patchctl's staging directory")
            os.rename(entry, entry, src_dir_fd=source, dst_dir_fd=dest_fd)


def _write_fully(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


@contextmanager
def _reading(archive: Path) -> Iterator[None]:
    try:
        yield
    except PatchctlError:
        raise
    except READ_ERRORS as exc:
        raise _corrupt(archive, exc) from None


def _prepare(dest: Path) -> frozenset[str] | None:
    """Check `dest` is missing or a real directory holding at most a `.git` (the repository
    patchctl extracts into); create it if missing. Returns the names already there (None when
    it was created), which a failed extraction leaves alone."""
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        raise PatchctlError(
            f"cannot extract into {dest}: it is a symlink or not a directory",
            hint="extract into a new directory",
        )
    if not dest.exists():
        dest.mkdir(parents=True)
        return None
    present = frozenset(child.name for child in dest.iterdir())
    if any(name.lower() not in DROPPED_NAMES for name in present):
        raise PatchctlError(f"cannot extract into {dest}: it is not empty")
    return present


def _clear(dest: Path, present: frozenset[str] | None) -> None:
    """Remove what a failed extraction wrote (everything but the names `present` before)."""
    if present is None:
        shutil.rmtree(dest, ignore_errors=True)
        return
    for child in dest.iterdir():
        if child.name in present:
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def extract_archive(
    archive: Path,
    dest: Path,
    *,
    subdir: str | None = None,
    progress: Progress | None = None,
    sink: Sink | None = None,
) -> ExtractResult:
    """Check every member and extract (the part under `subdir` of) `archive` into `dest`, in
    one pass over the archive.

    A single top-level directory (as in sdists and release tarballs) is stripped first.
    `dest` must be missing or hold only a `.git`; on any error it is left as it was. `sink`
    (not with a `subdir`) is told of each file as it is written.
    """
    if not archive.is_file():
        raise NotFound(f"archive {archive} does not exist")
    report = or_null(progress)
    present = _prepare(dest)
    try:
        result = _extract(archive, dest, subdir, report, None if subdir else sink)
    except BaseException:
        _clear(dest, present)
        raise
    report.done("extract")
    return result


def _extract(
    archive: Path, dest: Path, subdir: str | None, report: Progress, sink: Sink | None
) -> ExtractResult:
    staging = Path(tempfile.mkdtemp(prefix=".patchctl-extract-", dir=dest))
    dest_fd = os.open(dest, _NOFOLLOW_DIR)
    try:
        dirs = _Dirs(archive, os.open(staging, _NOFOLLOW_DIR))
        try:
            extraction = _Extraction(archive, staging, dirs, report, sink)
            report.start("extract", None)
            with _members(archive) as stream:
                for raw in stream:
                    extraction.take(raw)
                return extraction.finish(dest, dest_fd, subdir)
        finally:
            dirs.close()
            os.close(dirs.root_fd)
    finally:
        os.close(dest_fd)
        shutil.rmtree(staging, ignore_errors=True)
