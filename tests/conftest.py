"""Shared fixtures: a hermetic seal around every test, and factories for fake upstreams.

The seal (in the style of git-revise's `hermetic_seal`) gives each test a fake HOME whose
~/.gitconfig is HOSTILE: settings known to change patch bytes or git output. patchctl must
produce the same bytes regardless. Identity and dates are pinned, editors disabled, and the
patchctl cache points into the fake HOME.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support_patch import Entry, Exe, Link, write_files  # one file-map vocabulary for all tests

from patchctl.git import Git
from patchctl.series import Patch, Series, Upstream, save_series

HOSTILE_GITCONFIG = b"""[core]
\tautocrlf = true
\tsafecrlf = true
\teol = crlf
\tfilemode = false
\tsymlinks = false
\tquotepath = true
\tabbrev = 7
\thooksPath = /nonexistent-hooks
[diff]
\tnoprefix = true
\tmnemonicPrefix = true
\texternal = false
\tcontext = 1
\talgorithm = patience
\tsuppressBlankEmpty = true
\trelative = true
[color]
\tui = always
\tdiff = always
[apply]
\twhitespace = fix
[commit]
\tgpgSign = true
[init]
\tdefaultBranch = hostile
[user]
\tname = Hostile User
\temail = hostile@example.invalid
"""

# Env vars that would redirect or reconfigure git; removed so the seal starts clean.
GIT_ENV_TO_DROP = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_CONFIG",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG_NOSYSTEM",
    "GIT_CONFIG_COUNT",
    "GIT_CEILING_DIRECTORIES",
    "GIT_EXTERNAL_DIFF",
    "PATCHCTL_CACHE_DIR",
    "PATCHCTL_PYPI_URL",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
)


@pytest.fixture(autouse=True)
def hermetic_seal(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Fake HOME with a hostile git config; pinned identity/dates; no editor; private cache."""
    home = tmp_path_factory.mktemp("home")
    (home / ".gitconfig").write_bytes(HOSTILE_GITCONFIG)
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".config" / "git" / "config").write_bytes(HOSTILE_GITCONFIG)
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


# ----------------------------------------------------------------------------- content


Files = dict[str, Entry]

# Hostile content: every case that has broken a patch tool somewhere.
CONTENT_MATRIX: Files = {
    "crlf.txt": b"one\r\ntwo\r\nthree\r\n",
    "no-eol.txt": b"first\nlast without newline",
    "latin1.txt": "caf\xe9 na\xefve\n".encode("latin-1"),
    "binary.bin": bytes(range(256)) * 4,
    "tool.sh": Exe(b"#!/bin/sh\necho hi\n"),
    "plain-to-exec.sh": b"#!/bin/sh\nexit 0\n",
    "link": Link("crlf.txt"),
    "dir with spaces/file name.txt": b"spaces\n",
    "n\u00e4me-\u65e5\u672c.txt": b"non-ascii name\n",
    "trailing-ws.txt": b"keep   \nthese\t\n",
    "src/main.c": b"".join(b"line %d\n" % i for i in range(1, 41)),
}

# The matrix after a patch: every entry changes in its own hostile way.
CONTENT_MATRIX_AFTER: Files = {
    **CONTENT_MATRIX,
    "crlf.txt": b"one\r\nTWO\r\nthree\r\n",
    "no-eol.txt": b"first\nlast still without newline",
    "latin1.txt": "caf\xe9 na\xefve \xe0 la carte\n".encode("latin-1"),
    "binary.bin": bytes(range(255, -1, -1)) * 4,
    "plain-to-exec.sh": Exe(b"#!/bin/sh\nexit 0\n"),
    "link": Link("no-eol.txt"),
    "dir with spaces/file name.txt": b"spaces\nand more\n",
    "n\u00e4me-\u65e5\u672c.txt": None,
    "new \u00fcml\u00e4ut.txt": b"new file\n",
    "trailing-ws.txt": b"keep   \nthese\t\nadded  \n",
    "src/main.c": b"".join(b"line %d\n" % i for i in range(1, 41)).replace(b"line 20\n", b"L20\n"),
}


@dataclass(frozen=True)
class Repo:
    """A fake upstream repository made by `make_repo`."""

    path: Path
    git: Git
    commit: str
    tree: str


