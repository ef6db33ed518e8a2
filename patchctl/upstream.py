"""Materialize a pinned upstream into a directory, through a content-addressed cache.

Kinds (series.yaml `upstream.kind`):
- `pypi-sdist`: the sdist of package==version, found through the PyPI JSON API, sha256-checked;
- `git`: a local path or URL and a full 40-hex commit, fetched into a cache bare repository
  (the user's clone is only read, never written);
- `archive`: a local .tar.* or .zip file, or one downloaded over https, with its sha256.

Downloads are stored as `<cache>/sha256/<hex>/<file name>` and reused offline.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import urllib.request
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

from patchctl.archive import (
    FOLDED,
    FOLDING_FIX,
    Spellings,
    extract_archive,
    is_archive,
    name_folding,
    same_name,
)
from patchctl.cache import cache_dir
from patchctl.errors import (
    ChecksumMismatch,
    ConfigError,
    GitFailed,
    NotFound,
    PatchctlError,
    UnsafeArchive,
)
from patchctl.fsio import sha256_file, write_atomic_blocks
from patchctl.git import Git, IndexFeed, loose_missing, share_objects, unsound_objects
from patchctl.limits import ARCHIVE_BYTES, ARCHIVE_MEMBERS, DOWNLOAD_BYTES, INDEX_BYTES, human
from patchctl.progress import Progress, or_null
from patchctl.series import Series, Upstream
from patchctl.values import git_url_problem, is_remote_url, shown

PYPI_URL = "https://pypi.org"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
CHUNK = 1 << 20


def pypi_url() -> str:
    """The PyPI root (`$PATCHCTL_PYPI_URL` overrides it, e.g. a mirror or a file:// tree)."""
    return os.environ.get("PATCHCTL_PYPI_URL", PYPI_URL).rstrip("/")


def cached_path(sha256: str, filename: str, cache: Path | None = None) -> Path:
    """Where a file with this sha256 lives in the content-addressed store."""
    return (cache or cache_dir()) / "sha256" / sha256 / filename


def find_cached(sha256: str, cache: Path | None = None) -> Path | None:
    """A cached file with this sha256 whose bytes still match, or None."""
    folder = (cache or cache_dir()) / "sha256" / sha256
    if not folder.is_dir():
        return None
    for candidate in sorted(folder.iterdir()):
        if (
            candidate.is_file()
            and not candidate.name.startswith(".")
            and sha256_file(candidate) == sha256
        ):
            return candidate
    return None


def store(source: Path, sha256: str, filename: str, cache: Path | None = None) -> Path:
    """Copy `source` into the store if its sha256 is `sha256` (ChecksumMismatch otherwise).

    Streamed (an archive can be gigabytes) and hashed while copying: the file that lands in
    the store is the one that was checked.
    """
    target = cached_path(sha256, filename, cache)
    digest = hashlib.sha256()

    def blocks() -> Iterator[bytes]:
        with source.open("rb") as stream:
            for block in iter(lambda: stream.read(CHUNK), b""):
                digest.update(block)
                yield block

    def check() -> None:
        if digest.hexdigest() != sha256:
            raise ChecksumMismatch(f"{source} has sha256 {digest.hexdigest()}, expected {sha256}")

    try:
        write_atomic_blocks(target, blocks(), check)
    except ChecksumMismatch:
        with suppress(OSError):
            target.parent.rmdir()  # the folder of a hash nothing has: only if it is empty
        raise
    return target


# ----------------------------------------------------------------------------- pypi


@dataclass(frozen=True)
class Release:
    """One sdist file as the index describes it."""

    filename: str
    url: str
    sha256: str | None


def _open(url: str, accept: str = "application/json") -> Any:
    request = urllib.request.Request(url, headers={"User-Agent": "patchctl", "Accept": accept})
    try:
        return urllib.request.urlopen(request, timeout=60)
    except OSError as exc:
        raise PatchctlError(
            f"cannot download {url}: {exc}", hint="check the network, or seed the cache"
        ) from None


def _get_json(url: str, accept: str = "application/json") -> dict[str, Any]:
    with _open(url, accept) as response:
        raw = response.read(INDEX_BYTES + 1)
    if len(raw) > INDEX_BYTES:
        raise PatchctlError(f"{url} answered more than {human(INDEX_BYTES)}; not an index")
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise PatchctlError(
            f"{url} did not answer JSON ({str(exc)[:80]})", hint="check PATCHCTL_PYPI_URL"
        ) from None
    return data if isinstance(data, dict) else {}


def _sdist_name(package: str, version: str) -> str:
    """The normalised sdist file stem, e.g. `llama_cpp_python-0.3.36` (PEP 625)."""
    return f"{re.sub(r'[-_.]+', '_', package).lower()}-{version}"


def _is_sdist(filename: str, package: str, version: str) -> bool:
    stem = _sdist_name(package, version)
    name = filename.lower().replace("-", "_").replace(".", "_")
    expected = stem.replace("-", "_").replace(".", "_")
    return name in (expected + "_tar_gz", expected + "_zip")


def _from_json_api(package: str, version: str) -> list[Release]:
    """The sdists listed by PyPI's JSON API (`/pypi/<pkg>/<version>/json`)."""
    url = f"{pypi_url()}/pypi/{package}/{version}/json"
    entries = _get_json(url).get("urls", [])
    found = []
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("packagetype") == "sdist":
            found.append(_release(url, entry, "digests"))
    return [r for r in found if r is not None]


def _from_simple_api(package: str, version: str) -> list[Release]:
    """The sdists listed by the Simple API in JSON form (PEP 691), used when the JSON API
    is not served (some mirrors and proxies only serve /simple)."""
    url = f"{pypi_url()}/simple/{package}/"
    files = _get_json(url, SIMPLE_JSON).get("files", [])
    found = []
    for entry in files if isinstance(files, list) else []:
        if isinstance(entry, dict) and _is_sdist(str(entry.get("filename", "")), package, version):
            found.append(_release(url, entry, "hashes"))
    return [r for r in found if r is not None]


# What an index may name a file: it becomes a file name in the cache, so one plain name.
RELEASE_FILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,200}")


