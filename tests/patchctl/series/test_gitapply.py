"""series/gitapply.py: the one home of `git apply` flags, root rule, diagnostics and identity."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from support.files import CONTENT_MATRIX, CONTENT_MATRIX_AFTER, Exe, Files, Link, write_files
from support.repos import Repo

from patchctl.errors import PatchDoesNotApply, PatchDrift
from patchctl.gitlayer.index import temp_index
from patchctl.patchfmt.parse import zero_context
from patchctl.series import gitapply as patchapply
from patchctl.series.gitapply import (
    APPLY_FLAGS,
    ID_TRAILER,
    SHA_TRAILER,
    TreeOutcome,
    TreePatcher,
    apply_flags,
    apply_to_index,
    commit_message,
    drift_summary,
    find_drift,
    hunk_number,
    named_paths,
    patch_sha256,
    strict_apply,
)
from patchctl.series.model import Patch


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


# ----------------------------------------------------------------------------- TreePatcher


def _whole_index(
    repo: Repo, tree: str, data: bytes, root: str, reverse: bool
) -> tuple[int, bytes, str | None]:
    """The reference: the patch applied to a whole index of `tree`, then write-tree."""
    with temp_index(repo.git) as index:
        index.read_tree(tree)
        outcome = apply_to_index(index, data, root, reverse=reverse)
        return outcome.code, outcome.stderr, index.write_tree() if outcome.ok else None


def _same_as_whole_index(
    patcher: TreePatcher, repo: Repo, tree: str, data: bytes, root: str = ".", reverse: bool = False
) -> TreeOutcome:
    result = patcher.apply(tree, data, root, reverse=reverse)
    code, stderr, expected = _whole_index(repo, tree, data, root, reverse)
    assert (result.outcome.code, result.outcome.stderr, result.tree) == (code, stderr, expected)
    return result


def _git_diff(repo: Repo, pre: str, post: str, *flags: str) -> bytes:
    return repo.git.run(
        "diff-tree",
        "-p",
        "--binary",
        "--full-index",
        "--no-color",
        "--no-ext-diff",
        "--src-prefix=a/",
        "--dst-prefix=b/",
        *flags,
        pre,
        post,
        "--",
    )


def _tree(repo: Repo, files: Files) -> str:
    """The tree of the work tree of `repo` with `files` written (None removes; a directory
    emptied by the removals goes, so that a file can take its place)."""
    write_files(repo.path, {k: None for k, v in files.items() if v is None})
    for path in sorted(repo.path.rglob("*"), reverse=True):
        real_dir = path.is_dir() and not path.is_symlink() and ".git" not in path.parts
        if real_dir and not any(path.iterdir()):
            path.rmdir()
    write_files(repo.path, {k: v for k, v in files.items() if v is not None})
    repo.git.add_all()
    return repo.git.write_tree()


MATRIX_CASES: list[tuple[str, Files, Files, tuple[str, ...]]] = [
    ("matrix", CONTENT_MATRIX, CONTENT_MATRIX_AFTER, ()),
    (
        "rename",
        {"old/name.c": b"x\n" * 20},
        {"old/name.c": None, "new/name.c": b"x\n" * 20},
        ("-M",),
    ),
    ("rename-edit", {"r.c": b"y\n" * 30}, {"r.c": None, "s/r.c": b"y\n" * 29 + b"z\n"}, ("-M",)),
    ("copy", {"c.c": b"w\n" * 30}, {"c2.c": b"w\n" * 30}, ("-C", "--find-copies-harder")),
    ("file-to-dir", {"a": b"file\n"}, {"a": None, "a/b": b"inside\n"}, ()),
    (
        "dir-to-file",
        {"d/e": b"1\n", "d/f/g": b"2\n"},
        {"d/e": None, "d/f/g": None, "d": b"f\n"},
        (),
    ),
    ("symlink-to-file", {"l": Link("x")}, {"l": b"now a file\n"}, ()),
    ("mode-only", {"m.sh": b"echo\n"}, {"m.sh": Exe(b"echo\n")}, ()),
]


@pytest.mark.parametrize("name,before,after,flags", MATRIX_CASES, ids=[c[0] for c in MATRIX_CASES])
def test_tree_patcher_equals_a_whole_index_forward_reverse_and_conflicting(
    make_repo: Callable[..., Repo],
    name: str,
    before: Files,
    after: Files,
    flags: tuple[str, ...],
) -> None:
    filler = {f"filler/{i}.txt": b"%d\n" % i for i in range(30)}
    repo = make_repo({**filler, **before})
    pre = repo.tree
    post = _tree(repo, {**{k: None for k in before}, **after})
    data = _git_diff(repo, pre, post, *flags)
    assert data
    with TreePatcher(repo.git) as patcher:
        forward = _same_as_whole_index(patcher, repo, pre, data)
        assert forward.tree == post and forward.outcome.ok
        back = _same_as_whole_index(patcher, repo, post, data, reverse=True)
        assert back.tree == pre
        # the same patch on the wrong side: git's refusal (a mode change only warns), word
        # for word
        refused = _same_as_whole_index(patcher, repo, post, data).outcome
        assert not refused.ok or refused.drift()
        _same_as_whole_index(patcher, repo, pre, data, reverse=True)


def test_tree_patcher_replaces_what_a_new_path_displaces(make_repo: Callable[..., Repo]) -> None:
    """A new path where the tree has a file in its way, or a directory where it lands, that
    the patch does not name: the small index holds those entries too, so git answers as it
    does with a whole index (git 2.39 refuses both)."""
    repo = make_repo({"a": b"file in the way\n", "d/x": b"1\n", "d/y/z": b"2\n", "k": b"k\n"})
    under_file = (
        b"diff --git a/a/new b/a/new\nnew file mode 100644\n--- /dev/null\n+++ b/a/new\n"
        b"@@ -0,0 +1 @@\n+n\n"
    )
    over_dir = (
        b"diff --git a/d b/d\nnew file mode 100644\n--- /dev/null\n+++ b/d\n@@ -0,0 +1 @@\n+d\n"
    )
    with TreePatcher(repo.git) as patcher:
        for data in (under_file, over_dir):
            _same_as_whole_index(patcher, repo, repo.tree, data)


def test_tree_patcher_finds_paths_its_guess_missed(
    make_repo: Callable[..., Repo], monkeypatch: pytest.MonkeyPatch
) -> None:
    """named_paths is only a guess: with an empty guess every answer is still git's."""
    repo = make_repo({**CONTENT_MATRIX, "a": b"x\n", "d/e": b"1\n"})
    post = _tree(
        repo, {**CONTENT_MATRIX_AFTER, "a": None, "a/b": b"in\n", "d/e": None, "d": b"f\n"}
    )
    data = _git_diff(repo, repo.tree, post)
    monkeypatch.setattr(patchapply, "named_paths", lambda _data, _root=".": set())
    with TreePatcher(repo.git) as patcher:
        assert _same_as_whole_index(patcher, repo, repo.tree, data).tree == post
        assert _same_as_whole_index(patcher, repo, post, data, reverse=True).tree == repo.tree
        _same_as_whole_index(patcher, repo, post, data)  # "already exists": a conflict


