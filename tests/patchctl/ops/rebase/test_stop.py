"""stop: a stopped rebase is a real git conflict state (unmerged stages, new files
intent-to-add), its text names every hunk git placed on its own, and --continue takes the
resolution with or without `git add`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.drift import edit, lines, rebase_ready, resolve_conflicts, sha256
from support.repos import diff_files, new_repo

from patchctl.cli.main import main
from patchctl.errors import ConflictsLeft, PatchDoesNotApply
from patchctl.gitlayer.git import Git
from patchctl.ops.cleanroom.apply import cleanroom_apply
from patchctl.ops.rebase.rebase import rebase, rebase_abort, rebase_continue, rebase_status
from patchctl.ops.rebase.stop import block_ranges, blocks, placed_by_git, stop_lines
from patchctl.room import rebasestate
from patchctl.room.cleanroom import create_cleanroom, default_workdir
from patchctl.room.rebasestate import Stop
from patchctl.series.model import Patch, Series, Upstream, load_series, save_series

V1 = {"src/b.c": lines("b", 60), "src/c.c": lines("c", 30)}
V2 = {
    "src/b.c": edit(V1["src/b.c"], "b line 28", "b line 28 (changed upstream)"),
    "src/c.c": edit(V1["src/c.c"], "c line 10", "c line 10 (rewritten upstream)"),
}
AFTER = {
    "src/b.c": edit(V1["src/b.c"], "b line 30", "B LINE 30"),
    "src/c.c": edit(V1["src/c.c"], "c line 10", "C 10"),
    "src/new.c": b"a file the patch adds\n",
}


def conflicting_project(tmp: Path) -> tuple[Path, str]:
    """One patch on V1 that (on V2) conflicts in c.c, has a b.c hunk git merges on its own
    (a context line changed) and adds a new file: (series directory, the V2 commit)."""
    upstream = new_repo(tmp / "upstream", V1)
    data = diff_files(tmp / "scratch", V1, {**V1, **AFTER})
    series_dir = tmp / "project" / "patches" / "demo"
    series_dir.mkdir(parents=True)
    (series_dir / "0001-three.patch").write_bytes(data)
    entry = Patch(id="0001-three", file="0001-three.patch", title="three", imported=True,
                  sha256=sha256(data))  # fmt: skip
    up = Upstream(kind="git", url=str(upstream.path), commit=upstream.commit, tree=upstream.tree)
    series = Series(series_dir / "series.yaml", up, (entry,))
    save_series(series)
    create_cleanroom(series, default_workdir(series_dir))
    cleanroom_apply(series_dir)
    return series_dir, new_repo(tmp / "upstream", V2).commit


def room_of(series_dir: Path) -> Path:
    return series_dir.parent.parent / "cleanroom" / series_dir.name


def raw_git(room: Path, *args: str) -> bytes:
    """git as a user runs it in the clean room (through the pinned runner)."""
    return Git(room).run(*args)


def test_the_stop_is_a_git_conflict_state_with_three_stages(tmp_path: Path) -> None:
    series_dir, onto = conflicting_project(tmp_path)
    report = rebase(series_dir, onto)
    assert report.stop is not None and report.stop.files == ("src/c.c",)
    room = room_of(series_dir)
    git = Git(room)
    stages = raw_git(room, "ls-files", "-u", "-z").split(b"\0")
    assert sorted(s.split(b" ")[2][:1] for s in stages if s) == [b"1", b"2", b"3"]
    assert git.unmerged_paths() == ["src/c.c"]
    # the three sides are the files a cherry-pick would name
    ours = raw_git(room, "show", ":2:src/c.c")
    theirs = raw_git(room, "show", ":3:src/c.c")
    base = raw_git(room, "show", ":1:src/c.c")
    assert b"c line 10 (rewritten upstream)\n" in ours and b"C 10\n" in theirs
    assert base == V1["src/c.c"]
    assert raw_git(room, "diff", "--name-only", "--diff-filter=U") == b"src/c.c\n"
    # `git diff` shows the patch as it would be, the new file included (intent-to-add)
    shown = raw_git(room, "diff")
    assert b"+a file the patch adds" in shown and b"+B LINE 30" in shown
    assert b"new file mode" in shown
    assert "U" in raw_git(room, "status", "--porcelain").decode().split("src/c.c")[0]


def test_the_text_names_the_hunks_git_placed_on_its_own(tmp_path: Path) -> None:
    series_dir, onto = conflicting_project(tmp_path)
    report = rebase(series_dir, onto)
    stop = report.stop
    assert stop is not None
    assert placed_by_git(stop) == [("src/b.c", ["#1"])]
    text = "\n".join(stop_lines(stop, room_of(series_dir)))
    assert "placed by git on its own" in text
    assert "  src/b.c: hunks #1" in text
    assert "src/c.c: hunks #1 no longer apply" in text
    assert "new files included" in text and "--diff-filter=U" in text
    # --status prints the same stop again
    again = rebase_status(series_dir)
    assert again.stop == stop


@pytest.mark.parametrize("git_add", [False, True])
def test_continue_takes_the_resolution_with_or_without_git_add(
    tmp_path: Path, git_add: bool
) -> None:
    series_dir, onto = conflicting_project(tmp_path)
    rebase(series_dir, onto)
    room = room_of(series_dir)
    resolve_conflicts(room / "src" / "c.c", "C 10 (rewritten upstream)")
    if git_add:
        raw_git(room, "add", "--", "src/c.c")
        assert Git(room).unmerged_paths() == []
    done = rebase_continue(series_dir)
    assert done.state == "done"
    assert [(d.id, d.how, d.blocks) for d in done.patches] == [("0001-three", "resolved", 1)]
    data = (series_dir / "0001-three.patch").read_bytes()
    assert b"+C 10 (rewritten upstream)" in data and b"+a file the patch adds" in data
    assert b"+B LINE 30" in data
    assert load_series(series_dir).upstream.commit == onto
    assert Git(room).unmerged_paths() == []


def test_continue_refuses_while_blocks_are_left_and_names_them(tmp_path: Path) -> None:
    series_dir, onto = conflicting_project(tmp_path)
    rebase(series_dir, onto)
    with pytest.raises(PatchDoesNotApply, match=r"src/c\.c \(line"):
        rebase_continue(series_dir)
    # still stopped, still a conflict state
    assert Git(room_of(series_dir)).unmerged_paths() == ["src/c.c"]


def test_abort_from_a_conflict_state_puts_the_clean_room_back(tmp_path: Path) -> None:
    series_dir, onto = conflicting_project(tmp_path)
    before = (series_dir / "0001-three.patch").read_bytes()
    rebase(series_dir, onto)
    room = room_of(series_dir)
    rebase_abort(series_dir)
    assert Git(room).unmerged_paths() == []
    assert not rebasestate.in_progress(room)
    assert (series_dir / "0001-three.patch").read_bytes() == before
    assert (room / "src" / "c.c").read_bytes() == AFTER["src/c.c"]


def test_the_drift_series_stop_is_unmerged_too(tmp_path: Path) -> None:
    series_dir, onto = rebase_ready(tmp_path)
    rebase(series_dir, onto)
    assert Git(room_of(series_dir)).unmerged_paths() == ["src/c.c"]


def test_blocks_counts_markers_and_marker_free_files() -> None:
    stop = Stop("p", "conflict", "t", ("a", "b"), (), (("a", 3), ("a", 20)), ())
    assert blocks(stop) == 3  # two blocks in a, b deleted on one side


def test_a_refusal_lists_every_file_and_block_left(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    series_dir, onto = rebase_ready(tmp_path)
    rebase(series_dir, onto)
    room = room_of(series_dir)
    conflicted = (room / "src" / "c.c").read_bytes()
    blocks_at = [i for i, line in enumerate(conflicted.splitlines(), 1)
                 if line.startswith(b"<<<<<<< ")]  # fmt: skip
    ends_at = [i for i, line in enumerate(conflicted.splitlines(), 1)
               if line.startswith(b">>>>>>> ")]  # fmt: skip
    (room / "src" / "a.c").write_bytes(
        (room / "src" / "a.c").read_bytes() + b"<<<<<<< mine\nx\n=======\ny\n>>>>>>> theirs\n"
    )
    with pytest.raises(ConflictsLeft) as refused:
        rebase_continue(series_dir)
    message = refused.value.message
    assert f"src/c.c (line {blocks_at[0]}," in message
    assert f"blocks {blocks_at[0]}-{ends_at[0]}" in message
    assert "src/a.c (line" in message and "in 2 file(s)" in message
    left = refused.value.details()["left"]
    assert isinstance(left, list) and {e["file"] for e in left} == {"src/a.c", "src/c.c"}
    code = main(["rebase", "--series", str(series_dir), "--continue", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 3 and data["error"] == "ConflictsLeft"
    assert [e["file"] for e in data["left"]] == [e["file"] for e in left]
    assert all(e["blocks"] for e in data["left"])


def test_block_ranges_finds_closed_and_open_blocks() -> None:
    text = b"x\n<<<<<<< ours\na\n=======\nb\n>>>>>>> theirs\ny\n<<<<<<< again\nz\n"
    assert block_ranges(text) == [(2, 6), (8, None)]


def test_git_mergetool_works_on_the_stop_and_continue_takes_its_result(tmp_path: Path) -> None:
    series_dir, onto = conflicting_project(tmp_path)
    rebase(series_dir, onto)
    room = room_of(series_dir)
    # a merge tool that takes theirs (the patch's side): git hands it the stages it reads
    raw_git(
        room,
        "-c", "mergetool.take.cmd=cp \"$REMOTE\" \"$MERGED\"",
        "-c", "mergetool.take.trustExitCode=true",
        "-c", "mergetool.keepBackup=false",
        "mergetool", "--tool=take", "--no-prompt",
    )  # fmt: skip
    assert Git(room).unmerged_paths() == []
    assert (room / "src" / "c.c").read_bytes() == AFTER["src/c.c"]
    done = rebase_continue(series_dir)
    assert done.state == "done"
    data = (series_dir / "0001-three.patch").read_bytes()
    assert b"-c line 10 (rewritten upstream)\n+C 10" in data
