"""premerge.py: patches merged together on their own paths give the trees that merging each
alone onto the whole tip gives, and nothing is used where that would not hold."""

from __future__ import annotations

from support.repos import MakeRepo, Repo

from patchctl.gitlayer.pipes import BlobWriter, CommitWriter
from patchctl.gitlayer.trees import Entry, TreeStore
from patchctl.ops.rebase.premerge import Ahead, Premerger

LINES = b"".join(b"line %d\n" % n for n in range(1, 41))


def _edit(text: bytes, line: int, new: bytes) -> bytes:
    """`text` with line number `line` replaced by `new`."""
    lines = text.splitlines(keepends=True)
    lines[line - 1] = new
    return b"".join(lines)


class World:
    """One repository, its tree store, and blobs written on demand."""

    def __init__(self, repo: Repo) -> None:
        self.repo, self.git = repo, repo.git
        self.store = TreeStore(repo.git)
        self.blobs = BlobWriter(repo.git)
        self.writer = CommitWriter(repo.git)

    def close(self) -> None:
        for pipe in (self.store, self.blobs, self.writer):
            pipe.close()

    def entry(self, data: bytes) -> Entry:
        return ("100644", self.blobs.write(data))

    def tree(self, base: str, files: dict[bytes, bytes | None]) -> str:
        changes = {p: None if d is None else self.entry(d) for p, d in files.items()}
        return self.store.edit(base, changes)

    def patch(self, pid: str, base: str, files: dict[bytes, bytes | None]) -> tuple[Ahead, str]:
        """A patch on `base` setting (or removing) `files`: its Ahead and its tree after."""
        after = self.tree(base, files)
        changes = self.git.raw_changes([(base, after)])[0]
        return Ahead(pid, base, changes), after

    def full(self, base: str, tip: str, theirs: str) -> tuple[str, bool]:
        """The merge of `theirs` onto `tip` from `base`, as the rebase makes it alone."""
        merged = self.git.merge_trees(base, tip, theirs, ("tip", "patch"))
        return merged.tree, merged.clean


def _world(make_repo: MakeRepo) -> World:
    files = {f"src/f{n}.c": LINES for n in range(4)}
    files |= {f"old/m{n}.c": LINES + b"// %d\n" % n for n in range(3)}
    return World(make_repo(files))


def test_a_batch_gives_each_patch_the_tree_of_its_own_full_merge(make_repo: MakeRepo) -> None:
    w = _world(make_repo)
    try:
        base = w.repo.tree
        tip = w.tree(base, {b"src/f0.c": _edit(LINES, 2, b"upstream\n"),
                            b"src/f1.c": _edit(LINES, 38, b"upstream\n"),
                            b"src/gone.c": None, b"extra/u.c": b"new upstream\n"})  # fmt: skip
        one, one_after = w.patch("0001", base, {b"src/f0.c": _edit(LINES, 30, b"patch 1\n"),
                                                b"src/new/n.h": b"added\n"})  # fmt: skip
        two, two_after = w.patch("0002", one_after, {b"src/f1.c": _edit(LINES, 3, b"patch 2\n")})
        merger = Premerger(w.git, w.store, w.writer)
        first = merger.merged(tip, one, [two])
        assert first is not None and first.clean
        assert (first.tree, True) == w.full(base, tip, one_after)
        second = merger.merged(first.tree, two, [])
        assert second is not None
        assert (second.tree, True) == w.full(one_after, first.tree, two_after)
        assert merger.processes == 1  # the second came from the first merge
    finally:
        w.close()


def test_a_kept_result_is_merged_again_when_the_tip_changed_its_file(make_repo: MakeRepo) -> None:
    w = _world(make_repo)
    try:
        base = w.repo.tree
        tip = w.tree(base, {b"src/f2.c": _edit(LINES, 1, b"upstream\n")})
        one, one_after = w.patch("0001", base, {b"src/f0.c": _edit(LINES, 5, b"patch 1\n")})
        two, two_after = w.patch("0002", one_after, {b"src/f2.c": _edit(LINES, 30, b"p2\n")})
        merger = Premerger(w.git, w.store, w.writer)
        first = merger.merged(tip, one, [two])
        assert first is not None and merger.processes == 1
        assert "0002" in merger.results
        # the tip the second patch lands on differs in its file (a patch in between, say)
        moved = w.tree(first.tree, {b"src/f2.c": _edit(_edit(LINES, 1, b"upstream\n"), 20, b"x\n")})
        second = merger.merged(moved, two, [])
        assert second is not None and merger.processes == 2
        assert (second.tree, True) == w.full(one_after, moved, two_after)
        stale = w.full(one_after, first.tree, two_after)[0]  # what the kept result gave
        assert w.store.find(second.tree, b"src/f2.c") != w.store.find(stale, b"src/f2.c")
    finally:
        w.close()


