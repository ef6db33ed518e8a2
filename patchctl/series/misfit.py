"""A cheap proof that patch bytes cannot apply exactly to a tree, without running `git apply`.

`git apply` without fuzz places a hunk where its old side's lines are, byte for byte; the
hunk lands where its header says (no drift) only when the file holds those lines starting at
the hunk's old-side start line. So when, for some hunk with an old side, the file at that
line does not hold exactly those lines, the patch cannot apply exactly without drift: it
applies at an offset, or not at all. A rebase then goes straight to the three-way merge it
would have ended in anyway, and saves the two git processes of a failed exact attempt.

The check proves only that negative. Whenever it cannot read a patch with certainty (a binary
or zero-context hunk, a `\\ No newline` marker, a missing file, an odd name), it says
nothing, and `git apply` decides as before.
"""

from __future__ import annotations

import re

from patchctl.gitlayer.pipes import ObjectReader
from patchctl.gitlayer.trees import TreeStore
from patchctl.series.parts import diff_sections, split_patch

HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")


def misfits(store: TreeStore, reader: ObjectReader, data: bytes, tree: str, root: str) -> bool:
    """True only when some hunk of `data` provably does not match `tree` at its old-side
    start line (so it cannot apply exactly, without drift); False when unsure or when every
    hunk matches."""
    prefix = "" if root in (".", "") else root.strip("/") + "/"
    for header, hunks in diff_sections(split_patch(data).diff):
        name = _old_name(header)
        if name is None:
            return False
        if not hunks.startswith(b"@@ "):
            return False  # a binary hunk, a mode change: git decides
        found = store.find(tree, (prefix + name).encode("utf-8", "surrogateescape"))
        if found.entry is None or found.entry[0] not in ("100644", "100755"):
            return False
        blob = reader.read(found.entry[1])
        if blob is None or blob[0] != "blob":
            return False
        verdict = _section_misfits(blob[1].splitlines(keepends=True), hunks)
        if verdict is None:
            return False
        if verdict:
            return True
    return False


def _old_name(header: bytes) -> str | None:
    """The path of a section's `--- ` line without its first component (as `-p1` reads
    it); None for a new file or a section without one."""
    for line in header.splitlines():
        if line.startswith(b"--- "):
            raw = line[4:].split(b"\t", 1)[0]
            if raw == b"/dev/null" or raw.startswith(b'"') or b"/" not in raw:
                return None
            return raw.split(b"/", 1)[1].decode("utf-8", "surrogateescape")
    return None


def _section_misfits(lines: list[bytes], hunks: bytes) -> bool | None:
    """True when a hunk's old side is not at its start line in `lines`; None when unsure."""
    body = hunks.splitlines(keepends=True)
    i = 0
    while i < len(body):
        m = HUNK.match(body[i])
        if m is None:
            return None
        start, count = int(m.group(1)), int(m.group(2) or b"1")
        if count == 0:
            return None  # zero context: placed by line number (`--unidiff-zero`)
        old: list[bytes] = []
        new_lines = 0
        i += 1
        while i < len(body) and (len(old) < count or body[i][:1] in (b"+", b"\\")):
            line = body[i]
            kind = line[:1]
            if kind == b"\\":
                return None  # `\ No newline at end of file`
            if kind in (b" ", b"-"):
                old.append(line[1:])
            elif kind == b"+":
                new_lines += 1
            elif line in (b"\n", b"\r\n"):
                old.append(line)  # a blank context line whose space was stripped
            else:
                return None
            i += 1
        if len(old) != count:
            return None
        if lines[start - 1 : start - 1 + count] != old:
            return True
    return False
