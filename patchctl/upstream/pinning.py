"""From what a user types to a pinned upstream: `patchctl init UPSTREAM` and `patchctl rebase
--onto UPSTREAM` name an upstream the way a person would, and get back an `Upstream` with
every checksum computed by patchctl (nobody is asked for a sha256 or a tree id).

The forms (`parse_upstream`):
- `NAME==VERSION`: the PyPI sdist of that release (`pypi-sdist`);
- an archive: a local `.tar.*`/`.zip` file, or an `https://` URL ending in one (`archive`);
- a git repository (a path or URL) with `--commit COMMIT` (a full id, or a branch or tag the
  repository has; the full id is recorded) (`git`);
- for a rebase of a `git` series: a bare commit or ref of the same repository.
`subdir` (`--subdir`) is the directory inside the sdist/archive/repository that holds the
tree the patches apply to; for an sdist or archive it is relative to the single top
directory every sdist has (`vendor/llama.cpp` in `llama_cpp_python-0.3.36/`), which is
stripped. A rebase onto another release of the same package keeps the series' subdir.

`pin` then downloads or reads the upstream into the cache and fills in `sha256` (and the
full commit); the tree id comes from materializing it (init: the new clean room; rebase: the
new base).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from patchctl.allowlists import HEX40, is_archive
from patchctl.errors import ConfigError, GitFailed, NotFound
from patchctl.fsio import sha256_file
from patchctl.progress import Progress, or_null
from patchctl.series.model import Upstream, check_typed_upstream
from patchctl.upstream.archive import archive_subdir
from patchctl.upstream.materialize import in_tree_cache
from patchctl.upstream.pypi import sdist_releases
from patchctl.upstream.sources import archive_name, download_new, find_cached, git_cache, store

# PEP 508 name == PEP 440-ish version (letters, digits and . _ - + !).
SDIST_SPEC = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9][A-Za-z0-9._+!-]*)")
# A branch, tag or commit name as `--commit` takes it (never an option, never a refspec).
REF = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/+-]*")


@dataclass(frozen=True)
class Where:
    """Where relative paths in a series are resolved from, and where the user typed them."""

    series_dir: Path  # upstream.path / a local upstream.url are relative to it
    cwd: Path  # what the user typed is relative to it


def parse_upstream(
    text: str,
    where: Where,
    *,
    commit: str | None = None,
    subdir: str | None = None,
    current: Upstream | None = None,
) -> Upstream:
    """The upstream `text` names (not pinned yet: no sha256, no tree). `current` is the
    series' pin when rebasing: its subdir is kept for another release of the same package,
    and a `git` series takes a bare commit or ref of its own repository. Its values pass
    series.yaml's allow-list (a URL's scheme, host and remote helpers...) or it is refused
    (exit 5) before anything is fetched."""
    upstream = _parsed(text, where, commit=commit, subdir=subdir, current=current)
    check_typed_upstream(upstream)
    return upstream


def _parsed(
    text: str,
    where: Where,
    *,
    commit: str | None,
    subdir: str | None,
    current: Upstream | None,
) -> Upstream:
    sub = _subdir(subdir)
    if m := SDIST_SPEC.fullmatch(text):
        package, version = m.group(1), m.group(2)
        if sub is None and current is not None and current.kind == "pypi-sdist":
            sub = current.subdir if _same_package(current.package, package) else None
        return Upstream(kind="pypi-sdist", package=package, version=version, subdir=sub)
    if commit is None and current is not None and current.kind == "git" and _is_ref(text, where):
        keep = current.subdir if sub is None else sub
        return Upstream(kind="git", url=current.url, commit=text, subdir=keep)
    if commit is not None:
        return Upstream(kind="git", url=_location(text, where), commit=_ref(commit), subdir=sub)
    if text.startswith("https://") and is_archive(Path(archive_name(text))):
        return _archive(current, sub, url=text)
    local = where.cwd / text
    if is_archive(local) and local.is_file():
        return _archive(current, sub, path=_location(text, where))
    raise ConfigError(
        f"cannot tell which upstream {text!r} is",
        hint="give NAME==VERSION (a PyPI sdist), an archive (.tar.*/.zip path or https URL), "
        "or a git repository with --commit COMMIT",
    )


def _archive(
    current: Upstream | None, sub: str | None, *, url: str | None = None, path: str | None = None
) -> Upstream:
    if sub is None and current is not None and current.kind in ("archive", "pypi-sdist"):
        sub = current.subdir  # another release of the same archive keeps its layout
    return Upstream(kind="archive", subdir=sub, url=url, path=path)


def _same_package(a: str | None, b: str) -> bool:
    def norm(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    return a is not None and norm(a) == norm(b)


def _subdir(subdir: str | None) -> str | None:
    if subdir is None:
        return None
    sub = subdir.strip("/")
    parts = sub.split("/")
    if not sub or subdir.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ConfigError(
            f"--subdir {subdir!r} must be a relative path inside the upstream, without '..'",
            hint="e.g. --subdir vendor/llama.cpp",
        )
    return sub


def _is_ref(text: str, where: Where) -> bool:
    return bool(REF.fullmatch(text)) and not (where.cwd / text).exists() and "://" not in text


def _ref(text: str) -> str:
    if not REF.fullmatch(text) or ".." in text:
        raise ConfigError(
            f"--commit {text!r} is not a commit id, branch or tag name",
            hint="give the full 40-hex commit id (or a branch/tag the repository has)",
        )
    return text


def _location(text: str, where: Where) -> str:
    """A URL as typed; a local path relative to the series directory (as series.yaml
    resolves it), or absolute when it lies elsewhere on another root."""
    if "://" in text or re.match(r"^[A-Za-z0-9._-]+@[^/:]+:", text):
        return text
    if text.startswith("-"):
        raise ConfigError(f"{text!r} is not a path or URL", hint="name the repository or archive")
    absolute = (where.cwd / text).resolve()
    try:
        return os.path.relpath(absolute, where.series_dir.resolve())
    except ValueError:
        return str(absolute)


# ----------------------------------------------------------------------------- pinning


def pin(upstream: Upstream, series_dir: Path, progress: Progress | None = None) -> Upstream:
    """`upstream` with its sha256 computed (downloaded or read into the cache; an sdist whose
    tree the tree cache holds is not read again), its commit resolved to a full id and its
    subdir made relative to an archive's top directory."""
    if upstream.kind == "pypi-sdist":
        return _pin_sdist(upstream, progress)
    if upstream.kind == "archive":
        return _pin_archive(upstream, series_dir, progress)
    return _pin_git(upstream, series_dir, progress)


