"""`patchctl export --sdist`: the series' patched tree as an sdist that `pip install` builds.

The tree is not read from the clean room's work tree: it is computed in a scratch repository
(objects borrowed from the clean room) by applying the whole stack strictly onto the pinned
upstream, and every patch's result must be the tree series.yaml records for it (the trees
`patchctl verify` checks). So the tarball holds exactly the verified series, whatever state
the clean room is in. Everything is checked before the first write (the series, the upstream
sdist, the patched tree, the version sources, the output path); the tarball is written to a
temporary file beside the target and renamed over it. Layout and version: sdist.py.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from patchctl.errors import (
    ConfigError,
    DirtyTree,
    NotFound,
    PatchctlError,
    SdistError,
    VerifyFailed,
)
from patchctl.fsio import process_alive, sha256_file
from patchctl.gitlayer.git import Git, TreeEntry
from patchctl.gitlayer.index import temp_index
from patchctl.gitlayer.objects import scratch_repo
from patchctl.progress import Progress, or_null
from patchctl.room.cleanroom import open_cleanroom
from patchctl.series.gitapply import apply_to_index, conflict, drift_error
from patchctl.series.model import Series, load_series, read_patch_file
from patchctl.series.project import project_root
from patchctl.series.stack import Stack, check_base_tree, load_stack
from patchctl.upstream.sdist import (
    PKG_INFO,
    Layout,
    mark_version,
    marked_version,
    pkg_info_field,
    read_layout,
    sdist_filename,
    sorted_entries,
    version_sources,
    write_sdist,
)
from patchctl.upstream.sources import fetch_sdist, local_archive

DIST_DIR = "dist"
SDIST_KINDS = ("pypi-sdist", "archive")


@dataclass(frozen=True)
class SdistExport:
    """What `patchctl export --sdist` wrote."""

    path: Path
    sha256: str
    size: int
    name: str  # the distribution name, from PKG-INFO
    version: str  # the marked version, e.g. 0.3.36+patchctl.34ade154293a
    upstream_version: str
    tree: str  # the patched tree (before the version is marked)
    files: int
    top: str  # the top directory inside the tarball

    def to_json(self) -> dict[str, object]:
        """Plain data for --json."""
        return {
            "ok": True,
            "path": str(self.path),
            "sha256": self.sha256,
            "size": self.size,
            "name": self.name,
            "version": self.version,
            "upstream_version": self.upstream_version,
            "tree": self.tree,
            "files": self.files,
            "top": self.top,
        }


def check_exportable(series: Series) -> None:
    """ConfigError unless the series' upstream is a whole sdist (an archive, no subdir)."""
    up = series.upstream
    if up.kind not in SDIST_KINDS:
        raise ConfigError(
            f"export --sdist needs an sdist upstream, not kind {up.kind}",
            path=series.path,
            key="upstream.kind",
            hint="use a series whose upstream is the package's sdist (pypi-sdist or archive)",
        )
    if up.subdir is not None:
        raise ConfigError(
            f"export --sdist needs the whole sdist, but this series pins only {up.subdir}",
            path=series.path,
            key="upstream.subdir",
            hint="export a series of the whole package that extends this one "
            "(e.g. patches/llama-cpp-python extends patches/llamafile)",
        )


def patched_tree(stack: Stack, git: Git, start: str) -> str:
    """The stack applied strictly onto `start`; each result must be the recorded tree."""
    check_base_tree(stack, git, start)
    tree = start
    with temp_index(git) as index:
        index.read_tree(start)
        for entry in stack.entries:
            data = read_patch_file(entry.file)
            outcome = apply_to_index(index, data, entry.root)
            if not outcome.ok:
                raise conflict(entry.id, data, outcome.stderr, entry.root, hint="nothing written")
            if outcome.drift():
                raise drift_error(entry.patch, outcome.drift())
            tree = index.write_tree()
            if (
                entry.patch.post_tree is None
                or entry.local_tree(git, tree) != entry.patch.post_tree
            ):
                raise VerifyFailed(
                    f"patch {entry.id} gives a tree other than its recorded post_tree "
                    f"({entry.patch.post_tree or 'none recorded'}); nothing was written",
                    hint=f"run `patchctl verify --all --series {stack.series.dir}` and fix it",
                )
    return tree


