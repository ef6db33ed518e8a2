"""patchctl split: one patch -> consecutive parts by files and hunks, checked before writing,
written through the journal (all or nothing), verify --all green on the result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support.repos import Repo
from support.series import make_project

from patchctl.cli.main import main
from patchctl.errors import SplitRefused
from patchctl.ops.split import PartSpec, lines_of, parse_hunks, parse_part, split, with_hunks
from patchctl.series.model import Extends, Series, Upstream, load_series, save_series
from patchctl.txn.session import series_session

LONG = b"".join(b"line %d\n" % i for i in range(1, 41))
FILES = {
    "PKG-INFO": b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n",
    "src/a.c": LONG,
    "src/b.c": b"int b(void) { return 0; }\n",
    "docs/guide.md": b"# Guide\n",
    "old.txt": b"going away\n",
}
EDITED_A = LONG.replace(b"line 3\n", b"line 3 // big\n").replace(b"line 35\n", b"line 35 // big\n")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def ok(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code, out, err = run(capsys, *args, "--json")
    assert code == 0, f"{args}: {err} {out}"
    data = json.loads(out)
    assert isinstance(data, dict)
    return data


@pytest.fixture
def project(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A series with one captured patch, 0001-big: two hunks in src/a.c, src/b.c changed, a
    new doc, a deleted file; then the clean room back at the full series."""
    series = make_project(tmp_path, FILES)
    room = series.parent.parent / "cleanroom" / "demo"
    s = ("--series", str(series))
    ok(capsys, "cleanroom", "apply", *s)
    ok(capsys, "new", "0001-big", "--title", "Big change", "--marker", "// big", *s)
    (room / "src/a.c").write_bytes(EDITED_A)
    (room / "src/b.c").write_bytes(b"int b(void) { return 1; }\n")
    (room / "docs/new.md").write_bytes(b"# New\n")
    (room / "old.txt").unlink()
    ok(capsys, "capture", "0001-big", *s)
    ok(capsys, "new", "0002-top", "--title", "Top", *s)
    (room / "src/b.c").write_bytes(b"int b(void) { return 2; }\n")
    ok(capsys, "capture", "0002-top", *s)
    return series


def snapshot(series: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(series.iterdir()) if p.is_file()}


