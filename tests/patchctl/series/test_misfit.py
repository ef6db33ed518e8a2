"""series/misfit.py: a patch proven unable to apply exactly, without running git apply."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import closing

from support.repos import Repo

from patchctl.gitlayer.index import temp_index
from patchctl.gitlayer.pipes import ObjectReader
from patchctl.gitlayer.trees import TreeStore
from patchctl.series.gitapply import apply_to_index
from patchctl.series.misfit import misfits

LINES = b"".join(b"line %d\n" % n for n in range(1, 31))
PATCH = (
    b"Subject: x\n---\n"
    b"diff --git a/src/f.c b/src/f.c\n--- a/src/f.c\n+++ b/src/f.c\n"
    b"@@ -9,3 +9,4 @@\n line 9\n line 10\n+ours\n line 11\n"
)


def _check(repo: Repo, data: bytes = PATCH, root: str = ".") -> tuple[bool, bool]:
    """(misfits says so, git applies it exactly without drift)."""
    with TreeStore(repo.git) as store, closing(ObjectReader(repo.git)) as reader:
        said = misfits(store, reader, data, repo.tree, root)
    with temp_index(repo.git) as index:
        index.read_tree(repo.tree)
        outcome = apply_to_index(index, data, root)
    return said, outcome.ok and not outcome.drift()


def test_a_patch_that_fits_is_left_to_git(make_repo: Callable[..., Repo]) -> None:
    assert _check(make_repo({"src/f.c": LINES})) == (False, True)


def test_moved_lines_are_a_misfit_git_agrees(make_repo: Callable[..., Repo]) -> None:
    moved = make_repo({"src/f.c": b"new top\n" + LINES})  # git would apply at an offset
    assert _check(moved) == (True, False)
    changed = make_repo({"src/f.c": LINES.replace(b"line 10\n", b"line ten\n")})
    assert _check(changed) == (True, False)  # git cannot apply it at all


def test_unsure_cases_say_nothing(make_repo: Callable[..., Repo]) -> None:
    repo = make_repo({"sub/src/f.c": b"new top\n" + LINES})
    assert _check(repo, PATCH, "sub")[0] is True  # under the series root
    assert _check(repo, PATCH)[0] is False  # no such file: git decides
    no_newline = PATCH.replace(b" line 11\n", b" line 11\n\\ No newline at end of file\n")
    assert _check(repo, no_newline, "sub")[0] is False
    zero = PATCH.replace(
        b"@@ -9,3 +9,4 @@\n line 9\n line 10\n+ours\n line 11\n", b"@@ -9,0 +10 @@\n+ours\n"
    )
    assert _check(repo, zero, "sub")[0] is False