def _blob(git: Git, tree: str, path: str) -> bytes | None:
    oid = git.maybe_rev(f"{tree}:{path}")
    return None if oid is None else git.cat_file("blob", oid)


@dataclass(frozen=True)
class _Plan:
    """Everything the export writes, decided before anything is written (private)."""

    tree: str
    entries: list[TreeEntry]
    name: str
    old: str
    new: str
    edits: dict[str, bytes]  # version source path -> its marked bytes


def _plan(git: Git, tree: str) -> _Plan:
    entries = git.ls_tree(tree)
    links = [os.fsdecode(e.path) for e in entries if e.kind != "blob"]
    if links:
        raise SdistError(f"the patched tree holds submodules ({', '.join(links[:3])})")
    pkg_info = _blob(git, tree, PKG_INFO)
    if pkg_info is None:
        raise SdistError("the upstream has no PKG-INFO", hint="is the upstream an sdist?")
    old = pkg_info_field(pkg_info, "Version")
    new = marked_version(old, tree)
    edits: dict[str, bytes] = {}
    for source in version_sources(_blob(git, tree, "pyproject.toml")):
        data = _blob(git, tree, source.path)
        if data is None:
            raise SdistError(f"version source {source.path} is not in the sdist")
        edits[source.path] = mark_version(data, source, old, new)
    return _Plan(tree, entries, pkg_info_field(pkg_info, "Name"), old, new, edits)


def target_path(
    series: Series,
    output: Path | None,
    filename: str,
    force: bool = False,
    output_is_dir: bool = False,
) -> Path:
    """Where the tarball goes: `output` (a file ending in .tar.gz, or a directory to put it in:
    an existing one, or one named with a trailing slash, `output_is_dir`, made if its parent
    exists), else `<project>/dist/` (patchctl's own folder: an earlier export there is
    replaced). NotFound when the parent directory is missing, PatchctlError when a directory's
    place holds something else, a file name pip cannot install or an unwritable directory,
    DirtyTree (exit 8) when `output` names a file that exists, unless `force`."""
    if output is None:
        return _in_folder(project_root(series.dir) / DIST_DIR, filename, "the default folder")
    if output_is_dir or output.is_dir():
        return _in_folder(output, filename, "--output")
    if not output.name.endswith(".tar.gz"):
        raise PatchctlError(
            f"--output {output}: pip installs an sdist only from a file named *.tar.gz",
            hint=f"name a file ending in .tar.gz, or a directory with a trailing slash ({output}/)",
        )
    target = output
    if not target.parent.is_dir():
        raise NotFound(f"directory {target.parent} does not exist", hint="create it first")
    if target.is_symlink() or (target.exists() and not target.is_file()):
        raise PatchctlError(
            f"{target} exists and is not a regular file", hint="choose another --output"
        )
    if target.exists() and not force:
        raise DirtyTree(
            f"{target} already exists; refusing to overwrite it",
            hint="choose another --output, or add --force to replace it",
        )
    return _writable(target)


def _in_folder(folder: Path, filename: str, what: str) -> Path:
    """`folder/filename`, the folder made when missing (its parent must exist)."""
    if (folder.is_symlink() or folder.exists()) and not folder.is_dir():
        raise PatchctlError(
            f"{folder} ({what}) exists and is not a directory",
            hint=f"remove or rename {folder}, or give --output another directory",
        )
    if not folder.parent.is_dir():
        raise NotFound(f"directory {folder.parent} does not exist", hint="create it first")
    folder.mkdir(exist_ok=True)
    target = folder / filename
    if target.is_symlink() or (target.exists() and not target.is_file()):
        raise PatchctlError(f"{target} exists and is not a regular file", hint="remove it first")
    return _writable(target)


