"""The bytes of a pinned upstream, through a content-addressed download store.

Kinds (series.yaml `upstream.kind`):
- `pypi-sdist`: the sdist of package==version, found through the PyPI JSON API (pypi.py),
  sha256-checked;
- `git`: a local path or URL and a full 40-hex commit, fetched into a cache bare repository
  (the user's clone is only read, never written);
- `archive`: a local .tar.* or .zip file, or one downloaded over https, with its sha256.

Downloads are stored as `<cache>/sha256/<hex>/<file name>` and reused offline. Turning them
into a tree is materialize.py's.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

from patchctl.allowlists import git_url_problem, is_archive, is_remote_url, shown
from patchctl.cache import cache_dir
from patchctl.errors import (
    ChecksumMismatch,
    ConfigError,
    GitFailed,
    NotFound,
)
from patchctl.fsio import sha256_file, write_atomic_blocks
from patchctl.gitlayer.git import Git
from patchctl.progress import Progress, or_null
from patchctl.series.model import Series, Upstream
from patchctl.upstream.pypi import CHUNK, download, sdist_releases


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
        actual = download(url, tmp, or_null(progress))
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
        actual = download(url, tmp, or_null(progress))
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

    The url passed allowlists.git_url_problem on load; checked again here because it is about to
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
