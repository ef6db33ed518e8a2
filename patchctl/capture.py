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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from patchctl import values
from patchctl.apply import commit_message as apply_message  # one commit format for apply + capture
from patchctl.apply import patch_sha256
from patchctl.cleanroom import Cleanroom
from patchctl.docs import render_docs
from patchctl.errors import ConfigError, DirtyTree, NotFound, PatchctlError
from patchctl.fsio import check_writable, refuse_overwrite, write_if_changed
from patchctl.git import Git
from patchctl.series import Patch, Series, check_savable

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


def diff_tree_pairs(git: Git, pairs: Sequence[tuple[str, str]], root: str = ".") -> list[bytes]:
    """`diff_trees` for many (pre, post) pairs in one `diff-tree --stdin` process.

    git echoes each input line ("<pre> <post>") before that pair's diff; the output is split
    at those lines, in input order (a pair without differences yields b"").
    """
    if not pairs:
        return []
    relative = () if root in (".", "") else (f"--relative={root.rstrip('/')}/",)
    query = "".join(f"{a} {b}\n" for a, b in pairs).encode("ascii")
    out = git.run(*DIFF_TREE_FLAGS, *relative, "--stdin", stdin=query)
    heads = []
    pos = 0
    for a, b in pairs:
        head = f"{a} {b}\n".encode("ascii")
        found = out.find(head, pos) if a != b else -1
        while found > 0 and out[found - 1 : found] != b"\n":
            found = out.find(head, found + 1)
        heads.append((found, len(head)))
        pos = found + len(head) if found >= 0 else pos
    starts = [f for f, _ in heads if f >= 0] + [len(out)]
    diffs = []
    for found, size in heads:
        if found < 0:
            diffs.append(b"")
            continue
        end = min(x for x in starts if x > found)
        diffs.append(out[found + size : end])
    return diffs


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


@dataclass(frozen=True)
class Captured:
    """What a capture produced: the patch bytes and the trees around them."""

    patch: Patch
    data: bytes
    pre_tree: str
    post_tree: str
    written: bool


def objects_dir(source: Path) -> Path:
    """The object directory of a repository given as worktree, git dir or objects dir."""
    for candidate in (source / ".git" / "objects", source / "objects", source):
        if (candidate / "info").is_dir() or (candidate / "pack").is_dir():
            return candidate.resolve()
    raise NotFound(f"{source} is not a git repository", hint="run patchctl cleanroom apply first")


@contextmanager
def scratch_repo(sources: Sequence[Path]) -> Iterator[Git]:
    """A temporary bare repository that reads objects from `sources` (via alternates).

    Bare and empty, it reads no .gitattributes: diffs made here (capture and verify's
    re-export alike) never depend on a worktree's `diff=`/`-diff`/`binary` attributes.
    """
    with tempfile.TemporaryDirectory(prefix="patchctl-scratch-") as tmp:
        git = Git.init(Path(tmp) / "scratch.git", bare=True)
        # A throwaway repository: nothing in it needs to survive a crash, so no fsync.
        with (git.repo / "config").open("a", encoding="utf-8") as config:
            # index v4 (prefix-compressed paths) makes each apply/write-tree read less.
            config.write("[core]\n\tfsync = none\n[index]\n\tversion = 4\n")
        found = [objects_dir(s) for s in sources]
        if any("\n" in str(f) or "\r" in str(f) for f in found):
            raise PatchctlError("an object directory path contains a line break; not using it")
        alternates = "".join(f"{f}\n" for f in found)
        (git.repo / "objects" / "info").mkdir(parents=True, exist_ok=True)
        (git.repo / "objects" / "info" / "alternates").write_text(alternates)
        yield git


def capture_trees(git: Git, patch: Patch, pre: str, post: str, root: str = ".") -> bytes:
    """The patch bytes for `pre` -> `post`; NothingToCapture when the trees are equal."""
    if pre == post:
        raise NothingToCapture(
            f"{patch.id}: the working tree has no changes since the commit before it",
            hint="edit files in the clean room, then run capture again",
        )
    outside = paths_outside_root(git, pre, post, root)
    if outside:
        raise PatchctlError(
            f"{patch.id}: changes outside the series root {root!r} cannot be in the patch: "
            + ", ".join(outside[:5])
            + (" ..." if len(outside) > 5 else ""),
            hint="revert them in the clean room (they would be lost), then capture again",
        )
    with scratch_repo([git.repo]) as scratch:
        return export_patch(scratch, patch, pre, post, root)


def paths_outside_root(git: Git, pre: str, post: str, root: str) -> list[str]:
    """Changed paths that lie outside `root` (always none for root '.')."""
    if root in (".", ""):
        return []
    prefix = root.rstrip("/") + "/"
    out = git.run("diff-tree", "-r", "--name-only", "-z", "--no-renames", pre, post, "--")
    names = [os.fsdecode(n) for n in out.split(b"\0") if n]
    return [n for n in names if not n.startswith(prefix)]


