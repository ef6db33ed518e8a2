"""The series-corpus helpers (tests/support/corpus.py) that decide a package's result: the
quilt series as dpkg-source reads it, and the comparison with the dpkg-source oracle; and the
`quilt push -a` run and the timings recorded beside it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from support.corpus import Outcome, Step, compare_trees, passed, quilt_push, quilt_series, timings


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


def _debian(root: Path, patches: dict[str, bytes]) -> Path:
    (root / "patches").mkdir(parents=True)
    (root / "patches" / "series").write_text("".join(f"{name}\n" for name in patches))
    for name, data in patches.items():
        (root / "patches" / name).write_bytes(data)
    return root


FIX = b"--- a/x.c\n+++ b/x.c\n@@ -1 +1 @@\n-x\n+y\n"


@pytest.mark.skipif(shutil.which("quilt") is None, reason="quilt is not installed")
def test_quilt_push_applies_the_series_in_a_fresh_tree_without_user_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "src" / "pkg-1").mkdir(parents=True)
    (tmp_path / "src" / "pkg-1" / "x.c").write_bytes(b"x\n")
    (tmp_path / "src" / "pkg-1" / "debian" / "patches").mkdir(parents=True)  # upstream's own
    (tmp_path / "src" / "pkg-1" / "debian" / "patches" / "series").write_text("gone.patch\n")
    orig = tmp_path / "pkg_1.orig.tar.gz"
    subprocess.run(["tar", "czf", str(orig), "-C", str(tmp_path / "src"), "pkg-1"], check=True)
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / ".quiltrc").write_text("QUILT_PATCHES=elsewhere\n")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # neither is read
    monkeypatch.setenv("QUILT_PATCHES", "elsewhere")
    debian = _debian(tmp_path / "debian", {"fix.patch": FIX, "empty.patch": b""})
    step = quilt_push(orig, debian, tmp_path / "quilt")
    assert (step.name, step.exit_code, step.error) == ("quilt", 0, None)
    assert step.summary == {"applied": 2}  # a 0-byte patch is a no-op to quilt
    assert step.argv[:6] == ["quilt", "--quiltrc", "-", "push", "-a", "--fuzz=0"]
    assert not (tmp_path / "quilt").exists()  # removed once timed
    assert not (tmp_path / "quilt.home").exists()

    fuzzy = b"--- a/x.c\n+++ b/x.c\n@@ -1,2 +1,2 @@\n-x\n+y\n z\n"  # needs fuzz 1
    debian = _debian(tmp_path / "debian2", {"fuzzy.patch": fuzzy})
    step = quilt_push(orig, debian, tmp_path / "quilt")
    assert step.exit_code != 0 and step.error is not None and "fuzzy.patch" in step.error
    assert step.summary == {"applied": 0}


def _step(name: str, code: int, seconds: float) -> Step:
    return Step(name, ["patchctl", name], code, seconds)


def test_timings_count_import_and_the_apply_that_built_the_tree() -> None:
    drift = Outcome("p", quilt=Step("quilt", ["quilt"], 0, 0.5))
    drift.steps = [
        _step("init", 0, 1.0),
        _step("import", 0, 2.0),
        _step("verify", 0, 4.0),
        _step("apply", 10, 8.0),  # refused at the first drifted patch: not in import_apply
        _step("refresh", 0, 16.0),
        _step("apply-refreshed", 0, 32.0),
        _step("verify-final", 0, 64.0),
        Step("dpkg-source", ["patch"], 0, 128.0),  # not patchctl
    ]
    assert timings(drift) == {"import_apply": 34.0, "patchctl": 127.0, "quilt_push": 0.5}
    refused = Outcome("q", quilt=Step("quilt", ["quilt"], 0, 0.25))
    refused.steps = [_step("init", 0, 1.0), _step("import", 3, 0.5)]
    assert timings(refused) == {"patchctl": 1.5, "quilt_push": 0.25}
    missing = Outcome("r", quilt=Step("quilt", ["quilt"], 127, 0.0, "quilt is not installed"))
    assert timings(missing) == {}
