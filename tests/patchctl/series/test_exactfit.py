"""exactfit: a patch applied in memory only where it is provably what `git apply` writes."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest
from support.repos import Repo, diff_files

from patchctl.gitlayer.index import temp_index
from patchctl.gitlayer.pipes import BlobWriter, ObjectReader, TreeDiffer
from patchctl.gitlayer.trees import TreeStore
from patchctl.series.exactfit import applied, same_hunks
from patchctl.series.gitapply import apply_to_index

BODY = b"".join(b"line %d\n" % n for n in range(1, 41))
FILES = {
    "src/f.c": BODY,
    "src/g.c": b"g 1\ng 2\ng 3\ng 4\ng 5\n",
    "src/crlf.c": b"a\r\nb\r\nc\r\nd\r\ne\r\nf\r\ng\r\n",
}


def edited(**changes: bytes | None) -> dict[str, bytes]:
    out = dict(FILES)
    for key, value in changes.items():
        name = "src/" + key.replace("_", ".")
        if value is None:
            out.pop(name)
        else:
            out[name] = value
    return out


TWO_HUNKS = BODY.replace(b"line 5\n", b"5\n").replace(b"line 30\n", b"x\n")
CASES: dict[str, tuple[dict[str, bytes], bool]] = {
    # name: (files after the patch, whether it is applied in memory)
    "two hunks": (edited(f_c=TWO_HUNKS), True),
    "new file": (edited(n_c=b"new\nfile\n"), True),
    "crlf": (edited(crlf_c=FILES["src/crlf.c"].replace(b"d\r\n", b"D\r\n")), True),
    "at the top": (edited(f_c=b"first\n" + BODY), False),  # no leading context: git decides
    "at the end": (edited(g_c=FILES["src/g.c"] + b"g 6\n"), False),  # no trailing context
    "no newline": (edited(g_c=FILES["src/g.c"] + b"no newline"), False),
    "deleted": (edited(g_c=None), False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_applied_is_git_applys_tree_or_nothing(
    name: str, make_repo: Callable[..., Repo], tmp_path: Path
) -> None:
    after, expected = CASES[name]
    repo = make_repo(FILES)
    data = diff_files(tmp_path / "scratch", {k[4:]: v for k, v in FILES.items()},
                      {k[4:]: v for k, v in after.items()})  # fmt: skip
    with (
        TreeStore(repo.git) as store,
        closing(ObjectReader(repo.git)) as reader,
        BlobWriter(repo.git) as blobs,
        TreeDiffer(repo.git, "src") as differ,
        temp_index(repo.git) as index,
    ):
        got = applied(store, reader, blobs, data, repo.tree, "src")
        index.read_tree(repo.tree)
        assert apply_to_index(index, data, "src").ok
        want = index.write_tree()
        assert (got is not None) == expected
        if got is not None:
            assert got == want
            assert same_hunks(data, differ.diff(repo.tree, got))


def test_a_hunk_not_at_its_place_is_not_applied_and_a_wrong_proof_fails(
    make_repo: Callable[..., Repo], tmp_path: Path
) -> None:
    plain = {k[4:]: v for k, v in FILES.items()}
    after = {**plain, "f.c": BODY.replace(b"line 30\n", b"x\n")}
    data = diff_files(tmp_path / "scratch", plain, after)
    moved = make_repo({**FILES, "src/f.c": b"extra\n" + BODY})  # the hunk is one line lower
    other = make_repo({**FILES, "src/f.c": BODY.replace(b"line 31\n", b"y\n")})
    for repo in (moved, other):
        with (
            TreeStore(repo.git) as store,
            closing(ObjectReader(repo.git)) as reader,
            BlobWriter(repo.git) as blobs,
        ):
            assert applied(store, reader, blobs, data, repo.tree, "src") is None
    # the proof compares hunks: another change in the diff, or other lines, fail it
    assert same_hunks(data, data)
    assert not same_hunks(data, data.replace(b"+x\n", b"+z\n"))
    header = b"@@ -27,7 +27,7 @@"
    assert header in data
    assert same_hunks(data, data.replace(header, header + b" int f(void)"))  # git's section text
    assert not same_hunks(data, data.replace(header, b"@@ -28,7 +28,7 @@"))


@pytest.mark.parametrize("path", ["../x.c", ".git/x", "a/.git/x", "a/..", "a/./b", "x.", "-x"])
def test_a_path_git_would_check_goes_to_git(
    path: str, make_repo: Callable[..., Repo]
) -> None:
    repo = make_repo(FILES)
    data = (
        f"diff --git a/{path} b/{path}\nnew file mode 100644\nindex 0000000..1111111\n"
        f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+x\n"
    ).encode()
    fine = data.replace(path.encode(), b"ok/x.c")
    with (
        TreeStore(repo.git) as store,
        closing(ObjectReader(repo.git)) as reader,
        BlobWriter(repo.git) as blobs,
    ):
        assert applied(store, reader, blobs, fine, repo.tree, "src") is not None  # the control
        assert applied(store, reader, blobs, data, repo.tree, "src") is None


def test_blob_writer_stores_the_bytes_as_given(make_repo: Callable[..., Repo]) -> None:
    repo = make_repo({"a.txt": b"one\n"})
    with BlobWriter(repo.git) as blobs:
        oid = blobs.write(b"two\r\n\0")
        assert blobs.write(b"one\n") == repo.git.rev_parse(f"{repo.tree}:a.txt")
    assert repo.git.cat_file("blob", oid) == b"two\r\n\0"
