"""rebasestate: the journal of a rebase in progress, staged bytes and the copies kept for
--abort, under the clean room's .git."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from patchctl.errors import ConfigError, NotFound, PatchctlError
from patchctl.room import rebasestate
from patchctl.room.rebasestate import Done, Journal, Stop


def journal() -> Journal:
    return Journal(
        state="running",
        series="patches/demo/series.yaml",
        series_sha256="a" * 64,
        files_sha256={"0001-a.patch": "b" * 64},
        old_upstream={"kind": "git", "url": "../up", "commit": "1" * 40},
        new_upstream={"kind": "git", "url": "../up", "commit": "2" * 40, "tree": "3" * 40},
        old_base="4" * 40,
        new_base="5" * 40,
        old_commits=("6" * 40, "7" * 40),
        branch="7" * 40,
        ids=("0001-a", "0002-b"),
        labels=("1111111", "2222222"),
        worktree="8" * 40,
    )


@pytest.fixture
def room(tmp_path: Path) -> Path:
    (tmp_path / "room" / ".git").mkdir(parents=True)
    return tmp_path / "room"


def test_a_saved_journal_reads_back_equal_with_its_stop_and_done(room: Path) -> None:
    assert not rebasestate.in_progress(room)
    done = Done("0001-a", "9" * 40, "a" * 40, "merged", "c" * 64, True)
    stop = Stop("0002-b", "conflict", "d" * 40, ("src/b.c",), (("src/b.c", 2), ("x", None)),
                (("src/b.c", 10),), ("CONFLICT (content)",))  # fmt: skip
    saved = rebasestate.moved(room, journal(), "stopped", done=(done,), stop=stop)
    assert rebasestate.in_progress(room)
    loaded = rebasestate.load(room)
    assert loaded == saved
    assert (loaded.head, loaded.current) == ("9" * 40, "0002-b")


def test_head_and_current_before_the_first_and_after_the_last_patch() -> None:
    first = journal()
    assert (first.head, first.current) == ("5" * 40, "0001-a")  # the new base
    done = tuple(Done(i, c, "e" * 40, "kept", "f" * 64, False)
                 for i, c in (("0001-a", "9" * 40), ("0002-b", "a" * 40)))  # fmt: skip
    last = replace(first, done=done)
    assert (last.head, last.current) == ("a" * 40, None)


def test_no_journal_is_not_found(room: Path) -> None:
    with pytest.raises(NotFound, match="no rebase is in progress"):
        rebasestate.load(room)


@pytest.mark.parametrize(
    "text",
    [
        b"{not json",
        b"[]",
        json.dumps({"version": 99, "state": "running"}).encode(),
        json.dumps({"version": 1, "state": "dancing"}).encode(),
        json.dumps({"version": 1, "state": "running"}).encode(),  # fields missing
    ],
)
def test_an_unreadable_journal_says_so_and_how_to_recover(room: Path, text: bytes) -> None:
    path = rebasestate.directory(room) / "journal.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(text)
    with pytest.raises(PatchctlError, match="is unreadable") as info:
        rebasestate.load(room)
    assert "cleanroom apply" in (info.value.hint or "")


def test_a_journal_over_the_limit_is_refused_naming_it(
    room: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rebasestate.save(room, journal())
    path = rebasestate.directory(room) / "journal.json"
    monkeypatch.setenv("PATCHCTL_MAX_JOURNAL_BYTES", str(path.stat().st_size - 1))
    with pytest.raises(ConfigError, match="the journal is larger than") as info:
        rebasestate.load(room)
    assert info.value.path == path and info.value.exit_code == 5
    assert "cleanroom apply" in (info.value.hint or "")
    assert "PATCHCTL_MAX_JOURNAL_BYTES" in (info.value.hint or "")
    monkeypatch.setenv("PATCHCTL_MAX_JOURNAL_BYTES", str(path.stat().st_size))
    assert rebasestate.load(room) == journal()


def test_staged_bytes_and_old_copies_are_kept_byte_for_byte_until_removed(room: Path) -> None:
    data = b"\x00patch\r\nbytes\xff"
    rebasestate.save(room, journal())
    rebasestate.stage(room, "0001-a.patch", data)
    rebasestate.keep_old(room, "series.yaml", b"old series\n")
    assert rebasestate.staged(room, "0001-a.patch") == data
    assert rebasestate.old(room, "series.yaml") == b"old series\n"
    assert rebasestate.old(room, "README.md") is None
    rebasestate.remove(room)
    assert not rebasestate.in_progress(room) and not rebasestate.directory(room).exists()
