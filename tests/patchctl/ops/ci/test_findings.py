"""findings.py: lines in a patch file, and the GitHub and GitLab forms of a finding."""

from __future__ import annotations

import json

from patchctl.ops.ci import findings
from patchctl.ops.ci.findings import Finding

PATCH = b"""Subject: x
---
diff --git a/a.c b/a.c
--- a/a.c
+++ b/a.c
@@ -1,2 +1,2 @@
-one
+uno
 two
@@ -10,1 +10,1 @@
--- removed line that looks like a header
+++ added line that looks like one
diff --git a/sub/b.c b/sub/b.c
new file mode 100644
--- /dev/null
+++ b/sub/b.c
@@ -0,0 +1 @@
+b
\\ No newline at end of file
"""


def test_sections_hunks_and_lines() -> None:
    reading = findings.read_patch(PATCH)
    assert reading.problem is None
    assert [(s.start, s.path, s.hunks) for s in reading.sections] == [
        (3, b"a.c", [6, 10]),
        (13, b"sub/b.c", [17]),
    ]
    assert findings.hunk_line(PATCH, "a.c", 2) == 10
    assert findings.hunk_line(PATCH, "a.c", 9) == 3  # no such hunk: the section
    assert findings.hunk_line(PATCH, "vendor/sub/b.c", 1, "vendor") == 17
    assert findings.section_line(PATCH, "nothing.c") == 1


def test_broken_hunks_are_found_on_their_line() -> None:
    lost_space = PATCH.replace(b"\n two\n", b"\ntwo\n")
    assert findings.read_patch(lost_space).problem == (
        9,
        "not a diff line inside the hunk at line 6 (a context line lost its leading "
        "space, or a line was added by hand)",
    )
    cut = PATCH[: PATCH.index(b"+b\n")]
    line, why = findings.read_patch(cut).problem or (0, "")
    assert line == cut.count(b"\n") and "ends early" in why
    extra = PATCH.replace(b"+uno\n", b"+uno\n+more\n")
    assert findings.read_patch(extra).problem == (  # line 10: the first that does not fit
        10,
        "the hunk at line 6 has more lines than its header counts",
    )


def test_line_in_patch_reads_git_and_verify_messages() -> None:
    assert findings.line_in_patch(PATCH, "error: corrupt patch at line 7") == 7
    assert findings.line_in_patch(PATCH, "does not apply: error: patch failed: a.c:10") == 10
    assert findings.line_in_patch(PATCH, "first differing byte at offset 9 (line 2); x") == 2
    assert findings.line_in_patch(PATCH, "tree a instead of b; first differing path: sub/b.c") == 13
    assert findings.line_in_patch(PATCH, "error: sub/b.c: already exists in index") == 13
    assert findings.line_in_patch(PATCH, "something else") == 1


def test_first_differing_line_and_entry_line() -> None:
    assert findings.first_differing_line(b"a\nb\nc\n", b"a\nb\nX\n") == 3
    assert findings.first_differing_line(b"a\n", b"") == 1
    text = "version: 1\npatches:\n  - id: 0001-a\n    file: a.patch\n  - id: '0002-b'\n"
    assert findings.entry_line(text, "0002-b") == 5
    assert findings.entry_line(text, "0003-c") == 1


FINDING = Finding("s", "apply", "patches/s/x,y:z.patch", 7, "50% off\nline two", 3, "0001-x")


def test_github_commands_escape_data_and_properties() -> None:
    assert findings.github([FINDING]) == (
        "::error file=patches/s/x%2Cy%3Az.patch,line=7,title=patchctl ci%3A apply (exit 3)"
        "::50%25 off%0Aline two\n"
    )


def test_gitlab_code_quality_report() -> None:
    (entry,) = json.loads(findings.gitlab([FINDING]))
    assert entry["location"] == {"path": "patches/s/x,y:z.patch", "lines": {"begin": 7}}
    assert entry["severity"] == "blocker" and entry["check_name"] == "patchctl-apply"
    assert len(entry["fingerprint"]) == 64
    text = findings.text([FINDING])
    assert text == "patches/s/x,y:z.patch:7: apply: 50% off\nline two (exit 3)\n"
