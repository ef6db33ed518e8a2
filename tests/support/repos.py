"""The one repository builder of the tests, and what is computed from file maps with it.

Repositories are made with patchctl's own runner (pinned flags, fixed identity and dates), so
the hostile user config never shapes a fixture.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from patchctl.gitlayer.git import Git
from support.files import Files, write_files


@dataclass(frozen=True)
class Repo:
    """A repository made by `new_repo`: its path, runner, commit and tree."""

    path: Path
    git: Git
    commit: str
    tree: str


MakeRepo = Callable[..., Repo]  # the `make_repo` fixture: (files, name=None) -> Repo
MakePatch = Callable[[Files, Files], bytes]  # the `make_patch` fixture: (before, after) -> bytes


def new_repo(path: Path, files: Files, message: bytes = b"fake upstream\n") -> Repo:
    """Commit `files` (ignored ones too: `add -A -f`) in the repository at `path`, made when
    missing; a repository that exists gets a second commit on top of HEAD."""
    git = Git(path) if (path / ".git").exists() else Git.init(path)
    parent = git.maybe_rev("HEAD")
    write_files(path, files)
    git.add_all()
    tree = git.write_tree()
    commit = git.commit_tree(tree, message, (parent,) if parent else ())
    git.update_ref("HEAD", commit)
    return Repo(path, git, commit, tree)


def tree_of_files(scratch: Path, files: Files) -> str:
    """The git tree id of a file map (built in a scratch repository)."""
    return new_repo(scratch, files).tree


def diff_files(scratch: Path, before: Files, after: Files) -> bytes:
    """Patch bytes turning `before` into `after`: `git diff --binary --full-index`, a/ b/."""
    first = new_repo(scratch, before)
    write_files(scratch, after)
    write_files(scratch, {name: None for name in set(before) - set(after)})
    first.git.add_all()
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
