"""In-tree markers: fixed strings a patch puts into upstream files (e.g. `// patchctl 0078-dca`).

A marker lets whoever syncs with a new upstream find the code a patch owns with one grep.
`verify` checks that each marker a patch declares is absent before it and present after it;
`docs` lists them in the marker registry (docs/UPSTREAM_SYNC.md). Patch bytes are read, never
rewritten: markers are matched as bytes (UTF-8 encoded) against the lines a patch adds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from patchctl.gitlayer.git import Git
from patchctl.patchfmt import parse as patchparse


def markers_in_tree(
    git: Git, tree: str, markers: Sequence[str], paths: Sequence[str] | None = None
) -> frozenset[str]:
    """The subset of `markers` in at least one text file of `tree` (or of `paths` in it)."""
    if not markers or (paths is not None and not paths):
        return frozenset()
    matches = git.grep_fixed(tree, markers, paths)
    found = {line.decode("utf-8", "surrogateescape") for line in matches}
    return frozenset(m for m in markers if m in found or any(m in f for f in found))


@dataclass(frozen=True)
class MarkerCheck:
    """The result of checking one marker against a patch's pre and post trees."""

    marker: str
    in_pre: bool
    in_post: bool

    @property
    def ok(self) -> bool:
        """A marker must be introduced by its patch: absent before, present after."""
        return self.in_post and not self.in_pre


# git's binary heuristic (xdiff-interface.c buffer_is_binary): a NUL in the first 8000 bytes.
BINARY_PROBE = 8000


def read_blobs(git: Git, names: Sequence[str]) -> dict[str, bytes | None]:
    """Contents of `<tree>:<path>` names in one `cat-file --batch` (None: missing/not a blob)."""
    usable = [n for n in dict.fromkeys(names) if "\n" not in n]
    if not usable:
        return {}
    blobs: dict[str, bytes | None] = {}
    for name, found in zip(usable, git.cat_batch(usable), strict=True):
        blobs[name] = found[1] if found is not None and found[0] == b"blob" else None
    return blobs


def check_markers_batch(
    git: Git, jobs: Sequence[tuple[str, str, Sequence[str], Sequence[str]]]
) -> list[tuple[MarkerCheck, ...]]:
    """Check markers in the given paths of each (pre, post) pair; all blobs read in one process.

    Text files only, as `git grep -I`: a blob with a NUL in its first 8000 bytes is skipped.
    """
    names = [f"{t}:{p}" for pre, post, _m, paths in jobs for t in (pre, post) for p in paths]
    blobs = read_blobs(git, names)

    def present(tree: str, paths: Sequence[str], marker: str) -> bool:
        needle = marker.encode("utf-8")
        for path in paths:
            data = blobs.get(f"{tree}:{path}")
            if data is not None and b"\0" not in data[:BINARY_PROBE] and needle in data:
                return True
        return False

    return [
        tuple(MarkerCheck(m, present(pre, paths, m), present(post, paths, m)) for m in markers)
        for pre, post, markers, paths in jobs
    ]


def touched_paths(patch_bytes: bytes) -> list[str]:
    """Paths of the text files a patch changes, from its ---/+++ lines (-p1, unquoted).

    Only text hunks can add or remove a marker line, and every text hunk has these lines.
    """
    found: list[str] = []
    for diff in patchparse.parse(patch_bytes):
        if diff.has_names:
            for path in diff.paths():
                name = path.decode("utf-8", "surrogateescape")
                if name not in found:
                    found.append(name)
    return found


def added_by(patch_bytes: bytes, markers: Sequence[str]) -> frozenset[str]:
    """The markers that occur in lines `patch_bytes` adds."""
    added = [line for diff in patchparse.parse(patch_bytes) for line in diff.added]
    return frozenset(m for m in markers if any(m.encode("utf-8") in line for line in added))


def files_adding(patch_bytes: bytes, marker: str) -> tuple[str, ...]:
    """The paths (new side, for display) whose added lines contain `marker`, in patch order."""
    needle = marker.encode("utf-8")
    found: list[str] = []
    for diff in patchparse.parse(patch_bytes):
        name = patchparse.display(diff.path)
        if any(needle in line for line in diff.added) and name not in found:
            found.append(name)
    return tuple(found)
