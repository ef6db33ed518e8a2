"""pinning: what a user types (`init UPSTREAM`, `rebase --onto UPSTREAM`) becomes an Upstream;
pin() computes the sha256 and the full commit."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest
from support.repos import new_repo

from patchctl.cli.main import main
from patchctl.errors import ConfigError, NotFound
from patchctl.series.model import Upstream
from patchctl.upstream.pinning import Where, parse_upstream, pin


def where(tmp_path: Path) -> Where:
    series_dir = tmp_path / "project" / "patches" / "demo"
    series_dir.mkdir(parents=True, exist_ok=True)
    return Where(series_dir=series_dir, cwd=tmp_path)


def archive(path: Path, top: str, files: dict[str, bytes]) -> Path:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path.write_bytes(buffer.getvalue())
    return path


def test_an_sdist_spec_keeps_the_series_subdir_for_the_same_package(tmp_path: Path) -> None:
    current = Upstream(kind="pypi-sdist", package="llama_cpp_python", version="0.3.36",
                       subdir="vendor/llama.cpp")  # fmt: skip
    up = parse_upstream("llama-cpp-python==0.3.35", where(tmp_path), current=current)
    assert (up.kind, up.package, up.version, up.subdir) == (
        "pypi-sdist", "llama-cpp-python", "0.3.35", "vendor/llama.cpp",
    )  # fmt: skip
    other = parse_upstream("numpy==2.0.0", where(tmp_path), current=current)
    assert other.subdir is None  # another package: its layout is not assumed


def test_an_archive_path_is_recorded_relative_to_the_series(tmp_path: Path) -> None:
    tarball = archive(tmp_path / "demo-1.1.tar.gz", "demo-1.1", {"a.c": b"a\n"})
    up = parse_upstream("demo-1.1.tar.gz", where(tmp_path))
    assert (up.kind, up.path, up.sha256) == ("archive", "../../../demo-1.1.tar.gz", None)
    pinned = pin(up, where(tmp_path).series_dir)
    assert pinned.sha256 == hashlib.sha256(tarball.read_bytes()).hexdigest()


def test_an_archive_subdir_is_pinned_relative_to_its_stripped_top_directory(
    tmp_path: Path,
) -> None:
    archive(tmp_path / "demo-1.1.tar.gz", "demo-1.1", {"vendor/lib/a.c": b"a\n"})
    for typed in ("vendor/lib", "demo-1.1/vendor/lib"):
        up = parse_upstream("demo-1.1.tar.gz", where(tmp_path), subdir=typed)
        assert pin(up, where(tmp_path).series_dir).subdir == "vendor/lib", typed


def test_a_git_repository_with_a_branch_is_pinned_to_the_full_commit(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "upstream", {"src/a.c": b"a\n"})
    up = parse_upstream("upstream", where(tmp_path), commit="main")
    assert (up.kind, up.url, up.commit) == ("git", "../../../upstream", "main")
    assert pin(up, where(tmp_path).series_dir).commit == repo.commit
    missing = parse_upstream("upstream", where(tmp_path), commit="main", subdir="nope")
    with pytest.raises(NotFound, match="no directory 'nope'"):
        pin(missing, where(tmp_path).series_dir)


def test_a_rebase_of_a_git_series_takes_a_bare_ref_of_its_own_repository(tmp_path: Path) -> None:
    current = Upstream(kind="git", url="../../../upstream", commit="0" * 40, subdir="lib")
    up = parse_upstream("v2", where(tmp_path), current=current)
    assert (up.kind, up.url, up.commit, up.subdir) == ("git", "../../../upstream", "v2", "lib")


@pytest.mark.parametrize(
    ("typed", "options", "message"),
    [
        ("what-is-this", {}, "cannot tell which upstream"),
        ("http://example.org/x.tar.gz", {}, "cannot tell which upstream"),
        ("repo", {"commit": "--upload-pack=evil"}, "is not a commit id"),
        ("repo", {"commit": "a..b"}, "is not a commit id"),
        ("x==1", {"subdir": "../up"}, "must be a relative path"),
        ("x==1", {"subdir": "/abs"}, "must be a relative path"),
        ("-oProxyCommand=evil", {"commit": "main"}, "is not a path or URL"),
    ],
)
def test_what_cannot_be_an_upstream_is_refused_before_anything_is_fetched(
    tmp_path: Path, typed: str, options: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_upstream(
            typed, where(tmp_path), commit=options.get("commit"), subdir=options.get("subdir")
        )


def test_an_archive_already_in_the_tree_cache_is_not_listed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from patchctl.gitlayer.git import Git
    from patchctl.series.model import Series
    from patchctl.upstream import pinning
    from patchctl.upstream.materialize import materialize

    archive(tmp_path / "demo-1.1.tar.gz", "demo-1.1", {"vendor/lib/a.c": b"a\n"})
    at = where(tmp_path)
    pinned = pin(parse_upstream("demo-1.1.tar.gz", at, subdir="vendor/lib"), at.series_dir)
    materialize(Series(at.series_dir / "series.yaml", pinned), Git.init(tmp_path / "room"))

    def listing(*_args: object) -> str:
        raise AssertionError("the archive was listed again")

    monkeypatch.setattr(pinning, "archive_subdir", listing)
    again = pin(parse_upstream("demo-1.1.tar.gz", at, subdir="vendor/lib"), at.series_dir)
    assert again == pinned
    with pytest.raises(AssertionError, match="listed again"):  # another spelling: listed
        pin(parse_upstream("demo-1.1.tar.gz", at, subdir="demo-1.1/vendor/lib"), at.series_dir)


@pytest.mark.parametrize(
    ("text", "commit", "why"),
    [
        ("ssh://-oProxyCommand=touch%20pwned/repo", "main", "invalid host"),
        ("git@-oProxyCommand=x:repo", "main", "invalid host"),
        ("ftp://example.org/repo.git", "main", "scheme 'ftp'"),
        ("ext::sh -c touch% pwned", "main", "remote helper"),
        ("https://example.org/x\x1b[31m.tar.gz", None, "control character"),
        ("https://example.org/repo", "main\x07", None),
    ],
)
def test_an_upstream_typed_on_the_command_line_passes_the_series_allow_list(
    tmp_path: Path, text: str, commit: str | None, why: str | None
) -> None:
    where = Where(series_dir=tmp_path / "s", cwd=tmp_path)
    with pytest.raises(ConfigError) as refused:
        parse_upstream(text, where, commit=commit)
    assert refused.value.exit_code == 5
    if why is not None:
        assert why in refused.value.message
    # the CLI: init and rebase --onto refuse it alike, before anything is fetched
    args = ["init", text, "--series", str(tmp_path / "s")]
    assert main(args + (["--commit", commit] if commit else [])) == 5
    assert not (tmp_path / "s").exists() and not (tmp_path / "pwned").exists()