def test_tree_patcher_offsets_traditional_diffs_and_the_series_root(
    make_repo: Callable[..., Repo],
) -> None:
    body = b"".join(b"line %d\n" % i for i in range(1, 41))
    shifted = b"new first line\n" + body
    repo = make_repo({"sub/src/main.c": shifted, "sub/other": b"o\n"})
    quilt_style = (
        b"Description: a DEP-3 header\n---\n"
        b"--- linux-6.1.orig/src/main.c\t2024-01-01 00:00:00.000000000 +0000\n"
        b"+++ linux-6.1/src/main.c\t2024-01-01 00:00:00.000000000 +0000\n"
        b"@@ -19,3 +19,3 @@\n line 19\n-line 20\n+L20\n line 21\n"
    )
    with TreePatcher(repo.git) as patcher:
        result = _same_as_whole_index(patcher, repo, repo.tree, quilt_style, root="sub")
        assert result.outcome.ok and result.outcome.drift()  # applied, at an offset
        assert named_paths(quilt_style, "sub") >= {b"sub/src/main.c"}


def test_named_paths_reads_quoted_and_spaced_names() -> None:
    data = (
        b'diff --git "a/caf\\303\\251 x" "b/caf\\303\\251 x"\n'
        b"diff --git a/dir with spaces/f b/dir with spaces/f\n"
        b"rename from old name\nrename to new name\n--- a/t.c\t2020\n+++ /dev/null\n"
    )
    found = named_paths(data)
    assert {"caf\u00e9 x".encode(), b"dir with spaces/f", b"old name", b"new name", b"t.c"} <= found
    assert b"dev/null" not in found and b"" not in found


