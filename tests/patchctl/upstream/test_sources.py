"""upstream.py: content-addressed cache, PyPI sdist download, git fetch, archives."""

from __future__ import annotations

import hashlib
import json
import os
import ssl
import threading
from collections.abc import Callable, Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from support.archives import make_tar
from support.files import Entry, Exe, Link
from support.repos import Repo

from patchctl.cache import cache_dir
from patchctl.errors import ChecksumMismatch, ConfigError, NotFound
from patchctl.gitlayer.git import Git
from patchctl.progress import RecordingProgress
from patchctl.series.model import Series, Upstream
from patchctl.upstream.materialize import in_tree_cache, materialize, tree_from_cache
from patchctl.upstream.sources import fetch_git, fetch_sdist, find_cached, store


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_cache_dir_precedence(monkeypatch: pytest.MonkeyPatch, hermetic_seal: Path) -> None:
    assert cache_dir() == hermetic_seal / ".cache" / "patchctl"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == hermetic_seal / ".cache" / "patchctl"
    monkeypatch.setenv("XDG_CACHE_HOME", "/x/cache")
    assert cache_dir() == Path("/x/cache/patchctl")
    monkeypatch.setenv("PATCHCTL_CACHE_DIR", "/y")
    assert cache_dir() == Path("/y")


def test_store_is_content_addressed_and_checks_the_hash(tmp_path: Path, cache_home: Path) -> None:
    source = tmp_path / "f.tar.gz"
    source.write_bytes(b"payload")
    digest = sha(source)
    stored = store(source, digest, "f.tar.gz")
    assert stored == cache_home / "sha256" / digest / "f.tar.gz"
    assert find_cached(digest) == stored
    with pytest.raises(ChecksumMismatch):
        store(source, "0" * 64, "f.tar.gz")
    assert not (cache_home / "sha256" / ("0" * 64)).exists()
    stored.write_bytes(b"corrupted")
    assert find_cached(digest) is None


def make_mirror(tmp_path: Path, sdist: Path, published: str) -> str:
    """A file:// PyPI JSON API with one sdist release of pkg==1.0."""
    api = tmp_path / "mirror" / "pypi" / "pkg" / "1.0"
    api.mkdir(parents=True)
    entry = {
        "packagetype": "sdist",
        "filename": sdist.name,
        "url": sdist.as_uri(),
        "digests": {"sha256": published},
    }
    wheel = {**entry, "packagetype": "bdist_wheel", "filename": "pkg-1.0-py3-none-any.whl"}
    (api / "json").write_text(json.dumps({"urls": [wheel, entry]}))
    return (tmp_path / "mirror").as_uri()


@pytest.fixture
def sdist(tmp_path: Path) -> Path:
    return make_tar(tmp_path / "pkg-1.0.tar.gz", {"a.txt": b"a\n", "sub/b.txt": b"b\n"})


def pin(digest: str) -> Upstream:
    return Upstream(kind="pypi-sdist", package="pkg", version="1.0", sha256=digest)


