"""The bytes of a patch file patchctl writes: a format-patch-like header and the canonical diff.

The diff comes from `diff-tree` (plumbing) with every byte-changing knob written out below,
and the header is built only from series metadata: no clock, no local identity, a zero commit
id. The same trees and metadata always give the same bytes: capture writes them, verify's
re-export step recomputes and compares them.
"""

from __future__ import annotations

from collections.abc import Sequence

from patchctl.gitlayer.git import Git
from patchctl.series.model import Patch

ZERO_COMMIT = "0" * 40
# format-patch's fixed mbox separator date (builtin/log.c), not a clock reading.
MBOX_FROM = f"From {ZERO_COMMIT} Mon Sep 17 00:00:00 2001"
HEADER_FROM = "From: patchctl <patchctl@invalid>"
HEADER_DATE = "Date: Thu, 1 Jan 1970 00:00:00 +0000"

def diff_trees(git: Git, pre: str, post: str, root: str = ".", paths: Sequence[str] = ()) -> bytes:
    """The canonical diff bytes from tree `pre` to tree `post` (optionally under `root`, and
    only of the tree paths `paths`, taken literally, when given)."""
    return git.canonical_diff(pre, post, root, paths)


def diff_tree_pairs(git: Git, pairs: Sequence[tuple[str, str]], root: str = ".") -> list[bytes]:
    """`diff_trees` for many (pre, post) pairs in one `diff-tree --stdin` process.

    git echoes each input line ("<pre> <post>") before that pair's diff; the output is split
    at those lines, in input order (a pair without differences yields b"").
    """
    if not pairs:
        return []
    out = git.canonical_diffs(pairs, root)
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
        *([*patch.description.split("\n"), ""] if patch.description else []),
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