def test_split_by_paths_chains_trees_keeps_the_header_and_verifies(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = load_series(project)
    original = before.patch("0001-big")
    s = ("--series", str(project))
    result = ok(capsys, "split", "0001-big", "--part", "0001-code=src/*", "--part", "0002-rest", *s)
    assert [p["id"] for p in result["parts"]] == ["0001-code", "0002-rest"]
    assert result["parts"][0]["files"] == ["src/a.c", "src/b.c"]
    assert result["parts"][1]["files"] == ["docs/new.md", "old.txt"]
    after = load_series(project)
    assert after.ids() == ("0001-code", "0002-rest", "0002-top")
    code, rest, top = after.patches
    assert code.pre_tree == original.pre_tree and rest.post_tree == original.post_tree
    assert code.post_tree == rest.pre_tree and code.post_tree != code.pre_tree
    assert top == before.patch("0002-top")
    assert code.title == "Big change (1/2)" and rest.title == "Big change (2/2)"
    assert code.markers == ("// big",) and rest.markers == ()
    assert code.upstream_status == original.upstream_status and code.origin == original.origin
    assert not (project / "0001-big.patch").exists()
    data = (project / "0001-code.patch").read_bytes()
    assert b"Subject: [PATCH] Big change (1/2)\n" in data and b"Patchctl-Id: 0001-code\n" in data
    assert b"diff --git a/src/a.c" in data and b"docs/new.md" not in data
    assert ok(capsys, "verify", "--all", *s)["ok"] is True
    applied = ok(capsys, "cleanroom", "apply", *s)["applied"]
    assert [a["id"] for a in applied] == ["0001-code", "0002-rest", "0002-top"]


def test_split_by_hunks_of_one_file(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = ("--series", str(project))
    listed = ok(capsys, "split", "0001-big", "--list", *s)["files"]
    assert {f["path"]: len(f["hunks"]) for f in listed}["src/a.c"] == 2
    result = ok(
        capsys,
        "split",
        "0001-big",
        "--part",
        "0001-first=src/a.c:1",
        "--part",
        "0001-second=src/a.c:2,src/b.c",
        "--part",
        "0001-third",
        "--title",
        "0001-third=The rest of it",
        *s,
    )
    assert [p["hunks"] for p in result["parts"]] == [["src/a.c:1"], ["src/a.c:2"], []]
    first = (project / "0001-first.patch").read_bytes()
    assert b"line 3 // big" in first and b"line 35 // big" not in first
    second = (project / "0001-second.patch").read_bytes()
    assert b"+line 35 // big" in second and b"+line 3 // big" not in second
    assert load_series(project).patch("0001-third").title == "The rest of it"
    assert load_series(project).patch("0001-second").markers == ()  # the first adds it
    assert ok(capsys, "verify", "--all", *s)["ok"] is True


def test_a_part_may_keep_the_original_id(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = ("--series", str(project))
    ok(capsys, "split", "0001-big", "--part", "0001-big=docs/", "--part", "0001-more", *s)
    assert load_series(project).ids() == ("0001-big", "0001-more", "0002-top")
    assert b"docs/new.md" in (project / "0001-big.patch").read_bytes()
    assert ok(capsys, "verify", "--all", *s)["ok"] is True


def test_an_imported_patch_keeps_its_own_header(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = ("--series", str(project))
    mail = (
        b"From: Someone <someone@example.org>\nSubject: [PATCH 3/7] Two files\n\n"
        b"Why it matters.\n---\n"
        b"diff --git a/PKG-INFO b/PKG-INFO\n--- a/PKG-INFO\n+++ b/PKG-INFO\n"
        b"@@ -1,3 +1,3 @@\n Metadata-Version: 2.1\n-Name: demo\n+Name: demo2\n Version: 1.0\n"
        b"diff --git a/docs/guide.md b/docs/guide.md\n--- a/docs/guide.md\n+++ b/docs/guide.md\n"
        b"@@ -1 +1 @@\n-# Guide\n+# The guide\n-- \n2.39.0\n"
    )
    (tmp_path / "two.patch").write_bytes(mail)
    imported = ok(capsys, "import", str(tmp_path / "two.patch"), *s)["imported"]
    pid = imported[0]["id"]
    ok(capsys, "split", pid, "--part", "0004-pkg=PKG-INFO", "--part", "0005-docs=docs/*", *s)
    pkg = (project / "0004-pkg.patch").read_bytes()
    assert pkg.startswith(
        b"From: Someone <someone@example.org>\nSubject: [PATCH 3/7] Two files (1/2)\n"
    )
    assert b"Why it matters.\n" in pkg and pkg.endswith(b"-- \n2.39.0\n")
    entry = load_series(project).patch("0005-docs")
    assert entry.imported and entry.sha256 is not None
    assert ok(capsys, "verify", "--all", *s)["ok"] is True


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        (["0001-x=src/*", "0001-y=nothing/*"], "matches no file"),
        (["0001-x=src/*", "0001-y=src/b.c", "0001-z"], "claimed by two parts"),
        (["0001-x=src/a.c", "0001-y=src/a.c:1", "0001-z"], "claimed by two parts"),
        (["0001-x=src/*", "0001-y=docs/*"], "no part claims old.txt"),
        (["0001-x=src/*", "0001-y=docs/*,old.txt", "0001-z"], "would be empty"),
        (["0001-x=src/*", "0001-y", "0001-z"], "only one part may take the rest"),
        (["0001-x=src/*"], "at least two parts"),
        (["0001-x=src/*", "0002-top"], "already taken"),
        (["0001-x=src/*", "0001-x"], "already taken"),
        (["0001-x=src/a.c:3", "0001-y"], "has hunks 1-2"),
        (["0001-x=docs/new.md:1", "0001-y"], "cannot be split by hunks"),
        (["bad id=src/*", "0001-y"], "bad id"),
        (["0001-x=src/*,", "0001-y"], "empty pattern"),
    ],
)
def test_invalid_splits_are_refused_before_any_write(
    project: Path, capsys: pytest.CaptureFixture[str], parts: list[str], message: str
) -> None:
    before = snapshot(project)
    args = [a for p in parts for a in ("--part", p)]
    code, out, _err = run(capsys, "split", "0001-big", *args, "--series", str(project), "--json")
    error = json.loads(out)
    assert code == 5 and error["exit_code"] == 5 and error["error"] == "SplitRefused"
    assert message in error["message"] and error["key"] == "--part"
    assert snapshot(project) == before


def test_unknown_id_and_an_existing_part_file_are_refused(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = ("--series", str(project))
    before = snapshot(project)
    code, _out, err = run(
        capsys, "split", "0009-none", "--part", "0001-x=src/*", "--part", "0001-y", *s
    )
    assert code == 15 and "0009-none" in err
    (project / "0001-y.patch").write_bytes(b"mine\n")
    code, _out, err = run(
        capsys, "split", "0001-big", "--part", "0001-x=src/*", "--part", "0001-y", *s
    )
    assert code == 8 and "0001-y.patch" in err
    assert (project / "0001-y.patch").read_bytes() == b"mine\n"
    (project / "0001-y.patch").unlink()
    assert snapshot(project) == before


def test_dry_run_writes_nothing(project: Path) -> None:
    before = snapshot(project)
    specs = [parse_part("0001-x=src/*"), parse_part("0001-y")]
    result = split(project, "0001-big", specs, dry_run=True)
    assert [p.patch.id for p in result.parts] == ["0001-x", "0001-y"] and result.dry_run
    assert snapshot(project) == before


def test_a_failure_at_the_last_write_leaves_every_file_as_it_was(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from patchctl.txn.session import SeriesSession

    before = snapshot(project)

    def boom(self: SeriesSession, *args: object, **kwargs: object) -> list[Path]:
        raise OSError("disk full")

    monkeypatch.setattr(SeriesSession, "save", boom)
    with pytest.raises(OSError, match="disk full"):
        split(project, "0001-big", [PartSpec("0001-x", ("src/*",)), PartSpec("0001-y")])
    assert snapshot(project) == before
    assert not [p for p in project.iterdir() if p.name.startswith(".")]


def _split_process(project: Path, env: dict[str, str]) -> int:
    argv = [sys.executable, "-m", "patchctl", "split", "0001-big", "--series", str(project)]
    argv += ["--part", "0001-x=src/*", "--part", "0001-y"]
    return subprocess.run(argv, env={**os.environ, **env}, capture_output=True).returncode


def test_a_killed_split_leaves_old_or_new_files_and_the_next_run_recovers(
    project: Path, tmp_path: Path
) -> None:
    import shutil

    pristine = tmp_path / "pristine"
    shutil.copytree(project, pristine)
    before = snapshot(project)
    trace = tmp_path / "trace"
    assert _split_process(project, {"PATCHCTL_TEST_KILL_TRACE": str(trace)}) == 0
    after = snapshot(project)
    points = [line.split(" ", 1)[1] for line in trace.read_text().splitlines()]
    writes = [i + 1 for i, label in enumerate(points) if not label.startswith("git ")]
    assert any("removal" in points[i - 1] for i in writes)
    killed = 0
    for at in writes:
        shutil.rmtree(project)
        shutil.copytree(pristine, project)
        killed += _split_process(project, {"PATCHCTL_TEST_KILL_AT": str(at)}) == -9
        with series_session(project):
            pass  # the next run: finishes or rolls back what the killed one left
        assert snapshot(project) in (before, after), (at, points[at - 1])
    assert killed >= len(writes) - 1


def test_hunks_apply_at_their_own_place() -> None:
    diff = b"@@ -2,2 +2,2 @@\n a\n-b\n+B\n@@ -9 +9 @@\n-x\n\\ No newline at end of file\n+X\n"
    hunks = parse_hunks(diff)
    assert [(h.number, h.start) for h in hunks] == [(1, 1), (2, 8)]
    pre = b"0\na\nb\n3\n4\n5\n6\n7\nx"
    assert with_hunks(pre, hunks[1:]) == b"0\na\nb\n3\n4\n5\n6\n7\nX\n"
    assert with_hunks(pre, hunks) == b"0\na\nB\n3\n4\n5\n6\n7\nX\n"
    assert lines_of(b"a\r\nb\x0cc\nd") == [b"a\r\n", b"b\x0cc\n", b"d"]


def test_parse_part() -> None:
    assert parse_part("0001-x=a/*, b.c") == PartSpec("0001-x", ("a/*", "b.c"))
    assert parse_part("0001-rest") == PartSpec("0001-rest")
    with pytest.raises(SplitRefused, match="empty pattern"):
        parse_part("0001-x=")


EXT_FILES = {
    "pyproject.toml": b"[project]\nname = 'pkg'\n",
    "pkg/mod.py": b"X = 1\n",
    "vendor/lib/core.c": b"int core(void) { return 1; }\n",
    "vendor/lib/core.h": b"int core(void);\n",
}


@pytest.fixture
def extended(
    tmp_path: Path, make_repo: Callable[..., Repo], capsys: pytest.CaptureFixture[str]
) -> tuple[Path, Path]:
    """(base, package): `base` pins vendor/lib with 0001-core (two files) captured; `package`
    extends it under vendor/lib with its own 0002-bind."""
    upstream = make_repo(EXT_FILES, name="upstream")
    patches = tmp_path / "project" / "patches"
    sub = upstream.git.rev_parse(f"{upstream.commit}:vendor/lib")
    pin = Upstream(kind="git", url=str(upstream.path), commit=upstream.commit)
    base, package = patches / "base", patches / "package"
    base.mkdir(parents=True)
    save_series(Series(base / "series.yaml", replace(pin, subdir="vendor/lib", tree=sub)))
    ok(capsys, "cleanroom", "apply", "--series", str(base))
    ok(capsys, "new", "0001-core", "--title", "Core", "--series", str(base))
    room = tmp_path / "project" / "cleanroom"
    (room / "base" / "core.c").write_bytes(b"int core(void) { return 2; }\n")
    (room / "base" / "core.h").write_bytes(b"int core(void); /* 2 */\n")
    ok(capsys, "capture", "0001-core", "--series", str(base))
    package.mkdir()
    extends = Extends("base", "vendor/lib")
    upstream_pin = replace(pin, tree=upstream.tree)
    save_series(Series(package / "series.yaml", upstream_pin, extends=extends))
    ok(capsys, "cleanroom", "apply", "--series", str(package))
    ok(capsys, "new", "0002-bind", "--title", "Bind", "--series", str(package))
    (room / "package" / "pkg" / "mod.py").write_bytes(b"X = 2\n")
    ok(capsys, "capture", "0002-bind", "--series", str(package))
    return base, package


def test_a_series_that_extends_another(
    extended: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    base, package = extended
    parts = ["--part", "0001-c=core.c", "--part", "0001-h=core.h"]
    code, _out, err = run(capsys, "split", "0001-core", *parts, "--series", str(package))
    assert code == 15 and "belongs to the extended series base" in err
    clash = ["--part", "0001-c=core.c", "--part", "0002-bind"]
    before = snapshot(base)
    code, _out, err = run(capsys, "split", "0001-core", *clash, "--series", str(base))
    assert code == 5 and "taken in series package, which extends base" in err
    assert snapshot(base) == before
    code, _out, err = run(capsys, "split", "0001-core", *parts, "--series", str(base))
    assert code == 0 and f"run `patchctl docs --series {package}`" in err
    ok(capsys, "docs", "--series", str(package))
    assert ok(capsys, "verify", "--all", "--series", str(package))["ok"] is True
    assert ok(capsys, "verify", "--all", "--series", str(base))["ok"] is True
    applied = ok(capsys, "cleanroom", "apply", "--series", str(package))["applied"]
    assert [a["id"] for a in applied] == ["0001-c", "0001-h", "0002-bind"]


def test_parts_from_a_file(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parts = tmp_path / "parts.txt"
    parts.write_text("# the code first\n0001-code = src/a.c:1, src/b.c\n\n0001-more=src/a.c:2\n")
    s = ("--series", str(project))
    result = ok(capsys, "split", "0001-big", "--parts-from", str(parts), "--part", "0001-rest", *s)
    assert [p["id"] for p in result["parts"]] == ["0001-code", "0001-more", "0001-rest"]
    assert ok(capsys, "verify", "--all", *s)["ok"] is True
    parts.write_bytes(b"\xff\n")
    code, _out, err = run(capsys, "split", "0001-code", "--parts-from", str(parts), *s)
    assert code == 5 and "not UTF-8" in err


def test_a_series_with_a_root_splits_by_paths_under_it(
    tmp_path: Path, make_repo: Callable[..., Repo], capsys: pytest.CaptureFixture[str]
) -> None:
    upstream = make_repo({"lib/x.c": LONG, "lib/y.c": b"y\n", "top.txt": b"t\n"}, name="up")
    series = tmp_path / "patches" / "rooted"
    series.mkdir(parents=True)
    pin = Upstream(kind="git", url=str(upstream.path), commit=upstream.commit, tree=upstream.tree)
    save_series(Series(series / "series.yaml", pin, root="lib"))
    s = ("--series", str(series))
    ok(capsys, "cleanroom", "apply", *s)
    ok(capsys, "new", "0001-lib", "--title", "Lib", *s)
    room = tmp_path / "cleanroom" / "rooted"
    (room / "lib/x.c").write_bytes(EDITED_A)
    (room / "lib/y.c").write_bytes(b"y2\n")
    ok(capsys, "capture", "0001-lib", *s)
    listed = ok(capsys, "split", "0001-lib", "--list", *s)["files"]
    assert [(f["path"], len(f["hunks"])) for f in listed] == [("x.c", 2), ("y.c", 1)]
    ok(capsys, "split", "0001-lib", "--part", "0001-a=x.c:2", "--part", "0001-b", *s)
    assert b"diff --git a/x.c b/x.c" in (series / "0001-a.patch").read_bytes()
    assert ok(capsys, "verify", "--all", *s)["ok"] is True