def _release(base: str, entry: dict[str, Any], digests: str) -> Release | None:
    """One index entry as a Release; None when it is malformed or names an unsafe file/URL.

    The index is a remote input: its file name must be a plain archive name (it becomes a
    path in the cache) and its URL http(s) (or file: under a file: index).
    """
    filename, link = entry.get("filename"), entry.get("url")
    hashes = entry.get(digests)
    sha = hashes.get("sha256") if isinstance(hashes, dict) else None
    if not isinstance(filename, str) or not isinstance(link, str):
        return None
    if not RELEASE_FILE.fullmatch(filename) or not is_archive(Path(filename)):
        return None
    target = urljoin(base, link)
    allowed = ("https", "http", "file") if base.startswith("file:") else ("https", "http")
    if urlsplit(target).scheme not in allowed:
        return None
    return Release(filename, target, sha if isinstance(sha, str) else None)


def sdist_releases(package: str, version: str) -> list[Release]:
    """The sdist files of package==version (JSON API, else the Simple API)."""
    try:
        found = _from_json_api(package, version)
    except PatchctlError:
        found = []
    if not found:
        found = _from_simple_api(package, version)
    if not found:
        raise NotFound(f"PyPI has no sdist for {package}=={version}", hint="check upstream.version")
    return found


def _download(url: str, dest: Path, progress: Progress) -> str:
    """Stream `url` into `dest`; return the sha256 of what was written."""
    digest = hashlib.sha256()
    limit = DOWNLOAD_BYTES.value()
    received = 0
    with _open(url) as response, dest.open("wb") as out:
        total = response.headers.get("Content-Length")
        progress.start("download", int(total) if total and total.isdigit() else None)
        for block in iter(lambda: response.read(CHUNK), b""):
            received += len(block)
            if received > limit:
                raise PatchctlError(
                    f"{url} is larger than {human(limit)}; nothing was kept",
                    hint=DOWNLOAD_BYTES.hint(),
                )
            digest.update(block)
            out.write(block)
            progress.advance("download", len(block))
    progress.done("download")
    return digest.hexdigest()


def fetch_sdist(upstream: Upstream, progress: Progress | None = None) -> Path:
    """The sdist file of the pin, from the cache or downloaded and verified."""
    assert upstream.sha256 and upstream.package and upstream.version  # validated on load
    cached = find_cached(upstream.sha256)
    if cached is not None:
        return cached
    releases = sdist_releases(upstream.package, upstream.version)
    release = next((r for r in releases if r.sha256 in (upstream.sha256, None)), None)
    if release is None:
        published = ", ".join(f"{r.filename} {r.sha256}" for r in releases)
        raise ChecksumMismatch(
            f"PyPI's sdist has sha256 {published}; series pins {upstream.sha256}",
            hint="the pin or the release changed: check upstream.sha256; nothing was downloaded",
        )
    return _download_verified(release.url, release.filename, upstream.sha256, progress)


def _download_verified(url: str, filename: str, sha256: str, progress: Progress | None) -> Path:
    target = cached_path(sha256, filename)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{filename}.part{os.getpid()}")
    try:
        actual = _download(url, tmp, or_null(progress))
        if actual != sha256:
            raise ChecksumMismatch(
                f"downloaded {filename} has sha256 {actual}, expected {sha256}",
                hint="the download is corrupt or the pin is wrong; nothing was kept",
            )
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


