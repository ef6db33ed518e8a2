"""gitlayer/batch.py: the one reader of `cat-file --batch` output."""

from __future__ import annotations

from collections.abc import Callable

from support.repos import Repo

from patchctl.gitlayer.batch import records
from patchctl.gitlayer.git import Git


def test_records_of_found_and_missing_objects_in_order() -> None:
    out = b"1111 blob 3\nab\n\n2222 missing\n3333 tree 0\n\n"
    assert records(out, 3) == [(b"blob", b"ab\n"), None, (b"tree", b"")]


def test_a_missing_name_with_spaces_is_missing_not_a_size() -> None:
    # `<tree>:<path>` names hold the path as given: git echoes it before " missing".
    out = b"abc:a b missing\nabc:odd dir/a b.c missing\nabc:x blob 12 missing\n4444 blob 1\nz\n"
    assert records(out, 4) == [None, None, None, (b"blob", b"z")]


def test_cat_batch_reads_blobs_by_path_including_odd_names(
    make_repo: Callable[..., Repo],
) -> None:
    repo = make_repo({"odd dir/a b.c": b"spaced\n", "plain.txt": b"plain\n"})
    git: Git = repo.git
    names = [f"{repo.tree}:odd dir/a b.c", f"{repo.tree}:odd dir/none.c", f"{repo.tree}:plain.txt"]
    assert git.cat_batch(names) == [(b"blob", b"spaced\n"), None, (b"blob", b"plain\n")]
