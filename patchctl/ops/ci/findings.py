"""Findings of `patchctl ci`: a problem placed on a file and line, and the forms CI shows.

A finding names the file a reviewer should open (the patch file, series.yaml or a generated
doc, relative to the current directory when it lies under it) and a line in it: the `@@`
header of the hunk that fails, the `diff --git` line of the file section that differs, the
first line that differs from what patchctl would write, else line 1. The renderers turn
findings into GitHub workflow commands (`::error file=...,line=...::`, which GitHub shows on
the pull request's diff) and GitLab's code-quality report (a JSON array the job stores as a
`codequality` report artifact). Pure functions: nothing here reads or writes a file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from patchctl.patchfmt.parse import HUNK, strip_prefix, unquote

CORRUPT_AT = re.compile(r"corrupt patch at line (\d+)")
FAILED_AT = re.compile(r"patch failed: (.+):(\d+)")
DIFFERING_PATH = re.compile(r"first differing path: (.+)$")
DIFFERING_LINE = re.compile(r"first differing byte at offset \d+ \(line (\d+)\)")
FILE_ERROR = re.compile(r"error: ([^:\s]+): ")


@dataclass(frozen=True)
class Finding:
    """One problem `patchctl ci` found, placed on a file and a line."""

    series: str  # the series directory as given
    check: str  # series | patches | docs | apply | verify | build
    path: str  # the file to annotate
    line: int  # 1-based
    message: str  # one line
    exit_code: int  # the exit code of the error it stands for
    patch: str | None = None  # the patch id, when the finding is about one

    def to_json(self) -> dict[str, object]:
        """Plain data for --json."""
        return asdict(self)


def shown_path(path: Path) -> str:
    """`path` relative to the current directory when it lies under it (CI runs from the
    repository root, and annotations name repository paths), else absolute."""
    absolute = Path(os.path.abspath(path))
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(absolute)


# ----------------------------------------------------------------------------- lines


@dataclass
class Section:
    """One file section of a patch: where it starts, its path, its hunks' header lines."""

    start: int
    path: bytes
    hunks: list[int]


@dataclass(frozen=True)
class Reading:
    """A patch read section by section, hunk by hunk (by the counts in the `@@` headers)."""

    sections: list[Section]
    problem: tuple[int, str] | None  # (line, why): the first line a diff cannot hold


def read_patch(data: bytes) -> Reading:
    """The file sections of patch bytes, and the first hunk line that breaks the hunk's
    counts (a context line that lost its leading space, a line removed or added by hand, a
    truncated file). A section starts at `diff --git`, or in a plain diff at a `--- ` line
    outside a hunk; its path is the `+++` name (the `---` one for a deletion)."""
    sections: list[Section] = []
    lines = data.splitlines()
    i = 0
    while i < len(lines):
        number, line = i + 1, lines[i].removesuffix(b"\r")
        if line.startswith(b"diff --git "):
            name = line[len(b"diff --git ") :].rsplit(b" ", 1)[-1]
            sections.append(Section(number, strip_prefix(unquote(name)), []))
        elif line.startswith(b"--- ") and (not sections or sections[-1].hunks):
            sections.append(Section(number, _name(line[4:]), []))
        elif line.startswith((b"--- ", b"+++ ")) and sections:
            name = _name(line[4:])
            if name != b"dev/null" and (line.startswith(b"+++ ") or not sections[-1].path):
                sections[-1].path = name
        elif (m := HUNK.match(line)) and sections:
            sections[-1].hunks.append(number)
            old = 1 if m.group(2) is None else int(m.group(2))  # HUNK: start, count, start, count
            new = 1 if m.group(4) is None else int(m.group(4))
            i, problem = _hunk_body(lines, i + 1, old, new, number)
            if problem is not None:
                return Reading(sections, problem)
            continue
        i += 1
    return Reading(sections, None)


def _hunk_body(
    lines: list[bytes], i: int, old: int, new: int, header: int
) -> tuple[int, tuple[int, str] | None]:
    """Consume one hunk's lines from index `i`; (next index, problem or None)."""
    while old > 0 or new > 0:
        if i >= len(lines):
            why = f"the hunk at line {header} ends early: the file is cut short or lost lines"
            return i, (len(lines) or 1, why)
        first = lines[i][:1]
        if first == b" ":
            old, new = old - 1, new - 1
        elif first == b"-":
            old -= 1
        elif first == b"+":
            new -= 1
        elif first != b"\\":
            why = (
                f"not a diff line inside the hunk at line {header} (a context line lost its "
                "leading space, or a line was added by hand)"
            )
            return i, (i + 1, why)
        if old < 0 or new < 0:
            why = f"the hunk at line {header} has more lines than its header counts"
            return i, (i + 1, why)
        i += 1
    while i < len(lines) and lines[i][:1] == b"\\":  # "\ No newline at end of file"
        i += 1
    return i, None


