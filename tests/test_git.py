"""git.py: pinned flags and a hermetic environment beat hostile user config and env."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Repo

from patchctl.errors import GitFailed
from patchctl.git import PINNED_CONFIG, Git, hermetic_env


def test_every_pin_has_a_reason() -> None:
    assert all(why for _key, _value, why in PINNED_CONFIG)
    keys = [key for key, _value, _why in PINNED_CONFIG]
    assert len(keys) == len(set(keys))


def test_hostile_user_config_is_active_for_plain_git(tmp_path: Path) -> None:
    # Sanity check of the seal: plain git sees the hostile ~/.gitconfig...
    out = subprocess.run(
        ["git", "config", "--get", "diff.noprefix"], capture_output=True, cwd=tmp_path
    )
    assert out.stdout.strip() == b"true"


def test_hostile_user_config_is_invisible_to_patchctl(tmp_path: Path) -> None:
    git = Git.init(tmp_path / "r")
    code, out, _ = git.run_full("config", "--get", "diff.noprefix")
    assert out.strip() == b"false"  # the pin, not the user's true
    code, out, _ = git.run_full("config", "--get", "user.name")
    assert code == 1 and out == b""


def test_diff_output_has_prefixes_no_color_and_keeps_crlf(
    make_repo: Callable[..., Repo],
) -> None:
    repo = make_repo({"f.txt": b"a\r\nb\r\n"})
    (repo.path / "f.txt").write_bytes(b"a\r\nB\r\n")
    diff = repo.git.run("diff", "--no-ext-diff")
    assert b"diff --git a/f.txt b/f.txt" in diff
    assert b"\x1b[" not in diff
    assert b"-b\r\n+B\r\n" in diff
    assert repo.git.run("cat-file", "blob", "HEAD:f.txt") == b"a\r\nb\r\n"


def test_identity_and_dates_are_fixed_so_commits_are_reproducible(tmp_path: Path) -> None:
    ids = []
    for name in ("one", "two"):
        git = Git.init(tmp_path / name)
        (tmp_path / name / "f").write_bytes(b"x\n")
        git.add_all()
        ids.append(git.commit_tree(git.write_tree(), b"msg\n"))
    assert ids[0] == ids[1]
    header = Git(tmp_path / "one").run("cat-file", "commit", ids[0])
    assert b"author patchctl <patchctl@invalid> 0 +0000" in header
    assert b"committer patchctl <patchctl@invalid> 0 +0000" in header


def test_inherited_git_env_is_scrubbed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    git = Git.init(tmp_path / "r")
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(tmp_path / "bogus-index"))
    monkeypatch.setenv("GIT_WORK_TREE", str(tmp_path))
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", "false")
    env = hermetic_env(git.repo)
    assert "GIT_DIR" not in env and "GIT_INDEX_FILE" not in env
    assert env["GIT_CONFIG_GLOBAL"] == "/dev/null" and env["LC_ALL"] == "C"
    assert git.text("rev-parse", "--absolute-git-dir") == str((tmp_path / "r" / ".git").resolve())
    assert not (tmp_path / "elsewhere").exists()


def test_ceiling_stops_discovery_of_an_enclosing_repo(tmp_path: Path) -> None:
    Git.init(tmp_path / "outer")
    inner = tmp_path / "outer" / "plain"
    inner.mkdir()
    assert not Git(inner).is_repo()
    with pytest.raises(GitFailed) as info:
        Git(inner).run("rev-parse", "--git-dir")
    assert info.value.exit_code == 9
    assert info.value.returncode == 128


def test_run_accepts_listed_status_codes_and_passes_stdin_bytes(tmp_path: Path) -> None:
    git = Git.init(tmp_path / "r")
    data = b"\x00\xffbytes\r\n"
    oid = git.run("hash-object", "-w", "--stdin", stdin=data).decode().strip()
    assert git.run("cat-file", "blob", oid) == data
    assert git.run("cat-file", "-e", "0" * 40, ok=(0, 1)) == b""
    with pytest.raises(GitFailed):
        git.run("cat-file", "-e", "0" * 40)
    assert git.maybe_rev("HEAD") is None
