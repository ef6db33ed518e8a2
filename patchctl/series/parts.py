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

from patchctl.gitlayer.git import Git
from patchctl.patchfmt.parse import parse as parse_names
from patchctl.series.model import Patch
from patchctl.series.patchfile import diff_trees, render_patch

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
    git: Git,
    patch: Patch,
    old: bytes | None,
    pre: str,
    post: str,
    root: str = ".",
    *,
    git_style: bool = False,
    diff: bytes | None = None,
) -> bytes:
    """The bytes of `patch` for trees `pre` -> `post`, its diff made with the pinned flags
    (`diff`: that diff, made already, e.g. by `diff_tree_pairs` for many patches at once).

    An imported patch keeps its own header and trailer (`old`, the file's current bytes) and,
    unless `git_style`, its own diff dialect (in_dialect: plain `diff -u`, quilt's `Index:`
    preamble, git with abbreviated ids); a patch patchctl wrote gets patchctl's header from
    the series metadata, as `capture` writes it. `git` must read both trees (a scratch
    repository: no attributes apply).
    """
    if diff is None:
        diff = diff_trees(git, pre, post, root)
    if patch.imported and old is not None:
        if not git_style:
            diff = in_dialect(split_patch(old).diff, diff)
        return with_diff(old, diff)
    return render_patch(patch, diff)


# ----------------------------------------------------------------------------- dialects
#
# A regenerated diff comes from `git diff-tree` (gitlayer/git.py, DIFF_TREE_FLAGS): `diff --git`
# sections with full 40-hex `index` lines. An imported patch written another way keeps its
# way: a plain `diff -u` or quilt patch gets plain sections whose `---`/`+++` lines (and
# `Index:` preamble) are its own, for each file it already named; a git patch with
# abbreviated ids keeps their length. Only what a plain diff can say is written so: a section
# with a mode change, a binary hunk or an executable new file stays a git section (git apply
# reads both in one patch).

GIT_ONLY = re.compile(
    rb"^(old mode |new mode |rename from |copy from |similarity index |dissimilarity index "
    rb"|GIT binary patch|Binary files |(new|deleted) file mode (?!100644))"
)
INDEX_LINE = re.compile(rb"^index ([0-9a-f]{7,64})\.\.([0-9a-f]{7,64})(.*)$", re.DOTALL)
QUILT_RULE = b"=" * 67


def diff_sections(diff: bytes) -> list[tuple[bytes, bytes]]:
    """A diff part cut into file sections: (header lines, hunk lines) each, in order; text
    between sections stays with the hunks before it."""
    lines = diff.splitlines(keepends=True)
    sections: list[tuple[list[bytes], list[bytes]]] = []
    i = 0
    in_header = False
    while i < len(lines):
        line = lines[i]
        if m := HUNK.match(line):
            end = _skip_hunk(lines, i + 1, _count(m.group(1)), _count(m.group(2)))
            if not sections:
                sections.append(([], []))
            sections[-1][1].extend(lines[i:end])
            in_header, i = False, end
            continue
        opens = GIT_HEADER.match(line) and (
            not line.startswith(b"--- ") or _starts_section(lines, i)
        )
        if opens and not in_header:
            sections.append(([], []))
            in_header = True
        if in_header:
            sections[-1][0].append(line)
        elif sections:
            sections[-1][1].append(line)
        else:
            sections.append(([line], []))
        i += 1
    return [(b"".join(head), b"".join(body)) for head, body in sections]


def _names(header: bytes) -> tuple[bytes, bytes] | None:
    """The `---` and `+++` lines of a section header (None when it has none)."""
    lines = header.splitlines(keepends=True)
    for i, line in enumerate(lines[:-1]):
        if line.startswith(b"--- ") and lines[i + 1].startswith(b"+++ "):
            return line, lines[i + 1]
    return None


def _key(header: bytes) -> bytes | None:
    """The path a section header names (after -p1), for matching old and new sections."""
    found = parse_names(header + b"@@ -1 +1 @@\n")
    return found[0].path if found else None


def in_dialect(old: bytes, new: bytes) -> bytes:
    """`new` (a `git diff-tree` diff) written the way `old` (the diff part of the patch it
    replaces) is: see the comment above."""
    old_sections = diff_sections(old)
    theirs: dict[bytes, bytes] = {}
    for header, _body in old_sections:
        key = _key(header)
        if key is not None:
            theirs.setdefault(key, header)
    sections = _in_order(diff_sections(new), list(theirs))
    if b"diff --git " in old or not old:
        return _abbreviated(old, b"".join(header + body for header, body in sections))
    quilt = any(line.startswith(b"Index: ") for line in old.splitlines())
    return b"".join(_plain_header(head, body, theirs, quilt) + body for head, body in sections)


def _in_order(sections: list[tuple[bytes, bytes]], order: list[bytes]) -> list[tuple[bytes, bytes]]:
    """The sections in the order the old patch named their files (git's own order for files
    it did not name, after those)."""
    rank = {key: n for n, key in enumerate(order)}

    def place(section: tuple[bytes, bytes]) -> int:
        key = _key(section[0])
        return rank.get(key, len(rank)) if key is not None else len(rank)

    return sorted(sections, key=place)


def _plain_header(header: bytes, body: bytes, theirs: dict[bytes, bytes], quilt: bool) -> bytes:
    """A git section's header as a plain one: the old patch's own for that file when it
    says the same (a new file from /dev/null, a deleted one to it), else its `---`/`+++`
    lines (under an `Index:` preamble for a quilt patch). The git header itself where a
    plain one cannot say what it does."""
    names = _names(header)
    git_only = any(GIT_ONLY.match(line) for line in header.splitlines())
    if names is None or git_only or b"GIT binary patch" in body:
        return header
    key = _key(header)
    own = theirs.get(key) if key is not None else None
    own_names = _names(own) if own is not None else None
    if own is not None and own_names is not None and _nature(own_names) == _nature(names):
        return own
    preamble = b""
    if quilt and key is not None:
        preamble = b"Index: " + key + b"\n" + QUILT_RULE + b"\n"
    return preamble + names[0] + names[1]


def _nature(names: tuple[bytes, bytes]) -> tuple[bool, bool]:
    """(creates the file, deletes it) by a section's `---`/`+++` lines."""
    return names[0].startswith(b"--- /dev/null"), names[1].startswith(b"+++ /dev/null")


def _abbreviated(old: bytes, new: bytes) -> bytes:
    """`new` with the `index` lines of its text sections cut to the id length `old` uses
    (full ids when `old` has full ones or none; a binary section keeps full ids: git apply
    checks a binary delta's preimage by it)."""
    found = (INDEX_LINE.match(line) for line in old.splitlines(keepends=True))
    width = next((len(m.group(1)) for m in found if m is not None), 40)
    if width >= 40:
        return new
    out = []
    for header, body in diff_sections(new):
        if b"GIT binary patch" not in body:
            header = b"".join(_cut(line, width) for line in header.splitlines(keepends=True))
        out.append(header + body)
    return b"".join(out)


def _cut(line: bytes, width: int) -> bytes:
    m = INDEX_LINE.match(line)
    if m is None:
        return line
    return b"index " + m.group(1)[:width] + b".." + m.group(2)[:width] + m.group(3)