def _commit_files(path: Path, files: Files, parent: str | None = None) -> Repo:
    git = Git(path) if (path / ".git").exists() else Git.init(path)
    write_files(path, files)
    git.run("add", "-A", "-f", "--", ".")
    tree = git.write_tree()
    commit = git.commit_tree(tree, b"fake upstream\n", (parent,) if parent else ())
    git.update_ref("HEAD", commit)
    return Repo(path, git, commit, tree)


@pytest.fixture
def make_repo(tmp_path: Path) -> Callable[..., Repo]:
    """Factory: `make_repo({path: bytes | Link | Exe}, name="upstream") -> Repo` (one commit)."""
    counter = iter(range(1_000_000))

    def factory(files: Files, name: str | None = None) -> Repo:
        path = tmp_path / (name or f"repo{next(counter)}")
        return _commit_files(path, files)

    return factory


def tree_of_files(scratch: Path, files: Files) -> str:
    """The git tree id of a file map (built in a scratch repository)."""
    return _commit_files(scratch, files).tree


def diff_files(scratch: Path, before: Files, after: Files) -> bytes:
    """Patch bytes turning `before` into `after`: `git diff --binary --full-index`, a/ b/."""
    first = _commit_files(scratch, before)
    write_files(scratch, {k: v for k, v in after.items()})
    for name in set(before) - set(after):
        write_files(scratch, {name: None})
    first.git.run("add", "-A", "-f", "--", ".")
    return first.git.run(
        "diff",
        "--cached",
        "--binary",
        "--full-index",
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
        "--no-renames",
        "--src-prefix=a/",
        "--dst-prefix=b/",
        first.commit,
    )


@pytest.fixture
def make_patch(tmp_path: Path) -> Callable[[Files, Files], bytes]:
    """Factory: `make_patch(before, after) -> bytes` of a git patch."""
    counter = iter(range(1_000_000))

    def factory(before: Files, after: Files) -> bytes:
        return diff_files(tmp_path / f"patch-scratch{next(counter)}", before, after)

    return factory


# ----------------------------------------------------------------------------- archives


@dataclass(frozen=True)
class Special:
    """A raw tar member for hostile archives: type is a tarfile type constant."""

    type: bytes
    linkname: str = ""


def make_tar(path: Path, files: dict[str, Entry | Special], top: str | None = "pkg-1.0") -> Path:
    """A .tar.gz with `files` (under a single `top` directory unless None)."""
    with tarfile.open(path, "w:gz") as tar:
        for name, entry in files.items():
            if entry is None:
                continue
            full = f"{top}/{name}" if top else name
            info = tarfile.TarInfo(full)
            info.mtime = 0
            data = b""
            if isinstance(entry, Special):
                info.type = entry.type
                info.linkname = entry.linkname
            elif isinstance(entry, Link):
                info.type = tarfile.SYMTYPE
                info.linkname = entry.target
            else:
                data = entry.data if isinstance(entry, Exe) else entry
                info.mode = 0o755 if isinstance(entry, Exe) else 0o644
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data else None)
    return path


@pytest.fixture
def cache_home(hermetic_seal: Path) -> Iterator[Path]:
    """The patchctl cache inside the fake HOME (XDG_CACHE_HOME/patchctl)."""
    yield hermetic_seal / ".cache" / "patchctl"


# ----------------------------------------------------------------------------- series


def write_series(
    directory: Path,
    upstream: Upstream,
    patches: list[tuple[str, bytes]] | tuple[tuple[str, bytes], ...] = (),
    *,
    root: str = ".",
) -> Path:
    """A series directory: series.yaml plus one `<id>.patch` per (id, bytes)."""
    directory.mkdir(parents=True, exist_ok=True)
    entries = []
    for pid, data in patches:
        (directory / f"{pid}.patch").write_bytes(data)
        entries.append(Patch(id=pid, file=f"{pid}.patch", title=f"Patch {pid}"))
    save_series(Series(directory / "series.yaml", upstream, tuple(entries), root))
    return directory


def git_upstream(repo: Repo, **extra: str) -> Upstream:
    """A `git` upstream pin of a fake upstream repository (tree recorded)."""
    return Upstream(kind="git", url=str(repo.path), commit=repo.commit, tree=repo.tree, **extra)  # type: ignore[arg-type]