def test_renames_and_conflicts_are_left_to_the_full_merge(make_repo: MakeRepo) -> None:
    w = _world(make_repo)
    try:
        base = w.repo.tree
        # the new upstream moved old/ to moved/ and changed a line of src/f3.c
        moves: dict[bytes, bytes | None] = {}
        for n in range(3):
            moves[b"old/m%d.c" % n] = None
            moves[b"moved/m%d.c" % n] = LINES + b"// %d\n" % n
        tip = w.tree(base, {**moves, b"src/f3.c": _edit(LINES, 10, b"upstream\n")})
        merger = Premerger(w.git, w.store, w.writer)
        # a file added in the directory upstream moved: git moves it along (or stops)
        added, added_after = w.patch("0001", base, {b"old/m9.c": b"new\n"})
        assert merger.reduce(tip, added) is None
        assert merger.merged(tip, added, []) is None
        tree, _clean = w.full(base, tip, added_after)
        assert w.store.find(tree, b"old/m9.c").entry is None  # not where the patch put it
        # a file modified that upstream renamed: the change follows the rename
        renamed, renamed_after = w.patch("0002", base, {b"old/m1.c": _edit(LINES, 5, b"p\n")})
        assert merger.reduce(tip, renamed) is None
        tree, clean = w.full(base, tip, renamed_after)
        assert clean and w.store.find(tree, b"old/m1.c").entry is None
        # a conflict: the patch changes the line upstream changed
        clash, clash_after = w.patch("0003", base, {b"src/f3.c": _edit(LINES, 10, b"mine\n")})
        assert merger.reduce(tip, clash) is not None
        assert merger.merged(tip, clash, []) is None
        assert not w.full(base, tip, clash_after)[1]
        # a patch that removes a file is never merged here
        removal, _ = w.patch("0004", base, {b"src/f2.c": None})
        assert merger.reduce(tip, removal) is None
        # one conflicted patch in a batch costs the others nothing
        good, good_after = w.patch("0005", clash_after, {b"src/f0.c": _edit(LINES, 1, b"g\n")})
        assert merger.merged(tip, clash, [good]) is None
        assert "0005" in merger.results
        kept = merger.merged(tip, good, [])
        assert kept is not None
        assert (kept.tree, True) == w.full(clash_after, tip, good_after)
    finally:
        w.close()


def test_a_result_kept_from_one_batch_is_not_merged_again_by_the_next(
    make_repo: MakeRepo,
) -> None:
    w = _world(make_repo)
    try:
        base = w.repo.tree
        tip = w.tree(base, {b"src/f0.c": _edit(LINES, 1, b"upstream\n")})
        a, a_after = w.patch("0001", base, {b"src/f0.c": _edit(LINES, 20, b"a\n")})
        b, b_after = w.patch("0002", a_after, {b"src/f0.c": _edit(LINES, 30, b"b\n")})
        c, c_after = w.patch("0003", b_after, {b"src/f1.c": _edit(LINES, 9, b"c\n")})
        merger = Premerger(w.git, w.store, w.writer)
        first = merger.merged(tip, a, [b, c])
        assert first is not None and set(merger.results) == {"0003"}  # b shares a's file
        kept = merger.results["0003"]
        second = merger.merged(first.tree, b, [c])
        assert second is not None and merger.processes == 2
        assert merger.results["0003"] is kept  # c was not merged again
        third = merger.merged(second.tree, c, [])
        assert third is not None and merger.processes == 2
        assert (third.tree, True) == w.full(b_after, second.tree, c_after)
    finally:
        w.close()
