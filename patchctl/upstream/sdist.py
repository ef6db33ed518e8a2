"""The bytes of a patched sdist: its layout (taken from the original), its marked version, and
a reproducible tar.gz writer.

- Layout: the original sdist's top directory, member mtime, owner and tar format are kept;
  members are written in sorted path order, files 0644 or 0755 as git records them, symlinks
  as symlinks; the gzip header carries the same mtime and no file name. The same tree and
  original therefore always give the same bytes.
- Version: a patched sdist must not pass for the release it came from, so its version gets a
  PEP 440 local label, `<version>+patchctl.<12 hex of the patched tree>` (`.patchctl.<hex>`
  appended to an existing label). It is written wherever the build backend reads the version:
  PKG-INFO always, plus the static `[project] version`, or for a dynamic version the file of
  scikit-build-core's regex provider or hatch's `[tool.hatch.version] path`; setuptools-scm
  and hatch-vcs read PKG-INFO in an sdist. Any other dynamic version is refused (the wheel
  would carry the unpatched version and pip would reject it as inconsistent).
"""

from __future__ import annotations

import gzip
import io
import os
import re
import tarfile
import tomllib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchctl.allowlists import package_problem, shown
from patchctl.errors import SdistError, UnsafeArchive
from patchctl.gitlayer.git import TreeEntry
from patchctl.progress import Progress, or_null

PKG_INFO = "PKG-INFO"
LOCAL_PREFIX = "patchctl"
# PEP 440: a public version, optionally with a local label (canonical lowercase form).
PUBLIC = re.compile(r"[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?")
LOCAL = re.compile(r"[a-z0-9]+(\.[a-z0-9]+)*")
PKG_VERSION = re.compile(r"^Version: *(?P<value>[^\r\n]+?) *$", re.MULTILINE)
# scikit-build-core's and hatch's default version patterns (their documented defaults).
SKBUILD_REGEX = r'(?i)^(__version__|VERSION)(?: ?\: ?str)? *= *([\'"])v?(?P<value>.+?)\2'
HATCH_REGEX = r'(?i)^(__version__|VERSION) *= *([\'"])v?(?P<version>.+?)\2'
SKBUILD_REGEX_PROVIDER = "scikit_build_core.metadata.regex"
# zlib's default level: level 9 takes 5x the time for 1.6% less on llama-cpp-python's sdist.
GZIP_LEVEL = 6
PKG_INFO_BACKENDS = ("setuptools_scm", "setuptools-scm", "hatch-vcs", "hatch_vcs")


# ----------------------------------------------------------------------------- the original


@dataclass(frozen=True)
class Layout:
    """What the original sdist's tarball looks like: kept in the export."""

    top: str  # the single top directory, e.g. `llama_cpp_python-0.3.36`
    mtime: int  # the members' (most common) modification time
    uid: int
    gid: int
    uname: str
    gname: str
    pax: bool  # POSIX (pax) headers; GNU otherwise
    dirs: bool  # the original has directory members


def read_layout(archive: Path) -> Layout:
    """The layout of the original sdist (a .tar.gz, .tar.bz2 or .tar.xz with one top dir)."""
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
        with tarfile.open(archive, "r:*") as tar:
            assert tar.fileobj is not None
            tar.fileobj.seek(0)
            first = tar.fileobj.read(tarfile.BLOCKSIZE)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise SdistError(
            f"{archive.name} is not a readable tar archive: {exc}",
            hint="export --sdist needs an sdist (.tar.gz) as the upstream",
        ) from None
    tops = {m.name.split("/", 1)[0] for m in members}
    if len(tops) != 1 or not members:
        raise UnsafeArchive(
            f"{archive.name} has {len(tops)} top-level entries; an sdist has one directory",
            hint="export --sdist needs an sdist as the upstream",
        )

    def common(values: Sequence[Any]) -> Any:
        return Counter(values).most_common(1)[0][0]

    return Layout(
        top=tops.pop(),
        mtime=int(common([int(m.mtime) for m in members])),
        uid=common([m.uid for m in members]),
        gid=common([m.gid for m in members]),
        uname=common([m.uname for m in members]),
        gname=common([m.gname for m in members]),
        pax=first[257:265] == b"ustar\x0000",
        dirs=any(m.isdir() for m in members),
    )