# ----------------------------------------------------------------------------- archive


def download_new(
    url: str, filename: str, progress: Progress | None = None, expected: str | None = None
) -> tuple[Path, str]:
    """Download `url` into the store without knowing its sha256 yet (`patchctl init`, rebase
    `--onto`): (cached path, sha256 computed while downloading). `expected`, when the index
    publishes one, must match (ChecksumMismatch, nothing kept)."""
    folder = cache_dir() / "sha256"
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{filename}.part{os.getpid()}"
    try:
        actual = _download(url, tmp, or_null(progress))
        if expected is not None and actual != expected:
            raise ChecksumMismatch(
                f"downloaded {filename} has sha256 {actual}, the index says {expected}",
                hint="the download is corrupt or the index is wrong; nothing was kept",
            )
        target = cached_path(actual, filename)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target, actual


def archive_name(url: str) -> str:
    """The file name an archive URL downloads to (its last path component)."""
    return url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1] or "archive"


def local_archive(series: Series, progress: Progress | None = None) -> Path:
    """The `archive` kind's file (a local path, or downloaded from its https url),
    sha256-checked and stored in the cache."""
    up = series.upstream
    assert up.sha256 and (up.path or up.url)  # validated on load
    cached = find_cached(up.sha256)
    if cached is not None:
        return cached
    if up.url is not None:
        return _download_verified(up.url, archive_name(up.url), up.sha256, progress)
    assert up.path
    source = (series.dir / up.path).resolve()
    if not source.is_file():
        raise NotFound(f"upstream archive {source} does not exist", hint="check upstream.path")
    if not is_archive(source):
        raise ConfigError(
            f"{source.name} is not a .tar.* or .zip archive",
            path=series.path,
            key="upstream.path",
            hint="use a .tar.gz/.tar.xz/.zip file",
        )
    try:
        return store(source, up.sha256, source.name)
    except ChecksumMismatch as exc:
        raise ChecksumMismatch(exc.message, hint="fix upstream.sha256 or the archive") from None


# ----------------------------------------------------------------------------- git


def git_url(series: Series) -> str:
    """The upstream url; a relative local path is taken relative to the series directory.

    The url passed values.git_url_problem on load; checked again here because it is about to
    reach a command line (a Series can also be built in code).
    """
    url = series.upstream.url or ""
    problem = git_url_problem(url)
    if problem is not None:
        raise ConfigError(
            f"{shown(url)} {problem}",
            path=series.path,
            key="upstream.url",
            hint="use an https/http/ssh/git/file URL, user@host:path or a path",
        )
    if is_remote_url(url):
        return url
    return str((series.dir / url).resolve())


def git_cache(url: str) -> Git:
    """The cache bare repository for `url` (created on first use)."""
    key = hashlib.sha256(url.encode("utf-8")).hexdigest()[:32]
    path = cache_dir() / "git" / f"{key}.git"
    if (path / "HEAD").is_file():
        return Git(path)
    return Git.init(path, bare=True)


def _fresh_cache(broken: Git) -> Git:
    """Replace a cache repository that lacks objects (it is patchctl's own; refetched)."""
    aside = broken.repo.with_name(f".{broken.repo.name}.broken-{os.getpid()}")
    broken.repo.rename(aside)
    shutil.rmtree(aside, ignore_errors=True)
    return Git.init(broken.repo, bare=True)


def fetch_git(series: Series, progress: Progress | None = None) -> Git:
    """A cache repository that contains the pinned commit (fetched by id if missing)."""
    commit = series.upstream.commit
    assert commit  # validated on load
    cache = git_cache(git_url(series))
    if cache.maybe_rev(f"{commit}^{{commit}}") is not None:
        if cache.has_complete_commit(commit):
            return cache
        cache = _fresh_cache(cache)  # an interrupted fetch left part of the commit's objects
    report = or_null(progress)
    report.start("fetch", None)
    try:
        cache.fetch(git_url(series), commit)
    except GitFailed as exc:
        raise NotFound(
            f"cannot fetch commit {commit} from {git_url(series)}: {exc.message}",
            hint="check upstream.url and upstream.commit (full 40-hex id)",
        ) from None
    report.done("fetch")
    return cache


# ----------------------------------------------------------------------------- materialize


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
        if unsound_objects(trees, objects):
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
    names (macOS, Windows: archive.name_folding), two paths it takes for one (`src/A.c`,
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
    kind = cache.text("cat-file", "-t", "--end-of-options", commit)
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
