"""trees.py: tree objects read, searched and edited in memory equal what an index writes."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.files import CONTENT_MATRIX, Exe, Files, Link
from support.repos import MakeRepo

from patchctl.gitlayer.index import Index, temp_index
from patchctl.gitlayer.pipes import TreeWriter, tree_bytes
from patchctl.gitlayer.trees import CACHE_TREES, TREE_MODE, TreeStore, parse_tree


def _index_tree(index: Index, tree: str, changes: dict[bytes, tuple[str, str] | None]) -> str:
    """What an index makes of the same edit: read-tree, update-index, write-tree."""
    index.read_tree(tree)
    removed = b"".join(p + b"\0" for p, e in changes.items() if e is None)
    if removed:
        index.run("update-index", "-z", "--force-remove", "--stdin", stdin=removed)
    index.add_entries({p: e for p, e in changes.items() if e is not None})
    return index.write_tree()


def test_edit_equals_an_index_edit(make_repo: MakeRepo) -> None:
    files: Files = {
        **CONTENT_MATRIX,
        "d/e/f.txt": b"deep\n",
        "d/g.txt": b"g\n",
        "a": b"a file\n",
        "x/only.txt": b"alone\n",
        "t-tool": Exe(b"#!/bin/sh\n"),
        "l2": Link("a"),
    }
    repo = make_repo(files)
    blob = repo.git.rev_parse(f"{repo.tree}:a")
    edits: list[dict[bytes, tuple[str, str] | None]] = [
        {b"a": ("100755", blob)},  # mode change
        {b"d/e/f.txt": None},  # a directory emptied: dropped
        {b"x/only.txt": None, b"new/deep/er.txt": ("100644", blob)},
        {b"a": None, b"a/inside": ("100644", blob)},  # a file becomes a directory
        {b"d/e/f.txt": None, b"d/g.txt": None, b"d": ("120000", blob)},  # and back
        {"n\u00e4me-\u65e5\u672c.txt".encode(): None, b"dir with spaces/new": ("100644", blob)},
        {b"nope": None, b"src/gone.c": None},  # missing paths removed: nothing changes
    ]
    with TreeStore(repo.git) as store, temp_index(repo.git) as index:
        for changes in edits:
            assert store.edit(repo.tree, changes) == _index_tree(index, repo.tree, changes)
        everything = {p: None for p, _e in store.walk(repo.tree)}
        assert store.edit(repo.tree, everything) == "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
        assert store.edit(repo.tree, {}) == repo.tree


def test_find_reports_the_entry_and_what_blocks_the_way(make_repo: MakeRepo) -> None:
    repo = make_repo({"a": b"file\n", "d/e/f": b"deep\n", "l": Link("d")})
    with TreeStore(repo.git) as store:
        assert store.find(repo.tree, b"d/e/f").entry is not None
        assert store.find(repo.tree, b"d/e").entry is not None
        assert store.find(repo.tree, b"d/e").entry[0] == TREE_MODE  # type: ignore[index]
        assert store.find(repo.tree, b"nope").entry is None
        blocked = store.find(repo.tree, b"a/b/c")
        assert blocked.entry is None and blocked.blocker is not None
        assert blocked.blocker[0] == b"a"
        via_link = store.find(repo.tree, b"l/e/f")
        assert via_link.blocker is not None and via_link.blocker[1][0] == "120000"
        assert sorted(p for p, _e in store.walk(repo.tree)) == [b"a", b"d/e/f", b"l"]


def test_memory_is_bounded_and_a_closed_store_restarts(make_repo: MakeRepo) -> None:
    repo = make_repo({f"d{i}/f": b"%d\n" % i for i in range(20)})
    store = TreeStore(repo.git)
    store.find(repo.tree, b"d3/f")
    store.close()
    assert store.find(repo.tree, b"d7/f").entry is not None  # processes start again
    store.close()
    assert CACHE_TREES >= 1024


def test_parse_tree_reads_raw_entries(tmp_path: Path, make_repo: MakeRepo) -> None:
    repo = make_repo({"b": b"1\n", "a/x": b"2\n"})
    raw = repo.git.cat_file("tree", repo.tree)
    entries = parse_tree(raw, 20)
    assert set(entries) == {b"a", b"b"} and entries[b"a"][0] == TREE_MODE
    with pytest.raises(ValueError):
        parse_tree(b"100644 broken", 20)


TREE_TYPES = {
    "100644": "blob",
    "100755": "blob",
    "120000": "blob",
    "160000": "commit",
    TREE_MODE: "tree",
}


def test_tree_writer_writes_what_mktree_writes(make_repo: MakeRepo) -> None:
    """Names that sort differently as files and as directories (`a` < `a.b` < `a/` < `a0`),
    a gitlink, a symlink, an executable and non-ASCII names: the id mktree gives."""
    repo = make_repo({"f": b"x\n"})
    blob = repo.git.rev_parse(f"{repo.tree}:f")
    commit = repo.git.commit_tree(repo.tree, b"gitlink target\n")
    names = [b"a", b"a.b", b"a-", b"a0", b"ab", b"\xc3\xa4", b"z", b"A", b"a b"]
    entries: dict[bytes, tuple[str, str]] = {}
    for k, name in enumerate(names):
        mode = ("100644", "100755", "120000", TREE_MODE)[k % 4]
        entries[name] = (mode, repo.tree if mode == TREE_MODE else blob)
    entries[b"sub"] = ("160000", commit)
    for dirs in ((), (b"a",), (b"a", b"a.b", b"a0")):  # each name as a file, then as a directory
        chosen = {n: ((TREE_MODE, repo.tree) if n in dirs else e) for n, e in entries.items()}
        listing = b"".join(
            f"{m} {TREE_TYPES[m]} {o}\t".encode() + n + b"\0" for n, (m, o) in chosen.items()
        )
        expected = repo.git.run("mktree", "-z", stdin=listing).decode().strip()
        writer = TreeWriter(repo.git)
        try:
            assert writer.write(chosen) == expected
            assert writer.write(dict(reversed(chosen.items()))) == expected  # order given: moot
        finally:
            writer.close()
        assert tree_bytes(chosen) == repo.git.cat_file("tree", expected)


@pytest.mark.parametrize("name", [b"", b".", b"..", b"a/b", b"a\0b"])
def test_tree_bytes_refuses_a_name_git_refuses(name: bytes) -> None:
    with pytest.raises(ValueError, match="not a tree entry name"):
        tree_bytes({name: ("100644", "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391")})
