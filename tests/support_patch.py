"""Helpers for the capture / verify / docs / import tests (owned with those tests).

Repositories are built with patchctl's own runner (fixed identity and dates); `hostile`
writes the user settings that are known to change patch bytes into both the repository's
.git/config and a fake ~/.gitconfig, so tests prove the pins hold.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from patchctl.capture import snapshot_worktree
from patchctl.git import Git
from patchctl.series import Patch, Series, Upstream, save_series

HOSTILE_CONFIG = b"""[core]
\tautocrlf = true
\tsafecrlf = true
\tabbrev = 7
\tfilemode = false
\tquotepath = true
[diff]
\tnoprefix = true
\tmnemonicPrefix = true
\tsuppressBlankEmpty = true
\talgorithm = patience
\tcontext = 1
\tinterHunkContext = 5
\trenames = copies
\texternal = /bin/false
\tindentHeuristic = false
[color]
\tui = always
\tdiff = always
[apply]
\twhitespace = fix
[grep]
\tlineNumber = true
\tpatternType = perl
[format]
\tsignature = hostile
"""


@dataclass(frozen=True)
class Link:
    """A symlink entry for `write_files`."""

    target: str


@dataclass(frozen=True)
class Exe:
    """An executable file entry for `write_files`."""

    data: bytes


Entry = bytes | Link | Exe | None


def write_files(root: Path, files: dict[str, Entry]) -> None:
    """Create/overwrite/delete files under `root` (None deletes)."""
    for name, entry in files.items():
        path = root / name
        if path.is_symlink() or path.exists():
            path.unlink()
        if entry is None:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(entry, Link):
            os.symlink(entry.target, path)
        elif isinstance(entry, Exe):
            path.write_bytes(entry.data)
            path.chmod(0o755)
        else:
            path.write_bytes(entry)
            path.chmod(0o644)


def hostile(repo: Path, home: Path | None = None) -> None:
    """Append byte-changing user settings to the repo config (and ~/.gitconfig in `home`)."""
    with (repo / ".git" / "config").open("ab") as fh:
        fh.write(HOSTILE_CONFIG)
    if home is not None:
        (home / ".gitconfig").write_bytes(HOSTILE_CONFIG)


def make_repo(path: Path, files: dict[str, Entry]) -> tuple[Git, str]:
    """A repository with one commit holding `files`; returns (runner, base tree)."""
    git = Git.init(path)
    write_files(path, files)
    git.run("add", "-A", "--", ".")
    tree = git.write_tree()
    git.update_ref("HEAD", git.commit_tree(tree, b"base\n"))
    return git, tree


def make_series(directory: Path, base: str, patches: tuple[Patch, ...] = ()) -> Series:
    """A series.yaml in `directory` (an archive upstream pinned to tree `base`)."""
    directory.mkdir(parents=True, exist_ok=True)
    upstream = Upstream(kind="archive", path="orig.tar.gz", sha256="0" * 64, tree=base)
    series = Series(directory / "series.yaml", upstream, patches)
    save_series(series)
    return series


def worktree_tree(git: Git) -> str:
    """The tree of the working tree (as capture sees it)."""
    return snapshot_worktree(git)
