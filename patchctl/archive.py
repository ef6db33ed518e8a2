"""Safe extraction of upstream archives (.tar.* and .zip), which may come from the internet.

Three stages, and nothing is written before the first two have passed:
1. scan: every member's header is read with the limits of patchctl.limits in force (member
   count, total size, compression ratio), so a bomb stops at its first header past a limit;
   a corrupt or truncated archive stops here with the archive library's message;
2. check: names (no `..`, no absolute path, no control characters), types (files, dirs and
   symlinks; hard links become copies; devices and fifos are refused), the tree as a whole (a
   path named twice, a member under a file or a symlink, a member that changes type), and
   every symlink resolved through the other symlinks of the tree (a chain of links that each
   look internal but climb out together is refused). Python's own `tarfile.data_filter`
   (3.11.4+, 3.12) is applied as well where it exists; these checks do not rely on it;
3. write: every member is created relative to a directory descriptor, component by component,
   with O_NOFOLLOW and O_EXCL: nothing is ever written through a symlink or over an existing
   entry, whatever is on disk. A failure here (a checksum error in the last member, a full
   disk) removes everything written.

A `.tar.zst` is decoded by the `zstd` command first (bounded by the same limits as it is
decoded); the three stages then run on the decoded tar.

Members are written with git's view of modes: regular files 0644 or 0755, symlinks as
symlinks, hard links as copies, directories 0755.
"""

from __future__ import annotations

import errno
import lzma
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
import zipfile
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from patchctl.errors import NotFound, PatchctlError, ToolchainMissing, UnsafeArchive
from patchctl.limits import ARCHIVE_BYTES, ARCHIVE_MEMBERS, ARCHIVE_RATIO, RATIO_FLOOR, human
from patchctl.progress import Progress, or_null

ZSTD_SUFFIX = ".tar.zst"
TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ZSTD_SUFFIX)
# Components dropped on extraction: a vendored `.git` (a gitlink file in the sdist) would make
# git treat the tree as a submodule. Compared case-insensitively (git refuses `.GIT` too).
DROPPED_NAMES = frozenset({".git"})
# git refuses these as symlinks (verify_path): refused up front instead of failing `git add`.
NO_SYMLINK_NAMES = frozenset({".gitmodules", ".gitattributes", ".gitignore", ".mailmap"})
CHUNK = 1 << 20
MAX_NAME = 4096  # bytes of a member path
MAX_COMPONENT = 255  # bytes of one path component (NAME_MAX)
MAX_LINK = 4096  # bytes of a symlink target
MAX_HOPS = 40  # symlinks followed while resolving one target (the kernel's limit)
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