# ----------------------------------------------------------------------------- the commands


def new_patch(
    series: Series,
    patch_id: str,
    title: str,
    *,
    upstream_status: str = "Pending",
    origin: str = "patchctl",
    markers: tuple[str, ...] = (),
) -> tuple[Series, Patch]:
    """`patchctl new`: a series entry for `patch_id` at the top of the stack (not saved).

    Every value is checked by the rules series.yaml is loaded with, and the entry's file must
    not exist yet (a capture would overwrite it; DirtyTree, exit 8).
    """
    if patch_id in series.ids():
        raise ConfigError(f"patch {patch_id!r} already exists", path=series.path, key="id")
    problem = values.patch_id_problem(patch_id)
    if problem is not None:
        raise ConfigError(
            f"{values.shown(patch_id)} {problem}", path=series.path, key="id", hint="e.g. 0079-fix"
        )
    _check_text(series, "title", title.strip(), values.text_problem, required=True)
    _check_text(series, "upstream_status", upstream_status, values.text_problem)
    _check_text(series, "origin", origin, values.text_problem)
    for marker in markers:
        _check_text(series, "markers", marker, values.marker_problem)
    entry = Patch(
        id=patch_id,
        file=f"{patch_id}.patch",
        title=title.strip(),
        upstream_status=upstream_status,
        origin=origin,
        markers=markers,
    )
    target = series.patch_path(entry)
    if target.exists() or target.is_symlink():
        raise refuse_overwrite(target)
    updated = series.with_patch(entry)
    check_savable(updated)
    return updated, entry


def _check_text(
    series: Series,
    key: str,
    text: str,
    rule: Callable[[str], str | None],
    *,
    required: bool = False,
) -> None:
    problem = "is empty" if required and not text else rule(text)
    if problem is not None:
        raise ConfigError(
            f"{values.shown(text)} {problem}",
            path=series.path,
            key=key,
            hint="give one line of plain text (no control characters)",
        )


def stack_position(room: Cleanroom, series: Series, patch_id: str) -> tuple[str, bool]:
    """(parent commit of the patch's commit, whether the patch is already committed).

    Capture needs exactly the patches before `patch_id` applied, plus optionally `patch_id`
    itself on top (a re-capture); anything else would mix other patches' changes in.
    """
    before = list(series.ids()[: series.index(patch_id)])
    stack = room.stack()
    applied = [pid for _commit, pid, _sha in stack]
    if applied == before:
        return room.head(), False
    if applied == [*before, patch_id]:
        return (stack[-2][0] if len(stack) > 1 else room.base_commit()), True
    raise DirtyTree(
        f"clean room {room.path} has [{', '.join(applied) or 'nothing'}] applied; capturing "
        f"{patch_id} needs exactly the patches before it (and at most {patch_id} itself)",
        hint=f"patchctl cleanroom apply --upto {before[-1]}" if before else "apply nothing first",
    )


def commit_capture(room: Cleanroom, patch: Patch, data: bytes, parent: str) -> str:
    """Commit the captured tree as the patch's commit (same message as `cleanroom apply`)."""
    assert patch.post_tree is not None
    message = apply_message(patch, patch_sha256(data))
    commit = room.git.commit_tree(patch.post_tree, message, (parent,))
    room.git.update_ref("HEAD", commit, f"patchctl capture {patch.id}")
    # The index follows the new commit (stat data kept where blobs match); worktree untouched.
    room.git.run("read-tree", "--reset", "HEAD")
    room.git.run("update-index", "-q", "--refresh", ok=(0, 1))
    return commit


def capture_patch(series: Series, room: Cleanroom, patch_id: str) -> tuple[Series, Captured]:
    """`patchctl capture ID`: write the patch file, commit it in the clean room, record trees.

    Everything the capture and the save after it produce is checked before the first write:
    the updated series loads back, the docs render from the new bytes, every target is
    writable. A failure there leaves patch, series.yaml and clean room as they were.
    """
    patch = series.patch(patch_id)
    parent, _recapture = stack_position(room, series, patch_id)
    pre = room.git.tree_of(parent)
    post = snapshot_worktree(room.git)
    data = capture_trees(room.git, patch, pre, post, series.root)
    recorded = replace(patch, pre_tree=pre, post_tree=post, imported=False)
    updated = series.with_patch(recorded)
    check_savable(updated)
    docs = render_docs(updated, {patch.id: data})
    check_writable([series.patch_path(patch), series.path, *docs])
    written = write_if_changed(series.patch_path(patch), data)
    commit_capture(room, recorded, data, parent)
    return updated, Captured(recorded, data, pre, post, written)
