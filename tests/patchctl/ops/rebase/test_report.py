"""report: each patch's status, range-diff part, time and hot count; the files written beside
the range-diff; `rebase --status` re-printing them during and after a rebase."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.drift import rebase_ready, resolve_conflicts

from patchctl.cli.main import main
from patchctl.errors import PatchctlError
from patchctl.ops.rebase.rebase import rebase, rebase_abort, rebase_continue, rebase_status
from patchctl.ops.rebase.report import (
    SCHEMA,
    STATUSES,
    from_json,
    last_saved,
    of_rebase,
    report_names,
    split_range_diff,
    status_of,
    stored_resolutions,
    text_lines,
)
from patchctl.room.rebasestate import Done
from patchctl.series.resolutions import learn

RANGE_DIFF = """\
1:  1111111 = 1:  aaaaaaa 0001-a: first
2:  2222222 ! 2:  bbbbbbb 0002-b: second
    @@ src/b.c
     b line 1
    -old
    +new
3:  3333333 < -:  ------- 0003-c: gone
-:  ------- > 3:  ccccccc 0004-d: added
"""


def room_of(series_dir: Path) -> Path:
    return series_dir.parent.parent / "cleanroom" / series_dir.name


@pytest.mark.parametrize(
    ("how", "pair", "status"),
    [
        ("applied", "=", "clean"),
        ("unchanged", "", "clean"),
        ("merged", "=", "offset"),
        ("merged", "!", "3-way"),
        ("merged", "", "3-way"),
        ("replayed", "!", "replayed"),
        ("resolved", "!", "conflict"),
        ("upstreamed", "<", "merged"),
        ("dropped", "<", "dropped"),
    ],
)
def test_each_how_has_its_status(how: str, pair: str, status: str) -> None:
    assert status_of(how, pair) == status
    assert status in STATUSES


def test_the_range_diff_is_split_per_patch() -> None:
    parts = split_range_diff(RANGE_DIFF)
    assert {pid: mark for pid, (mark, _t) in parts.items()} == {
        "0001-a": "=",
        "0002-b": "!",
        "0003-c": "<",
        "0004-d": ">",
    }
    assert parts["0002-b"][1].splitlines()[1:] == ["    @@ src/b.c", "     b line 1",
                                                     "    -old", "    +new"]  # fmt: skip
    assert parts["0001-a"][1] == RANGE_DIFF.splitlines()[0] + "\n"


def test_stored_resolutions_are_counted_and_odd_ids_are_not_followed(tmp_path: Path) -> None:
    store = tmp_path / "resolutions" / "0002-b"
    (store / "sub").mkdir(parents=True)
    names = (
        "c.c-0123456789ab.yaml",
        "b.h-ba9876543210.yaml",
        "notes.txt",
        "sub/c-aaaaaaaaaaaa.yaml",
    )
    for name in names:
        (store / name).write_text("x")
    (store / "l-bbbbbbbbbbbb.yaml").symlink_to(store / names[0])  # a symlink is not a record
    assert stored_resolutions(tmp_path, "0002-b") == 2  # records sit flat, named as records
    assert stored_resolutions(tmp_path, "0009-none") == 0
    assert stored_resolutions(tmp_path, "..") == 0 and stored_resolutions(tmp_path, "a/b") == 0


def test_a_finished_rebase_writes_its_report_beside_the_range_diff(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    series_dir, onto = rebase_ready(tmp_path)
    store = series_dir / "resolutions" / "0004-c-10"
    store.mkdir(parents=True)
    merged = b"a\n<<<<<<< ours\nx\n||||||| base\ny\n=======\nz\n>>>>>>> theirs\nb\n"
    earlier = learn("0004-c-10", "src/c.c", merged, b"a\nxz\nb\n").records[0]
    (store / earlier.name).write_bytes(earlier.dump())  # an earlier hand resolution
    stopped = rebase(series_dir, onto)
    during = of_rebase(stopped)
    assert [(r.id, r.status) for r in during.patches] == [
        ("0001-readme", "clean"),
        ("0002-louder-a", "3-way"),  # no range-diff yet: a merge is not known to be an offset
        ("0003-b-30", "clean"),
        ("0004-c-10", "conflict"),
    ]
    assert during.patches[3].hot == 1 and during.patches[3].how == ""
    resolve_conflicts(room_of(series_dir) / "src" / "c.c", "C 10 (rewritten upstream)")
    done = rebase_continue(series_dir)
    assert done.range_diff is not None
    json_name, html_name = report_names(done.range_diff.name)
    saved = json.loads((series_dir / json_name).read_text())
    assert saved["schema"] == SCHEMA and saved["state"] == "done"
    rows = {p["id"]: p for p in saved["patches"]}
    assert [p["id"] for p in saved["patches"]] == ["0001-readme", "0002-louder-a", "0003-b-30",
                                                   "0004-c-10"]  # fmt: skip
    assert rows["0002-louder-a"]["status"] == "offset"  # a.c moved; the patch did not change
    assert rows["0002-louder-a"]["range_diff_pair"] == "="
    assert rows["0004-c-10"]["status"] == "conflict"
    assert rows["0004-c-10"]["range_diff_pair"] == "!"
    assert "+C 10 (rewritten upstream)" in rows["0004-c-10"]["range_diff"]
    assert (rows["0004-c-10"]["hot_stored"], rows["0004-c-10"]["hot_now"]) == (1, 1)
    assert rows["0004-c-10"]["hot"] == 2 and rows["0001-readme"]["hot"] == 0
    assert rows["0004-c-10"]["waited"] >= 0 and rows["0002-louder-a"]["seconds"] > 0
    assert rows["0004-c-10"]["seconds"] > 0  # the time up to its stop
    assert saved["total_seconds"] == pytest.approx(sum(p["seconds"] for p in saved["patches"]))
    assert saved["counts"]["clean"] == 2 and saved["counts"]["offset"] == 1
    assert (series_dir / html_name).read_bytes().startswith(b"<!DOCTYPE html>")
    # the JSON of the run carries the same report
    assert done.to_json()["report"] == {**saved, "range_diff": str(done.range_diff)}
    # once the rebase is over, --status prints the saved report, with the range-diff parts
    assert main(["rebase", "--series", str(series_dir), "--status"]) == 0
    out = capsys.readouterr().out
    assert "offset" in out and "0004-c-10" in out and "+C 10 (rewritten upstream)" in out
    page = tmp_path / "again.html"
    args = ["rebase", "--series", str(series_dir), "--status", "--json", "--html", str(page)]
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out) == saved
    assert page.read_bytes() == (series_dir / html_name).read_bytes()


def test_status_of_a_stopped_rebase_shows_the_table_and_can_write_the_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    series_dir, onto = rebase_ready(tmp_path)
    assert main(["rebase", "--series", str(series_dir), "--onto", onto]) == 3
    out = capsys.readouterr().out
    assert "  conflict" in out and "0004-c-10" in out and "4 patches: " in out
    page = tmp_path / "stopped.html"
    assert main(["rebase", "--series", str(series_dir), "--status", "--html", str(page)]) == 0
    assert b"0004-c-10" in page.read_bytes()
    code = main(["rebase", "--series", str(series_dir), "--status", "--html", "/nonexistent/x"])
    assert code != 0 and "does not exist" in capsys.readouterr().err
    assert main(["rebase", "--series", str(series_dir), "--continue", "--html", str(page)]) == 2
    rebase_abort(series_dir)
    assert last_saved(series_dir) is None  # no report of an aborted rebase
    assert not list(series_dir.glob("rebase-*"))


def test_a_saved_report_that_is_not_one_is_refused_with_its_name(tmp_path: Path) -> None:
    (tmp_path / "rebase-a-b.report.json").write_text('{"schema": "other"}')
    with pytest.raises(PatchctlError, match=r"rebase-a-b\.report\.json is not a rebase report"):
        last_saved(tmp_path)
    with pytest.raises(ValueError):
        from_json([])


def test_text_lines_name_every_patch_and_the_hot_ones() -> None:
    from patchctl.ops.rebase.report import build

    done = (
        Done("0001-a", "c", "t", "applied", "s", False, 0.5),
        Done("0002-b", "c", "t", "resolved", "s", True, 0.25, blocks=3, waited=42.0),
    )
    report = build(state="done", series_dir=Path("/nonexistent/demo"), old="o", new="n",
                   ids=["0001-a", "0002-b"], done=done, range_diff_text=RANGE_DIFF)  # fmt: skip
    text = "\n".join(text_lines(report, diffs=True))
    assert "clean" in text and "conflict" in text and "0002-b 0+3" in text
    assert "+new" in text  # the changed pair's range-diff, with diffs=True
    assert "0.8 s moving them, 42 s stopped" in text
    assert from_json(json.loads(json.dumps(report.to_json()))) == report


def test_status_of_a_running_rebase_reads_its_journal(tmp_path: Path) -> None:
    series_dir, onto = rebase_ready(tmp_path)
    rebase(series_dir, onto)
    again = of_rebase(rebase_status(series_dir))
    assert [r.status for r in again.patches][-1] == "conflict"


# ----------------------------------------------------------------------------- a real move

REPO = Path(__file__).resolve().parents[4]


@pytest.mark.integration
def test_the_shipped_series_moved_between_releases_reports_every_patch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """patches/llamafile-0.3.35 moved onto llama-cpp-python 0.3.36 (both sdists through the
    test cache): every stop is a git conflict state with its blocks named, each resolved
    (both sides kept, ours first) and continued; the report names every patch."""
    import shutil

    from support.chromium import chromium, seen
    from support.debian import CACHE

    from patchctl.gitlayer.git import Git
    from patchctl.ops.cleanroom.apply import cleanroom_apply

    monkeypatch.setenv("PATCHCTL_CACHE_DIR", str(CACHE))
    series_dir = tmp_path / "proj" / "patches" / "llamafile-0.3.35"
    shutil.copytree(REPO / "patches" / "llamafile-0.3.35", series_dir)
    room = tmp_path / "room"
    cleanroom_apply(series_dir, workdir=room)
    ids = list(load_series_ids(series_dir))
    result = rebase(series_dir, "llama-cpp-python==0.3.36", workdir=room)
    stops = []
    while result.state == "stopped":
        assert result.stop is not None
        unmerged = Git(room).unmerged_paths()
        assert unmerged and set(unmerged) == set(result.stop.files)
        stops.append((result.stop.id, len(result.stop.files)))
        for path in unmerged:
            keep_both(room / path)
        result = rebase_continue(series_dir, workdir=room)
    assert result.state == "done" and len(stops) >= 2
    assert result.range_diff is not None
    json_name, html_name = report_names(result.range_diff.name)
    saved = json.loads((series_dir / json_name).read_text())
    assert [p["id"] for p in saved["patches"]] == ids
    statuses = {p["id"]: p["status"] for p in saved["patches"]}
    assert {pid for pid, _n in stops} == {pid for pid, s in statuses.items() if s == "conflict"}
    assert all(p["hot_now"] >= 1 for p in saved["patches"] if p["status"] == "conflict")
    view = seen(chromium().dump_dom(series_dir / html_name))
    text = "".join(view.text)
    assert all(pid in text for pid in ids) and "conflict" in text


def load_series_ids(series_dir: Path) -> tuple[str, ...]:
    from patchctl.series.model import load_series

    return load_series(series_dir).ids()


def keep_both(path: Path) -> None:
    """Resolve every diff3 block of the file at `path` by keeping ours, then theirs."""
    out, side = [], None
    for line in path.read_bytes().splitlines(keepends=True):
        if line.startswith(b"<<<<<<< "):
            side = "ours"
        elif side and line.startswith(b"||||||| "):
            side = "base"
        elif side and line.rstrip(b"\r\n") == b"=======":
            side = "theirs"
        elif side and line.startswith(b">>>>>>> "):
            side = None
        elif side != "base":
            out.append(line)
    path.write_bytes(b"".join(out))
