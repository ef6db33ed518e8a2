"""In-tree markers: fixed strings a patch puts into upstream files (e.g. `// patchctl 0078-dca`).

A marker lets whoever syncs with a new upstream find the code a patch owns with one grep.
`verify` checks that each marker a patch declares is absent before it and present after it;
`docs` lists them in the marker registry (docs/UPSTREAM_SYNC.md). Patch bytes are read, never
rewritten: markers are matched as bytes (UTF-8 encoded) against the lines a patch adds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from patchctl.git import Git

# `git grep` options: fixed strings, each match printed alone (-o) without a file name (-h),
# text files only (-I), and the grep.* settings that would change that output pinned off.
GREP_PINS = (
    "-c",
    "grep.lineNumber=false",
    "-c",
    "grep.column=false",
    "-c",
    "grep.fullName=false",
    "-c",
    "grep.patternType=fixed",
)
GREP_FLAGS = ("grep", "--no-color", "--no-textconv", "-I", "-F", "-o", "-h")


def markers_in_tree(
    git: Git, tree: str, markers: Sequence[str], paths: Sequence[str] | None = None
) -> frozenset[str]:
    """The subset of `markers` in at least one text file of `tree` (or of `paths` in it)."""
    if not markers or (paths is not None and not paths):
        return frozenset()
    patterns: list[str] = []
    for marker in markers:
        patterns += ["-e", marker]
    # :(literal) so that paths with glob characters mean themselves.
    specs = [] if paths is None else [f":(literal){p}" for p in paths]
    out = git.run(*GREP_PINS, *GREP_FLAGS, *patterns, tree, "--", *specs, ok=(0, 1))
    found = {line.decode("utf-8", "surrogateescape") for line in out.splitlines()}
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


def changed_paths(git: Git, pre: str, post: str) -> list[str]:
    """The paths whose entries differ between two trees."""
    out = git.run("diff-tree", "-r", "--name-only", "-z", "--no-renames", pre, post, "--")
    return [name.decode("utf-8", "surrogateescape") for name in out.split(b"\0") if name]


def check_markers(
    git: Git, pre: str, post: str, markers: Sequence[str], paths: Sequence[str] | None = None
) -> tuple[MarkerCheck, ...]:
    """Check every declared marker against the trees before and after a patch.

    With `paths` (the files the patch changes) only those files are searched: a marker found
    in an untouched file would be in both trees, which the caller rules out once for the
    upstream tree and by scanning the earlier patches' added lines (whole-tree greps of a
    large upstream cost ~0.5 s each; see docs/benchmarks).
    """
    before = markers_in_tree(git, pre, markers, paths)
    after = markers_in_tree(git, post, markers, paths)
    return tuple(MarkerCheck(m, m in before, m in after) for m in markers)


def added_by(patch_bytes: bytes, markers: Sequence[str]) -> frozenset[str]:
    """The markers that occur in lines `patch_bytes` adds."""
    added = [line for line in patch_bytes.splitlines() if _is_added(line)]
    return frozenset(m for m in markers if any(m.encode("utf-8") in line for line in added))


def files_adding(patch_bytes: bytes, marker: str) -> tuple[str, ...]:
    """The paths (b/ side) whose added lines contain `marker`, in patch order, unique."""
    needle = marker.encode("utf-8")
    found: list[str] = []
    current: str | None = None
    for line in patch_bytes.splitlines():
        current = _next_path(line, current)
        if _is_added(line) and needle in line and current is not None and current not in found:
            found.append(current)
    return tuple(found)


def _is_added(line: bytes) -> bool:
    return line.startswith(b"+") and not line.startswith(b"+++ ")


def _next_path(line: bytes, current: str | None) -> str | None:
    if line.startswith(b"+++ "):
        name = line[4:].split(b"\t", 1)[0]
        if name == b"/dev/null":
            return current
        return _strip_prefix(_unquote(name))
    if line.startswith(b"diff --git "):
        return None
    return current


def _strip_prefix(name: bytes) -> str:
    text = name.decode("utf-8", "surrogateescape")
    return text.split("/", 1)[1] if "/" in text else text


def _unquote(name: bytes) -> bytes:
    """Undo git's C-style quoting of a path ("b/caf\\303\\251") for display."""
    if not (name.startswith(b'"') and name.endswith(b'"')):
        return name
    body = name[1:-1].decode("ascii", "surrogateescape")
    return body.encode("latin-1", "surrogateescape").decode("unicode_escape").encode("latin-1")


def registry_rows(
    entries: Iterable[tuple[str, str, bytes]],
) -> list[tuple[str, str, tuple[str, ...]]]:
    """(marker, patch id, files adding it) for each (patch id, marker, patch bytes) given."""
    return [(marker, pid, files_adding(data, marker)) for pid, marker, data in entries]
