"""A patch applied exactly in memory, proved equal to what `git apply` writes, or nothing.

The rebase's common case is a patch whose every hunk sits exactly at its stated lines in the
new tree. `git apply` of it needs the tree in an index first (two processes to move the index,
one to apply, one to write the tree). Here the hunks are spliced into the blobs read through
the long-lived reader, the new blobs and trees written through long-lived pipes, and the
result is then *proved* to be `git apply`'s: the canonical diff of the two trees (which the
rebase computes anyway, to regenerate the patch's bytes) must hold exactly the patch's hunks,
at the same lines, file by file. A diff of `pre` and `post` with those hunks means every hunk
of the patch matches `pre` at its stated place, where `git apply` tries it first (without
fuzz or offset), and that applying them there gives `post`.

It handles only what it can read with certainty: git sections changing an existing regular
file or adding one (mode 100644 or 100755) at a path of plain names, text hunks with
context, no `\\ No newline` marker, no rename, copy, mode change, binary or deletion.
Anything else, or a hunk not at its place, or a proof that fails, returns None and the
caller runs `git apply` as before.
"""

from __future__ import annotations

import re

from patchctl.gitlayer.pipes import BlobWriter, ObjectReader
from patchctl.gitlayer.trees import Entry, TreeStore
from patchctl.series.parts import diff_sections, split_patch

HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
DIFF_GIT = re.compile(rb"^diff --git a/(\S+) b/(\S+)\r?\n\Z")
INDEX = re.compile(rb"^index [0-9a-f]{7,64}\.\.[0-9a-f]{7,64}(?: (100644|100755))?\r?\n\Z")
NEW_FILE = re.compile(rb"^new file mode (100644|100755)\r?\n\Z")
FILE_MODES = ("100644", "100755")
# A path component read with certainty: plain characters, not starting with a dot or dash and
# not ending with a dot (so never `.`, `..`, `.git` or a variant git's path checks refuse);
# any other path goes to `git apply`, which checks it.
SAFE_PART = re.compile(rb"[A-Za-z0-9_][A-Za-z0-9._+-]*(?<!\.)\Z")


def applied(
    store: TreeStore, reader: ObjectReader, blobs: BlobWriter, data: bytes, tree: str, root: str
) -> str | None:
    """The tree of `data` applied exactly to `tree` (hunks at their stated lines), when every
    section is one this module reads with certainty and fits; None otherwise. The caller
    must still prove the result (`same_hunks`) before taking it."""
    prefix = b"" if root in (".", "") else root.strip("/").encode() + b"/"
    changes: dict[bytes, Entry | None] = {}
    for header, hunks in diff_sections(split_patch(data).diff):
        section = _section(header)
        if section is None or not hunks.startswith(b"@@ "):
            return None
        path, new_mode = section
        full = prefix + path
        if full in changes:
            return None
        found = store.find(tree, full)
        if found.blocker is not None:
            return None
        if new_mode is None:  # a change of an existing file
            if found.entry is None or found.entry[0] not in FILE_MODES:
                return None
            blob = reader.read(found.entry[1])
            if blob is None or blob[0] != "blob":
                return None
            mode, lines = found.entry[0], _lines(blob[1])
        else:
            if found.entry is not None:
                return None
            mode, lines = new_mode, []
        result = _spliced(lines, hunks)
        if result is None:
            return None
        changes[full] = (mode, blobs.write(b"".join(result)))
    if not changes:
        return None
    return store.edit(tree, changes)


def _section(header: bytes) -> tuple[bytes, str | None] | None:
    """(path, mode of a new file or None) of a section header this module reads; else None."""
    lines = header.splitlines(keepends=True)
    if not lines or (m := DIFF_GIT.match(lines[0])) is None or m.group(1) != m.group(2):
        return None
    path, mode, names = m.group(1), None, 0
    if not all(SAFE_PART.match(part) for part in path.split(b"/")):
        return None
    for line in lines[1:]:
        if (new := NEW_FILE.match(line)) is not None and mode is None:
            mode = new.group(1).decode("ascii")
        elif INDEX.match(line):
            continue
        elif line.rstrip(b"\r\n") in (b"--- a/" + path, b"--- /dev/null", b"+++ b/" + path):
            names += 1
        else:
            return None
    if names != 2 or (mode is None) == (b"--- /dev/null\n" in lines):
        return None
    return path, mode


def _spliced(lines: list[bytes], hunks: bytes) -> list[bytes] | None:
    """`lines` with every hunk applied at its stated old-side lines; None when a hunk is not
    exactly there, or anything is uncertain."""
    body = _lines(hunks)
    out: list[bytes] = []
    done = 0  # lines of `lines` consumed
    delta = 0  # new-side lines minus old-side lines of the hunks so far
    i = 0
    while i < len(body):
        m = HUNK.match(body[i])
        if m is None:
            return None
        start, count = int(m.group(1)), int(m.group(2) or b"1")
        new_start, new_count = int(m.group(3)), int(m.group(4) or b"1")
        i += 1
        old: list[bytes] = []
        new: list[bytes] = []
        kinds = b""
        while i < len(body) and not body[i].startswith(b"@@ "):
            kind, text = body[i][:1], body[i][1:]
            if kind == b" ":
                old.append(text)
                new.append(text)
            elif kind == b"-":
                old.append(text)
            elif kind == b"+":
                new.append(text)
            else:
                return None  # `\ No newline`, a stripped blank line, anything else
            kinds += kind
            i += 1
        if len(old) != count or len(new) != new_count:
            return None
        if count == 0:
            if start != 0 or lines:  # only a file made from nothing
                return None
            at = 0
        else:
            at = start - 1
            if not kinds.startswith(b" ") or not kinds.endswith(b" "):
                return None  # git pins a hunk without leading/trailing context to an end
            if new_start != start + delta:
                return None  # git places a hunk by its new-side start: it must agree
        if at < done or lines[at : at + count] != old:
            return None
        out += lines[done:at] + new
        done = at + count
        delta += new_count - count
    return out + lines[done:]


def _lines(data: bytes) -> list[bytes]:
    """`data` cut after each `\\n`, as git cuts lines (a lone `\\r` ends no line)."""
    parts = data.split(b"\n")
    lines = [part + b"\n" for part in parts[:-1]]
    return [*lines, parts[-1]] if parts[-1] else lines


def same_hunks(patch: bytes, diff: bytes) -> bool:
    """True when the canonical diff `diff` holds exactly the hunks of patch bytes `patch`:
    the same files in the same order, the same hunk ranges and lines (the text git writes
    after a hunk's range, and the blob ids of index lines, may differ)."""
    return _hunk_lines(split_patch(patch).diff) == _hunk_lines(diff)


def _hunk_lines(diff: bytes) -> list[tuple[bytes, list[bytes]]]:
    found = []
    for header, hunks in diff_sections(diff):
        first = header.split(b"\n", 1)[0]
        lines = []
        for line in hunks.splitlines(keepends=True):
            m = HUNK.match(line)
            lines.append(m.group(0) if m is not None else line)
        found.append((first, lines))
    return found
