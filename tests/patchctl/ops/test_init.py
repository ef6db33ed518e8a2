"""init: a series pinned from what a user types (sdist, archive path or URL, git + commit),
every checksum computed, series.yaml validated like a hand-written one, never overwritten."""

from __future__ import annotations

import hashlib
import io
import json
import ssl
import tarfile
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from support.archives import make_tar
from support.repos import new_repo, tree_of_files

from patchctl.cli.main import main
from patchctl.errors import ConfigError, DirtyTree, NotFound, UnsafeArchive
from patchctl.ops.init import init_series
from patchctl.room.cleanroom import load_cleanroom
from patchctl.series.model import load_series

FILES = {"vendor/lib/a.c": b"int a;\n", "vendor/lib/b.c": b"int b;\n", "setup.py": b"x\n"}


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_git_upstream_with_a_branch_records_the_full_commit_and_tree(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "upstream", FILES)
    series_dir = tmp_path / "project" / "patches" / "demo"
    result = init_series(series_dir, str(repo.path), commit="main", subdir="vendor")
    up = load_series(series_dir).upstream
    assert (up.kind, up.commit, up.subdir) == ("git", repo.commit, "vendor")
    assert up.tree == repo.git.rev_parse(f"{repo.commit}:vendor")
    assert up.url == "../../../upstream"  # relative to the series directory, as it resolves
    room = load_cleanroom(result.cleanroom)
    assert room.base_tree() == up.tree and (room.path / "lib" / "a.c").read_bytes() == b"int a;\n"
    assert (series_dir / "README.md").is_file()


def test_an_existing_series_is_never_overwritten(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "upstream", FILES)
    series_dir = tmp_path / "s"
    series_dir.mkdir()
    (series_dir / "series.yaml").write_bytes(b"hand written\n")
    with pytest.raises(DirtyTree) as info:
        init_series(series_dir, str(repo.path), commit=repo.commit)
    assert info.value.exit_code == 8
    assert (series_dir / "series.yaml").read_bytes() == b"hand written\n"


@pytest.mark.parametrize("subdir", ["vendor/lib", "pkg-1.0/vendor/lib"])
def test_archive_subdir_is_relative_to_the_stripped_top_directory(
    tmp_path: Path, subdir: str
) -> None:
    archive = make_tar(tmp_path / "pkg-1.0.tar.gz", FILES, top="pkg-1.0")
    series_dir = tmp_path / "project" / "patches" / "demo"
    init_series(series_dir, str(archive), subdir=subdir)
    up = load_series(series_dir).upstream
    assert (up.kind, up.path, up.subdir) == ("archive", "../../../pkg-1.0.tar.gz", "vendor/lib")
    assert up.sha256 == sha(archive)
    lib = {"a.c": b"int a;\n", "b.c": b"int b;\n"}
    assert up.tree == tree_of_files(tmp_path / "scratch", lib)


def test_a_missing_subdir_explains_the_stripped_top_directory(tmp_path: Path) -> None:
    archive = make_tar(tmp_path / "pkg-1.0.tar.gz", FILES, top="pkg-1.0")
    with pytest.raises(NotFound, match=r"top directory 'pkg-1\.0/' is stripped"):
        init_series(tmp_path / "s", str(archive), subdir="vendor/nope")
    assert not (tmp_path / "s").exists()  # nothing left behind


def test_archive_url_is_downloaded_and_its_sha256_computed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = make_tar(tmp_path / "pkg-1.0.tar.gz", FILES, top="pkg-1.0")
    url = "https://example.invalid/releases/pkg-1.0.tar.gz"
    real = urllib.request.urlopen

    def serve(
        request: urllib.request.Request, timeout: float = 0, context: ssl.SSLContext | None = None
    ) -> Any:
        assert request.full_url == url
        assert context is not None  # https: the process's one TLS context
        return real(archive.as_uri(), timeout=timeout)

    monkeypatch.setattr(urllib.request, "urlopen", serve)
    init_series(tmp_path / "s", url)
    up = load_series(tmp_path / "s").upstream
    assert (up.kind, up.url, up.path, up.sha256) == ("archive", url, None, sha(archive))


def test_unknown_upstream_and_http_archive_urls_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot tell which upstream"):
        init_series(tmp_path / "s", "no-such-thing")
    with pytest.raises(ConfigError, match="cannot tell which upstream"):
        init_series(tmp_path / "s", "http://example.invalid/a.tar.gz")
    series = tmp_path / "t" / "series.yaml"
    series.parent.mkdir()
    series.write_text(
        "version: 1\nupstream: {kind: archive, url: 'http://x/a.tar.gz', sha256: "
        + "0" * 64
        + "}\n"
    )
    with pytest.raises(ConfigError, match="https"):
        load_series(series)


def test_init_cli_json_then_import_and_verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = new_repo(tmp_path / "upstream", FILES)
    series_dir = tmp_path / "project" / "patches" / "demo"
    code = main(
        ["init", str(repo.path), "--commit", repo.commit, "--series", str(series_dir), "--json"]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["ok"] and data["upstream"]["tree"] == repo.tree
    again = main(["init", str(repo.path), "--commit", repo.commit, "--series", str(series_dir)])
    assert again == 8


def test_sdist_from_the_package_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sdist = make_tar(tmp_path / "pkg-1.0.tar.gz", FILES, top="pkg-1.0")
    api = tmp_path / "mirror" / "pypi" / "pkg" / "1.0"
    api.mkdir(parents=True)
    entry = {"packagetype": "sdist", "filename": sdist.name, "url": sdist.as_uri(), "digests": {}}
    (api / "json").write_text(json.dumps({"urls": [entry]}))
    monkeypatch.setenv("PATCHCTL_PYPI_URL", (tmp_path / "mirror").as_uri())
    init_series(tmp_path / "s", "pkg==1.0", subdir="vendor/lib")
    up = load_series(tmp_path / "s").upstream
    assert (up.kind, up.package, up.version, up.subdir) == (
        "pypi-sdist",
        "pkg",
        "1.0",
        "vendor/lib",
    )
    assert up.sha256 == sha(sdist)  # computed on download: the index published none


def _repeating_tar(path: Path, second: bytes) -> Path:
    """pkg/a.c twice (the second copy holding `second`), then pkg/b.c."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data in (("pkg/a.c", b"int a;\n"), ("pkg/a.c", second), ("pkg/b.c", b"b\n")):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return path


def test_identical_repeated_members_are_taken_and_a_failed_init_leaves_no_directory(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    differing = _repeating_tar(tmp_path / "bad.tar.gz", b"int b;\n")
    with pytest.raises(UnsafeArchive, match="appears twice"):
        init_series(project / "patches" / "demo", str(differing))
    assert list(project.iterdir()) == []  # no empty patches/ or cleanroom/ behind
    same = _repeating_tar(tmp_path / "good.tar.gz", b"int a;\n")
    result = init_series(project / "patches" / "demo", str(same))
    assert (result.cleanroom / "a.c").read_bytes() == b"int a;\n"
    assert load_series(project / "patches" / "demo").upstream.tree == tree_of_files(
        tmp_path / "scratch", {"a.c": b"int a;\n", "b.c": b"b\n"}
    )