def test_sdist_is_downloaded_verified_cached_and_reused_offline(
    tmp_path: Path, sdist: Path, cache_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    digest = sha(sdist)
    monkeypatch.setenv("PATCHCTL_PYPI_URL", make_mirror(tmp_path, sdist, digest))
    progress = RecordingProgress()
    first = fetch_sdist(pin(digest), progress)
    assert first == cache_home / "sha256" / digest / "pkg-1.0.tar.gz"
    assert first.read_bytes() == sdist.read_bytes()
    assert ("done", "download", None) in progress.events
    monkeypatch.setenv("PATCHCTL_PYPI_URL", "file:///nonexistent-offline")
    assert fetch_sdist(pin(digest)) == first


def test_published_checksum_mismatch_downloads_nothing(
    tmp_path: Path, sdist: Path, cache_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATCHCTL_PYPI_URL", make_mirror(tmp_path, sdist, sha(sdist)))
    with pytest.raises(ChecksumMismatch) as info:
        fetch_sdist(pin("1" * 64))
    assert info.value.exit_code == 6
    assert "series pins 1111" in str(info.value)
    assert not cache_home.exists()


def test_downloaded_bytes_mismatch_keeps_nothing(
    tmp_path: Path, sdist: Path, cache_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lie = "2" * 64  # the index claims the pinned hash, the bytes disagree
    monkeypatch.setenv("PATCHCTL_PYPI_URL", make_mirror(tmp_path, sdist, lie))
    with pytest.raises(ChecksumMismatch) as info:
        fetch_sdist(pin(lie))
    assert f"has sha256 {sha(sdist)}, expected {lie}" in str(info.value)
    assert list((cache_home / "sha256" / lie).iterdir()) == []


@pytest.fixture
def http_root(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A local HTTP server over a directory (for the Simple API, which needs real URLs)."""
    root = tmp_path / "www"
    root.mkdir()
    handler = partial(SimpleHTTPRequestHandler, directory=str(root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_simple_api_is_used_when_the_json_api_is_missing(
    http_root: tuple[Path, str], sdist: Path, cache_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Some mirrors serve only /simple (PEP 691 JSON) and give 404 for /pypi/<pkg>/<ver>/json.
    root, url = http_root
    (root / "packages").mkdir()
    (root / "packages" / sdist.name).write_bytes(sdist.read_bytes())
    other = {
        "filename": "pkg-0.9.tar.gz",
        "url": "../../packages/x",
        "hashes": {"sha256": "9" * 64},
    }
    mine = {
        "filename": sdist.name,
        "url": f"../../packages/{sdist.name}",
        "hashes": {"sha256": sha(sdist)},
    }
    (root / "simple" / "pkg").mkdir(parents=True)
    (root / "simple" / "pkg" / "index.html").write_text(json.dumps({"files": [other, mine]}))
    monkeypatch.setenv("PATCHCTL_PYPI_URL", url)
    got = fetch_sdist(pin(sha(sdist)))
    assert got == cache_home / "sha256" / sha(sdist) / sdist.name
    assert got.read_bytes() == sdist.read_bytes()


def test_release_without_sdist_is_not_found(
    http_root: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, url = http_root
    api = root / "pypi" / "pkg" / "1.0"
    api.mkdir(parents=True)
    (api / "json").write_text(json.dumps({"urls": []}))
    (root / "simple" / "pkg").mkdir(parents=True)
    (root / "simple" / "pkg" / "index.html").write_text(json.dumps({"files": []}))
    monkeypatch.setenv("PATCHCTL_PYPI_URL", url)
    with pytest.raises(NotFound):
        fetch_sdist(pin("3" * 64))


def snapshot(path: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under `path` with its mtime and bytes."""
    return {
        str(p.relative_to(path)): (p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


def git_series(tmp_path: Path, repo: Repo, **extra: str) -> Series:
    up = Upstream(kind="git", url=str(repo.path), commit=repo.commit, **extra)  # type: ignore[arg-type]
    return Series(tmp_path / "s" / "series.yaml", up)


def test_git_upstream_is_fetched_by_commit_and_the_clone_is_untouched(
    tmp_path: Path, make_repo: Callable[..., Repo]
) -> None:
    repo = make_repo({"a.txt": b"a\n", "sub/b.txt": b"b\n"}, name="user-clone")
    (repo.path / "a.txt").write_bytes(b"uncommitted edit\n")
    before = snapshot(repo.path)
    series = git_series(tmp_path, repo)
    cache = fetch_git(series)
    assert cache.rev_parse(f"{repo.commit}^{{commit}}") == repo.commit
    assert fetch_git(series).repo == cache.repo  # cached: no second fetch needed
    target = Git.init(tmp_path / "room")
    result = materialize(series, target)
    assert result.tree == repo.tree
    assert (tmp_path / "room" / "a.txt").read_bytes() == b"a\n"
    assert snapshot(repo.path) == before


def test_a_cache_left_incomplete_by_a_killed_fetch_is_fetched_again(
    tmp_path: Path, make_repo: Callable[..., Repo]
) -> None:
    """A fetch killed while writing loose objects leaves the commit without all of its
    tree; the cache repository is rebuilt instead of failing on every later run."""
    repo = make_repo({"a.txt": b"a\n", "sub/b.txt": b"b\n"}, name="user-clone")
    series = git_series(tmp_path, repo)
    cache = fetch_git(series)
    packed = cache.run("pack-objects", "--stdout", "--revs", stdin=f"{repo.commit}\n".encode())
    for pack in (cache.repo / "objects" / "pack").iterdir():
        pack.unlink()
    cache.run("unpack-objects", stdin=packed)  # all loose now, as a small fetch used to be
    sub = repo.git.rev_parse(f"{repo.commit}:sub")
    (cache.repo / "objects" / sub[:2] / sub[2:]).unlink()  # the kill came before this one
    assert not cache.has_complete_commit(repo.commit)
    again = fetch_git(series)
    assert again.repo == cache.repo and again.has_complete_commit(repo.commit)
    result = materialize(series, Git.init(tmp_path / "room"))
    assert result.tree == repo.tree


def test_git_subdir_and_tree_pin(tmp_path: Path, make_repo: Callable[..., Repo]) -> None:
    repo = make_repo({"top.txt": b"t\n", "sub/b.txt": b"b\n"})
    sub_tree = repo.git.rev_parse(f"{repo.commit}:sub")
    good = git_series(tmp_path, repo, subdir="sub", tree=sub_tree)
    assert materialize(good, Git.init(tmp_path / "r1")).tree == sub_tree
    bad = git_series(tmp_path, repo, subdir="sub", tree=repo.tree)
    with pytest.raises(ChecksumMismatch) as info:
        materialize(bad, Git.init(tmp_path / "r2"))
    assert f"upstream tree is {sub_tree}, series pins {repo.tree}" in str(info.value)


def test_unknown_commit_is_not_found(tmp_path: Path, make_repo: Callable[..., Repo]) -> None:
    repo = make_repo({"a": b"a\n"})
    series = git_series(tmp_path, repo)
    missing = Series(series.path, Upstream(kind="git", url=str(repo.path), commit="4" * 40))
    with pytest.raises(NotFound):
        fetch_git(missing)


def test_archive_upstream_checks_sha_and_caches(tmp_path: Path, cache_home: Path) -> None:
    (tmp_path / "s").mkdir()
    archive = make_tar(tmp_path / "s" / "orig.tar.gz", {"x.c": b"int x;\n"})
    digest = sha(archive)
    series = Series(
        tmp_path / "s" / "series.yaml",
        Upstream(kind="archive", path="orig.tar.gz", sha256=digest),
    )
    result = materialize(series, Git.init(tmp_path / "room"))
    assert (tmp_path / "room" / "x.c").read_bytes() == b"int x;\n"
    assert result.tree == Git(tmp_path / "room").write_tree()
    assert find_cached(digest) is not None
    wrong = Series(series.path, Upstream(kind="archive", path="orig.tar.gz", sha256="5" * 64))
    with pytest.raises(ChecksumMismatch):
        materialize(wrong, Git.init(tmp_path / "room2"))
    assert list((tmp_path / "room2").iterdir()) == [tmp_path / "room2" / ".git"]


def test_staged_tree_is_cached_and_reused(tmp_path: Path, cache_home: Path) -> None:
    (tmp_path / "s").mkdir()
    files: dict[str, Entry] = {
        "x.c": b"int x;\r\n",
        "bin/run": Exe(b"#!/bin/sh\n"),
        "ln": Link("x.c"),
        "sub/.git": b"gitdir: ..\n",
    }
    archive = make_tar(tmp_path / "s" / "orig.tar.gz", files)
    up = Upstream(kind="archive", path="orig.tar.gz", sha256=sha(archive))
    series = Series(tmp_path / "s" / "series.yaml", up)
    first = materialize(series, Git.init(tmp_path / "one"))
    assert (cache_home / "trees.git").is_dir()
    archive.unlink()  # a cache hit needs neither the archive nor an extraction
    progress = RecordingProgress()
    second = materialize(series, Git.init(tmp_path / "two"), progress)
    assert second == first and second.dropped == ("sub/.git",)
    assert not any(event[1] == "extract" for event in progress.events)
    room = tmp_path / "two"
    assert (room / "x.c").read_bytes() == b"int x;\r\n"
    assert os.access(room / "bin" / "run", os.X_OK) and os.readlink(room / "ln") == "x.c"
    assert Git(room).write_tree() == first.tree
    assert Git(room).run("diff-files", "--name-only") == b""  # work tree == index
    # Objects are shared, not packed or copied: one file for the blob in all three places.
    blob = Git(room).rev_parse(f"{first.tree}:x.c")
    name = Path(".git") / "objects" / blob[:2] / blob[2:]
    cached = cache_home / "trees.git" / "objects" / blob[:2] / blob[2:]
    assert os.path.samefile(cached, tmp_path / "one" / name)
    assert os.path.samefile(cached, room / name)
    assert not any((cache_home / "trees.git" / "objects" / "pack").iterdir())


STAGED: dict[str, Entry] = {
    "x.c": b"int x;\r\n",
    "bin/run": Exe(b"#!/bin/sh\n"),
    "ln": Link("x.c"),
    "sub/deep/y.c": b"int y;\n",
    "sub/.git": b"gitdir: ..\n",
}


def _staged(
    tmp_path: Path, name: str, top: str | None, files: dict[str, Entry] = STAGED
) -> tuple[Path, str]:
    """An archive of STAGED under `top` (no directory entries, as many tarballs) materialized
    into a fresh room: the room and its tree."""
    (tmp_path / "s").mkdir(exist_ok=True)
    archive = make_tar(tmp_path / "s" / f"{name}.tar.gz", files, top=top)
    up = Upstream(kind="archive", path=archive.name, sha256=sha(archive))
    room = tmp_path / name
    result = materialize(Series(tmp_path / "s" / "series.yaml", up), Git.init(room))
    assert Git(room).run("diff-files", "--name-only") == b""  # stat data: work tree == index
    assert Git(room).run("ls-files", "--others", "--exclude-standard") == b""
    return room, result.tree


def test_the_index_is_fed_while_extracting_without_a_second_add(
    tmp_path: Path, cache_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_add(self: Git) -> None:
        raise AssertionError("staged again with git add")

    room, tree = _staged(tmp_path, "with-top", "pkg-1.0")
    reference = Git.init(tmp_path / "reference")
    for path in ("x.c", "bin", "ln", "sub"):
        os.rename(room / path, tmp_path / "reference" / path)
    reference.add_all()  # what git add makes of the same files
    assert reference.write_tree() == tree
    monkeypatch.setattr(Git, "add_all", no_add)
    _staged(tmp_path, "with-top-again", "pkg-2.0")  # the fed path, never git add


def test_a_wrong_guess_of_the_top_is_staged_again_the_same(
    tmp_path: Path, cache_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _room, with_top = _staged(tmp_path, "with-top", "pkg-1.0")
    # without a top directory, and a nested file first: the fed index names paths under
    # "sub/", which turns out not to be the top; it is thrown away and git add stages the tree
    adds: list[Path] = []
    add_all = Git.add_all

    def spy(self: Git) -> None:
        adds.append(self.repo)
        add_all(self)

    monkeypatch.setattr(Git, "add_all", spy)
    first = dict(sorted(STAGED.items(), key=lambda item: not item[0].startswith("sub/deep")))
    room, without = _staged(tmp_path, "without-top", None, first)
    assert adds == [room] and without == with_top


def test_a_mislabelled_cache_object_is_never_taken(tmp_path: Path, cache_home: Path) -> None:
    """A cached object whose bytes are another object's (readable, wrong) is caught before
    anything is linked: the clean room is extracted again."""
    (tmp_path / "s").mkdir()
    archive = make_tar(tmp_path / "s" / "orig.tar.gz", {"x.c": b"int x;\n", "y.c": b"y\n"})
    series = Series(
        tmp_path / "s" / "series.yaml",
        Upstream(kind="archive", path="orig.tar.gz", sha256=sha(archive)),
    )
    first = materialize(series, Git.init(tmp_path / "one"))
    x, y = (Git(tmp_path / "one").rev_parse(f"{first.tree}:{n}") for n in ("x.c", "y.c"))
    objects = cache_home / "trees.git" / "objects"
    (objects / y[:2] / y[2:]).unlink()  # unlinked, not written: room one keeps its own
    (objects / y[:2] / y[2:]).write_bytes((objects / x[:2] / x[2:]).read_bytes())
    progress = RecordingProgress()
    again = materialize(series, Git.init(tmp_path / "two"), progress)
    assert again.tree == first.tree and ("done", "extract", None) in progress.events
    assert (tmp_path / "two" / "y.c").read_bytes() == b"y\n"
    assert Git(tmp_path / "two").cat_file("blob", y) == b"y\n"
    # The extraction mended the cache: the next clean room is a hit again.
    progress = RecordingProgress()
    assert materialize(series, Git.init(tmp_path / "three"), progress) == first
    assert not any(event[1] == "extract" for event in progress.events)


def test_broken_tree_cache_falls_back_to_extraction(tmp_path: Path, cache_home: Path) -> None:
    (tmp_path / "s").mkdir()
    archive = make_tar(tmp_path / "s" / "orig.tar.gz", {"x.c": b"int x;\n"})
    series = Series(
        tmp_path / "s" / "series.yaml",
        Upstream(kind="archive", path="orig.tar.gz", sha256=sha(archive)),
    )
    first = materialize(series, Git.init(tmp_path / "one"))
    for pack in (cache_home / "trees.git" / "objects").rglob("*"):
        if pack.is_file():
            pack.chmod(0o644)
            pack.write_bytes(b"garbage")
    progress = RecordingProgress()
    again = materialize(series, Git.init(tmp_path / "two"), progress)
    assert again.tree == first.tree
    assert ("done", "extract", None) in progress.events


def test_relative_git_url_is_resolved_from_the_series_dir(
    tmp_path: Path, make_repo: Callable[..., Repo]
) -> None:
    repo = make_repo({"a.txt": b"a\n"}, name="upstream")
    series_dir = tmp_path / "proj" / "patches" / "s"
    series_dir.mkdir(parents=True)
    up = Upstream(kind="git", url="../../../upstream", commit=repo.commit, tree=repo.tree)
    assert materialize(Series(series_dir / "series.yaml", up), Git.init(tmp_path / "r")).tree == (
        repo.tree
    )


def test_a_cached_tree_is_fetched_as_objects_without_a_checkout(
    tmp_path: Path, cache_home: Path
) -> None:
    (tmp_path / "s").mkdir()
    archive = make_tar(tmp_path / "s" / "orig.tar.gz", {"lib/x.c": b"int x;\n", "sub/.git": b"x\n"})
    up = Upstream(kind="archive", path="orig.tar.gz", sha256=sha(archive), subdir="lib")
    assert not in_tree_cache(up) and tree_from_cache(up, Git.init(tmp_path / "none")) is None
    first = materialize(Series(tmp_path / "s" / "series.yaml", up), Git.init(tmp_path / "one"))
    assert in_tree_cache(up)
    assert not in_tree_cache(Upstream(kind="archive", path="orig.tar.gz", sha256=sha(archive)))
    repo = Git.init(tmp_path / "two")
    cached = tree_from_cache(up, repo)
    assert cached == first and repo.maybe_rev(f"{cached.tree}:x.c") is not None
    assert list((tmp_path / "two").iterdir()) == [tmp_path / "two" / ".git"]  # nothing written


def test_a_cached_file_damaged_after_it_was_found_sound_is_found_again(
    tmp_path: Path, cache_home: Path
) -> None:
    """The tree cache remembers the object files it found sound; one written to since is
    hashed again: the damaged cache gives nothing, and the next materialize extracts."""
    (tmp_path / "s").mkdir()
    archive = make_tar(tmp_path / "s" / "orig.tar.gz", {"x.c": b"int x;\n", "y.c": b"y\n"})
    up = Upstream(kind="archive", path="orig.tar.gz", sha256=sha(archive))
    first = materialize(Series(tmp_path / "s" / "series.yaml", up), Git.init(tmp_path / "one"))
    assert tree_from_cache(up, Git.init(tmp_path / "two")) == first
    assert list((cache_home / "trees.git" / "patchctl-sound").iterdir())  # remembered
    assert tree_from_cache(up, Git.init(tmp_path / "three")) == first
    y = Git(tmp_path / "one").rev_parse(f"{first.tree}:y.c")
    x = Git(tmp_path / "one").rev_parse(f"{first.tree}:x.c")
    objects = cache_home / "trees.git" / "objects"
    (objects / y[:2] / y[2:]).unlink()
    (objects / y[:2] / y[2:]).write_bytes((objects / x[:2] / x[2:]).read_bytes())
    assert tree_from_cache(up, Git.init(tmp_path / "four")) is None


CASE_PAIR: dict[str, Entry] = {"src/A.c": b"int A;\n", "src/a.c": b"int a;\n", "README": b"r\n"}


def fold_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the clean room's file system one that ignores case, as macOS and Windows do by
    default (casefold.name_folding finds that out with a probe file;
    tests/patchctl/upstream/test_archive.py checks the probe itself)."""
    from patchctl.upstream import materialize

    monkeypatch.setattr(materialize, "name_folding", lambda fd: str.casefold, raising=False)
    monkeypatch.setattr(materialize, "same_name", lambda fd, a, b: a.casefold() == b.casefold())


def test_a_git_tree_with_names_one_file_here_is_refused_before_checkout(
    tmp_path: Path, make_repo: Callable[..., Repo], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A git checkout on a file system that folds case would write src/a.c over src/A.c (git
    only warns): refused (exit 5) naming both and the fix, nothing checked out. Where the file
    system tells them apart, both are checked out byte for byte."""
    repo = make_repo(CASE_PAIR, name="cased")
    series = git_series(tmp_path, repo)
    room = Git.init(tmp_path / "ok")
    assert materialize(series, room).tree == repo.tree
    assert [(room.repo / n).read_bytes() for n in ("src/A.c", "src/a.c")] == [b"int A;\n",
                                                                           b"int a;\n"]  # fmt: skip
    fold_names(monkeypatch)
    room = Git.init(tmp_path / "folded")
    with pytest.raises(ConfigError) as info:
        materialize(series, room)
    assert info.value.exit_code == 5 and info.value.key == "upstream"
    assert "holds 'src/A.c' and 'src/a.c', which name one file on this file system" in str(
        info.value
    )
    assert "nothing was checked out" in str(info.value)
    assert info.value.hint is not None and "case-sensitive file system" in info.value.hint
    assert sorted(p.name for p in room.repo.iterdir()) == [".git"]


def test_a_cached_tree_with_names_one_file_here_is_refused_before_checkout(
    tmp_path: Path, cache_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tree cache skips extraction (and its checks): a tree cached from a clean room on
    another file system is checked again before it is checked out."""
    (tmp_path / "s").mkdir()
    archive = make_tar(tmp_path / "s" / "orig.tar.gz", CASE_PAIR)
    series = Series(
        tmp_path / "s" / "series.yaml",
        Upstream(kind="archive", path="orig.tar.gz", sha256=sha(archive)),
    )
    materialize(series, Git.init(tmp_path / "one"))  # cached
    fold_names(monkeypatch)
    room = Git.init(tmp_path / "two")
    with pytest.raises(ConfigError, match=r"holds 'src/A\.c' and 'src/a\.c'"):
        materialize(series, room)
    assert sorted(p.name for p in room.repo.iterdir()) == [".git"]


def test_an_sdist_whose_tree_is_cached_is_pinned_without_reading_it(
    tmp_path: Path, sdist: Path, cache_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rebase onto a release materialized before reads its tree from the tree cache (each
    object checked as it is taken): pinning it neither hashes nor needs the archive again."""
    from patchctl.upstream import pinning

    digest = sha(sdist)
    monkeypatch.setenv("PATCHCTL_PYPI_URL", make_mirror(tmp_path, sdist, digest))
    wanted = Upstream(kind="pypi-sdist", package="pkg", version="1.0")
    first = pinning.pin(wanted, tmp_path)
    assert first.sha256 == digest and not in_tree_cache(first)
    materialize(Series(tmp_path / "series.yaml", first), Git.init(tmp_path / "room"))
    assert in_tree_cache(first)
    kept = find_cached(digest)
    assert kept is not None
    kept.write_bytes(b"damaged\n")  # not read again: pinning stays offline and quick

    def hashed(*_args: object) -> str:
        raise AssertionError("the archive was hashed again")

    monkeypatch.setattr(pinning, "sha256_file", hashed)
    monkeypatch.setattr(pinning, "find_cached", hashed)
    assert pinning.pin(wanted, tmp_path) == first
    other = Upstream(kind="pypi-sdist", package="pkg", version="1.0", subdir="sub")
    with pytest.raises(AssertionError, match="hashed again"):  # another tree: read as before
        pinning.pin(other, tmp_path)


def test_https_requests_of_one_process_share_one_tls_context() -> None:
    from patchctl.upstream import pypi

    first = pypi._tls()
    assert pypi._tls() is first  # the CA certificates are loaded once per process
    assert first.verify_mode == ssl.CERT_REQUIRED and first.check_hostname
