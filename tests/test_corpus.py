"""The series-corpus helpers (tests/support/corpus.py) that decide a package's result: the
quilt series as dpkg-source reads it, and the comparison with the dpkg-source oracle."""

from __future__ import annotations

from pathlib import Path

from support.corpus import Step, compare_trees, passed, quilt_series


def test_quilt_series_reads_comments_as_dpkg_source_does(tmp_path: Path) -> None:
    series = tmp_path / "series"
    series.write_text("# head\n\n  a.patch -p1 # why\nfix#2.patch\nsub/b.diff\t-p0\n #x\n")
    assert quilt_series(series) == [
        ("a.patch", ["-p1"]),
        ("fix#2.patch", []),
        ("sub/b.diff", ["-p0"]),
    ]


def _tree(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    (root / ".git").mkdir(exist_ok=True)
    (root / ".git" / "HEAD").write_bytes(b"ignored\n")
    return root


def _oracle(tmp_path: Path, ours: dict[str, bytes], theirs: dict[str, bytes]) -> Step:
    step = Step("dpkg-source", [], 0, 0.0, summary={"equal": False})
    compare_trees(step, _tree(tmp_path / "a", ours), _tree(tmp_path / "b", theirs))
    return step


def test_an_empty_file_that_patch_E_removed_is_the_only_accepted_difference(
    tmp_path: Path,
) -> None:
    step = _oracle(tmp_path, {"x.c": b"x\n", "t/empty.script": b""}, {"x.c": b"x\n"})
    assert step.summary["differences"] == ["t/empty.script"]
    assert step.summary["explained"] is True and passed(step)


def test_a_content_or_presence_difference_fails_the_oracle(tmp_path: Path) -> None:
    step = _oracle(tmp_path, {"x.c": b"x\n", "t/empty.script": b""}, {"x.c": b"y\n"})
    assert step.summary["differences"] == ["t/empty.script", "x.c"]
    assert step.summary["explained"] is False and not passed(step)
    step = _oracle(tmp_path / "2", {"x.c": b"x\n"}, {"x.c": b"x\n", "only-theirs": b""})
    assert step.summary["differences"] == ["only-theirs"] and not passed(step)