def is_archive(path: Path) -> bool:
    """True for a file name patchctl knows how to extract."""
    name = path.name.lower()
    return name.endswith(".zip") or any(name.endswith(s) for s in TAR_SUFFIXES)


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
    if any(ord(c) < 0x20 or c == "\x7f" for c in name):
        raise _unsafe(archive, name, "has a control character in its name")
    encoded = name.encode("utf-8", "surrogateescape")
    if len(encoded) > MAX_NAME or any(
        len(p.encode("utf-8", "surrogateescape")) > MAX_COMPONENT for p in parts
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
        stream = tar.extractfile(info)
        if stream is None:
            raise tarfile.ReadError(f"cannot read {info.name!r}")
        return stream

    return opener


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
    declare gigabytes of header."""

    def _proc_member(self, source: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in EXTENSION_HEADERS and self.size > MAX_HEADER:
            raise _HugeHeader(f"an extension header of {human(self.size)}")
        return super()._proc_member(source)  # type: ignore[misc,no-any-return]


EXTENSION_HEADERS = (
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
)
MAX_HEADER = 1 << 20  # a pax header or GNU long name (real ones are well under 64 KiB)


@contextmanager
def _members(archive: Path) -> Iterator[list[_Raw]]:
    """Every member of the archive (scanned within the limits); the archive stays open."""
    try:
        if archive.name.lower().endswith(".zip"):
            _check_zip_directory(archive)
            with zipfile.ZipFile(archive) as zf:
                yield list(_zip_members(archive, zf))
            return
        if archive.name.lower().endswith(ZSTD_SUFFIX):
            with _zstd_decoded(archive) as plain, tarfile.open(
                fileobj=plain, mode="r:", tarinfo=_BoundedTarInfo
            ) as tar:
                yield list(_tar_members(archive, tar))
            return
        with tarfile.open(archive, "r:*", tarinfo=_BoundedTarInfo) as tar:
            yield list(_tar_members(archive, tar))
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
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as child:
            assert child.stdout is not None and child.stderr is not None
            try:
                while block := child.stdout.read(CHUNK):
                    budget.add(len(block), members=0)
                    plain.write(block)
            except BaseException:
                child.kill()
                raise
            message = child.stderr.read(4096).decode("utf-8", "replace")
        if child.returncode != 0:
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


def _check_tree(archive: Path, members: list[Member]) -> None:
    """Refuse a path named twice, a member under a file or link, and a change of type."""
    kinds: dict[str, str] = {}
    for member in members:
        parts = member.name.split("/") if member.name else []
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            kind = kinds.setdefault(parent, "dir")
            if kind != "dir":
                raise _unsafe(archive, member.name, f"lies under {_show(parent)}, a {kind}")
        kind = "file" if member.kind == "hardlink" else member.kind
        seen = kinds.get(member.name)
        if seen is None:
            kinds[member.name] = kind
        elif seen != kind:
            raise _unsafe(archive, member.name, f"changes type from {seen} to {kind}")
        elif kind != "dir":
            raise _unsafe(archive, member.name, "appears twice in the archive")


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
            if Path(plan.dest).name.lower() in NO_SYMLINK_NAMES:
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
    """Python's own tarfile `data` filter on every tar member written (where Python has it)."""
    data_filter = getattr(tarfile, "data_filter", None)
    if data_filter is None:
        return  # Python < 3.11.4: the checks above stand alone
    for plan in plans:
        if plan.info is None:
            continue
        try:
            data_filter(plan.info.replace(name=plan.dest, deep=False), str(dest))
        except tarfile.FilterError as exc:
            why = f"is refused by tarfile's data filter ({exc})"
            raise _unsafe(archive, plan.member.name, why) from None


# ----------------------------------------------------------------------------- selecting


@dataclass(frozen=True)
class _Plan:
    """A member to write: its destination name and how to open its bytes."""

    member: Member
    dest: str
    open: Opener
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


def _is_dropped(name: str) -> bool:
    return any(part.lower() in DROPPED_NAMES for part in name.split("/"))


def _select(archive: Path, raw: list[_Raw], subdir: str | None) -> tuple[list[_Plan], list[str]]:
    top = _strip_top([r.member.name for r in raw])
    prefix = "/".join(p for p in (top, (subdir or "").strip("/")) if p)
    plans: list[_Plan] = []
    dropped: list[str] = []
    for item in raw:
        dest = _relocate(item.member.name, prefix)
        if dest is None or dest == "":
            continue
        if _is_dropped(dest):
            dropped.append(dest)
            continue
        plans.append(_Plan(item.member, dest, item.open, item.info))
    if subdir and not plans:
        raise NotFound(f"{archive.name}: no member under {subdir!r}", hint="check upstream.subdir")
    return plans, dropped


# ----------------------------------------------------------------------------- writing


_NOFOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class _Writer:
    """Creates members under a directory descriptor, never following a symlink on disk."""

    def __init__(
        self, archive: Path, root_fd: int, files: dict[str, Member], openers: dict[str, Opener]
    ) -> None:
        self.archive = archive
        self.root_fd = root_fd
        self.files = files
        self.openers = openers

    @contextmanager
    def _parent(self, plan: _Plan) -> Iterator[tuple[int, str]]:
        """(descriptor of the member's directory, its leaf name); directories made as needed."""
        *dirs, leaf = plan.dest.split("/")
        fd = os.dup(self.root_fd)
        try:
            for part in dirs:
                with suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                child = self._open_dir(fd, part, plan)
                os.close(fd)
                fd = child
            yield fd, leaf
        finally:
            os.close(fd)

    def _open_dir(self, fd: int, part: str, plan: _Plan) -> int:
        try:
            return os.open(part, _NOFOLLOW_DIR, dir_fd=fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise _unsafe(
                    self.archive,
                    plan.member.name,
                    f"would be written through {part!r}, a symlink or file on disk",
                ) from None
            raise

    def write(self, plan: _Plan) -> None:
        member = plan.member
        with self._parent(plan) as (fd, leaf):
            if member.kind == "dir":
                self._mkdir(fd, leaf, plan)
            elif member.kind == "symlink":
                os.symlink(member.target, leaf, dir_fd=fd)
            else:
                source = self.files[member.target] if member.kind == "hardlink" else member
                opener = self.openers[source.name] if member.kind == "hardlink" else plan.open
                self._write_file(fd, leaf, source, opener)

    def _mkdir(self, fd: int, leaf: str, plan: _Plan) -> None:
        try:
            os.mkdir(leaf, 0o755, dir_fd=fd)
        except FileExistsError:
            if not stat.S_ISDIR(os.stat(leaf, dir_fd=fd, follow_symlinks=False).st_mode):
                raise _unsafe(
                    self.archive, plan.member.name, "collides with a file on disk"
                ) from None

    def _write_file(self, fd: int, leaf: str, source: Member, opener: Opener) -> None:
        out_fd = os.open(leaf, _NEW_FILE, 0o600, dir_fd=fd)
        with os.fdopen(out_fd, "wb") as out:
            written = 0
            with _reading(self.archive), opener() as stream:
                while block := _read(self.archive, stream):
                    written += len(block)
                    if written > source.size:
                        raise _unsafe(self.archive, source.name, "holds more bytes than declared")
                    out.write(block)
            os.fchmod(out.fileno(), 0o755 if source.executable else 0o644)


def _read(archive: Path, stream: IO[bytes]) -> bytes:
    try:
        return stream.read(CHUNK)
    except READ_ERRORS as exc:
        raise _corrupt(archive, exc) from None


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
) -> ExtractResult:
    """Check every member, then extract (the part under `subdir` of) `archive` into `dest`.

    A single top-level directory (as in sdists and release tarballs) is stripped first.
    `dest` must be missing or hold only a `.git`; on any error it is left as it was.
    """
    if not archive.is_file():
        raise NotFound(f"archive {archive} does not exist")
    report = or_null(progress)
    with _members(archive) as raw:
        members = [r.member for r in raw]
        _check_tree(archive, members)
        files = _check_hardlinks(archive, members)
        plans, dropped = _select(archive, raw, subdir)
        _check_symlinks(archive, plans)
        _data_filter(archive, plans, dest)
        report.start("extract", len(plans))
        present = _prepare(dest)
        try:
            _write_all(archive, dest, plans, files, {r.member.name: r.open for r in raw}, report)
        except BaseException:
            _clear(dest, present)
            raise
    report.done("extract")
    return ExtractResult(sum(p.member.kind != "dir" for p in plans), tuple(dropped))


def _write_all(
    archive: Path,
    dest: Path,
    plans: list[_Plan],
    files: dict[str, Member],
    openers: dict[str, Opener],
    report: Progress,
) -> None:
    root_fd = os.open(dest, _NOFOLLOW_DIR)
    try:
        writer = _Writer(archive, root_fd, files, openers)
        for plan in plans:
            writer.write(plan)
            report.advance("extract")
    finally:
        os.close(root_fd)
