"""rebase: a series moved to another upstream, stopping at a conflict; --continue, --skip,
--abort; the old series intact until the end; every step survives a kill."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from support.drift import (
    DEP3_HEADER,
    GBP_HEADER,
    MAIL_HEADER,
    QUILT_HEADER,
    SIGNATURE,
    V2,
    drifted_project,
    rebase_ready,
    resolve_conflicts,
)
from support.repos import new_repo

from patchctl import progress
from patchctl.cli.commands.rebase import report_lines
from patchctl.cli.main import main
from patchctl.errors import (
    ConfigError,
    DirtyTree,
    NothingToCapture,
    PatchctlError,
    PatchDoesNotApply,
    SeriesChanged,
)
from patchctl.gitlayer.index import temp_index
from patchctl.ops.capture import capture
from patchctl.ops.cleanroom.apply import cleanroom_apply
from patchctl.ops.rebase import rebase as rebase_module
from patchctl.ops.rebase.rebase import rebase, rebase_abort, rebase_continue, rebase_skip
from patchctl.ops.refresh import refresh
from patchctl.ops.verify import verify_series
from patchctl.room import rebasestate
from patchctl.room.cleanroom import load_cleanroom, repin_marker, same_pin
from patchctl.room.journal import command
from patchctl.series.gitapply import FUZZ_CONTEXT, apply_flags
from patchctl.series.model import load_series
from patchctl.series.parts import split_patch
from patchctl.txn.journal import Journal

HEADERS = {
    "0001-readme.patch": (GBP_HEADER, SIGNATURE),
    "0002-louder-a.patch": (DEP3_HEADER, b""),
    "0003-b-30.patch": (MAIL_HEADER, SIGNATURE),
    "0004-c-10.patch": (QUILT_HEADER, b""),
}


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def room_of(series_dir: Path) -> Path:
    return series_dir.parent.parent / "cleanroom" / series_dir.name


def test_a_conflict_stops_with_a_report_and_continue_keeps_every_header(tmp_path: Path) -> None:
    series_dir, onto = rebase_ready(tmp_path)
    before = snapshot(series_dir)
    old_upstream = load_series(series_dir).upstream

    report = rebase(series_dir, onto)
    assert report.state == "stopped" and report.stop is not None
    stop = report.stop
    assert (stop.id, stop.reason, stop.files) == ("0004-c-10", "conflict", ("src/c.c",))
    assert stop.hunks == (("src/c.c", 1),) and stop.markers == (("src/c.c", 10),)
    assert [(d.id, d.how) for d in report.patches] == [
        ("0001-readme", "unchanged"),
        ("0002-louder-a", "merged"),
        ("0003-b-30", "unchanged"),
    ]
    assert snapshot(series_dir) == before  # the old series is intact until the end
    room = room_of(series_dir)
    text = (room / "src" / "c.c").read_bytes()
    assert b"<<<<<<< patchctl/merge/onto-" in text and b"||||||| " in text  # diff3 style

    for writer in (
        lambda: cleanroom_apply(series_dir),
        lambda: capture(series_dir, "0004-c-10"),
        lambda: refresh(series_dir),
    ):
        with pytest.raises(DirtyTree, match="rebase is in progress"):
            writer()
    with pytest.raises(PatchDoesNotApply, match=r"conflict markers are still in src/c\.c"):
        rebase_continue(series_dir)

    resolve_conflicts(room / "src" / "c.c", "C 10 (rewritten upstream)")
    done = rebase_continue(series_dir)
    assert done.state == "done" and done.range_diff is not None
    assert [d.how for d in done.patches] == ["unchanged", "merged", "unchanged", "resolved"]
    after = snapshot(series_dir)
    for name, (header, trailer) in HEADERS.items():
        parts = split_patch(after[name])
        assert (parts.header, parts.trailer) == (header, trailer), name
    for name in ("0001-readme.patch", "0003-b-30.patch"):
        assert after[name] == before[name]
    assert b"+C 10 (rewritten upstream)" in after["0004-c-10.patch"]

    series = load_series(series_dir)
    assert series.upstream.commit == onto and series.upstream.url == old_upstream.url
    assert series.upstream.tree == new_repo(tmp_path / "v2tree", V2).tree
    assert series.patches[0].pre_tree == series.upstream.tree
    assert verify_series(series, [room]).ok
    assert "4:" in done.range_diff_text and done.range_diff.read_text() == done.range_diff_text
    shown = report_lines(done)  # what --continue prints: the pairing lines, not the diffs
    assert "@@" in done.range_diff_text and not any("@@" in line for line in shown)
    assert any(line.strip().startswith("4:") for line in shown)
    # the clean room ends on the new base with the series applied, as `cleanroom apply` keeps it
    kept = cleanroom_apply(series_dir)
    assert all(a.reused for a in kept.applied) and len(kept.applied) == 4
    assert same_pin(load_cleanroom(room), series)
    assert not rebasestate.in_progress(room)
    assert load_cleanroom(room).git.refs("refs/patchctl/rebase/") == []


def test_continue_refuses_every_left_over_marker_kind_and_lists_each_block(
    tmp_path: Path,
) -> None:
    series_dir, onto = rebase_ready(tmp_path)
    rebase(series_dir, onto)
    room = room_of(series_dir)
    conflicted = room / "src" / "c.c"
    # half-resolved: the `<<<<<<<` and `>>>>>>>` lines gone, the diff3 base and the `=======` left
    kept = [
        line
        for line in conflicted.read_bytes().splitlines(keepends=True)
        if not line.startswith((b"<<<<<<< ", b">>>>>>> "))
    ]
    conflicted.write_bytes(b"".join(kept))
    (room / "src" / "d.c").write_bytes(b"one\n=======\ntwo\n>>>>>>>\n=======x not a marker\n")
    with pytest.raises(PatchDoesNotApply) as refused:
        rebase_continue(series_dir)
    message = refused.value.message
    base = next(i for i, line in enumerate(kept, 1) if line.startswith(b"||||||| "))
    sep = next(i for i, line in enumerate(kept, 1) if line == b"=======\n")
    assert f"src/c.c (line {base}, {sep})" in message
    assert "src/d.c (line 2, 4)" in message
    assert "src/d.c (line 2, 4, 5)" not in message


def test_abort_puts_series_and_clean_room_back_and_saves_the_edits(tmp_path: Path) -> None:
    series_dir, onto = rebase_ready(tmp_path)
    room = room_of(series_dir)
    before = snapshot(series_dir)
    head = load_cleanroom(room).head()
    rebase(series_dir, onto)
    (room / "src" / "c.c").write_bytes(b"my half-done resolution\n")
    report = rebase_abort(series_dir)
    assert report.state == "aborted" and report.backup is not None
    cr = load_cleanroom(room)
    saved = cr.git.run("cat-file", "blob", f"{report.backup.ref}:src/c.c")
    assert saved == b"my half-done resolution\n"
    assert snapshot(series_dir) == before
    assert cr.head() == head and cr.dirty_paths() == []
    assert cr.git.text("symbolic-ref", "HEAD") == "refs/heads/main"
    assert not rebasestate.in_progress(room)
    assert all(a.reused for a in cleanroom_apply(series_dir).applied)
    with pytest.raises(PatchctlError, match="no rebase is in progress"):
        rebase_continue(series_dir)


def test_skip_drops_the_patch_keeps_its_file_and_prints_a_short_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    series_dir, onto = rebase_ready(tmp_path)
    original = (series_dir / "0004-c-10.patch").read_bytes()
    rebase(series_dir, onto)
    capsys.readouterr()
    assert main(["rebase", "--series", str(series_dir), "--skip"]) == 0
    out = capsys.readouterr().out
    series = load_series(series_dir)
    assert series.ids() == ("0001-readme", "0002-louder-a", "0003-b-30")
    assert not (series_dir / "0004-c-10.patch").exists()
    kept = list((series_dir / "skipped").rglob("0004-c-10.patch"))
    assert len(kept) == 1 and kept[0].read_bytes() == original  # moved, never deleted
    assert f"its file moved to {kept[0]}" in out
    assert verify_series(series, [room_of(series_dir)]).ok
    range_diff = next(series_dir.glob("rebase-*.range-diff")).read_text()
    pairs = [line.strip() for line in range_diff.splitlines()]
    assert "4:  " in out and all(line in out for line in pairs)


def test_a_patch_upstream_already_has_stops_as_empty(tmp_path: Path) -> None:
    series_dir, _onto = rebase_ready(tmp_path)
    upstream = new_repo(tmp_path / "upstream", {**V2, "README": b"demo project\npatched\n"})
    report = rebase(series_dir, upstream.commit)
    assert report.stop is not None and (report.stop.id, report.stop.reason) == (
        "0001-readme",
        "empty",
    )
    with pytest.raises(NothingToCapture):
        rebase_continue(series_dir)
    report = rebase_skip(series_dir)
    assert report.stop is not None and report.stop.id == "0004-c-10"  # then the conflict


def test_a_patch_upstream_merged_is_reported_with_evidence_and_kept(tmp_path: Path) -> None:
    series_dir, _onto = rebase_ready(tmp_path)
    merged = new_repo(tmp_path / "upstream", {"README": b"demo project\npatched\n"},
                      message=b"README: say patched (#42)\n")  # fmt: skip
    report = rebase(series_dir, merged.commit)
    assert report.stop is not None and (report.stop.id, report.stop.reason) == (
        "0001-readme",
        "empty",
    )
    (found,) = report.upstreamed
    assert (found.id, found.state) == ("0001-readme", "merged")
    assert any(e.startswith("patch-id ") and "(#42)" in e for e in found.evidence)
    assert any(e.startswith("reverse-applies cleanly") for e in found.evidence)
    text = "\n".join(report_lines(report))
    assert "merged        0001-readme" in text and "rebase --drop-merged drops them" in text
    assert load_series(series_dir).ids()[0] == "0001-readme"  # never dropped silently


def test_drop_merged_drops_what_upstream_has_and_names_it(tmp_path: Path) -> None:
    series_dir, _onto = rebase_ready(tmp_path)
    merged = new_repo(tmp_path / "upstream", {"README": b"demo project\npatched\n"},
                      message=b"README: say patched (#42)\n")  # fmt: skip
    report = rebase(series_dir, merged.commit, drop_merged=True)
    assert next((d.id, d.how) for d in report.patches) == ("0001-readme", "upstreamed")
    assert report.stop is not None and report.stop.id == "0004-c-10"  # then the conflict
    resolve_conflicts(room_of(series_dir) / "src" / "c.c", "c = 10;")
    done = rebase_continue(series_dir)
    assert done.state == "done" and "0001-readme" not in load_series(series_dir).ids()
    assert [u.id for u in done.upstreamed] == ["0001-readme"]
    assert done.skipped and done.skipped[0].name == "0001-readme.patch"  # kept aside
    text = "\n".join(report_lines(done))
    assert "dropped by --drop-merged: 0001-readme" in text
    assert "time moving the patches: " in text and "slowest: " in text
    moved = [d for d in done.patches if d.how not in ("upstreamed", "resolved")]
    assert moved and all(d.seconds > 0 for d in moved)  # each move timed, in the journal too
    entries = done.to_json()["patches"]
    assert isinstance(entries, list) and all("seconds" in entry for entry in entries)


def test_status_reprints_the_stop_and_cleanroom_status_names_the_rebase(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    series_dir, onto = rebase_ready(tmp_path)
    assert main(["rebase", "--series", str(series_dir), "--onto", onto]) == 3
    stop_text = capsys.readouterr().out
    assert main(["rebase", "--series", str(series_dir), "--status"]) == 0
    again = capsys.readouterr().out
    assert "stopped at 0004-c-10: conflict in 1 file(s)" in again
    # --status also runs the missing-API check (the stop itself does not)
    api = "  API check: no identifier the moved patches add is gone from the new upstream\n"
    assert api in again and api not in stop_text and again.replace(api, "") == stop_text
    assert main(["rebase", "--series", str(series_dir), "--status", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["state"] == "stopped" and data["stop"]["patch"] == "0004-c-10"
    assert main(["cleanroom", "status", "--series", str(series_dir)]) == 0
    status = capsys.readouterr().out
    assert "rebase   in progress (stopped)" in status and "3 of 4 patch(es) moved" in status
    assert "stopped at 0004-c-10 (conflict: src/c.c)" in status
    assert "(not patchctl)" not in status and "unsaved" not in status
    assert "applied " in status and "0003-b-30" in status  # the moved patches, on the new base
    assert main(["cleanroom", "status", "--series", str(series_dir), "--json"]) == 0
    rebase_json = json.loads(capsys.readouterr().out)["rebase"]
    assert (rebase_json["moved"], rebase_json["stopped_at"]) == (3, "0004-c-10")
    rebase_abort(series_dir)
    assert main(["rebase", "--series", str(series_dir), "--status"]) != 0  # none in progress


def _killed_at_record(
    monkeypatch: pytest.MonkeyPatch, series_dir: Path, onto: str, nth: int
) -> None:
    """Run a rebase that is interrupted as it records its `nth` patch (KeyboardInterrupt, as
    a kill between two patches); the real recorder is put back afterwards."""
    real = rebase_module._record
    calls: list[str] = []

    def dies_on_the_nth(*args: Any, **kwargs: Any) -> Any:
        calls.append("x")
        if len(calls) == nth:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(rebase_module, "_record", dies_on_the_nth)
    with pytest.raises(KeyboardInterrupt):
        rebase(series_dir, onto)
    monkeypatch.setattr(rebase_module, "_record", real)


def test_a_run_killed_between_two_patches_is_continued(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    series_dir, onto = rebase_ready(tmp_path)
    _killed_at_record(monkeypatch, series_dir, onto, 2)
    room = room_of(series_dir)
    assert rebasestate.load(room).state == "running"
    with pytest.raises(PatchctlError, match="already in progress"):
        rebase(series_dir, onto)
    report = rebase_continue(series_dir)
    assert report.stop is not None and report.stop.id == "0004-c-10"
    assert [d.id for d in report.patches] == ["0001-readme", "0002-louder-a", "0003-b-30"]


@pytest.mark.parametrize("then", ["continue", "abort"])
def test_a_run_killed_while_finishing_completes_or_aborts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, then: str
) -> None:
    series_dir, onto = rebase_ready(tmp_path)
    before = snapshot(series_dir)
    room = room_of(series_dir)
    rebase(series_dir, onto)
    resolve_conflicts(room / "src" / "c.c", "C 10")

    def killed(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(rebase_module, "repin_marker", killed)
    with pytest.raises(KeyboardInterrupt):
        rebase_continue(series_dir)
    monkeypatch.undo()
    assert rebasestate.load(room).state == "finishing"
    # the switch was staged in the series session's journal, which the kill dropped
    assert snapshot(series_dir) == before
    if then == "continue":
        report = rebase_continue(series_dir)
        assert report.state == "done"
        assert verify_series(load_series(series_dir), [room]).ok
    else:
        rebase_abort(series_dir)
        assert snapshot(series_dir) == before
        assert all(a.reused for a in cleanroom_apply(series_dir).applied)


def test_a_hand_edit_of_the_series_during_a_stop_is_not_overwritten(tmp_path: Path) -> None:
    series_dir, onto = rebase_ready(tmp_path)
    rebase(series_dir, onto)
    path = series_dir / "series.yaml"
    path.write_bytes(path.read_bytes() + b"# an edit\n")
    with pytest.raises(SeriesChanged, match=r"series\.yaml"):
        rebase_continue(series_dir)
    rebase_abort(series_dir)  # abort never writes the series it did not write
    assert path.read_bytes().endswith(b"# an edit\n")


def test_the_same_upstream_is_refused(tmp_path: Path) -> None:
    series_dir, _onto = rebase_ready(tmp_path)
    commit = load_series(series_dir).upstream.commit
    assert commit is not None
    with pytest.raises(PatchctlError, match="already on"):
        rebase(series_dir, commit)
    assert not rebasestate.in_progress(room_of(series_dir))


def test_cli_json_stop_and_continue(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    series_dir, onto = rebase_ready(tmp_path)
    code = main(["rebase", "--series", str(series_dir), "--onto", onto, "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 3 and data["error"] == "RebaseStopped" and data["patch"] == "0004-c-10"
    stop = data["report"]["stop"]
    assert stop["files"] == ["src/c.c"] and stop["hunks"] == [{"file": "src/c.c", "hunk": 1}]
    resolve_conflicts(room_of(series_dir) / "src" / "c.c", "C 10")
    code = main(["rebase", "--series", str(series_dir), "--continue", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["state"] == "done"
    assert data["range_diff_summary"][-1].lstrip().startswith("4:")
    assert main(["rebase", "--series", str(series_dir), "--skip", "--abort"]) == 2


def test_onto_an_archive_already_in_the_tree_cache(tmp_path: Path) -> None:
    from support.archives import make_tar
    from support.series import make_project

    from patchctl.ops.init import init_series

    series_dir = make_project(tmp_path, {"a.c": b"one\ntwo\nthree\n", "b.c": b"b\n"})
    cleanroom_apply(series_dir)
    room = room_of(series_dir)
    assert main(["new", "0001-a", "--title", "A", "--series", str(series_dir)]) == 0
    (room / "a.c").write_bytes(b"one\ntwo (patched)\nthree\n")
    capture(series_dir, "0001-a")
    onto = make_tar(tmp_path / "demo-1.1.tar.gz", {"a.c": b"0\none\ntwo\nthree\n", "b.c": b"b\n"})
    other = init_series(tmp_path / "other" / "patches" / "demo", str(onto))  # now in the cache
    done = rebase(series_dir, str(onto))
    assert done.state == "done" and [d.how for d in done.patches] == ["merged"]
    series = load_series(series_dir)
    assert series.upstream.tree == other.series.upstream.tree
    assert (room / "a.c").read_bytes() == b"0\none\ntwo (patched)\nthree\n"
    assert main(["verify", "--all", "--series", str(series_dir)]) == 0


def test_the_old_series_is_replayed_with_its_drift_as_a_whole_index_would(tmp_path: Path) -> None:
    # the unrefreshed series: its patches apply to their own upstream only at an offset or with
    # fuzz; each old commit's tree is the one `git apply --cached` (offsets) or `-C1` (fuzz) on a
    # whole index of the previous tree gives
    series_dir = drifted_project(tmp_path)
    series = load_series(series_dir)
    room = load_cleanroom(room_of(series_dir))
    commits = rebase_module._old_commits(room, series)
    assert len(commits) == len(series.patches)
    git = room.git
    tree = room.base_tree()
    fuzzed = 0
    for patch, commit in zip(series.patches, commits, strict=True):
        data = series.patch_path(patch).read_bytes()
        with temp_index(git) as index:
            index.read_tree(tree)
            if index.apply(data, apply_flags(series.root))[0] != 0:
                fuzzy = apply_flags(series.root, context=FUZZ_CONTEXT)
                assert index.apply(data, fuzzy)[0] == 0, patch.id
                fuzzed += 1
            tree = index.write_tree()
        assert git.tree_of(commit) == tree, patch.id
    assert fuzzed  # the series holds a patch that needs fuzz on its own upstream


def test_an_abort_gives_every_file_it_puts_back_its_mtime(tmp_path: Path) -> None:
    series_dir, onto = rebase_ready(tmp_path)
    room = room_of(series_dir)
    before = {
        p: p.stat().st_mtime_ns for p in room.rglob("*") if p.is_file() and ".git" not in p.parts
    }
    rebase(series_dir, onto)  # stops at 0004 with the merged files in the work tree
    assert (room / "src" / "a.c").stat().st_mtime_ns != before[room / "src" / "a.c"]
    (room / "src" / "c.c").write_bytes(b"a half-done resolution\n")
    rebase_abort(series_dir)
    after = {p: p.stat().st_mtime_ns for p in before}
    assert after == before  # content and mtimes as before the rebase: a build sees no change
    cr = load_cleanroom(room)
    assert cr.dirty_paths() == [] and all(a.reused for a in cleanroom_apply(series_dir).applied)


def test_an_onto_value_outside_the_url_allow_list_is_refused(tmp_path: Path) -> None:
    series_dir, _onto = rebase_ready(tmp_path)
    before = snapshot(series_dir)
    with pytest.raises(ConfigError, match="invalid host") as refused:
        rebase(series_dir, "ssh://-oProxyCommand=touch%20pwned/repo", commit="main")
    assert refused.value.exit_code == 5 and snapshot(series_dir) == before
    assert not rebasestate.in_progress(room_of(series_dir))


def test_the_note_after_a_killed_rebase_names_the_rebase(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    series_dir, onto = rebase_ready(tmp_path)
    room = room_of(series_dir)
    rebase(series_dir, onto)
    resolve_conflicts(room / "src" / "c.c", "C 10")

    def killed(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    abandon = Journal.abandon
    monkeypatch.setattr(rebase_module, "repin_marker", killed)
    monkeypatch.setattr(Journal, "abandon", lambda self: None)  # a kill leaves the journal
    with pytest.raises(KeyboardInterrupt):
        rebase_continue(series_dir)
    monkeypatch.setattr(rebase_module, "repin_marker", repin_marker)
    monkeypatch.setattr(Journal, "abandon", abandon)
    notes: list[str] = []
    monkeypatch.setattr(progress, "notice_sink", notes.append)
    assert rebase_continue(series_dir).state == "done"
    assert any("an interrupted `patchctl rebase --continue` was" in note for note in notes), notes
    assert not any("patchctl patchctl" in note for note in notes)
    assert command("patchctl") == "patchctl command" and command("") == "patchctl command"


# ----------------------------------------------------------------------------- base blobs


def test_a_base_blob_the_new_upstream_lacks_still_gives_the_merge_its_base(
    tmp_path: Path,
) -> None:
    from support.repos import diff_files
    from support.series import git_upstream, write_series

    from patchctl.gitlayer.git import Git
    from patchctl.gitlayer.index import temp_index
    from patchctl.series.baseblobs import named_bases

    body = b"".join(b"f line %d\n" % n for n in range(1, 41))
    v1 = {"f.c": body, "g.c": b"g\n"}
    patched = {**v1, "f.c": body.replace(b"f line 30\n", b"f line 30 patched\n")}
    v2 = {**v1, "f.c": body.replace(b"f line 28\n", b"f line 28 (upstream)\n")}
    data = diff_files(tmp_path / "scratch", v1, patched)
    ((_path, named),) = named_bases(data)
    upstream = new_repo(tmp_path / "upstream", v1)
    assert upstream.git.rev_parse(f"{upstream.tree}:f.c") == named
    series_dir = write_series(
        tmp_path / "project" / "patches" / "demo", git_upstream(upstream), [("0001-f", data)]
    )
    cleanroom_apply(series_dir)
    onto = new_repo(tmp_path / "upstream", v2).commit

    # The control: git's own three-way apply, in a repository holding the new upstream only,
    # has no base: the blob the index line names is not there.
    only_new = new_repo(tmp_path / "only-new", v2)
    assert only_new.git.run_full("cat-file", "-e", named)[0] != 0
    with temp_index(only_new.git) as index:
        index.read_tree(only_new.tree)
        code, err = index.apply(data, ("--3way",))
    assert code != 0 and b"lacks the necessary blob" in err, err

    report = rebase(series_dir, onto)
    assert report.state == "done" and [d.how for d in report.patches] == ["merged"]
    assert report.bases == ()  # the rebuilt old tree holds every named base blob
    new = (series_dir / "0001-f.patch").read_bytes()
    assert b"+f line 30 patched" in new
    assert named_bases(new) == [(b"f.c", Git(only_new.path).rev_parse(f"{only_new.tree}:f.c"))]
    checked = verify_series(load_series(series_dir), [room_of(series_dir)])
    assert checked.ok, checked.failures()


def test_a_patch_naming_base_blobs_the_series_does_not_rebuild_is_reported(
    tmp_path: Path,
) -> None:
    series_dir, onto = rebase_ready(tmp_path)
    series = load_series(series_dir)
    report = verify_series(series, [room_of(series_dir)])
    assert report.ok, report.failures()
    name = "0002-louder-a.patch"
    data = (series_dir / name).read_bytes()
    # the same patch with its index line naming a blob the series never held
    named = re.search(rb"\nindex ([0-9a-f]+)\.\.", data)
    assert named is not None
    stranger = "0123456789abcdef0123456789abcdef01234567"[: len(named.group(1))]
    edited = data.replace(named.group(0), b"\nindex " + stranger.encode() + b"..", 1)
    assert edited != data
    (series_dir / name).write_bytes(edited)
    text = (series_dir / "series.yaml").read_text()
    (series_dir / "series.yaml").write_text(text.replace(sha256_of(data), sha256_of(edited)))
    report = verify_series(load_series(series_dir), [room_of(series_dir)])
    steps = {s.step: s for p in report.patches if p.id == "0002-louder-a" for s in p.steps}
    assert steps["bases"].ok and steps["bases"].note is not None  # noted, as offsets are
    assert stranger in steps["bases"].note and "not reproduced: src/a.c" in steps["bases"].note
    assert steps["forward"].ok and report.ok  # git apply does not read index lines
    moved = rebase(series_dir, onto)
    assert [(b["patch"], b["path"], b["named"]) for b in moved.bases] == [
        ("0002-louder-a", "src/a.c", stranger)
    ]
    assert "base blob 0123456789ab" in "\n".join(report_lines(moved))
    assert moved.to_json()["bases_unreproduced"] == [dict(b) for b in moved.bases]


def sha256_of(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("every", [0.0, 3600.0])
def test_a_kill_loses_at_most_the_patches_moved_since_the_last_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, every: float
) -> None:
    """The journal is saved every SAVE_EVERY seconds while patches move: a kill keeps what
    was recorded (every patch before it when the interval is 0, none when it is an hour) and
    --continue moves the rest to the same commits as an unbroken run."""
    series_dir, onto = rebase_ready(tmp_path)
    unbroken = rebase(series_dir, onto)
    rebase_abort(series_dir)
    monkeypatch.setattr(rebase_module, "SAVE_EVERY", every)
    _killed_at_record(monkeypatch, series_dir, onto, 3)
    kept = rebasestate.load(room_of(series_dir))
    assert kept.state == "running"
    assert [d.id for d in kept.done] == (["0001-readme", "0002-louder-a"] if every == 0 else [])
    again = rebase_continue(series_dir)
    assert [(d.id, d.commit) for d in again.patches] == [
        (d.id, d.commit) for d in unbroken.patches
    ]
    assert again.stop is not None and again.stop.id == "0004-c-10"
