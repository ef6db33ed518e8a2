"""`patchctl ci`: green on a fresh sample project; red, naming the file and line, for a
corrupted patch, stale docs and a patch that no longer applies (full and --fast)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.repos import tree_of_files
from support.series import CI_FILES, NEW_FILE_PATCH, captured_project, repin

from patchctl.cli.main import main
from patchctl.ops.ci.gate import GateOptions, project_series, run_gate

PATCH = "patches/demo/0001-one.patch"
README = "patches/demo/README.md"
SERIES = "patches/demo/series.yaml"
# Lines of 0001-one.patch: the util.c section opens at 19, its hunks start at 23 and 32;
# line 26 is the context line ` int f2;` of the first of them.
UTIL_SECTION, UTIL_HUNK1, UTIL_HUNK2, CONTEXT_F2 = 19, 23, 32, 26


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    """The sample project (its root is the current directory, as in a CI job)."""
    series_dir = captured_project(tmp_path)
    old = Path.cwd()
    os.chdir(series_dir.parent.parent)
    try:
        yield series_dir.parent.parent
    finally:
        os.chdir(old)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["ci", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def ci_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    """Exit code and the `ci` report (inside the error document on failure)."""
    code, out, _err = run(capsys, *args, "--json")
    data = json.loads(out)
    return code, data if code == 0 else data["ci"]


def places(report: dict[str, Any]) -> list[tuple[str, str, int, int]]:
    """(check, path, line, exit code) of each finding."""
    return [(f["check"], f["path"], f["line"], f["exit_code"]) for f in report["findings"]]


def corrupt_context(project: Path) -> None:
    """A context line that lost its leading space (an editor trimming whitespace)."""
    path = project / PATCH
    path.write_bytes(path.read_bytes().replace(b"\n int f2;\n", b"\nint f2;\n", 1))


def test_fresh_project_is_green(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = run(capsys)
    assert code == 0, out
    assert "series patches/demo" in out and out.endswith("patchctl ci: all checks passed\n")
    for check in ("series", "patches", "docs", "apply", "verify"):
        assert f"ok       {check}" in out
    code, report = ci_json(capsys, "--fast")
    assert code == 0 and report["ok"] is True and report["findings"] == []
    assert [c["check"] for c in report["series"][0]["checks"]] == ["series", "patches", "docs"]


def test_corrupted_patch_is_red_on_its_line(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corrupt_context(project)
    code, report = ci_json(capsys, "--fast")
    assert code == 12
    assert ("patches", PATCH, CONTEXT_F2, 12) in places(report)
    code, report = ci_json(capsys)
    assert code == 12  # the patches check comes first; apply fails on the same line
    assert ("patches", PATCH, CONTEXT_F2, 12) in places(report)
    assert ("apply", PATCH, CONTEXT_F2, 3) in places(report)
    assert report["series"][0]["checks"][-1] == {
        "check": "verify",
        "status": "skipped",
        "detail": "the series did not apply",
    }


def test_changed_added_line_fails_verify_on_its_line(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = project / PATCH
    path.write_bytes(path.read_bytes().replace(b"+int g17;", b"+int h17;"))
    code, report = ci_json(capsys)
    assert code == 12
    found = places(report)
    assert ("verify", PATCH, UTIL_SECTION, 12) in found  # forward: first differing path
    assert ("verify", PATCH, 37, 12) in found  # reexport: the changed line itself
    assert not [f for f in found if f[0] != "verify"]


def test_stale_docs_are_red_on_the_first_stale_line(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = project / README
    lines = readme.read_bytes().splitlines(keepends=True)
    number = next(n for n, line in enumerate(lines, 1) if b"`0001-one`" in line)
    lines[number - 1] = lines[number - 1].replace(b"One", b"Uno")
    readme.write_bytes(b"".join(lines))
    for args in (("--fast",), ()):
        code, report = ci_json(capsys, *args)
        assert code == 16
        assert places(report) == [("docs", README, number, 16)]
    (project / README).unlink()
    code, report = ci_json(capsys, "--fast")
    assert code == 16 and places(report) == [("docs", README, 1, 16)]


def test_patch_that_no_longer_applies_is_red_on_its_hunk(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    moved = {**CI_FILES, "util.c": CI_FILES["util.c"].replace(b"f16;", b"x16;")}
    repin(project.parent, project / "patches" / "demo", moved)
    assert main(["docs", "--series", "patches/demo", "--json"]) == 0
    code, report = ci_json(capsys)
    assert code == 3
    assert places(report) == [("apply", PATCH, UTIL_HUNK2, 3)]
    assert report["findings"][0]["patch"] == "0001-one"
    assert "hunk #2 in util.c" in report["findings"][0]["message"]


def test_new_pin_with_its_tree_is_red_without_the_upstream(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    moved = {**CI_FILES, "util.c": CI_FILES["util.c"].replace(b"f16;", b"x16;")}
    tree = tree_of_files(project.parent / "scratch", moved)
    repin(project.parent, project / "patches" / "demo", moved, tree)
    assert main(["docs", "--series", "patches/demo", "--json"]) == 0
    entry = (project / SERIES).read_text().splitlines().index("  - id: 0001-one") + 1
    code, report = ci_json(capsys, "--fast")
    assert code == 12
    assert places(report) == [("patches", SERIES, entry, 12)]
    code, report = ci_json(capsys)
    assert code == 12
    assert places(report) == [("patches", SERIES, entry, 12), ("apply", PATCH, UTIL_HUNK2, 3)]


def test_header_and_sha256_changes_are_found_fast(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = project / PATCH
    path.write_bytes(path.read_bytes().replace(b"Subject: [PATCH] One", b"Subject: [PATCH] Uno"))
    code, report = ci_json(capsys, "--fast")
    assert code == 12 and places(report) == [("patches", PATCH, 4, 12)]
    path.unlink()
    code, report = ci_json(capsys, "--fast")
    entry = (project / SERIES).read_text().splitlines().index("  - id: 0001-one") + 1
    assert code == 15
    assert ("patches", SERIES, entry, 15) in places(report)


def test_an_imported_patch_git_cannot_read_is_red_on_gits_line(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project.parent / "extra.patch").write_bytes(NEW_FILE_PATCH)
    args = ("--series", "patches/demo", "--json")
    assert main(["import", str(project.parent / "extra.patch"), *args]) == 0
    series = project / SERIES  # an older series: no sha256 recorded for the imported patch
    text = series.read_text().splitlines(keepends=True)
    series.write_text("".join(line for line in text if not line.startswith("    sha256: ")))
    extra = project / "patches/demo/0002-extra.patch"
    extra.write_bytes(NEW_FILE_PATCH.replace(b"@@ -0,0 +1 @@", b"@@ -0,0 +1,2 @@"))
    code, report = ci_json(capsys, "--fast")
    assert code == 3
    assert places(report)[0] == ("patches", "patches/demo/0002-extra.patch", 6, 3)
    assert "corrupt patch at line 7" in report["findings"][0]["message"]  # past the end


def test_github_and_gitlab_formats(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corrupt_context(project)
    code, out, err = run(capsys, "--fast", "--format", "github")
    assert code == 12
    assert f"::error file={PATCH},line={CONTEXT_F2},title=patchctl ci%3A patches (exit 12)::" in out
    assert f"{PATCH}:{CONTEXT_F2}: patches:" in out  # the summary, in the job log
    assert err.startswith("error: patch 0001-one: line 26")
    code, out, err = run(capsys, "--fast", "--format", "gitlab")
    assert code == 12
    report = json.loads(out)  # stdout holds only the report; the summary is on stderr
    assert report[0]["location"] == {"path": PATCH, "lines": {"begin": CONTEXT_F2}}
    assert report[0]["check_name"] == "patchctl-patches"
    assert "series patches/demo" in err
    code, out, _err = run(capsys, "--fast", "--format", "gitlab")
    assert json.loads(out) == report  # stable fingerprints


def test_build_is_the_last_check(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if shutil.which("cmake") is None:
        pytest.skip("cmake is not installed: the build check of `patchctl ci --build` not run")
    code, report = ci_json(capsys, "--build", "-t", "demo")
    assert code == 0, report
    assert report["series"][0]["checks"][-1]["check"] == "build"
    code, report = ci_json(capsys, "--build", "-t", "no-such-target")
    assert code == 13 and places(report) == [("build", SERIES, 1, 13)]


def test_series_are_found_and_checked_in_order(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert project_series(project) == [Path("patches/demo")]
    missing = run_gate([Path("patches/none"), Path("patches/demo")], GateOptions(fast=True))
    assert [g.series for g in missing.series] == ["patches/none", "patches/demo"]
    assert missing.exit_code == 15  # the first series' failure
    assert missing.series[1].failures == []
    assert [c.status for c in missing.series[0].checks] == ["failed", "skipped", "skipped"]


@pytest.mark.parametrize(
    "args",
    [("--json", "--format", "github"), ("--fast", "--build"), ("--launcher", "ccache")],
)
def test_option_conflicts_are_usage_errors(
    project: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...]
) -> None:
    code, _out, err = run(capsys, *args)
    assert code == 2, err
