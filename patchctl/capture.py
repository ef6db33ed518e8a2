"""Capture: a clean-room working tree -> deterministic patch bytes, committed as the patch.

The worktree is snapshotted through a temporary index (GIT_INDEX_FILE), so the user's index
is never touched; `add -A` picks up modified, new, deleted, mode-changed and symlinked files.
The diff comes from `diff-tree` (plumbing) with every byte-changing knob written out below,
and the header is a format-patch look-alike built only from series metadata: no clock, no
local identity, a zero commit id. The same trees and metadata always give the same bytes,
which is what `verify`'s re-export step relies on.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from patchctl.errors import PatchctlError
from patchctl.git import Git
from patchctl.series import Patch

ZERO_COMMIT = "0" * 40
# format-patch's fixed mbox separator date (builtin/log.c), not a clock reading.
MBOX_FROM = f"From {ZERO_COMMIT} Mon Sep 17 00:00:00 2001"
HEADER_FROM = "From: patchctl <patchctl@invalid>"
HEADER_DATE = "Date: Thu, 1 Jan 1970 00:00:00 +0000"

# Each flag pins one thing that would otherwise change the patch bytes (house-style.md).
DIFF_TREE_FLAGS: tuple[str, ...] = (
    "diff-tree",
    "-r",  # recurse: one entry per file, never per directory
    "-p",  # a patch, not a raw listing
    "--binary",  # binary files as `GIT binary patch` hunks (git apply can apply them)
    "--full-index",  # full 40-hex blob ids: stable across repos, enables am -3
    "--no-color",  # no escape codes in stored bytes
    "--no-ext-diff",  # diff.external / GIT_EXTERNAL_DIFF never run
    "--no-textconv",  # textconv filters never rewrite content
    "--no-renames",  # rename policy: a rename is a delete plus an add (exact, config-free)
    "--diff-algorithm=myers",  # one fixed algorithm (gbp #1030044)
    "--indent-heuristic",  # git's default, explicit so diff.indentHeuristic cannot flip it
    "-U3",  # context lines are part of the bytes
    "--inter-hunk-context=0",  # hunk merging too (zulip-mobile #5407)
    "-O/dev/null",  # no diff.orderFile: paths in git's own order
    "--ignore-submodules=none",  # gitlinks compared like any entry
    "--src-prefix=a/",  # prefixes fixed whatever diff.noprefix / mnemonicPrefix say
    "--dst-prefix=b/",
)


class NothingToCapture(PatchctlError):
    """The working tree equals the tree before the patch: there is no patch to write."""


def diff_trees(git: Git, pre: str, post: str, root: str = ".") -> bytes:
    """The canonical diff bytes from tree `pre` to tree `post` (optionally under `root`)."""
    relative = () if root in (".", "") else (f"--relative={root.rstrip('/')}/",)
    return git.run(*DIFF_TREE_FLAGS, *relative, pre, post, "--")


def patch_header(patch: Patch) -> bytes:
    """The format-patch-like header: fixed From/Date, subject, DEP-3-style trailers, `---`."""
    lines = [
        MBOX_FROM,
        HEADER_FROM,
        HEADER_DATE,
        f"Subject: [PATCH] {_one_line(patch.title or patch.id)}",
        "",
        f"Patchctl-Id: {patch.id}",
        f"Upstream-Status: {_one_line(patch.upstream_status or 'Pending')}",
        f"Origin: {_one_line(patch.origin or 'patchctl')}",
        "---",
        "",
    ]
    return "\n".join(lines).encode("utf-8")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def render_patch(patch: Patch, diff: bytes) -> bytes:
    """Header plus diff: the exact bytes of the patch file."""
    return patch_header(patch) + diff


def export_patch(git: Git, patch: Patch, pre: str, post: str, root: str = ".") -> bytes:
    """Re-export: the patch file bytes that trees `pre` -> `post` and `patch`'s metadata give."""
    return render_patch(patch, diff_trees(git, pre, post, root))


@contextmanager
def temp_index(git: Git, seed: Path | None = None) -> Iterator[dict[str, str]]:
    """A throwaway index file (a copy of `seed` when given); yields the env that selects it."""
    with tempfile.TemporaryDirectory(prefix="patchctl-index-") as tmp:
        index = Path(tmp) / "index"
        if seed is not None and seed.is_file():
            shutil.copy2(seed, index)  # stat data AND mtime kept: racy-git checks stay valid
        yield {"GIT_INDEX_FILE": str(index)}


def git_dir(git: Git) -> Path:
    """The absolute .git directory of a repository."""
    return Path(os.fsdecode(git.run("rev-parse", "--absolute-git-dir").strip()))


def snapshot_worktree(git: Git) -> str:
    """The tree id of the whole working tree as `git add -A` sees it; the index is untouched."""
    with temp_index(git, git_dir(git) / "index") as env:
        git.run("add", "-A", "--", ".", env=env)
        return git.run("write-tree", env=env).decode("ascii").strip()


def write_if_changed(path: Path, data: bytes) -> bool:
    """Write `data` atomically unless the file already holds exactly these bytes."""
    if path.is_file() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return True


@dataclass(frozen=True)
class Captured:
    """What a capture produced: the patch bytes and the trees around them."""

    patch: Patch
    data: bytes
    pre_tree: str
    post_tree: str
    written: bool


def capture_trees(git: Git, patch: Patch, pre: str, post: str, root: str = ".") -> bytes:
    """The patch bytes for `pre` -> `post`; NothingToCapture when the trees are equal."""
    if pre == post:
        raise NothingToCapture(
            f"{patch.id}: the working tree has no changes since the commit before it",
            hint="edit files in the clean room, then run capture again",
        )
    return export_patch(git, patch, pre, post, root)
