"""The three parts of a patch file, and the bytes of a patch whose diff was regenerated.

A patch file is `header + diff + trailer`:
- the header is everything before the first file section: a DEP-3 or gbp-pq header, a mail
  header with its body, a `---` line and a diffstat, free text. `git apply` never reads it;
  it is the patch's own and is kept byte for byte whenever patchctl rewrites the diff
  (`refresh`, `import --refresh`, `capture` and `rebase` of an imported patch);
- the diff is every file section, from the first one to the end of the last hunk (by the
  line counts in the `@@` headers) or binary block: git's `diff --git` sections and the
  plain `Index:` / `diff ...` / `--- ` + `+++ ` sections quilt and `diff -u` write;
- the trailer is what follows the last hunk, e.g. format-patch's `-- ` signature line and
  git version. It is kept as well.
Only the diff part is ever replaced (`with_diff`), so a regenerated patch differs from the
old one in its diff bytes alone. Text between two file sections belongs to the diff part and
is not kept when the diff is regenerated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from patchctl.git import Git
from patchctl.patchfile import diff_trees, render_patch
from patchctl.series import Patch

HUNK = re.compile(rb"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
# Lines that open or belong to a file section's header (outside a hunk).
SECTION_START = re.compile(rb"^diff --git ")
PLAIN_PREAMBLE = re.compile(rb"^(Index: |={5,}\r?$|diff )")
GIT_HEADER = re.compile(
    rb"^(diff --git |old mode |new mode |deleted file mode |new file mode |copy from |copy to "
    rb"|rename from |rename to |similarity index |dissimilarity index |index |Binary files "
    rb"|--- |\+\+\+ |Index: |={5,}\r?$|diff )"
)
BINARY = re.compile(rb"^GIT binary patch\r?$")
BINARY_BLOCK = re.compile(rb"^(literal|delta) \d+\r?$")


@dataclass(frozen=True)
class PatchParts:
    """A patch file's bytes cut into header, diff and trailer (joined they are the file)."""

    header: bytes
    diff: bytes
    trailer: bytes

    def join(self) -> bytes:
        """The file's bytes."""
        return self.header + self.diff + self.trailer


def split_patch(data: bytes) -> PatchParts:
    """Cut patch bytes into header, diff and trailer (a file without a diff is all header)."""
    lines = data.splitlines(keepends=True)
    start = _diff_start(lines)
    if start is None:
        return PatchParts(data, b"", b"")
    end = _diff_end(lines, start)
    head = sum(len(line) for line in lines[:start])
    tail = sum(len(line) for line in lines[:end])
    return PatchParts(data[:head], data[head:tail], data[tail:])


def _diff_start(lines: list[bytes]) -> int | None:
    """The first line of the first file section (with quilt's `Index:` preamble), or None."""
    for i, line in enumerate(lines):
        if SECTION_START.match(line) or _plain_section_at(lines, i):
            while i > 0 and PLAIN_PREAMBLE.match(lines[i - 1]):
                i -= 1
            return i
    return None


def _plain_section_at(lines: list[bytes], i: int) -> bool:
    """A `--- old` line followed by `+++ new` and a hunk header: a plain unified diff."""
    return (
        lines[i].startswith(b"--- ")
        and i + 2 < len(lines)
        and lines[i + 1].startswith(b"+++ ")
        and HUNK.match(lines[i + 2]) is not None
    )


def _diff_end(lines: list[bytes], start: int) -> int:
    """The index after the last line that belongs to a file section."""
    end = start
    i = start
    while i < len(lines):
        line = lines[i]
        if m := HUNK.match(line):
            i = _skip_hunk(lines, i + 1, _count(m.group(1)), _count(m.group(2)))
            end = i
        elif BINARY.match(line):
            i = _skip_binary(lines, i + 1)
            end = i
        elif GIT_HEADER.match(line) and (not line.startswith(b"--- ") or _starts_section(lines, i)):
            i += 1
            end = i
        else:
            i += 1  # text between sections, or the trailer when no section follows
    return end


def _starts_section(lines: list[bytes], i: int) -> bool:
    """`--- ` outside a hunk is a file name only when `+++ ` follows (else it is text)."""
    return i + 1 < len(lines) and lines[i + 1].startswith(b"+++ ")


def _count(raw: bytes | None) -> int:
    return 1 if raw is None else int(raw)


def _skip_hunk(lines: list[bytes], i: int, old: int, new: int) -> int:
    """The index after a hunk whose body starts at `i` with `old`/`new` lines to consume."""
    while i < len(lines) and (old > 0 or new > 0):
        first = lines[i][:1]
        if first in (b" ", b"\n", b"\r"):
            old, new = old - 1, new - 1
        elif first == b"-":
            old -= 1
        elif first == b"+":
            new -= 1
        elif first != b"\\":
            break  # a truncated hunk: stop where its lines stop
        i += 1
    while i < len(lines) and lines[i].startswith(b"\\"):
        i += 1  # "\ No newline at end of file" belongs to the last line
    return i


def _skip_binary(lines: list[bytes], i: int) -> int:
    """The index after a `GIT binary patch` body: one or two literal/delta blocks."""
    for _block in range(2):
        if i >= len(lines) or not BINARY_BLOCK.match(lines[i]):
            break
        i += 1
        while i < len(lines) and lines[i].strip(b"\r\n"):
            i += 1
        i = min(i + 1, len(lines))  # the blank line that closes the block
    return i


def with_diff(data: bytes, diff: bytes) -> bytes:
    """`data` with its diff part replaced by `diff`: header and trailer kept byte for byte."""
    parts = split_patch(data)
    return parts.header + diff + parts.trailer


def regenerated(
    git: Git, patch: Patch, old: bytes | None, pre: str, post: str, root: str = "."
) -> bytes:
    """The bytes of `patch` for trees `pre` -> `post`, its diff made with the pinned flags.

    An imported patch keeps its own header and trailer (`old`, the file's current bytes);
    a patch patchctl wrote gets patchctl's header from the series metadata, as `capture`
    writes it. `git` must read both trees (a scratch repository: no attributes apply).
    """
    diff = diff_trees(git, pre, post, root)
    if patch.imported and old is not None:
        return with_diff(old, diff)
    return render_patch(patch, diff)