def _pin_sdist(up: Upstream, progress: Progress | None) -> Upstream:
    assert up.package and up.version
    releases = sdist_releases(up.package, up.version)
    release = sorted(releases, key=lambda r: (not r.filename.endswith(".tar.gz"), r.filename))[0]
    if release.sha256 is not None and in_tree_cache(replace(up, sha256=release.sha256)):
        # Materialized before: its tree is what any use of this pin reads (checked object by
        # object when taken), so the archive is neither read nor hashed again here.
        return replace(up, sha256=release.sha256)
    cached = find_cached(release.sha256) if release.sha256 else None
    if cached is None:
        cached, digest = download_new(release.url, release.filename, progress, release.sha256)
    else:
        digest = release.sha256 or sha256_file(cached)
    return _with_subdir(replace(up, sha256=digest), cached)


def _pin_archive(up: Upstream, series_dir: Path, progress: Progress | None) -> Upstream:
    if up.url is not None:
        cached, digest = download_new(up.url, archive_name(up.url), progress)
    else:
        assert up.path
        source = (series_dir / up.path).resolve()
        if not source.is_file():
            raise NotFound(f"archive {source} does not exist")
        digest = sha256_file(source)
        cached = find_cached(digest) or store(source, digest, source.name)
    return _with_subdir(replace(up, sha256=digest), cached)


def _with_subdir(up: Upstream, archive: Path) -> Upstream:
    """`up` with its subdir relative to the archive's top directory. Listing a large archive
    takes seconds, so an upstream already in the tree cache (materialized before with this
    subdir) keeps it as it is."""
    if up.subdir is None or in_tree_cache(up):
        return up
    return replace(up, subdir=archive_subdir(archive, up.subdir) or None)


def _pin_git(up: Upstream, series_dir: Path, progress: Progress | None) -> Upstream:
    assert up.url and up.commit
    url = up.url
    if "://" not in url and not re.match(r"^[A-Za-z0-9._-]+@[^/:]+:", url):
        url = str((series_dir / url).resolve())
    cache = git_cache(url)
    report = or_null(progress)
    report.start("fetch", None)
    full = up.commit if HEX40.fullmatch(up.commit) else None
    if full is None or cache.maybe_rev(f"{full}^{{commit}}") is None:
        try:
            cache.fetch(url, up.commit)
        except GitFailed as exc:
            raise NotFound(
                f"cannot fetch {up.commit!r} from {url}: {exc.message}",
                hint="check the repository and the commit (a full id, or a branch/tag it has)",
            ) from None
        full = full or cache.rev_parse("FETCH_HEAD^{commit}")
    report.done("fetch")
    if up.subdir is not None and cache.maybe_rev(f"{full}:{up.subdir}") is None:
        raise NotFound(f"commit {full} of {url} has no directory {up.subdir!r}")
    return replace(up, commit=full)
