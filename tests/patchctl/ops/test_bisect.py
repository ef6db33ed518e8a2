"""ops/bisect.py: the first upstream commit a patch stops applying on (git upstreams)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.drift import V2, drifted_project
from support.repos import new_repo

from patchctl.cli.main import main
from patchctl.errors import NotFound, PatchctlError
from patchctl.ops.bisect import bisect_upstream, report_lines
from patchctl.series.model import load_series


def _history(tmp_path: Path) -> tuple[Path, list[str]]:
    """The drifted project on V1, then upstream commits: two unrelated, V2 (rewrites the line
    0004-c-10 changes), two unrelated. (series dir, [V1, c1, c2, V2, c4, c5])."""
    series_dir = drifted_project(tmp_path)
    upstream = tmp_path / "upstream"
    commits = [str(load_series(series_dir).upstream.commit)]
    commits.append(new_repo(upstream, {"docs/one": b"1\n"}, b"docs: one\n").commit)
    commits.append(new_repo(upstream, {"docs/two": b"2\n"}, b"docs: two (#12)\n").commit)
    commits.append(new_repo(upstream, V2, b"c: rewrite line 10 (#13)\n").commit)
    commits.append(new_repo(upstream, {"docs/three": b"3\n"}, b"docs: three\n").commit)
    commits.append(new_repo(upstream, {"docs/four": b"4\n"}, b"docs: four\n").commit)
    return series_dir, commits


def test_names_the_commit_that_broke_the_patch_and_its_hunk(tmp_path: Path) -> None:
    series_dir, commits = _history(tmp_path)
    report = bisect_upstream(series_dir, "0004-c-10", commits[0], commits[-1])
    assert report.first_bad == commits[3] and report.last_good == commits[2]
    assert report.subject == "c: rewrite line 10 (#13)"
    assert report.hunks == (("src/c.c", 1),)
    assert report.commits == 5 and report.tried < 2 + 5  # by halves, not one by one
    text = "\n".join(report_lines(report))
    assert commits[3] in text and "src/c.c: hunk #1 no longer applies" in text


def test_a_branch_name_and_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    series_dir, commits = _history(tmp_path)
    args = ["bisect-upstream", "0004-c-10", "--series", str(series_dir)]
    assert main([*args, "--good", commits[1], "--bad", "main", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["first_bad"] == commits[3] and data["hunks"] == [{"file": "src/c.c", "hunk": 1}]


def test_refusals(tmp_path: Path) -> None:
    series_dir, commits = _history(tmp_path)
    with pytest.raises(PatchctlError, match="still applies on --bad"):
        bisect_upstream(series_dir, "0004-c-10", commits[0], commits[2])
    with pytest.raises(PatchctlError, match="does not apply on --good"):
        bisect_upstream(series_dir, "0004-c-10", commits[3], commits[5])
    with pytest.raises(PatchctlError, match="not a descendant"):
        bisect_upstream(series_dir, "0004-c-10", commits[5], commits[0])
    with pytest.raises(NotFound):
        bisect_upstream(series_dir, "0004-c-10", "no-such-tag", commits[5])
    with pytest.raises(NotFound):
        bisect_upstream(series_dir, "9999-nope", commits[0], commits[5])
