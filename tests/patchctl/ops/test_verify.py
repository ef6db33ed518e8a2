"""verify: the four round-trip steps, failure reports, and a property test over random edits."""

from __future__ import annotations

import json
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.drift import rebase_ready
from support.files import Entry, Exe, Link, write_files
from support.repos import new_repo
from support.series import make_project, make_series

from patchctl.cli.main import main
from patchctl.errors import NotFound, VerifyFailed
from patchctl.gitlayer.git import Git
from patchctl.ops.capture import capture_trees
from patchctl.ops.verify import first_differing_byte, verify_series
from patchctl.series.model import Patch, Series

BASE: dict[str, Entry] = {
    "a.txt": b"1\n2\n3\n4\n5\n6\n7\n8\n",
    "b.c": b"int b;\n",
    "sub/c.h": b"#pragma once\n",
}


def _captured_stack(tmp: Path, edits: list[dict[str, Entry]]) -> tuple[Series, Git]:
    """A series of len(edits) captured patches, one per edit set, over BASE."""
    repo = tmp / "repo"
    made = new_repo(repo, BASE)
    git, base = made.git, made.tree
    series_dir = tmp / "project" / "patches" / "s"
    patches = []
    pre = base
    for n, edit in enumerate(edits, 1):
        write_files(repo, edit)
        post = git.snapshot_worktree()
        entry = Patch(
            id=f"{n:04d}-p{n}",
            file=f"{n:04d}-p{n}.patch",
            title=f"patch {n}",
            markers=(f"MARK-{n}",)
            if any(f"MARK-{n}".encode() in _data(e) for e in edit.values())
            else (),
            pre_tree=pre,
            post_tree=post,
        )
        series_dir.mkdir(parents=True, exist_ok=True)
        (series_dir / entry.file).write_bytes(capture_trees(git, entry, pre, post))
        patches.append(entry)
        pre = post
    return make_series(series_dir, base, tuple(patches)), git


def _data(entry: Entry) -> bytes:
    if isinstance(entry, Exe):
        return entry.data
    return entry if isinstance(entry, bytes) else b""


def test_stack_verifies_and_reports_each_step(tmp_path: Path) -> None:
    series, git = _captured_stack(
        tmp_path,
        [
            {"a.txt": b"1\n2\nMARK-1\n4\n5\n6\n7\n8\n", "new.bin": b"\0\1"},
            {"b.c": Exe(b"int b; /* MARK-2 */\n"), "sub/c.h": None, "l": Link("b.c")},
        ],
    )
    report = verify_series(series, [git.repo])
    assert report.ok, report.failures()
    assert [p.id for p in report.patches] == ["0001-p1", "0002-p2"]
    assert report.patches[1].to_json()["ok"] is True
    report.raise_if_failed()
    only = verify_series(series, [git.repo], ids=["0002-p2"])
    assert [p.id for p in only.patches] == ["0002-p2"] and only.ok


def test_flipped_byte_fails_reexport_with_offset(tmp_path: Path) -> None:
    series, git = _captured_stack(tmp_path, [{"a.txt": b"1\n2\nx\n"}])
    path = series.patch_path(series.patches[0])
    data = bytearray(path.read_bytes())
    data[40] ^= 0x01
    path.write_bytes(bytes(data))
    report = verify_series(series, [git.repo])
    failed = {s.step: s.detail for _, s in report.failures()}
    assert "offset 40" in failed["reexport"]
    with pytest.raises(VerifyFailed, match=r"patch 0001-p1, step reexport"):
        report.raise_if_failed()


def test_wrong_post_tree_names_first_differing_path(tmp_path: Path) -> None:
    series, git = _captured_stack(tmp_path, [{"a.txt": b"x\n"}, {"b.c": b"y\n"}])
    first, second = series.patches
    broken = series.with_patches([replace(first, post_tree=second.post_tree), second])
    report = verify_series(broken, [git.repo])
    failures = report.failures()
    assert failures[0][0] == "0001-p1" and failures[0][1].step == "forward"
    assert "first differing path: b.c" in failures[0][1].detail
    # the walk continues from the computed tree, so the next patch is judged on its own
    assert all(pid == "0001-p1" for pid, _ in failures)


