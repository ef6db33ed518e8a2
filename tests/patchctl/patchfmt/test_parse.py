"""patchfmt/parse.py: files and line counts of patch bytes, with git's path rules."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import paths
from support.paths import REPO
from unidiff import PatchSet

from patchctl.patchfmt.parse import ambiguous_names, display, header_names, parse, unquote

GOLDEN = paths.GOLDEN / "capture"
SHIPPED = sorted((REPO / "patches" / "llamafile").glob("*.patch"))


def test_a_new_empty_file_whose_path_contains_b_slash() -> None:
    data = (
        b"diff --git a/x b/y b/x b/y\nnew file mode 100644\n"
        b"index " + b"0" * 40 + b"..e69de29bb2d1d6434b8b29ae775ad8c2e48c5391\n"
    )
    (only,) = parse(data)
    assert only.path == b"x b/y" and only.old == b"x b/y" and not only.added


def test_names_come_from_the_minus_plus_lines_with_gits_quoting() -> None:
    data = (
        b'diff --git "a/tab\\there" "b/tab\\there"\nnew file mode 100644\n--- /dev/null\n'
        b'+++ "b/tab\\there"\n@@ -0,0 +1 @@\n+x\n'
        b"diff --git a/sp ace b/sp ace\n--- a/sp ace\t\n+++ b/sp ace\t\n@@ -1 +1 @@\n-a\n+b\n"
    )
    first, second = parse(data)
    assert first.path == b"tab\there" and first.old is None
    assert second.paths() == [b"sp ace"] and second.removed == 1


def test_hunk_lines_are_counted_by_the_hunk_header() -> None:
    # an added "++ x" and a removed "-- y" look like ---/+++ headers to a naive reader
    data = b"--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n--- y\n keep\n+++ x\n\\ No newline at end of file\n"
    (only,) = parse(data)
    assert only.added == [b"++ x"] and only.removed == 1


def test_renames_binaries_and_modes() -> None:
    data = (
        b"diff --git a/old b/new\nsimilarity index 100%\nrename from old\nrename to new\n"
        b"diff --git a/bin b/bin\nindex 1..2 100644\nGIT binary patch\nliteral 3\nKcmZQz\n\n"
        b"diff --git a/m b/m\nold mode 100644\nnew mode 100755\n"
    )
    rename, binary, mode = parse(data)
    assert (rename.old, rename.new) == (b"old", b"new")
    assert binary.binary and binary.path == b"bin"
    assert mode.path == b"m" and not mode.binary


def test_unquote_and_header_names() -> None:
    assert unquote(b'"caf\\303\\251 \\"q\\" \\\\"') == 'café "q" \\'.encode()
    assert header_names(b"a/same b/same") == (b"same", b"same")
    assert header_names(b"a/x b/y") is None  # two different names: only rename lines tell
    assert display(b"lat\xe9n") == "lat\\xe9n"


@pytest.mark.parametrize("path", [*sorted(GOLDEN.glob("*.patch")), *SHIPPED], ids=lambda p: p.name)
def test_agrees_with_unidiff_where_unidiff_can_read(path: Path) -> None:
    data = path.read_bytes()
    theirs = PatchSet.from_string(data, encoding="latin-1")
    ours = parse(data)
    assert [(len(f.added), f.removed, f.binary) for f in ours] == [
        (f.added, f.removed, f.is_binary_file) for f in theirs
    ]
    for mine, other in zip(ours, theirs, strict=True):
        name = other.path.encode("latin-1")
        assert mine.path == (unquote(name) if name.startswith(b'"') else name)


def test_a_plain_name_with_spaces_is_read_as_git_apply_reads_it() -> None:
    hunk = b"@@ -1 +1 @@\n-a\n+b\n"
    for stamp in (b"", b" 2020-01-01 00:00:00.000000000 +0000", b" Wed Jan  1 00:00:00 2020"):
        data = b"--- a/dir with space/x" + stamp + b"\n+++ b/dir with space/x" + stamp + b"\n"
        assert parse(data + hunk)[0].path == b"dir with space/x", stamp
        assert ambiguous_names(data + hunk) == [(b"dir with space/x", b"dir")]
    plain = b"--- a/x 2020-01-01 00:00:00\n+++ b/x 2020-01-01 00:00:00\n" + hunk
    assert parse(plain)[0].path == b"x" and ambiguous_names(plain) == []
