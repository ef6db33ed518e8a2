"""Safe extraction of upstream archives (.tar.* and .zip).

Every member is checked before anything is written: a member with `..`, an absolute path, a
link that escapes the tree, a device or a fifo raises UnsafeArchive and the destination is left
untouched. Members are written by this module (not `extractall`), with git's view of modes:
regular files 0644 or 0755, symlinks as symlinks, hard links as copies.
"""

from __future__ import annotations

import os
import posixpath
import stat
import tarfile
import zipfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from patchctl.errors import NotFound, PatchctlError, UnsafeArchive
from patchctl.progress import Progress, or_null

TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar.zst")
# Components dropped on extraction: a vendored `.git` (a gitlink file in the sdist) would make
# git treat the tree as a submodule.
DROPPED_NAMES = frozenset({".git"})


@dataclass(frozen=True)
class Member:
    """One archive entry, normalised: `name` relative to the archive's top."""

    name: str
    kind: str  # "file" | "dir" | "symlink" | "hardlink"
    executable: bool = False
    target: str = ""  # link target (symlink: as stored; hardlink: archive path)


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
        f"{archive.name}: member {name!r} {why}; nothing was extracted",
        hint="use a trusted archive (or re-pack it without that member)",
    )


def _check_name(archive: Path, name: str) -> str:
    """The member path without leading './', or UnsafeArchive."""
    if name.startswith("/") or posixpath.isabs(name) or (len(name) > 1 and name[1] == ":"):
        raise _unsafe(archive, name, "has an absolute path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts or ("\\" in name and ".." in name.split("\\")):
        raise _unsafe(archive, name, "contains '..'")
    return "/".join(parts)


def _check_link(archive: Path, member: Member) -> None:
    if posixpath.isabs(member.target):
        raise _unsafe(archive, member.name, f"links to absolute path {member.target!r}")
    base = posixpath.dirname(member.name) if member.kind == "symlink" else ""
    resolved = posixpath.normpath(posixpath.join(base, member.target))
    if resolved == ".." or resolved.startswith("../") or member.target == "":
        raise _unsafe(archive, member.name, f"links outside the tree ({member.target!r})")


def _tar_members(archive: Path, tar: tarfile.TarFile) -> Iterator[tuple[Member, tarfile.TarInfo]]:
    for info in tar.getmembers():
        name = _check_name(archive, info.name)
        if info.isreg():
            member = Member(name, "file", bool(info.mode & 0o111))
        elif info.isdir():
            member = Member(name, "dir")
        elif info.issym():
            member = Member(name, "symlink", target=info.linkname)
        elif info.islnk():
            member = Member(name, "hardlink", target=_check_name(archive, info.linkname))
        else:
            raise _unsafe(archive, info.name, "is a device, fifo or other special file")
        if member.kind in ("symlink", "hardlink"):
            _check_link(archive, member)
        yield member, info


def _zip_members(archive: Path, zf: zipfile.ZipFile) -> Iterator[tuple[Member, zipfile.ZipInfo]]:
    for info in zf.infolist():
        name = _check_name(archive, info.filename)
        mode = info.external_attr >> 16
        if info.is_dir():
            member = Member(name, "dir")
        elif stat.S_ISLNK(mode):
            target = zf.read(info).decode("utf-8", "surrogateescape")
            member = Member(name, "symlink", target=target)
            _check_link(archive, member)
        elif mode and not stat.S_ISREG(mode):
            raise _unsafe(archive, info.filename, "is a device, fifo or other special file")
        else:
            member = Member(name, "file", bool(mode & 0o111))
        yield member, info


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
    return any(part in DROPPED_NAMES for part in name.split("/"))


@dataclass(frozen=True)
class _Plan:
    """A member to write: its destination name and a reader for its bytes."""

    member: Member
    dest: str
    read: Callable[[], bytes]


@contextmanager
def _open_plans(archive: Path, subdir: str | None) -> Iterator[tuple[list[_Plan], list[str]]]:
    """Check every member and yield what to write; the archive stays open meanwhile."""
    if archive.name.lower().endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            raw = [(m, partial(zf.read, i)) for m, i in list(_zip_members(archive, zf))]
            yield _select(archive, raw, subdir)
        return
    try:
        tar = tarfile.open(archive, "r:*")  # noqa: SIM115 (closed by the with below)
    except tarfile.TarError as exc:
        raise UnsafeArchive(f"{archive.name}: not a readable archive ({exc})") from None
    with tar:
        pairs = list(_tar_members(archive, tar))
        yield _select(archive, [(m, partial(_tar_read, tar, i)) for m, i in pairs], subdir)


def _tar_read(tar: tarfile.TarFile, info: tarfile.TarInfo) -> bytes:
    stream = tar.extractfile(info)
    if stream is None:
        raise PatchctlError(f"cannot read {info.name!r} from the archive")
    with stream:
        return stream.read()


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
    """`relative_subdir` for an archive file (reads its member names only)."""
    with _open_plans(archive, None) as (plans, _dropped):
        names = [p.member.name for p in plans]  # as stored: the top directory included
    return relative_subdir(names, subdir)


def _select(
    archive: Path, raw: Sequence[tuple[Member, Callable[[], bytes]]], subdir: str | None
) -> tuple[list[_Plan], list[str]]:
    names = [m.name for m, _ in raw]
    top = _strip_top(names)
    prefix = "/".join(p for p in (top, relative_subdir(names, subdir)) if p)
    plans: list[_Plan] = []
    dropped: list[str] = []
    for member, read in raw:
        dest = _relocate(member.name, prefix)
        if dest is None or dest == "":
            continue
        if _is_dropped(dest):
            dropped.append(dest)
            continue
        plans.append(_Plan(member, dest, read))
    if subdir and not plans:
        stripped = f" (its single top directory {top + '/'!r} is stripped first)" if top else ""
        raise NotFound(
            f"{archive.name}: no member under {subdir!r}{stripped}",
            hint="upstream.subdir is the path inside the archive's top directory, "
            "e.g. vendor/llama.cpp",
        )
    return plans, dropped


def _write(root: Path, plan: _Plan, by_name: dict[str, _Plan]) -> None:
    target = root / plan.dest
    member = plan.member
    if member.kind == "dir":
        target.mkdir(parents=True, exist_ok=True)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    if member.kind == "symlink":
        os.symlink(member.target, target)
        return
    source = plan
    if member.kind == "hardlink":
        linked = by_name.get(member.target)
        if linked is None:
            raise PatchctlError(f"hard link {member.name!r} points to a missing member")
        source = linked
    target.write_bytes(source.read())
    target.chmod(0o755 if source.member.executable else 0o644)


def extract_archive(
    archive: Path,
    dest: Path,
    *,
    subdir: str | None = None,
    progress: Progress | None = None,
) -> ExtractResult:
    """Check every member, then extract (the part under `subdir` of) `archive` into `dest`.

    A single top-level directory (as in sdists and release tarballs) is stripped first.
    `dest` must be empty or missing; on UnsafeArchive nothing is written.
    """
    if not archive.is_file():
        raise NotFound(f"archive {archive} does not exist")
    report = or_null(progress)
    with _open_plans(archive, subdir) as (plans, dropped):
        by_name = {p.member.name: p for p in plans if p.member.kind == "file"}
        report.start("extract", len(plans))
        dest.mkdir(parents=True, exist_ok=True)
        for plan in plans:
            _write(dest, plan, by_name)
            report.advance("extract")
    report.done("extract")
    return ExtractResult(sum(p.member.kind != "dir" for p in plans), tuple(dropped))