def _writable(target: Path) -> Path:
    if not os.access(target.parent, os.W_OK):
        raise PatchctlError(f"{target.parent} is not writable", hint="choose another --output")
    return target


BATCH_BYTES = 32 << 20  # blobs read per `cat-file --batch` (bounds the memory an export takes)


def _files(git: Git, plan: _Plan) -> Iterator[tuple[TreeEntry, bytes]]:
    """Each entry with its bytes (the marked ones for the version sources), in tarball order,
    read from git in batches of about BATCH_BYTES."""
    batch: list[TreeEntry] = []
    size = 0
    for entry in [*sorted_entries(plan.entries), None]:
        if batch and (entry is None or size + entry.size > BATCH_BYTES):
            for done, data in zip(batch, git.cat_blobs([e.oid for e in batch]), strict=True):
                yield done, plan.edits.get(os.fsdecode(done.path), data)
            batch, size = [], 0
        if entry is not None:
            batch.append(entry)
            size += entry.size


def _write(git: Git, plan: _Plan, layout: Layout, target: Path, progress: Progress) -> None:
    """The tarball, written beside `target` and renamed over it (the partial files of killed
    exports of the same name are removed first)."""
    names = [os.fsdecode(e.path) for e in plan.entries]
    sweep_partials(target)
    part = target.with_name(f"{PART_PREFIX.format(name=target.name)}{os.getpid()}")
    try:
        write_sdist(part, layout, _files(git, plan), names, progress)
        os.replace(part, target)
    finally:
        part.unlink(missing_ok=True)


PART_PREFIX = ".{name}.part"  # + the writer's pid


def sweep_partials(target: Path) -> list[Path]:
    """Remove `.NAME.part<pid>` beside `target` left by exports that were killed (their process
    is gone); a partial file of a running export is left alone."""
    prefix = PART_PREFIX.format(name=target.name)
    removed = []
    for path in target.parent.glob(glob.escape(prefix) + "*"):
        pid = path.name[len(prefix) :]
        stale = pid.isdigit() and not process_alive(int(pid))
        if stale and path.is_file() and not path.is_symlink():
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def _original(series: Series, progress: Progress | None) -> Path:
    """The upstream sdist file (from the cache; downloaded and checked when missing)."""
    if series.upstream.kind == "pypi-sdist":
        return fetch_sdist(series.upstream, progress)
    return local_archive(series)


def export_sdist(
    series_path: Path,
    output: Path | None = None,
    workdir: Path | None = None,
    progress: Progress | None = None,
    *,
    force: bool = False,
    output_is_dir: bool = False,
) -> SdistExport:
    """`patchctl export --sdist`: the patched sdist of the series (objects from its clean room).
    An existing file named by `output` is replaced only with `force`; `output_is_dir`: the
    user named `output` with a trailing slash, a directory (see target_path)."""
    series = load_series(series_path)
    stack = load_stack(series)
    check_exportable(series)
    room = open_cleanroom(series.dir, workdir)
    start = series.upstream.tree or room.base_tree()
    layout = read_layout(_original(series, progress))
    prog = or_null(progress)
    with scratch_repo([room.path]) as git:
        if not git.has_tree(start):
            raise NotFound(
                f"upstream tree {start} is not in {room.path}",
                hint=f"run `patchctl cleanroom apply --series {series.dir}`",
            )
        prog.start("apply", None)
        tree = patched_tree(stack, git, start)
        prog.done("apply")
        plan = _plan(git, tree)
        name = sdist_filename(plan.name, plan.new)
        target = target_path(series, output, name, force, output_is_dir)
        _write(git, plan, layout, target, prog)
    return SdistExport(
        path=target,
        sha256=sha256_file(target),
        size=target.stat().st_size,
        name=plan.name,
        version=plan.new,
        upstream_version=plan.old,
        tree=tree,
        files=len(plan.entries),
        top=layout.top,
    )
