"""ops/rebase/upstreamed.py: merged / partly merged / needed, from patch-id, trailers and
reverse apply."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from support.drift import rebase_ready
from support.repos import Repo, new_repo

from patchctl.cli.main import main
from patchctl.gitlayer.index import temp_index
from patchctl.ops.rebase.upstreamed import (
    MERGED,
    NEEDED,
    PARTLY,
    detect,
    report_lines,
    trailer_refs,
    upstream_commits,
)

LINES = b"".join(b"line %d\n" % n for n in range(1, 21))


def _patch(repo: Repo, header: bytes, changes: dict[str, bytes]) -> bytes:
    """A patch file (header, `---`, git diff) of `changes` on the repo's first commit."""
    before = {name: repo.git.cat_file("blob", repo.git.rev_parse(f"{repo.tree}:{name}"))
              for name in changes}  # fmt: skip
    scratch = repo.path.parent / "scratch"
    diff = new_repo(scratch, before).git
    (scratch / "x").write_bytes(b"")
    for name, data in changes.items():
        (scratch / name).write_bytes(data)
    diff.run("add", "-A")
    out = diff.run("diff", "--cached", "--full-index", "--", *changes)
    diff.run("rm", "-q", "-r", "--cached", "--", ".")
    for name in (*changes, "x"):
        (scratch / name).unlink()
    return header + b"---\n" + out


def test_trailer_refs_reads_dep3_and_pr_trailers() -> None:
    data = (
        b"Subject: x\n\nForwarded: https://github.com/ggml-org/llama.cpp/pull/1234\n"
        b"Applied-Upstream: commit:abcdef1234567\nUpstream-PR: #77\nForwarded: no\n---\n"
    )
    assert set(trailer_refs(data)) == {("pr", "1234"), ("commit", "abcdef1234567"), ("pr", "77")}
    assert trailer_refs(b"Subject: y\nForwarded: not-needed\n---\n") == ()


def test_detect_merged_partly_merged_and_needed(make_repo: Callable[..., Repo]) -> None:
    files = {
        n: LINES.replace(b"line 10\n", f"{n} 10\n".encode())
        for n in ("a.c", "b.c", "c.c", "d.c", "e.c")
    }
    repo = make_repo(files, name="up")
    old = repo.commit
    edit = {n: files[n].replace(b"line 5\n", b"line 5\n// ours\n") for n in files}
    p1 = _patch(repo, b"Subject: a\n", {"a.c": edit["a.c"]})
    p2 = _patch(repo, b"Subject: b and c\n", {"b.c": edit["b.c"], "c.c": edit["c.c"]})
    p3 = _patch(
        repo, b"Subject: d\n\nUpstream-PR: https://github.com/o/r/pull/456\n", {"d.c": edit["d.c"]}
    )
    p4 = _patch(repo, b"Subject: e\n", {"e.c": edit["e.c"]})
    # upstream: the same change as p1 (#123) at another place in the history, half of p2
    # inside a larger commit, and #456 as a reworked change
    new_repo(repo.path, {"a.c": edit["a.c"]}, message=b"fix a (#123)\n")
    new_repo(repo.path, {"b.c": edit["b.c"].replace(b"line 1\n", b"line one\n")}, b"b (#200)\n")
    new = new_repo(repo.path, {"d.c": edit["d.c"].replace(b"// ours", b"// theirs")},
                   message=b"reworked d (#456)\n")  # fmt: skip
    commits = upstream_commits(repo.git, old, new.commit)
    assert [c.subject for c in commits] == ["fix a (#123)", "b (#200)", "reworked d (#456)"]
    with temp_index(repo.git) as index:
        found = detect(
            index, [("p1", p1), ("p2", p2), ("p3", p3), ("p4", p4)], new.tree, ".", commits
        )
    states = {r.id: r for r in found}
    assert states["p1"].state == MERGED
    assert any(e.startswith("patch-id") and "fix a (#123)" in e for e in states["p1"].evidence)
    assert states["p2"].state == PARTLY and states["p2"].left == ("c.c",)
    assert "b.c" in states["p2"].evidence[0]
    assert states["p3"].state == MERGED
    assert any("#456" in e and "reworked d" in e for e in states["p3"].evidence)
    assert states["p4"].state == NEEDED and states["p4"].evidence == ()
    text = "\n".join(report_lines(found))
    assert "partly merged p2" in text and "still needed: c.c" in text


def test_detect_without_history_uses_the_tree_alone(make_repo: Callable[..., Repo]) -> None:
    repo = make_repo({"a.c": LINES}, name="arch")
    edit = LINES.replace(b"line 5\n", b"line 5\n// ours\n")
    patch = _patch(repo, b"Subject: a\n", {"a.c": edit})
    new = new_repo(repo.path, {"a.c": edit.replace(b"line 1\n", b"line 0\nline 1\n")})
    with temp_index(repo.git) as index:
        (result,) = detect(index, [("p", patch)], new.tree, ".")
        (before,) = detect(index, [("p", patch)], repo.tree, ".")
    assert result.state == MERGED and "reverse-applies cleanly" in result.evidence[0]
    assert before.state == NEEDED


def test_status_upstreamed_on_a_series(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    series_dir, _onto = rebase_ready(tmp_path)
    merged = new_repo(tmp_path / "upstream", {"README": b"demo project\npatched\n"},
                      message=b"README: say patched (#42)\n")  # fmt: skip
    before = {p.name: p.read_bytes() for p in series_dir.iterdir() if p.is_file()}
    args = ["status", "--upstreamed", "--series", str(series_dir), "--onto", merged.commit]
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    states = {p["patch"]: p["state"] for p in data["patches"]}
    assert states["0001-readme"] == MERGED and data["history"] is True
    assert list(states.values()).count(MERGED) == 1 and data["summary"]["merged"] == 1
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "merged        0001-readme" in text and "patch-id" in text and "1 merged" in text
    after = {p.name: p.read_bytes() for p in series_dir.iterdir() if p.is_file()}
    assert after == before  # a report: nothing in the series is written
    assert main(["status", "--series", str(series_dir)]) == 2  # --upstreamed is required