def test_marker_checks(tmp_path: Path) -> None:
    series, git = _captured_stack(tmp_path, [{"a.txt": b"MARK-1\n"}, {"b.c": b"int q;\n"}])
    first, second = series.patches
    # a marker the second patch does not add, and one already present before it
    bad = series.with_patches([first, replace(second, markers=("MARK-1", "absent"))])
    steps = {s.step: s for _, s in verify_series(bad, [git.repo]).failures()}
    assert "'MARK-1' also added by earlier patch 0001-p1" in steps["markers"].detail
    assert "'absent' missing from post-tree" in steps["markers"].detail
    # a marker that upstream already contains cannot identify a patch
    upstream = series.with_patches([replace(first, markers=("MARK-1", "pragma once")), second])
    steps = {s.step: s for _, s in verify_series(upstream, [git.repo]).failures()}
    assert "'pragma once' already in the upstream tree" in steps["markers"].detail
    assert "'pragma once' missing from post-tree" in steps["markers"].detail


def test_marker_in_touched_file_before_the_patch(tmp_path: Path) -> None:
    series, git = _captured_stack(tmp_path, [{"a.txt": b"MARK-1 x\n"}, {"a.txt": b"MARK-1 y\n"}])
    first, second = series.patches
    dup = series.with_patches([replace(first, markers=()), replace(second, markers=("MARK-1",))])
    steps = {s.step: s for _, s in verify_series(dup, [git.repo]).failures()}
    assert "'MARK-1' already in pre-tree" in steps["markers"].detail


def test_uncaptured_patch_fails_chain(tmp_path: Path) -> None:
    series, git = _captured_stack(tmp_path, [{"a.txt": b"z\n"}])
    bare = series.with_patches([replace(series.patches[0], pre_tree=None, post_tree=None)])
    failures = verify_series(bare, [git.repo]).failures()
    assert failures[0][1].step == "chain" and "no pre_tree" in failures[0][1].detail


def test_conflicting_patch_fails_forward_and_later_steps(tmp_path: Path) -> None:
    series, git = _captured_stack(tmp_path, [{"a.txt": b"z\n"}])
    path = series.patch_path(series.patches[0])
    path.write_bytes(path.read_bytes().replace(b"-1\n-2\n", b"-9\n-9\n"))
    failures = {s.step: s.detail for _, s in verify_series(series, [git.repo]).failures()}
    assert failures["forward"].startswith("does not apply")
    assert "first differing path: a.txt" in failures["reverse"]
    assert "reexport" in failures


def test_missing_base_objects_is_not_found(tmp_path: Path) -> None:
    series, _ = _captured_stack(tmp_path, [{"a.txt": b"z\n"}])
    made = new_repo(tmp_path / "other", {"x": b"x\n"})
    other, _ = made.git, made.tree
    with pytest.raises(NotFound, match="upstream tree"):
        verify_series(series, [other.repo])
    with pytest.raises(NotFound):
        verify_series(series, [other.repo], ids=["9999-nope"])


def test_user_clean_room_is_untouched(tmp_path: Path) -> None:
    series, git = _captured_stack(tmp_path, [{"a.txt": b"z\n"}])
    index = (git.repo / ".git" / "index").read_bytes()
    refs = git.run("for-each-ref")
    worktree = (git.repo / "a.txt").read_bytes()
    verify_series(series, [git.repo])
    assert (git.repo / ".git" / "index").read_bytes() == index
    assert git.run("for-each-ref") == refs
    assert (git.repo / "a.txt").read_bytes() == worktree


def test_first_differing_byte() -> None:
    assert "offset 2 (line 2)" in first_differing_byte(b"a\nbc", b"a\nxc")
    assert "offset 3" in first_differing_byte(b"abc", b"abcd")


# ----------------------------------------------------------------------------- property

