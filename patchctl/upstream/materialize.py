"""Materialize a pinned upstream into a clean room's repository: the tree of the pin, staged
from the download (sources.py) or the tree cache, its names checked to fit the clean room's
file system, its size within limits and its recorded tree id.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from patchctl.allowlists import shown
from patchctl.cache import cache_dir
from patchctl.errors import (
    ChecksumMismatch,
    ConfigError,
    GitFailed,
    NotFound,
    UnsafeArchive,
)
from patchctl.gitlayer.git import Git
from patchctl.gitlayer.objects import loose_missing, share_objects, unsound_objects
from patchctl.gitlayer.pipes import IndexFeed
from patchctl.limits import ARCHIVE_BYTES, ARCHIVE_MEMBERS, human
from patchctl.progress import Progress, or_null
from patchctl.series.model import Series, Upstream
from patchctl.upstream.archive import extract_archive
from patchctl.upstream.casefold import FOLDED, FOLDING_FIX, Spellings, name_folding, same_name
from patchctl.upstream.sources import fetch_git, fetch_sdist, git_url, local_archive


@dataclass(frozen=True)
class Materialized:
    """The pristine upstream staged in a repository: its tree id and what was dropped."""

    tree: str
    dropped: tuple[str, ...] = ()


def materialize(series: Series, repo: Git, progress: Progress | None = None) -> Materialized:
    """Fill the (empty) work tree and index of `repo` with the pristine upstream.

    Checks the resulting tree id against `upstream.tree` when the series records one.
    """
    up = series.upstream
    if up.kind == "git":
        result = _materialize_git(series, repo, progress)
    else:
        result = _from_tree_cache(series, repo) or _materialize_archive(series, repo, progress)
    _check_tree(series, result.tree)
    return result


def _materialize_archive(series: Series, repo: Git, progress: Progress | None) -> Materialized:
    up = series.upstream
    if up.kind == "pypi-sdist":
        source = fetch_sdist(up, progress)
    else:
        source = local_archive(series, progress)
    # the index is fed as files are written (hashing overlaps reading the archive); when the
    # tree's final names were not those fed (a subdir, no single top directory), it is re-made
    feed = IndexFeed(repo)
    try:
        extracted = extract_archive(
            source, repo.repo, subdir=up.subdir, progress=progress, sink=feed
        )
    finally:
        feed.close()
    report = or_null(progress)
    report.start("stage", None)
    if extracted.sunk and feed.ok:
        repo.refresh_index()  # the stat data of the entries moved out of the staging directory
    else:
        repo.index_path().unlink(missing_ok=True)
        _stage_all(repo, source)
    result = Materialized(repo.write_tree(), extracted.dropped)
    report.done("stage")
    _save_to_tree_cache(up, repo, result)
    return result


def _stage_all(repo: Git, archive: Path) -> None:
    """`git add` the extracted tree; a path git refuses (a rule of its verify_path that
    extraction does not mirror) is the archive's fault: exit 7, naming the member."""
    try:
        repo.add_all()
    except GitFailed as exc:
        found = INVALID_PATH.search(exc.stderr)
        if found is None:
            raise
        name = found.group(1).decode("utf-8", "backslashreplace")
        raise UnsafeArchive(
            f"{archive.name}: member {shown(name, 120)} has a path git refuses to "
            "store; nothing was extracted",
            hint="use a trusted archive (or re-pack it without that member)",
        ) from None


INVALID_PATH = re.compile(rb"invalid path '(.*)'")


# Extracting and staging a large archive takes a while; the staged tree is kept in one cache
# repository, keyed by the archive's sha256 and subdir (so the key is content-addressed).
# Its objects are shared, not copied: the loose objects the new clean room just wrote are
# hard-linked into the cache, and a later clean room links the tree's objects back
# (git.share_objects) once each has been read and found to hash to its id. Packing them
# instead (push, fetch) costs a delta search and a recompression of every object: on a
# kernel-sized tree, longer than staging it.


def _trees_cache() -> Git:
    path = cache_dir() / "trees.git"
    return Git(path) if (path / "HEAD").is_file() else Git.init(path, bare=True)


def _tree_ref(up: Upstream) -> str:
    key = hashlib.sha256(f"{up.sha256}\0{up.subdir or ''}".encode()).hexdigest()[:40]
    return f"refs/patchctl/trees/{key}"


def _save_to_tree_cache(up: Upstream, repo: Git, result: Materialized) -> None:
    dropped = "".join(f"dropped: {name}\n" for name in result.dropped)
    commit = repo.commit_tree(result.tree, f"patchctl tree cache\n\n{dropped}".encode())
    try:
        trees = _trees_cache()
        # every loose object of the new clean room (the upstream's only), mending any
        # damaged copy the cache held
        share_objects(repo, trees, replace=True)
        trees.update_ref(_tree_ref(up), commit, "patchctl tree cache")
    except (GitFailed, OSError):
        pass  # the tree cache is an optimisation: a failure to fill it costs only time


# Under the tree cache: per cached commit, the identities of its object files found sound.
SOUND = "patchctl-sound"


def _cached_commit(up: Upstream) -> str | None:
    trees_path = cache_dir() / "trees.git"
    if up.sha256 is None or not (trees_path / "HEAD").is_file():
        return None
    return Git(trees_path).maybe_rev(_tree_ref(up))


def in_tree_cache(up: Upstream) -> bool:
    """True when an archive or sdist upstream (sha256 and subdir) was materialized before: its
    tree is cached, and its subdir is known to name a directory of the archive."""
    return up.kind != "git" and _cached_commit(up) is not None