# ----------------------------------------------------------------------------- the version


def marked_version(version: str, tree: str) -> str:
    """`version` with the local label `patchctl.<12 hex of tree>` (PEP 440)."""
    public, _, local = version.partition("+")
    if not PUBLIC.fullmatch(public) or (local and not LOCAL.fullmatch(local)):
        raise SdistError(
            f"the sdist's version {version!r} is not a canonical PEP 440 version",
            hint="export --sdist needs an sdist whose PKG-INFO version is canonical",
        )
    label = f"{LOCAL_PREFIX}.{tree[:12]}"
    return f"{public}+{local}.{label}" if local else f"{public}+{label}"


def pkg_info_field(pkg_info: bytes, name: str) -> str:
    """A header of a PKG-INFO file, e.g. `Version` (SdistError when it has none)."""
    head = pkg_info.decode("utf-8", "replace").split("\n\n", 1)[0]
    match = re.search(rf"^{name}: *(?P<value>[^\r\n]+?) *$", head, re.MULTILINE)
    if match is None:
        raise SdistError(f"PKG-INFO has no {name}: header", hint="is the upstream an sdist?")
    return match.group("value")


def sdist_filename(name: str, version: str) -> str:
    """`<normalised name>-<version>.tar.gz` (PEP 625), e.g. `llama_cpp_python-0.3.36.tar.gz`.

    `name` comes from the upstream's PKG-INFO: one that is not a PEP 508 name (an absolute
    path, `..`, a space) is refused, as it would put the tarball anywhere."""
    problem = package_problem(name)
    if problem is not None:
        raise SdistError(
            f"the sdist's PKG-INFO Name {shown(name)} {problem}; it names the exported file",
            hint="export --sdist needs an sdist whose PKG-INFO names the package",
        )
    return f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}.tar.gz"


@dataclass(frozen=True)
class VersionSource:
    """A file that holds the version and the pattern (group `value`) that finds it."""

    path: str
    pattern: str