NAMES = ("a.txt", "b.c", "sub/c.h", "new 1.txt", "sub/new.bin")
CONTENT = st.binary(min_size=0, max_size=64).map(lambda b: b.replace(b"\0", b"\n") + b"\n") | (
    st.binary(min_size=1, max_size=64)
)
ENTRY: st.SearchStrategy[Entry] = st.one_of(
    CONTENT,
    CONTENT.map(Exe),
    st.sampled_from(NAMES).map(Link),
    st.none(),
)
EDITS = st.dictionaries(st.sampled_from(NAMES), ENTRY, min_size=1, max_size=4)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=EDITS, where=st.floats(min_value=0, max_value=1), flip=st.integers(1, 255))
def test_random_edits_capture_verify_and_any_flipped_byte_fails(
    edits: dict[str, Entry], where: float, flip: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        made = new_repo(repo, BASE)
        git, base = made.git, made.tree
        write_files(repo, edits)
        post = git.snapshot_worktree()
        if post == base:
            return  # the edits rewrote files with their own bytes: nothing to capture
        entry = Patch(
            id="0001-random", file="0001-random.patch", title="r", pre_tree=base, post_tree=post
        )
        series = make_series(Path(tmp) / "p" / "patches" / "s", base, (entry,))
        data = capture_trees(git, entry, base, post)
        series.patch_path(entry).write_bytes(data)
        assert verify_series(series, [repo]).ok
        offset = min(int(where * len(data)), len(data) - 1)
        flipped = bytearray(data)
        flipped[offset] ^= flip
        series.patch_path(entry).write_bytes(bytes(flipped))
        assert not verify_series(series, [repo]).ok, f"flip at {offset} went unnoticed"


def test_git_apply_crash_is_reported_not_left_locked(tmp_path: Path) -> None:
    # git 2.39 aborts (apply.c assertion) on a new-file patch whose "new file mode" is
    # corrupted; found by the property test above. Verify must report, not wedge on a lock.
    series, git = _captured_stack(tmp_path, [{"new 1.txt": b"\n"}])
    path = series.patch_path(series.patches[0])
    data = bytearray(path.read_bytes())
    data[data.index(b"new file mode")] ^= 0x01
    path.write_bytes(bytes(data))
    report = verify_series(series, [git.repo])
    assert not report.ok
    assert {s.step for _, s in report.failures()} >= {"forward", "reexport"}


def test_verify_from_upstream_objects_only(tmp_path: Path) -> None:
    """CI without a clean room: only the upstream's objects exist; verify builds every
    pre/post tree itself (forward first, then reverse and checks on the computed trees)."""
    series, _git = _captured_stack(
        tmp_path, [{"a.txt": b"MARK-1\n", "n.bin": b"\0\1"}, {"b.c": b"int c;\n"}]
    )
    made = new_repo(tmp_path / "upstream-only", BASE)
    upstream, base = made.git, made.tree
    assert base == series.upstream.tree
    assert upstream.run_full("cat-file", "-e", f"{series.patches[-1].post_tree}")[0] != 0
    report = verify_series(series, [upstream.repo])
    assert report.ok, report.failures()
    assert [s.step for s in report.patches[0].steps] == [
        "chain",
        "forward",
        "reverse",
        "reexport",
        "markers",
        "bases",
    ]


def test_offset_notes_show_in_text_output_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = b"".join(b"line %d\n" % i for i in range(1, 21))
    series_dir = make_project(tmp_path, {"f.txt": lines})
    offset = (
        b"Description: named three lines too low\n---\n--- a/f.txt\n+++ b/f.txt\n"
        b"@@ -12,3 +12,3 @@\n line 9\n-line 10\n+LINE 10\n line 11\n"
    )
    (tmp_path / "offset.patch").write_bytes(offset)
    for args in (("cleanroom", "apply"), ("import", str(tmp_path / "offset.patch"))):
        assert main([*args, "--series", str(series_dir)]) == 0
    capsys.readouterr()
    assert main(["verify", "--all", "--series", str(series_dir)]) == 0
    text = capsys.readouterr().out
    assert "ok   0001-offset" in text
    assert "note (forward): 1 hunk(s) at an offset, first in f.txt" in text
    assert "(offset -3 lines)" in text
    assert "1/1 patch(es) verified; 1 with hunks at an offset" in text
    assert main(["verify", "--all", "--series", str(series_dir), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    forward = report["patches"][0]["steps"][1]
    assert forward["step"] == "forward" and "offset -3 lines" in forward["note"]
    assert all(s["note"] is None for s in report["patches"][0]["steps"][2:])


def test_a_damaged_imported_patch_is_hinted_to_be_restored_never_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    series_dir, _onto = rebase_ready(tmp_path)
    patch = series_dir / "0003-b-30.patch"
    data = patch.read_bytes()
    added = data.index(b"\n+", data.index(b"\n@@ ")) + 2
    patch.write_bytes(data[:added] + b"X" + data[added + 1 :])
    assert main(["verify", "--all", "--series", str(series_dir)]) == 12
    captured = capsys.readouterr()
    assert "imported bytes changed" in captured.out
    assert "git restore" in captured.err and "patchctl capture" not in captured.err
    assert "patchctl docs" not in captured.out + captured.err