def tree_from_cache(up: Upstream, repo: Git) -> Materialized | None:
    """The upstream's cached tree given to `repo` (objects only, linked after each was read
    and found sound: the index and the work tree are not touched); None on a miss, an
    unreadable cache or a damaged one (nothing is then taken from it)."""
    commit = _cached_commit(up) if up.kind != "git" else None
    if commit is None:
        return None
    trees_path = cache_dir() / "trees.git"
    try:
        trees = Git(trees_path)
        objects = [commit, *trees.tree_objects(trees.tree_of(commit))]
        objects = loose_missing(repo, objects)  # what `repo` holds already is not taken
        # Files found sound before and not written to since are not read again (objects.py).
        if unsound_objects(trees, objects, known=trees_path / SOUND / commit):
            return None  # a damaged cache: extract again, nothing taken from it
        packed = share_objects(trees, repo, objects)
        if packed:
            repo.fetch(str(trees_path), commit)  # a cache packed by hand (git gc)
        tree = repo.tree_of(commit)
        message = repo.cat_file("commit", commit).decode("utf-8", "replace")
    except (GitFailed, OSError):
        return None
    dropped = tuple(line[9:] for line in message.splitlines() if line.startswith("dropped: "))
    return Materialized(tree, dropped)


def _from_tree_cache(series: Series, repo: Git) -> Materialized | None:
    """The staged upstream from the tree cache (None on a miss or an unreadable cache)."""
    result = tree_from_cache(series.upstream, repo)
    if result is not None:
        check_names_fit(series, repo, result.tree)  # cached from a clean room elsewhere
        repo.read_tree(result.tree, reset=True, update=True)
    return result


def _materialize_git(series: Series, repo: Git, progress: Progress | None) -> Materialized:
    cache = fetch_git(series, progress)
    commit = series.upstream.commit
    assert commit  # validated on load
    _check_commit(series, cache, commit)
    repo.fetch(str(cache.repo), f"{commit}")
    tree = repo.tree_of(commit)
    subdir = series.upstream.subdir
    if subdir:
        found = repo.subtree(tree, subdir)
        if found is None:
            raise NotFound(
                f"upstream.subdir: no directory {subdir!r} in {series.upstream.describe()}",
                hint="upstream.subdir names a directory of the commit, e.g. vendor/llama.cpp",
            )
        tree = found
    _check_tree_size(series, repo, tree)
    check_names_fit(series, repo, tree)
    repo.read_tree(tree, reset=True, update=True)
    return Materialized(tree)


def check_names_fit(series: Series, repo: Git, tree: str) -> None:
    """Before `tree` is checked out into `repo`'s work tree: on a file system that folds
    names (macOS, Windows: casefold.name_folding), two paths it takes for one (`src/A.c`,
    `src/a.c`) would be written one over the other; ConfigError (exit 5) naming both."""
    fd = os.open(repo.repo, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _check_spellings(series, repo, tree, fd)
    finally:
        os.close(fd)


def _check_spellings(series: Series, repo: Git, tree: str, fd: int) -> None:
    fold = name_folding(fd)
    if fold is None:
        return  # the file system tells every name of the tree apart
    spellings = Spellings(fold, partial(same_name, fd))
    for entry in repo.ls_tree(tree):
        found = spellings.add(os.fsdecode(entry.path))
        if found is not None:
            raise ConfigError(
                f"the tree of {series.upstream.describe()} holds {found[0]!r} and "
                f"{found[1]!r}, which {FOLDED}; nothing was checked out",
                path=series.path,
                key="upstream",
                hint=f"{FOLDING_FIX}, or pin an upstream without one of them",
            )


def _check_tree_size(series: Series, repo: Git, tree: str) -> None:
    """A git upstream's tree within the archive limits (files, bytes), checked before it is
    checked out: a commit of a few objects can repeat one subtree into billions of files."""
    max_files, max_bytes = ARCHIVE_MEMBERS.value(), ARCHIVE_BYTES.value()
    files, size = repo.tree_size(tree, max_files, max_bytes)
    over = (
        (f"more than {max_files} files", ARCHIVE_MEMBERS)
        if files > max_files
        else (f"more than {human(max_bytes)}", ARCHIVE_BYTES)
        if size > max_bytes
        else None
    )
    if over is not None:
        what, limit = over
        raise ConfigError(
            f"the tree of {series.upstream.describe()} holds {what} (limit {limit.env}); "
            "nothing was checked out",
            path=series.path,
            key="upstream.commit",
            hint=limit.hint(),
        )


def _check_commit(series: Series, cache: Git, commit: str) -> None:
    """The pinned id names a commit (or an annotated tag of one), not a tree or a blob."""
    if cache.maybe_rev(f"{commit}^{{commit}}") is not None:
        return
    kind = cache.object_type(commit)
    raise ConfigError(
        f"{commit} is a {shown(kind)[1:-1]}, not a commit",
        path=series.path,
        key="upstream.commit",
        hint=f"pin the commit: `git rev-parse <ref>^{{commit}}` in {git_url(series)}",
    )


def _check_tree(series: Series, tree: str) -> None:
    pinned = series.upstream.tree
    if pinned is not None and pinned != tree:
        raise ChecksumMismatch(
            f"upstream tree is {tree}, series pins {pinned} ({series.upstream.describe()})",
            hint="the upstream content differs from the pin; check upstream.subdir/tree",
        )
