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

Reading the formats and the checks of stage 1 that need only the member itself (limits,
name, link target) are archive_formats.py's; the case-folding probes are casefold.py's.

Members are written with git's view of modes: regular files 0644 or 0755, symlinks as
symlinks, hard links as copies, directories 0755. A `Sink` (git's index: materialize.py
passes a `gitlayer.pipes.IndexFeed`) can be told of each file as it is written, so that
hashing the tree overlaps reading the archive.
"""

from __future__ import annotations

import os
import re
import shutil
import tarfile
import tempfile
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import IO, Protocol

from patchctl.errors import NotFound, PatchctlError, UnsafeArchive
from patchctl.progress import Progress, or_null
from patchctl.upstream.archive_formats import (
    CHUNK,
    READ_ERRORS,
    Member,
    Opener,
    Raw,
    corrupt,
    read_members,
    show_name,
    unsafe,
)
from patchctl.upstream.casefold import (
    FOLDED,
    FOLDING_FIX,
    Fold,
    Same,
    Spellings,
    name_folding,
    same_name,
)
from patchctl.upstream.fdwrite import (
    NEW_FILE,
    NOFOLLOW_DIR,
    OLD_FILE,
    Dirs,
    split_name,
    write_fully,
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
MAX_HOPS = 40  # symlinks followed while resolving one target (the kernel's limit)
PROGRESS_STEP = 256  # members read between two progress events


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
                raise unsafe(self.archive, member.name, f"lies under {show_name(parent)}, a {kind}")
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
            raise unsafe(self.archive, member.name, f"changes type from {seen} to {kind}")
        if kind == "dir":
            return None
        first = self.firsts[member.name]
        if (first.kind, first.executable, first.target) != (
            member.kind,
            member.executable,
            member.target,
        ) or (member.kind == "file" and first.size != member.size):
            raise unsafe(self.archive, member.name, TWICE)
        return first

    def _check_spelling(self, name: str) -> None:
        """Refuse a path (or a directory above it) that this file system takes for one seen
        under another spelling: one would be written over the other, or two directories
        merged, before git ever saw them."""
        assert self.spellings is not None
        found = self.spellings.add(name)
        if found is not None:
            raise UnsafeArchive(
                f"{self.archive.name}: members {show_name(found[0])} and {show_name(found[1])} "
                f"{FOLDED}; nothing was extracted",
                hint=f"{FOLDING_FIX}, or re-pack the archive without one of them",
            )


TWICE = "appears twice in the archive, the copies differing (in type, mode, target or bytes)"



def _check_hardlinks(archive: Path, members: list[Member]) -> dict[str, Member]:
    """The regular files by archive name; every hard link must name one of them."""
    files = {m.name: m for m in members if m.kind == "file"}
    for member in members:
        if member.kind == "hardlink" and member.target not in files:
            raise unsafe(
                archive,
                member.name,
                f"is a hard link to {show_name(member.target)}, "
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
                raise unsafe(archive, member.name, "is a symlink git refuses to store")
            why = _escapes(plan.dest, links)
            if why is not None:
                raise unsafe(archive, member.name, f"links outside the tree ({why})")


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
    place yet), and `check_name` refuses more than it does; resolving 80,000 names took
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
            raise unsafe(archive, plan.member.name, why) from None


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
    with read_members(archive) as raw:
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


class _Extraction:
    """One pass over the members into the staging directory `dirs.root_fd`, then the checks
    that need the whole archive, the links, and the move of the tree into `dest`."""

    def __init__(
        self, archive: Path, root: Path, dirs: Dirs, report: Progress, sink: Sink | None
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

    def take(self, raw: Raw) -> None:
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

    def _check_repeated(self, first: Member, raw: Raw) -> None:
        """Accept a member named twice only when the copies are the same (GNU tar writes the
        second over the first): a file's bytes are compared with the copy written (a file not
        written, a dropped name, cannot be compared and is refused); links were compared by
        target. Differing copies would make the tree depend on the extractor."""
        if first.kind != "file":
            return
        if first.name in self.unwritten:
            raise unsafe(self.archive, first.name, "appears twice in the archive")
        parent, leaf = split_name(first.name)
        fd = os.open(leaf, OLD_FILE, dir_fd=self.dirs.fd(parent, first.name))
        with os.fdopen(fd, "rb") as written, _reading(self.archive), raw.open() as stream:
            while block := stream.read(CHUNK):
                if written.read(len(block)) != block:
                    raise unsafe(self.archive, first.name, TWICE)
            if written.read(1):
                raise unsafe(self.archive, first.name, TWICE)

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
        parent, leaf = split_name(name)
        out = os.open(leaf, NEW_FILE, 0o600, dir_fd=self.dirs.fd(parent, name))
        try:
            written = 0
            with _reading(self.archive), opener() as stream:
                while block := stream.read(CHUNK):
                    written += len(block)
                    if written > source.size:
                        raise unsafe(self.archive, source.name, "holds more bytes than declared")
                    write_fully(out, block)
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
            parent, leaf = split_name(member.name)
            os.symlink(member.target, leaf, dir_fd=self.dirs.fd(parent, member.name))
        elif member.kind == "hardlink":
            source = files[member.target]
            self._write_file(member.name, source, self._opener(source.name))

    def _opener(self, name: str) -> Opener:
        """How to read the bytes of regular file `name` again: from its copy written in the
        staging directory, or (a file that was not written) from the archive."""
        if name in self.unwritten:
            return self.unwritten[name]
        parent, leaf = split_name(name)

        def opener() -> IO[bytes]:
            return os.fdopen(os.open(leaf, OLD_FILE, dir_fd=self.dirs.fd(parent, name)), "rb")

        return opener

    def _move(self, prefix: str, dest_fd: int) -> None:
        """Rename the entries of staging directory `prefix` into `dest_fd`."""
        source = self.dirs.fd(prefix, prefix)
        staging = self.root.name
        for entry in os.listdir(source):
            if not prefix and is_git_dir_name(entry):
                continue  # a top-level .git of an archive without a top directory
            if entry == staging:
                raise unsafe(self.archive, entry, "has the name of patchctl's staging directory")
            os.rename(entry, entry, src_dir_fd=source, dst_dir_fd=dest_fd)


@contextmanager
def _reading(archive: Path) -> Iterator[None]:
    try:
        yield
    except PatchctlError:
        raise
    except READ_ERRORS as exc:
        raise corrupt(archive, exc) from None


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
    dest_fd = os.open(dest, NOFOLLOW_DIR)
    try:
        dirs = Dirs(archive, os.open(staging, NOFOLLOW_DIR))
        try:
            extraction = _Extraction(archive, staging, dirs, report, sink)
            report.start("extract", None)
            with read_members(archive) as stream:
                for raw in stream:
                    extraction.take(raw)
                return extraction.finish(dest, dest_fd, subdir)
        finally:
            dirs.close()
            os.close(dirs.root_fd)
    finally:
        os.close(dest_fd)
        shutil.rmtree(staging, ignore_errors=True)