def version_sources(pyproject: bytes | None) -> list[VersionSource]:
    """Where the build backend reads the version from, besides PKG-INFO (SdistError when a
    dynamic version comes from a source patchctl cannot mark)."""
    sources = [VersionSource(PKG_INFO, PKG_VERSION.pattern)]
    if pyproject is None:
        return sources
    try:
        data = tomllib.loads(pyproject.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SdistError(f"pyproject.toml does not parse: {exc}") from None
    project = data.get("project", {})
    if "version" in project:
        quoted = re.escape(str(project["version"]))
        # `version = "..."` inside the [project] table (before the next table header)
        pattern = (
            rf"(?ms)^\[project\][ \t]*$(?:(?!^\[).)*?^version *= *([\"'])(?P<value>{quoted})\1"
        )
        return [*sources, VersionSource("pyproject.toml", pattern)]
    if "version" not in project.get("dynamic", []):
        return sources
    return [*sources, *_dynamic_source(data)]


def _dynamic_source(data: dict[str, Any]) -> list[VersionSource]:
    tool = data.get("tool", {})
    skbuild = tool.get("scikit-build", {}).get("metadata", {}).get("version", {})
    if skbuild.get("provider") == SKBUILD_REGEX_PROVIDER and "input" in skbuild:
        if skbuild.get("result", "{value}") != "{value}" or skbuild.get("remove"):
            raise SdistError("scikit-build-core's version `result`/`remove` are not supported")
        return [VersionSource(str(skbuild["input"]), str(skbuild.get("regex", SKBUILD_REGEX)))]
    hatch = tool.get("hatch", {}).get("version", {})
    if "path" in hatch:
        pattern = str(hatch.get("pattern", HATCH_REGEX)).replace("?P<version>", "?P<value>")
        return [VersionSource(str(hatch["path"]), pattern)]
    requires = " ".join(map(str, data.get("build-system", {}).get("requires", [])))
    if any(name in requires for name in PKG_INFO_BACKENDS):
        return []  # these read PKG-INFO when building from an sdist
    raise SdistError(
        "pyproject.toml declares a dynamic version whose source patchctl cannot mark",
        hint="supported: static [project] version, scikit-build-core's regex provider, "
        "hatch's version path, setuptools-scm/hatch-vcs",
    )


def mark_version(data: bytes, source: VersionSource, old: str, new: str) -> bytes:
    """`data` (the bytes of `source.path`) with version `old` replaced by `new`: exactly one
    match of the source's pattern, replaced only inside its `value` group (SdistError when
    the file does not hold `old` exactly once)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SdistError(f"version source {source.path} is not UTF-8") from None
    found = list(re.finditer(source.pattern, text, re.MULTILINE))
    if len(found) != 1 or found[0].group("value") != old:
        values = [m.group("value") for m in found]
        raise SdistError(
            f"{source.path}: expected version {old!r} once, found {values or 'none'}",
            hint="the sdist's version sources disagree; it cannot be marked as patched",
        )
    start, end = found[0].span("value")
    return (text[:start] + new + text[end:]).encode("utf-8")


# ----------------------------------------------------------------------------- the tarball


def _info(layout: Layout, name: str, kind: bytes, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(f"{layout.top}/{name}" if name else layout.top)
    info.type = kind
    info.mode = mode
    info.mtime = layout.mtime
    info.uid, info.gid, info.uname, info.gname = layout.uid, layout.gid, layout.uname, layout.gname
    return info


def _directories(names: Sequence[str]) -> list[str]:
    dirs = {"/".join(n.split("/")[:i]) for n in names for i in range(1, n.count("/") + 1)}
    return sorted(dirs)


def sorted_entries(entries: Sequence[TreeEntry]) -> list[TreeEntry]:
    """The tarball's member order: by path."""
    return sorted(entries, key=lambda e: e.path)


def write_sdist(
    target: Path,
    layout: Layout,
    files: Iterable[tuple[TreeEntry, bytes]],
    names: Sequence[str],
    progress: Progress | None = None,
) -> None:
    """Write `files` (each entry with its bytes, in `sorted_entries` order; a symlink's bytes
    are its target) as a tar.gz at `target`; `names` are all their paths, for the directory
    members of an original that has them."""
    prog = or_null(progress)
    prog.start("export", len(names))
    fmt = tarfile.PAX_FORMAT if layout.pax else tarfile.GNU_FORMAT
    with (
        target.open("wb") as raw,
        gzip.GzipFile("", "wb", GZIP_LEVEL, raw, mtime=layout.mtime) as gz,
        tarfile.open(fileobj=gz, mode="w", format=fmt, encoding="utf-8") as tar,
    ):
        if layout.dirs:
            tar.addfile(_info(layout, "", tarfile.DIRTYPE, 0o755))
            for name in _directories(names):
                tar.addfile(_info(layout, name, tarfile.DIRTYPE, 0o755))
        for entry, data in files:
            name = os.fsdecode(entry.path)
            if entry.mode == "120000":
                info = _info(layout, name, tarfile.SYMTYPE, 0o777)
                info.linkname = os.fsdecode(data)
                tar.addfile(info)
            else:
                mode = 0o755 if entry.mode == "100755" else 0o644
                info = _info(layout, name, tarfile.REGTYPE, mode)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            prog.advance("export")
        raw.flush()
        os.fsync(raw.fileno())
    prog.done("export")
