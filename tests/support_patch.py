"""Helpers for the capture / verify / docs / import tests (owned with those tests).

Repositories are built with patchctl's own runner (fixed identity and dates); `hostile`
writes the user settings that are known to change patch bytes into both the repository's
.git/config and a fake ~/.gitconfig, so tests prove the pins hold.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

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


def write_files(root: Path, files: Mapping[str, Entry]) -> None:
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


def make_repo(path: Path, files: Mapping[str, Entry]) -> tuple[Git, str]:
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
    return git.snapshot_worktree()


def make_project(root: Path, files: dict[str, bytes]) -> Path:
    """A project with patches/demo/series.yaml over an `archive` upstream holding `files`."""
    import hashlib
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(f"demo-1.0/{name}")
            info.size = len(data)
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    archive = root / "demo-1.0.tar.gz"
    root.mkdir(parents=True, exist_ok=True)
    archive.write_bytes(buffer.getvalue())
    series_dir = root / "project" / "patches" / "demo"
    series_dir.mkdir(parents=True)
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    (series_dir / "series.yaml").write_text(
        "version: 1\nupstream:\n  kind: archive\n"
        f"  path: ../../../{archive.name}\n  sha256: {sha}\npatches: []\n"
    )
    return series_dir


def racy_same_size_edit(git: Git, name: str, data: bytes) -> None:
    """Rewrite `name` with `data` (same size) so that only git's racy-clean check can see it.

    Within one second: the file is rewritten with its committed bytes, the index records its
    stat data, then the new bytes land. Stat data (seconds, size, inode) still match the index;
    git re-reads the file only because its mtime is not older than the index file's. The call
    returns in a later second, so a copy of the index with a fresh mtime would miss the edit.
    """
    path = git.repo / name
    old = git.cat_file("blob", git.rev_parse(f"HEAD:{name}"))
    assert len(old) == len(data) and old != data
    for _attempt in range(5):
        time.sleep(1.02 - time.time() % 1)  # early in a fresh second
        second = int(time.time())
        path.write_bytes(old)
        git.refresh_index()
        path.write_bytes(data)
        stamps = (path.stat().st_mtime, path.stat().st_ctime, git.index_path().stat().st_mtime)
        if {int(t) for t in stamps} == {second}:
            break
    else:
        raise AssertionError("could not edit within the second of the index write")
    time.sleep(1.02 - time.time() % 1)
