"""baseblobs: the base blobs a patch's index lines name, checked against a rebuilt tree."""

from __future__ import annotations

from collections.abc import Callable

from support.repos import Repo

from patchctl.gitlayer.trees import TreeStore
from patchctl.series.baseblobs import check, named_bases

LINES = b"".join(b"line %d\n" % n for n in range(20))


def section(path: str, old: str, new: str = "1" * 40) -> bytes:
    return (
        f"diff --git a/{path} b/{path}\nindex {old}..{new} 100644\n"
        f"--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-line 0\n+line zero\n"
    ).encode()


def new_file(path: str) -> bytes:
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 100644\nindex 0000000..{'2' * 7}\n"
        f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+x\n"
    ).encode()


def test_named_bases_skip_new_files_and_prefix_the_root() -> None:
    data = section("f.c", "a" * 40) + new_file("n.c") + section("d/g.c", "bcdef01")
    assert named_bases(data) == [(b"f.c", "a" * 40), (b"d/g.c", "bcdef01")]
    assert named_bases(data, "sub/") == [(b"sub/f.c", "a" * 40), (b"sub/d/g.c", "bcdef01")]
    plain = b"--- a/f.c\n+++ b/f.c\n@@ -1 +1 @@\n-line 0\n+line zero\n"
    assert named_bases(plain) == []  # no index line: nothing named


def test_check_reproduces_full_and_abbreviated_ids_and_names_the_rest(
    make_repo: Callable[..., Repo],
) -> None:
    repo = make_repo({"src/f.c": LINES, "src/g.c": b"g\n"})
    blob = repo.git.rev_parse(f"{repo.tree}:src/f.c")
    other = repo.git.rev_parse(f"{repo.tree}:src/g.c")
    with TreeStore(repo.git) as store:
        full = check(store, repo.tree, section("f.c", blob), "src")
        assert full.ok and (full.named, full.abbreviated) == (1, 0)
        short = check(store, repo.tree, section("f.c", blob[:7]), "src")
        assert short.ok and (short.named, short.abbreviated) == (1, 1)
        wrong = check(store, repo.tree, section("f.c", other) + section("gone.c", blob), "src")
        assert [(u.path, u.named, u.rebuilt) for u in wrong.unreproduced] == [
            ("src/f.c", other, blob),
            ("src/gone.c", blob, None),
        ]
        assert "the rebuilt tree has no such file" in wrong.unreproduced[1].describe()
        top = check(store, repo.tree, section("f.c", blob))  # root "." : no src/ prefix
        assert not top.ok and top.unreproduced[0].rebuilt is None
        assert check(store, repo.tree, new_file("src/n.c")).named == 0


def test_known_entries_are_read_instead_of_the_tree(make_repo: Callable[..., Repo]) -> None:
    repo = make_repo({"f.c": LINES})
    blob = repo.git.rev_parse(f"{repo.tree}:f.c")
    other = "e" * 40
    with TreeStore(repo.git) as store:
        data = section("f.c", blob)
        assert check(store, repo.tree, data).ok
        said = {b"f.c": (("100644", other), ("100644", blob))}  # the before side counts
        found = check(store, repo.tree, data, known=said)
        assert [(u.named, u.rebuilt) for u in found.unreproduced] == [(blob, other)]
        assert check(store, repo.tree, data, known={b"g.c": (None, None)}).ok  # other paths