def _diff_u0(tmp_path: Path, before: bytes, after: bytes) -> bytes:
    """What `diff -U0` writes for one file, with quilt's a/ b/ names."""
    (tmp_path / "old").write_bytes(before)
    (tmp_path / "new").write_bytes(after)
    done = subprocess.run(
        ["diff", "-U0", "--label", "a/f.c", "--label", "b/f.c", "old", "new"],
        cwd=tmp_path,
        capture_output=True,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    return done.stdout


@pytest.mark.skipif(shutil.which("diff") is None, reason="diff is not installed")
def test_zero_context_hunks_apply_exactly_at_their_lines_and_drift_elsewhere(
    tmp_path: Path, make_repo: Callable[..., Repo]
) -> None:
    body = b"".join(b"line %d\n" % i for i in range(1, 41))
    lines = body.splitlines(keepends=True)
    # a one-line change, an insertion, and a removal at 22-25 (`@@ -22,4 +21,0 @@` style)
    after = b"".join(
        [*lines[:4], b"FIVE\n", *lines[5:10], b"new a\n", b"new b\n", *lines[10:21], *lines[25:]]
    )
    patch = _diff_u0(tmp_path, body, after)
    assert b"@@ -5 +5 @@" in patch and b",0 @@" in patch and b"@@ -22,4 +" in patch
    assert zero_context(patch) and "--unidiff-zero" in apply_flags(data=patch)
    assert "--unidiff-zero" not in apply_flags(data=b"@@ -1,3 +1,3 @@\n a\n-b\n+c\n d\n")
    repo = make_repo({"f.c": body})
    expected = make_repo({"f.c": after})
    entry = Patch(id="0001-u0", file="0001-u0.patch")
    with TreePatcher(repo.git) as patcher:
        assert strict_apply(patcher, entry, patch, ".", repo.tree) == expected.tree
        back = patcher.apply(expected.tree, patch, reverse=True)
        assert back.tree == repo.tree and back.outcome.drift() == []
    # GNU patch puts the hunks at the same lines
    if shutil.which("patch") is not None:
        (tmp_path / "f.c").write_bytes(body)
        gnu = ["patch", "-p1", "--batch", "--silent"]
        subprocess.run(gnu, input=patch, cwd=tmp_path, check=True)
        assert (tmp_path / "f.c").read_bytes() == after
    # on a file that moved, a zero-context hunk is drift, as any other
    moved = make_repo({"f.c": b"top 1\ntop 2\n" + body})
    with TreePatcher(moved.git) as patcher, pytest.raises(PatchDrift, match="offset 2 lines"):
        strict_apply(patcher, entry, patch, ".", moved.tree)


def test_a_hunk_header_whose_new_start_ignores_an_earlier_hunk_is_exact_at_its_old_line(
    tmp_path: Path, make_repo: Callable[..., Repo]
) -> None:
    body = b"".join(b"line %d\n" % i for i in range(1, 61))
    # hunk 2's new-side start repeats its old-side start although hunk 1 added a line (a
    # header written by hand, or by a tool that numbers each hunk alone)
    patch = (
        b"--- a/f.c\n+++ b/f.c\n"
        b"@@ -10,3 +10,4 @@\n line 10\n+added\n line 11\n line 12\n"
        b"@@ -40,3 +40,4 @@\n line 40\n+also\n line 41\n line 42\n"
    )
    after = body.replace(b"line 10\n", b"line 10\nadded\n")
    after = after.replace(b"line 40\n", b"line 40\nalso\n")
    repo = make_repo({"f.c": body})
    expected = make_repo({"f.c": after})
    entry = Patch(id="0001-hand", file="0001-hand.patch")
    with TreePatcher(repo.git) as patcher:
        raw = patcher.apply(repo.tree, patch)
        assert b"Hunk #2 succeeded at 41 (offset 1 line)" in raw.outcome.stderr  # git's view
        assert raw.outcome.drift() == []
        assert strict_apply(patcher, entry, patch, ".", repo.tree) == expected.tree
    if shutil.which("patch") is not None:  # GNU patch takes it exactly, without an offset
        (tmp_path / "f.c").write_bytes(body)
        done = subprocess.run(
            ["patch", "-p1", "--batch"], input=patch, cwd=tmp_path, capture_output=True, check=True
        )
        assert b"offset" not in done.stdout and (tmp_path / "f.c").read_bytes() == after
    # a hunk whose old-side line is wrong is drift still
    wrong = patch.replace(b"@@ -40,3 +40,4 @@", b"@@ -38,3 +39,4 @@")
    with TreePatcher(repo.git) as patcher, pytest.raises(PatchDrift, match="hunk #2"):
        strict_apply(patcher, entry, wrong, ".", repo.tree)


def test_a_binary_hunk_git_cannot_read_is_named_not_called_empty(
    make_repo: Callable[..., Repo], make_patch: Callable[..., bytes]
) -> None:
    data = bytes(range(256)) * 64
    changed = data[:100] + b"\x07" + data[101:]
    patch = make_patch({"bin.dat": data}, {"bin.dat": changed})
    assert b"GIT binary patch" in patch
    no_index = b"".join(
        line for line in patch.splitlines(keepends=True) if not line.startswith(b"index ")
    )
    repo = make_repo({"other": b"x\n"})  # no bin.dat: the delta has nothing to apply to
    entry = Patch(id="0001-bin", file="0001-bin.patch")
    with TreePatcher(repo.git) as patcher, pytest.raises(PatchDoesNotApply) as refused:
        strict_apply(patcher, entry, no_index, ".", repo.tree)
    assert refused.value.file == "bin.dat" and refused.value.why is not None
    assert "binary hunk without a full `index` line" in refused.value.why
    assert "contains no changes" not in refused.value.message
