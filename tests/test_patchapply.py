"""patchapply.py: the one home of `git apply` flags, root rule, diagnostics and identity."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from support.repos import Repo

from patchctl.git import temp_index
from patchctl.patchapply import (
    APPLY_FLAGS,
    ID_TRAILER,
    SHA_TRAILER,
    apply_flags,
    apply_to_index,
    commit_message,
    drift_summary,
    find_drift,
    hunk_number,
    patch_sha256,
)
from patchctl.series import Patch


def test_every_flag_has_a_reason_and_every_apply_has_them() -> None:
    assert all(why for _flag, why in APPLY_FLAGS)
    flags = [flag for flag, _why in APPLY_FLAGS]
    assert list(apply_flags()) == flags
    assert apply_flags("llama.cpp/", reverse=True, check=True, context=1) == (
        "--check",
        "-R",
        *flags,
        "-C1",
        "--directory=llama.cpp",
    )


def test_commit_message_and_sha() -> None:
    patch = Patch(id="0001-x", file="0001-x.patch", title="Do x")
    sha = patch_sha256(b"bytes")
    assert sha == hashlib.sha256(b"bytes").hexdigest()
    assert commit_message(patch, sha) == (
        f"0001-x: Do x\n\n{ID_TRAILER}: 0001-x\n{SHA_TRAILER}: {sha}\n".encode()
    )


def test_apply_to_index_under_the_series_root(
    make_repo: Callable[..., Repo], make_patch: Callable[..., bytes]
) -> None:
    repo = make_repo({"sub/f.txt": b"a\n", "g.txt": b"g\n"})
    patch = make_patch({"f.txt": b"a\n"}, {"f.txt": b"b\n"})
    with temp_index(repo.git) as index:
        index.read_tree(repo.tree)
        outcome = apply_to_index(index, patch, "sub")
        assert outcome.ok and not outcome.drift()
        tree = index.write_tree()
        assert repo.git.cat_file("blob", f"{tree}:sub/f.txt") == b"b\n"
        again = apply_to_index(index, patch, "sub")
        assert not again.ok and again.first_error().startswith("error: ")


def test_drift_summary() -> None:
    assert drift_summary([]) is None
    drift = find_drift(b"Checking patch a...\nHunk #1 succeeded at 9 (offset 2 lines).\n")
    assert drift_summary(drift) == (
        "1 hunk(s) at an offset, first in a: hunk would apply at line 9 (offset 2 lines)"
    )


def test_drift_parser_and_hunk_numbers() -> None:
    stderr = (
        b"Checking patch a b.c...\nHunk #1 succeeded at 3.\n"
        b"Hunk #2 succeeded at 40 (offset 7 lines).\n"
        b"Checking patch x...\nwarning: x has type 100644, expected 100755\n"
    )
    drift = find_drift(stderr)
    assert [(d.file, d.hunk) for d in drift] == [("a b.c", 2), ("x", None)]
    assert "offset 7 lines" in drift[0].why and "100755" in drift[1].why
    patch = (
        b"diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+c\n d\n"
        b"@@ -10,3 +10,3 @@\n x\n-y\n+z\n w\n"
    )
    assert hunk_number(patch, "f", 10) == 2
    assert hunk_number(patch, "sub/f", 1, root="sub") == 1
    assert hunk_number(patch, "g", 1) is None
