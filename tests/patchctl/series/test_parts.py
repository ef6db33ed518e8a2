"""patchparts: a patch file cut into header, diff and trailer, and rejoined byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.drift import (
    DEP3_HEADER,
    GBP_HEADER,
    MAIL_HEADER,
    QUILT_HEADER,
    SIGNATURE,
    quilt_series,
)
from support.files import CONTENT_MATRIX, CONTENT_MATRIX_AFTER
from support.repos import diff_files

from patchctl.series.parts import in_dialect, split_patch, with_diff


@pytest.fixture(scope="module")
def series(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    tmp = tmp_path_factory.mktemp("parts")
    return quilt_series(tmp / "scratch", tmp / "patches")


@pytest.mark.parametrize(
    ("name", "header", "trailer"),
    [
        ("readme.patch", GBP_HEADER, SIGNATURE),
        ("louder-a.patch", DEP3_HEADER, b""),
        ("b-30.patch", MAIL_HEADER, SIGNATURE),
        ("c-10.patch", QUILT_HEADER, b""),
    ],
)
def test_header_and_trailer_are_found(
    series: dict[str, bytes], name: str, header: bytes, trailer: bytes
) -> None:
    parts = split_patch(series[name])
    assert parts.header == header
    assert parts.trailer == trailer
    assert parts.join() == series[name]
    assert parts.diff.startswith((b"diff --git ", b"Index: "))


def test_with_diff_replaces_only_the_diff(series: dict[str, bytes]) -> None:
    data = series["b-30.patch"]
    new = with_diff(data, b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n")
    assert new.startswith(MAIL_HEADER) and new.endswith(SIGNATURE)
    assert split_patch(new).diff.endswith(b"+b\n")


def test_binary_modes_symlinks_and_no_newline_stay_in_the_diff(tmp_path: Path) -> None:
    diff = diff_files(tmp_path / "scratch", CONTENT_MATRIX, CONTENT_MATRIX_AFTER)
    assert b"GIT binary patch" in diff and b"\\ No newline at end of file" in diff
    data = b"Subject: matrix\n\n" + diff + b"-- \ntrailer text\n"
    parts = split_patch(data)
    assert parts.header == b"Subject: matrix\n\n"
    assert parts.diff == diff
    assert parts.trailer == b"-- \ntrailer text\n"


def test_text_between_sections_is_diff_and_dashes_in_the_header_are_header() -> None:
    data = (
        b"Subject: x\n\n--- not a file name\nmore text\n---\n"
        b"--- a/one\n+++ b/one\n@@ -1,2 +1,2 @@\n-1\n+one\n 2\n"
        b"note between files\n"
        b"--- a/two\n+++ b/two\n@@ -1 +1 @@\n-2\n+two\n"
    )
    parts = split_patch(data)
    assert parts.header == b"Subject: x\n\n--- not a file name\nmore text\n---\n"
    assert parts.diff.endswith(b"+two\n") and b"note between files" in parts.diff
    assert parts.trailer == b""


def test_crlf_hunks_and_a_file_without_a_diff() -> None:
    data = b"Header\r\n\r\ndiff --git a/d b/d\r\n--- a/d\r\n+++ b/d\r\n@@ -1 +1 @@\r\n-x\r\n+y\r\n"
    parts = split_patch(data)
    assert parts.header == b"Header\r\n\r\n" and parts.trailer == b""
    assert split_patch(b"only words\n").header == b"only words\n"
    assert split_patch(b"").join() == b""


def test_a_regenerated_diff_keeps_a_quilt_patchs_sections_and_git_only_changes_stay_git() -> None:
    old = (
        b"Index: pkg/src/x.c\n" + b"=" * 67 + b"\n"
        b"--- pkg.orig/src/x.c\n+++ pkg/src/x.c\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n"
    )
    new = (
        b"diff --git a/src/x.c b/src/x.c\nindex " + b"1" * 40 + b".." + b"2" * 40 + b" 100644\n"
        b"--- a/src/x.c\n+++ b/src/x.c\n@@ -5,2 +5,2 @@\n a\n-b\n+c\n"
        b"diff --git a/src/new.c b/src/new.c\nnew file mode 100644\nindex " + b"0" * 40 + b".."
        + b"3" * 40 + b"\n--- /dev/null\n+++ b/src/new.c\n@@ -0,0 +1 @@\n+n\n"
        b"diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n"
    )
    assert in_dialect(old, new) == (
        b"Index: pkg/src/x.c\n" + b"=" * 67 + b"\n"
        b"--- pkg.orig/src/x.c\n+++ pkg/src/x.c\n@@ -5,2 +5,2 @@\n a\n-b\n+c\n"
        b"Index: src/new.c\n" + b"=" * 67 + b"\n--- /dev/null\n+++ b/src/new.c\n@@ -0,0 +1 @@\n+n\n"
        b"diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n"
    )
