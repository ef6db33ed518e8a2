"""Reading patch bytes: which files a patch touches, and the lines it adds and removes.

Read-only, and exact about the two things that break naive readers:
- paths: git quotes a path with special bytes C-style ("a/tab\\there"), appends a tab to
  a `---`/`+++` name that contains a space, and writes `diff --git a/X b/Y` with no
  quoting for spaces, so a path containing " b/" makes that line ambiguous. Names come
  from the `---`/`+++` lines (or `rename`/`copy` lines) first; a `diff --git` line is only
  used when a section has neither (binary, mode-only, empty files), and then with git's own
  rule for it (both halves name the same path);
- lines: a hunk's extent comes from the counts in its `@@` header, so an added line that
  starts with `++ ` or a removed `-- ` line is counted as what it is, not taken for a header.
Bytes are never rewritten; paths are returned as bytes (they need not be UTF-8).

A plain (non-git) diff's `---`/`+++` name is read as git apply reads it: up to a TAB, else
the whole line less a trailing timestamp, so `a/Core and Builtins/x.rst` names a path with
spaces. GNU patch and quilt read such a name only up to its first whitespace when no TAB
ends it (`a/Core`); `ambiguous_names` finds the names the two readings disagree on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# The timestamps diff(1) writes after a name (ISO 8601 and ctime forms), which git apply drops
# when no TAB separates them from the name.
TIMESTAMP = re.compile(
    rb"[ \t]+(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?(?: ?[+-]\d{4})?"
    rb"|[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})$"
)
HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
ESCAPES = {
    ord("a"): 7,
    ord("b"): 8,
    ord("t"): 9,
    ord("n"): 10,
    ord("v"): 11,
    ord("f"): 12,
    ord("r"): 13,
    ord('"'): 34,
    ord("\\"): 92,
}


@dataclass(frozen=True)
class Hunk:
    """One hunk's header numbers and how many context lines it holds."""

    old_start: int
    old_count: int
    new_start: int
    new_count: int
    context: int


@dataclass
class FileDiff:
    """One file's section of a patch (paths without their a/ b/ prefix)."""

    old: bytes | None = None  # None: /dev/null (a new file) or not known
    new: bytes | None = None  # None: /dev/null (a deleted file) or not known
    added: list[bytes] = field(default_factory=list)  # added lines, without the '+'
    removed: int = 0
    binary: bool = False
    header: bytes = b""  # the rest of its `diff --git ` line, if any
    has_names: bool = False  # names came from ---/+++ or rename/copy lines
    hunks: list[Hunk] = field(default_factory=list)
    full_index: bool = False  # an `index <old>..<new>` line with full object ids
    base: str | None = None  # the pre-image blob id its `index` line names (maybe abbreviated)

    @property
    def path(self) -> bytes:
        """The file's path: the new name, else the old one."""
        if self.new is not None:
            return self.new
        if self.old is not None:
            return self.old
        return self.header

    def paths(self) -> list[bytes]:
        """The old and new names that exist (one when they are equal)."""
        return list(dict.fromkeys(p for p in (self.old, self.new) if p is not None))