def _name(field: bytes) -> bytes:
    raw = unquote(field) if field.startswith(b'"') else field.split(b"\t", 1)[0]
    return strip_prefix(raw.rstrip())


def _relative(path: str, root: str) -> bytes:
    """A tree path as the patch names it (the series root taken off)."""
    prefix = "" if root in (".", "") else root.strip("/") + "/"
    return os.fsencode(path.removeprefix(prefix) if prefix else path)


def section_line(data: bytes, path: str, root: str = ".") -> int:
    """The line that opens the file section of `path` (a tree path) in the patch, else 1."""
    wanted = _relative(path, root)
    return next((s.start for s in read_patch(data).sections if s.path == wanted), 1)


def hunk_line(data: bytes, path: str, hunk: int | None, root: str = ".") -> int:
    """The line of the `@@` header of hunk `hunk` (1-based) of `path`'s section, else the
    section's first line, else 1."""
    wanted = _relative(path, root)
    for section in read_patch(data).sections:
        if section.path == wanted:
            if hunk is not None and 0 < hunk <= len(section.hunks):
                return section.hunks[hunk - 1]
            return section.start
    return 1


def line_in_patch(data: bytes, detail: str, root: str = ".") -> int:
    """The patch line a verify or apply message points at: git's corrupt line (at most the
    last line), the hunk that failed at `FILE:LINE`, the first differing byte's line, the
    section of the first differing path or of the file git named; else 1."""
    if m := CORRUPT_AT.search(detail):  # past the end for a cut-off file: its last line
        return min(int(m.group(1)), max(1, len(data.splitlines())))
    if m := FAILED_AT.search(detail):
        return _failed_hunk_line(data, m.group(1), int(m.group(2)), root)
    if m := DIFFERING_LINE.search(detail):
        return int(m.group(1))
    if m := DIFFERING_PATH.search(detail):
        return section_line(data, m.group(1).strip(), root)
    if m := FILE_ERROR.search(detail):
        return section_line(data, m.group(1), root)
    return 1


def _failed_hunk_line(data: bytes, path: str, old_line: int, root: str) -> int:
    """The `@@` header of `path`'s hunk whose old range starts at (about) `old_line`."""
    wanted = _relative(path, root)
    lines = data.splitlines()
    for section in read_patch(data).sections:
        if section.path != wanted:
            continue
        for number in section.hunks:
            first = _old_start(lines[number - 1])
            if first is not None and abs(first - old_line) <= 1:
                return number
        return section.start
    return 1


def _old_start(header: bytes) -> int | None:
    m = re.match(rb"^@@ -(\d+)", header)
    return int(m.group(1)) if m else None


def first_differing_line(expected: bytes, actual: bytes) -> int:
    """The 1-based line where `actual` first differs from `expected` (the line after the
    last one when one is a prefix of the other)."""
    limit = min(len(expected), len(actual))
    offset = next((i for i in range(limit) if expected[i] != actual[i]), limit)
    return actual[:offset].count(b"\n") + 1


def entry_line(series_text: str, patch_id: str) -> int:
    """The line of series.yaml where the entry `id: <patch_id>` is, else 1."""
    pattern = re.compile(rf"^\s*-?\s*id:\s*['\"]?{re.escape(patch_id)}['\"]?\s*(#.*)?$")
    lines = series_text.splitlines()
    return next((n for n, line in enumerate(lines, 1) if pattern.match(line)), 1)


# ----------------------------------------------------------------------------- renderers


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def github(findings: Sequence[Finding]) -> str:
    """GitHub Actions workflow commands, one `::error file=...,line=...,title=...::` per
    finding (shown on the file and line of the pull request's diff)."""
    lines = []
    for f in findings:
        title = f"patchctl ci: {f.check} (exit {f.exit_code})"
        props = f"file={_escape_property(f.path)},line={f.line},title={_escape_property(title)}"
        lines.append(f"::error {props}::{_escape_data(f.message)}\n")
    return "".join(lines)


def gitlab(findings: Sequence[Finding]) -> str:
    """GitLab's code-quality report: a JSON array (the job stores it as a `codequality`
    report; GitLab shows each entry on its file and line in the merge request)."""
    entries = [
        {
            "description": f.message,
            "check_name": f"patchctl-{f.check}",
            "fingerprint": _fingerprint(f),
            "severity": "blocker" if f.check in ("apply", "verify") else "major",
            "location": {"path": f.path, "lines": {"begin": f.line}},
        }
        for f in findings
    ]
    return json.dumps(entries, indent=2) + "\n"


def _fingerprint(finding: Finding) -> str:
    """Stable across runs for the same problem (GitLab compares reports by it)."""
    key = "\0".join((finding.check, finding.path, str(finding.line), finding.message))
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def text(findings: Sequence[Finding]) -> str:
    """`path:line: check: message (exit N)`, one line each, as compilers print them."""
    return "".join(
        f"{f.path}:{f.line}: {f.check}: {f.message} (exit {f.exit_code})\n" for f in findings
    )
