"""room/snapshot.py: the upstream's .gitignore files as one root-relative exclude file that ignores
exactly what git's own per-directory reading ignores."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.files import write_files
from support.repos import new_repo

from patchctl.room.snapshot import relocated, trusted_rules

RULES: dict[str, bytes] = {
    ".gitignore": b"# top\n/build/\n*.o\n!keep.o\nlogs/\n\n",
    "a/.gitignore": b"*.tmp\n/only-top.txt\nsub/x.c\n!important.tmp\n**/deep.txt\n",
    "a/sub/.gitignore": b"*.o\n!a.o\n",
    "b[1]/.gitignore": b"*.c\n",  # glob characters in the directory's name
    "c/.gitignore": b"\\#hash.txt\n\\!bang.txt\ntrail/ \n",
}
UNTRACKED = [
    "build/x", "a/build/x", "m.o", "keep.o", "a/keep.o", "logs/l", "a/logs/l",
    "a/t.tmp", "a/sub/t.tmp", "t.tmp", "a/important.tmp", "a/only-top.txt",
    "a/sub/only-top.txt", "a/sub/x.c", "a/x.c", "x.c", "a/q/deep.txt", "a/deep.txt",
    "deep.txt", "a/sub/a.o", "a/sub/b.o", "b[1]/y.c", "b1/y.c", "c/#hash.txt",
    "c/!bang.txt", "c/trail/z",
]  # fmt: skip


def test_relocated_rules_ignore_what_gits_per_directory_rules_ignore(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "r", RULES)
    write_files(repo.path, {name: b"x\n" for name in UNTRACKED})
    rules = trusted_rules(repo.git, repo.tree)
    (tmp_path / "exclude").write_bytes(rules)

    def others(*flags: str) -> list[bytes]:
        return sorted(repo.git.run("ls-files", "-z", "--others", *flags).split(b"\0")[:-1])

    expected = others("--exclude-per-directory=.gitignore")
    assert others(f"--exclude-from={tmp_path / 'exclude'}") == expected
    assert b"a/important.tmp" in expected and b"a/sub/a.o" in expected  # negations hold
    assert b"a/sub/only-top.txt" in expected and b"b1/y.c" in expected  # anchoring holds
    assert b"a/t.tmp" not in expected and b"b[1]/y.c" not in expected


@pytest.mark.parametrize(
    ("directory", "line", "rule"),
    [
        (b"", b"*.o", b"*.o"),
        (b"d", b"*.o", b"/d/**/*.o"),
        (b"d", b"/x", b"/d/x"),
        (b"d", b"x/y", b"/d/x/y"),
        (b"d", b"x/", b"/d/**/x/"),
        (b"d", b"!x", b"!/d/**/x"),
        (b"d", b"!/x/", b"!/d/x/"),
        (b"d", b"**/x", b"/d/**/x"),
        (b"a[1]*", b"x", b"/a\\[1]\\*/**/x"),
    ],
)
def test_relocated_lines(directory: bytes, line: bytes, rule: bytes) -> None:
    assert relocated(directory, b"# comment\n\n" + line + b"\n").splitlines()[-1] == rule


def test_info_exclude_comes_last_and_a_symlinked_gitignore_is_not_read(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "r", {".gitignore": b"*.o\n", "d/x": b"x\n"})
    (repo.path / "d" / ".gitignore").symlink_to("../.gitignore")
    repo = new_repo(repo.path, {})
    exclude = repo.path / ".git" / "info" / "exclude"
    exclude.parent.mkdir(exist_ok=True)
    exclude.write_bytes(b"/mine.txt\n")
    assert trusted_rules(repo.git, repo.tree) == b"*.o\n/mine.txt\n"
