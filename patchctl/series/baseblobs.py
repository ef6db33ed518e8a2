"""The base blobs a patch names, and whether the series rebuilds them.

A git patch's `index <old>..<new>` lines name the blob each file had before the patch. `git
am -3` builds a three-way merge's base from those ids and fails ("sha1 information is lacking
or useless") when the repository lacks them: a fork that moved to a new upstream no longer has
the old blobs. patchctl does not store them: it rebuilds them. The tree before a patch is the
pinned upstream with the patches before it applied (series.yaml records it as `pre_tree`;
`verify` and `rebase` rebuild it), and the blob a patch names must be the one at its path in
that tree. Then a rebase's three-way merge, whose base is that rebuilt tree, merges from the
very blobs the patch names, whatever the new upstream holds.

`check` says for each named id whether the rebuilt tree reproduces it:
- a full id (40 or 64 hex digits) when it is the id of the file there;
- an abbreviated id (7 or more digits, as `git format-patch` writes without `--full-index`)
  only by its prefix: it is reproduced when the id of the file there starts with it (such an
  id cannot tell apart two blobs that share the prefix; it is counted as abbreviated);
- an id of zeros (a new file) names nothing and is not checked.
Not reproduced (`Unreproduced`): the patch was made on another version of the file (an
imported patch that applies at an offset or with fuzz), its index line was edited, or the
file is missing. A rebase still merges from the rebuilt tree, the content the patch was
actually applied to (a base built from the named blob would not lead to the patch's old result),
and `verify` reports the patch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from patchctl.gitlayer.trees import TREE_MODE, Entry, TreeStore
from patchctl.patchfmt.parse import display, parse


@dataclass(frozen=True)
class Unreproduced:
    """A named base blob the rebuilt tree does not hold at the patch's path."""

    path: str  # the file's path in the tree (series root included)
    named: str  # the id the patch's index line names
    rebuilt: str | None  # the id of the file there, None when there is none

    def describe(self) -> str:
        """`path: named <id>, rebuilt <id or "no file">`."""
        there = self.rebuilt if self.rebuilt is not None else "no such file"
        return f"{self.path}: index line names {self.named}, the rebuilt tree has {there}"


@dataclass(frozen=True)
class BaseCheck:
    """The base blobs of one patch checked against its rebuilt pre tree."""

    named: int  # how many ids were checked
    abbreviated: int  # how many of them were abbreviated (checked by prefix only)
    unreproduced: tuple[Unreproduced, ...] = ()

    @property
    def ok(self) -> bool:
        """True when every named base blob is reproduced."""
        return not self.unreproduced


def named_bases(data: bytes, root: str = ".") -> list[tuple[bytes, str]]:
    """(path in the tree, named id) of every file section of `data` with an `index` line whose
    pre-image is a file (not a new file), in patch order."""
    prefix = b"" if root in (".", "") else root.strip("/").encode() + b"/"
    found = []
    for diff in parse(data):
        if diff.base is None or diff.old is None or not diff.base.strip("0"):
            continue
        found.append((prefix + diff.old, diff.base))
    return found


def check(
    store: TreeStore,
    tree: str,
    data: bytes,
    root: str = ".",
    *,
    known: Mapping[bytes, tuple[Entry | None, Entry | None]] | None = None,
) -> BaseCheck:
    """Whether `tree` (the series rebuilt up to the patch before) holds every base blob that
    patch bytes `data` name. `known`: the entries of `tree` already known at some paths (the
    `before` side of the patch's own changes, as `Git.raw_changes` lists them), read
    instead of the tree."""
    named = named_bases(data, root)
    missing = []
    for path, oid in named:
        seen = known.get(path) if known is not None else None
        found = seen[0] if seen is not None else store.find(tree, path).entry
        rebuilt = found[1] if found is not None and found[0] != TREE_MODE else None
        if rebuilt is None or not rebuilt.startswith(oid):
            missing.append(Unreproduced(display(path), oid, rebuilt))
    short = sum(1 for _p, oid in named if len(oid) not in (40, 64))
    return BaseCheck(len(named), short, tuple(missing))
