"""ops/rebase/replay.py: `rebase --continue` records each resolved conflict block under the
series' resolutions/, a later rebase meeting the same conflict replays it (or declines with
--no-replay), the replayed result is checked as a hand resolution, and verify covers the
store."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.drift import rebase_ready, resolve_conflicts

from patchctl.cli.commands.rebase import report_lines
from patchctl.cli.main import main
from patchctl.errors import ResolutionInvalid
from patchctl.gitlayer.git import Git, Merged
from patchctl.gitlayer.trees import TreeStore
from patchctl.ops.rebase.rebase import rebase, rebase_continue, rebase_skip
from patchctl.ops.rebase.replay import replay_conflict
from patchctl.ops.verify import store_problems, verify
from patchctl.series.model import load_series
from patchctl.series.resolutions import Record, load_patch_records

PATCH = "0004-c-10"
RESOLVED = "C 10 (rewritten upstream)"


def room_of(series_dir: Path) -> Path:
    return series_dir.parent.parent / "cleanroom" / series_dir.name


def resolved_once(tmp: Path) -> Path:
    """A project whose rebase stopped at 0004-c-10's conflict, resolved and continued: the
    series directory (with the recorded resolution)."""
    series_dir, onto = rebase_ready(tmp)
    stopped = rebase(series_dir, onto)
    assert stopped.stop is not None and stopped.stop.id == PATCH
    resolve_conflicts(room_of(series_dir) / "src" / "c.c", RESOLVED)
    done = rebase_continue(series_dir)
    assert done.state == "done"
    return series_dir


def test_continue_records_the_block_and_a_second_rebase_replays_it(tmp_path: Path) -> None:
    first = resolved_once(tmp_path / "first")
    [record] = load_patch_records(first, PATCH)
    assert record.file == "src/c.c" and record.resolved == RESOLVED.encode() + b"\n"
    assert b"<<<<<<<" not in record.dump() and record.base and record.ours and record.theirs
    assert store_problems(load_series(first)) == []

    # the same move made again elsewhere, with the store copied: no stop, byte-identical patch
    second, onto = rebase_ready(tmp_path / "second")
    shutil.copytree(first / "resolutions", second / "resolutions")
    report = rebase(second, onto)
    assert report.state == "done"
    replayed = {d.id: d for d in report.patches}[PATCH]
    assert replayed.how == "replayed"
    assert replayed.replayed == (f"resolutions/{PATCH}/{record.name}",)
    assert (second / f"{PATCH}.patch").read_bytes() == (first / f"{PATCH}.patch").read_bytes()
    patches = report.to_json()["patches"]
    assert isinstance(patches, list)
    assert patches[3]["replayed"] == [f"resolutions/{PATCH}/{record.name}"]
    assert f"  replayed   {PATCH} (1 conflict block(s) replayed from resolutions/)" in report_lines(
        report
    )
    verify(second).raise_if_failed()


def test_the_recorded_file_lands_only_when_the_rebase_finishes(tmp_path: Path) -> None:
    series_dir, onto = rebase_ready(tmp_path)
    rebase(series_dir, onto)
    resolve_conflicts(room_of(series_dir) / "src" / "c.c", RESOLVED)
    assert not (series_dir / "resolutions").exists()
    done = rebase_continue(series_dir)
    last = done.patches[-1]
    assert last.how == "resolved" and len(last.recorded) == 1
    assert (series_dir / last.recorded[0]).is_file()


def test_no_replay_stops_at_the_conflict_anyway(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = resolved_once(tmp_path / "first")
    second, onto = rebase_ready(tmp_path / "second")
    shutil.copytree(first / "resolutions", second / "resolutions")
    code = main(["rebase", "--series", str(second), "--onto", onto, "--no-replay", "--json"])
    assert code == 3
    data = json.loads(capsys.readouterr().out)
    assert data["report"]["stop"]["patch"] == PATCH and data["report"]["stop"]["replayed"] == []


def test_a_replayed_resolution_leaving_a_marker_is_not_taken(tmp_path: Path) -> None:
    first = resolved_once(tmp_path / "first")
    [good] = load_patch_records(first, PATCH)
    bad = Record(good.patch, good.file, good.ours, good.base, good.theirs, b"x\n=======\ny\n")
    second, onto = rebase_ready(tmp_path / "second")
    path = second / bad.relpath()
    path.parent.mkdir(parents=True)
    path.write_bytes(bad.dump())
    report = rebase(second, onto)
    assert report.state == "stopped" and report.stop is not None
    assert any("recorded resolutions were not taken" in m for m in report.stop.messages)
    assert b"<<<<<<< " in (room_of(second) / "src" / "c.c").read_bytes()  # the plain conflict


def test_a_partly_replayed_conflict_keeps_only_what_is_left(tmp_path: Path) -> None:
    two = (
        b"<<<<<<< onto-2\nA\n||||||| base\nB\n=======\nC\n>>>>>>> 0001-a\n"
        b"between\n"
        b"<<<<<<< onto-2\nD\n||||||| base\nE\n=======\nF\n>>>>>>> 0001-a\n"
    )
    git = Git.init(tmp_path / "repo")
    with TreeStore(git) as store:
        blob = git.write_blob(two)
        tree = store.edit(store.edit(git.write_tree(), {}), {b"src/f.c": ("100644", blob)})
        merged = Merged(tree, ("src/f.c", "src/gone.c"), ("CONFLICT (modify/delete)",))
        record = Record("0001-a", "src/f.c", b"A\n", b"B\n", b"C\n", b"AC\n")
        series_dir = tmp_path / "series"
        (series_dir / record.relpath()).parent.mkdir(parents=True)
        (series_dir / record.relpath()).write_bytes(record.dump())
        again = replay_conflict(git, store, series_dir, "0001-a", merged, True)
        assert again.used == (record.relpath(),) and not again.whole
        assert again.merged.conflicts == ("src/f.c", "src/gone.c")  # both still need the user
        text = git.cat_file("blob", git.rev_parse(f"{again.merged.tree}:src/f.c"))
        assert text == b"AC\nbetween\n" + two.split(b"between\n")[1]
        off = replay_conflict(git, store, series_dir, "0001-a", merged, False)
        assert off.merged == merged and off.used == ()


def test_a_damaged_record_is_refused_by_verify_and_the_rebase(tmp_path: Path) -> None:
    first = resolved_once(tmp_path / "first")
    [record] = load_patch_records(first, PATCH)
    path = first / record.relpath()
    path.write_bytes(path.read_bytes().replace(b"rewritten", b"Rewritten"))
    with pytest.raises(ResolutionInvalid, match=r"does not hash.*") as caught:
        verify(first).raise_if_failed()
    assert str(path) in str(caught.value) and "restore it" in str(caught.value)


def test_skip_moves_the_records_of_the_dropped_patch_aside(tmp_path: Path) -> None:
    first = resolved_once(tmp_path / "first")
    second, onto = rebase_ready(tmp_path / "second")
    (second / "resolutions").mkdir()
    shutil.copytree(first / "resolutions" / PATCH, second / "resolutions" / PATCH)
    for name in (second / "resolutions" / PATCH).iterdir():  # records that no longer match
        record = load_patch_records(second, PATCH)[0]
        changed = Record(PATCH, record.file, b"other\n", record.base, record.theirs, b"r\n")
        name.unlink()
        (second / changed.relpath()).write_bytes(changed.dump())
    stopped = rebase(second, onto)
    assert stopped.stop is not None and stopped.stop.id == PATCH
    done = rebase_skip(second)
    assert done.state == "done"
    assert not (second / "resolutions" / PATCH).exists() or not any(
        (second / "resolutions" / PATCH).iterdir()
    )
    kept = list((second / "skipped").rglob("*.yaml"))
    assert len(kept) == 1 and kept[0].parent.name == PATCH
    assert store_problems(load_series(second)) == []


def test_a_file_the_resolution_gives_back_to_upstream_gets_no_record(tmp_path: Path) -> None:
    """Taking the new upstream's side of a file whole leaves the patch not changing it: a
    record there would be stale at once (verify refuses records of paths a patch does not
    change), so none is made, and the finished series verifies."""
    series_dir, onto = rebase_ready(tmp_path)
    stopped = rebase(series_dir, onto)
    assert stopped.stop is not None and stopped.stop.id == PATCH
    room = room_of(series_dir)
    git = Git(room)
    ours = git.maybe_rev(":2:src/c.c")  # the stop's stage 2: the new base's version
    assert ours is not None
    (room / "src" / "c.c").write_bytes(git.cat_file("blob", ours))
    (room / "src" / "extra.c").write_text("int extra;\n")  # so the patch is not empty
    done = rebase_continue(series_dir)
    assert done.state == "done"
    assert {d.id: d for d in done.patches}[PATCH].recorded == ()
    assert not (series_dir / "resolutions" / PATCH).exists()
    verify(series_dir).raise_if_failed()
