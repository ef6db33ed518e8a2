"""Fixtures only (helpers live in tests/support/): a hermetic seal around every test, and
factories for fake upstream repositories and patches.

The seal (in the style of git-revise's `hermetic_seal`) gives each test a fake HOME whose
~/.gitconfig is HOSTILE (support/gitconfig.py): settings known to change patch bytes or git
output. patchctl must produce the same bytes regardless. Identity and dates are pinned, editors
disabled, and the patchctl cache points into the fake HOME.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.debpkg import ccache
from support.files import Files
from support.gitconfig import GIT_ENV_TO_DROP, install_user_config
from support.repos import MakePatch, MakeRepo, Repo, diff_files, new_repo


@pytest.fixture(autouse=True)
def hermetic_seal(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Fake HOME with a hostile git config; pinned identity/dates; no editor; private cache."""
    home = tmp_path_factory.mktemp("home")
    install_user_config(home)
    template = home / "git-template"
    template.mkdir()
    for name in GIT_ENV_TO_DROP:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Test Author")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "author@example.invalid")
    monkeypatch.setenv("GIT_AUTHOR_DATE", "2001-02-03T04:05:06Z")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "Test Committer")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "committer@example.invalid")
    monkeypatch.setenv("GIT_COMMITTER_DATE", "2001-02-03T04:05:06Z")
    monkeypatch.setenv("GIT_EDITOR", "false")
    monkeypatch.setenv("GIT_TEMPLATE_DIR", str(template))
    monkeypatch.setenv("TZ", "UTC")
    return home


@pytest.fixture
def make_repo(tmp_path: Path) -> MakeRepo:
    """Factory: `make_repo({path: bytes | Link | Exe}, name="upstream") -> Repo` (one commit,
    in a new directory under tmp_path; support.repos.new_repo does the work)."""
    counter = iter(range(1_000_000))

    def factory(files: Files, name: str | None = None) -> Repo:
        return new_repo(tmp_path / (name or f"repo{next(counter)}"), files)

    return factory


@pytest.fixture
def make_patch(tmp_path: Path) -> MakePatch:
    """Factory: `make_patch(before, after) -> bytes` of a git patch."""
    counter = iter(range(1_000_000))

    def factory(before: Files, after: Files) -> bytes:
        return diff_files(tmp_path / f"patch-scratch{next(counter)}", before, after)

    return factory


@pytest.fixture
def cache_home(hermetic_seal: Path) -> Iterator[Path]:
    """The patchctl cache inside the fake HOME (XDG_CACHE_HOME/patchctl)."""
    yield hermetic_seal / ".cache" / "patchctl"


@pytest.fixture
def ccache_on_path(hermetic_seal: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`ccache` first on PATH, for the tests of `--launcher ccache`: the installed one, else
    Debian's, fetched and checked by tests/support/debpkg.py (so such a test never skips on a
    fresh machine). Its path."""
    folder = ccache()
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")
    return folder / "ccache"