def unquote(name: bytes) -> bytes:
    """A path as git writes it in a patch: C-style quoted ("...") or verbatim."""
    if not (len(name) >= 2 and name.startswith(b'"') and name.endswith(b'"')):
        return name
    body, out, i = name[1:-1], bytearray(), 0
    while i < len(body):
        byte = body[i]
        if byte == 0x5C and i + 1 < len(body):  # backslash
            nxt = body[i + 1]
            if 0x30 <= nxt <= 0x37:  # \ooo octal
                digits = body[i + 1 : i + 4]
                out.append(int(digits, 8) & 0xFF)
                i += 1 + len(digits)
                continue
            out.append(ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(byte)
        i += 1
    return bytes(out)


def strip_prefix(name: bytes) -> bytes:
    """`a/x/y` -> `x/y` (the -p1 rule git apply and quilt use)."""
    return name.split(b"/", 1)[1] if b"/" in name else name


def _quoted_end(text: bytes) -> int:
    """The index just past the closing quote of the quoted name `text` starts with (-1: none)."""
    i = 1
    while i < len(text):
        if text[i] == 0x5C:
            i += 2
            continue
        if text[i] == 0x22:
            return i + 1
        i += 1
    return -1


def _name(field_bytes: bytes) -> bytes | None:
    """The path of a ---/+++ line's name field (None for /dev/null)."""
    if field_bytes.startswith(b'"'):
        end = _quoted_end(field_bytes)
        raw = unquote(field_bytes[:end]) if end > 0 else field_bytes
    else:
        raw = _plain_name(field_bytes)
    return None if raw == b"/dev/null" else strip_prefix(raw)


def _plain_name(field_bytes: bytes) -> bytes:
    """An unquoted ---/+++ name as git apply reads it: up to a TAB, else the line less a
    trailing timestamp."""
    line = field_bytes.removesuffix(b"\r")
    if b"\t" in line:
        return line.split(b"\t", 1)[0]
    return TIMESTAMP.sub(b"", line)


def gnu_patch_name(field_bytes: bytes) -> bytes:
    """An unquoted ---/+++ name as GNU patch and quilt read it: up to a TAB when one follows
    the name, else up to the first whitespace."""
    line = field_bytes.removesuffix(b"\r")
    if b"\t" in line:
        return line.split(b"\t", 1)[0]
    return line.split(None, 1)[0] if line.strip() else line


def ambiguous_names(data: bytes) -> list[tuple[bytes, bytes]]:
    """(git apply's reading, GNU patch's reading) of each plain-diff file whose `---`/`+++`
    name holds whitespace that no TAB ends: the two tools would touch different paths.
    Both readings after the -p1 strip. A git diff's section (after a `diff --git` line)
    quotes or TAB-ends such names and is skipped."""
    found: list[tuple[bytes, bytes]] = []
    lines = data.split(b"\n")
    in_git = False
    for i, line in enumerate(lines):
        if line.startswith(b"diff --git "):
            in_git = True
        elif line.startswith((b"diff ", b"Index: ")):
            in_git = False
        if in_git or not _is_names(lines, i):
            continue
        for field_bytes in (lines[i + 1][4:], line[4:]):  # the new name first
            if field_bytes.startswith(b'"'):
                continue
            ours = _plain_name(field_bytes)
            theirs = gnu_patch_name(field_bytes)
            if ours != b"/dev/null" and ours != theirs:
                found.append((strip_prefix(ours), strip_prefix(theirs)))
                break
    return found


def header_names(rest: bytes) -> tuple[bytes, bytes] | None:
    """(old, new) from what follows `diff --git `, by git's rule; None when ambiguous.

    Quoted names are read as such; two unquoted names must be the same path after their
    prefixes (git writes the line that way whenever no rename/copy lines follow).
    """
    rest = rest.removesuffix(b"\r")
    if rest.startswith(b'"'):
        end = _quoted_end(rest)
        if end < 0 or rest[end : end + 1] != b" ":
            return None
        second = rest[end + 1 :]
        return strip_prefix(unquote(rest[:end])), strip_prefix(unquote(second))
    if rest.endswith(b'"') and b' "' in rest:
        first, _, second = rest.rpartition(b' "')
        return strip_prefix(first), strip_prefix(unquote(b'"' + second))
    candidates = []
    for pos in range(len(rest)):
        if rest[pos : pos + 1] == b" ":
            old, new = strip_prefix(rest[:pos]), strip_prefix(rest[pos + 1 :])
            if old == new:
                candidates.append((old, new))
    return candidates[0] if len(candidates) == 1 else None


def parse(data: bytes) -> list[FileDiff]:
    """The file sections of patch bytes (git diffs and plain unified diffs), in order."""
    lines = data.split(b"\n")
    files: list[FileDiff] = []
    current: FileDiff | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(b"diff --git "):
            current = FileDiff(header=line[len(b"diff --git ") :])
            files.append(current)
        elif _is_names(lines, i):
            if current is None or current.has_names or current.added or current.removed:
                current = FileDiff()
                files.append(current)
            current.old, current.new = _name(line[4:]), _name(lines[i + 1][4:])
            current.has_names = True
            i += 2
            continue
        elif current is not None and HUNK.match(line):
            i = _hunk(lines, i, current)
            continue
        elif current is not None:
            _git_header_line(line, current)
        i += 1
    for diff in files:
        if not diff.has_names:
            _names_from_header(diff)
    return files


def nul_names(data: bytes) -> list[bytes]:
    """The names of file sections that hold a NUL byte, raw or C-quoted (`\\000`): no file
    system path can, and git apply cuts such a name at the NUL (another file's name)."""
    if b"\0" not in data and b"\\000" not in data:
        return []
    found = []
    for diff in parse(data):
        for name in (diff.old, diff.new, diff.header):
            if name is not None and b"\0" in name:
                found.append(name)
    return found


def zero_context(data: bytes) -> bool:
    """True when some hunk has no context line at all and changes lines inside a file (as
    `diff -U0` writes every hunk): git apply then needs `--unidiff-zero` to place it by
    its line numbers, as GNU patch, quilt and dpkg-source do. A hunk that makes a file
    from nothing (`@@ -0,0 ...`) needs no context and does not count."""
    if b"\n@@ -" not in data and not data.startswith(b"@@ -"):
        return False
    return any(h.context == 0 and h.old_start > 0 for d in parse(data) for h in d.hunks)


def _is_names(lines: list[bytes], i: int) -> bool:
    return lines[i].startswith(b"--- ") and i + 1 < len(lines) and lines[i + 1].startswith(b"+++ ")


def _hunk(lines: list[bytes], i: int, diff: FileDiff) -> int:
    """Count one hunk's lines (its extent from the @@ counts); return the next line index."""
    match = HUNK.match(lines[i])
    assert match is not None
    old_start, new_start = int(match.group(1)), int(match.group(3))
    old_count = int(match.group(2)) if match.group(2) is not None else 1
    new_count = int(match.group(4)) if match.group(4) is not None else 1
    old, new, context = old_count, new_count, 0
    i += 1
    while i < len(lines) and (old > 0 or new > 0):
        line = lines[i]
        tag = line[:1]
        if tag == b"+":
            diff.added.append(line[1:])
            new -= 1
        elif tag == b"-":
            diff.removed += 1
            old -= 1
        elif tag in (b" ", b""):
            old, new, context = old - 1, new - 1, context + 1
        elif tag != b"\\":  # "\ No newline at end of file" belongs to the line before
            break
        i += 1
    while i < len(lines) and lines[i].startswith(b"\\"):
        i += 1
    diff.hunks.append(Hunk(old_start, old_count, new_start, new_count, context))
    return i


FULL_INDEX = re.compile(rb"^index (?:[0-9a-f]{40}|[0-9a-f]{64})\.\.(?:[0-9a-f]{40}|[0-9a-f]{64})\b")


INDEX_IDS = re.compile(rb"^index ([0-9a-f]{7,64})\.\.([0-9a-f]{7,64})(?:[ \r]|$)")


def _git_header_line(line: bytes, diff: FileDiff) -> None:
    if FULL_INDEX.match(line):
        diff.full_index = True
    if (ids := INDEX_IDS.match(line)) is not None:
        diff.base = ids.group(1).decode("ascii")
    if line.startswith(b"GIT binary patch") or (
        line.startswith(b"Binary files ") and line.rstrip(b"\r").endswith(b" differ")
    ):
        diff.binary = True
    for prefix, side in (
        (b"rename from ", "old"),
        (b"copy from ", "old"),
        (b"rename to ", "new"),
        (b"copy to ", "new"),
    ):
        if line.startswith(prefix) and not diff.has_names:
            value = line[len(prefix) :].removesuffix(b"\r")
            name = unquote(value)
            if side == "old":
                diff.old = name
            else:
                diff.new = name


def _names_from_header(diff: FileDiff) -> None:
    if diff.old is not None and diff.new is not None:
        return  # rename/copy lines named both sides
    names = header_names(diff.header)
    if names is not None:
        diff.old = diff.old if diff.old is not None else names[0]
        diff.new = diff.new if diff.new is not None else names[1]


def display(path: bytes) -> str:
    """A path for humans and generated docs: UTF-8, other bytes as \\xNN escapes."""
    return path.decode("utf-8", "backslashreplace")
