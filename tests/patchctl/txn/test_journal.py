"""journal.py: a command's writes are staged and committed at once; the next run rolls back a
journal that was never committed, finishes one that was, and stops on a target that changed
since the kill (keeping the new bytes for the user)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.series import make_project

from patchctl import killpoint
from patchctl.errors import ConfigError, DirtyTree, PatchctlError
from patchctl.gitlayer.git import Git
from patchctl.ops.capture import add_patch, capture
from patchctl.ops.cleanroom.apply import cleanroom_apply
from patchctl.room.journal import RoomJournal, sha256, signed, verified
from patchctl.series.model import load_series
from patchctl.txn import journal as journal_module
from patchctl.txn.journal import JOURNAL, Journal, read_journal, recover
from patchctl.txn.session import series_session

FILES = {"main.c": b"int main(void) { return 0; }\n"}


def hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_staged_writes_are_invisible_until_commit_then_all_land(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_bytes(b"old a\n")
    journal = Journal(tmp_path / JOURNAL, "test")
    journal.stage_file(a, b"new a\n")
    journal.stage_file(b, b"new b\n", create=True)
    journal.stage_file(a, b"newer a\n")  # a second stage replaces the first
    assert a.read_bytes() == b"old a\n" and not b.exists()
    op, state, effects = read_journal(tmp_path / JOURNAL)
    assert (op, state, len(effects)) == ("test", "staging", 2)
    assert journal.commit() == [b, a]
    assert (a.read_bytes(), b.read_bytes()) == (b"newer a\n", b"new b\n")
    assert hidden(tmp_path) == []  # no journal, no staged copy


def test_stage_files_stages_many_with_one_journal_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_bytes(b"old a\n")
    journal = Journal(tmp_path / JOURNAL, "test")
    journal.stage_file(a, b"first a\n")
    saves: list[str] = []
    real = Journal._save

    def counting(self: Journal, state: str) -> None:
        saves.append(state)
        real(self, state)

    monkeypatch.setattr(Journal, "_save", counting)
    journal.stage_files([(a, b"new a\n"), (b, b"new b\n")])
    assert saves == ["staging"]  # one write names both staged copies
    assert a.read_bytes() == b"old a\n" and not b.exists()
    _op, state, effects = read_journal(tmp_path / JOURNAL)
    assert (state, len(effects)) == ("staging", 2)  # the earlier stage of a was replaced
    assert journal.commit() == [a, b]
    assert (a.read_bytes(), b.read_bytes()) == (b"new a\n", b"new b\n")
    assert hidden(tmp_path) == []


def test_stage_files_naming_a_target_twice_leaves_no_staged_copy_behind(tmp_path: Path) -> None:
    a = tmp_path / "a.txt"
    journal = Journal(tmp_path / JOURNAL, "test")
    journal.stage_files([(a, b"first\n"), (a, b"second\n")])
    assert journal.commit() == [a]
    assert a.read_bytes() == b"second\n" and hidden(tmp_path) == []


def test_a_target_changed_before_the_commit_point_refuses_and_writes_nothing(
    tmp_path: Path,
) -> None:
    a = tmp_path / "a.txt"
    a.write_bytes(b"old\n")
    journal = Journal(tmp_path / JOURNAL, "test")
    journal.stage_file(a, b"new\n")
    a.write_bytes(b"a hand edit\n")
    with pytest.raises(DirtyTree, match="changed on disk"):
        journal.commit()
    journal.abandon()
    assert a.read_bytes() == b"a hand edit\n"
    assert hidden(tmp_path) == []


def test_a_staging_journal_is_rolled_back(tmp_path: Path) -> None:
    a = tmp_path / "a.txt"
    a.write_bytes(b"old\n")
    journal = Journal(tmp_path / JOURNAL, "capture")
    journal.stage_file(a, b"new\n")  # the run dies here: nothing of it was visible
    (tmp_path / f".{JOURNAL}.tmp123-abcdef12").write_bytes(b"{")  # a killed journal write
    found = recover(tmp_path)
    assert found is not None and (found.op, found.outcome) == ("capture", "rolled back")
    assert a.read_bytes() == b"old\n"
    assert hidden(tmp_path) == []
    assert recover(tmp_path) is None


def test_a_committed_journal_is_finished_whatever_was_already_done(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_bytes(b"old a\n")
    journal = Journal(tmp_path / JOURNAL, "import")
    journal.stage_file(a, b"new a\n")
    journal.stage_file(b, b"new b\n", create=True)
    calls: list[str] = []

    def die_after_first(label: str) -> None:
        calls.append(label)
        if label == "write b.txt":
            raise KeyboardInterrupt  # stands in for the kill (the test kills for real)

    with pytest.MonkeyPatch.context() as patch, pytest.raises(KeyboardInterrupt):
        patch.setattr(killpoint, "reached", die_after_first)
        journal.commit()
    assert a.read_bytes() == b"new a\n" and not b.exists()  # half done
    found = recover(tmp_path)
    assert found is not None and found.outcome == "finished"
    assert (a.read_bytes(), b.read_bytes()) == (b"new a\n", b"new b\n")
    assert hidden(tmp_path) == []


def test_a_target_changed_after_the_kill_stops_recovery_and_keeps_the_new_bytes(
    tmp_path: Path,
) -> None:
    a = tmp_path / "a.txt"
    a.write_bytes(b"old\n")
    journal = Journal(tmp_path / JOURNAL, "capture")
    journal.stage_file(a, b"new\n")
    journal._save(journal_module.COMMITTED)  # killed right after the commit point
    a.write_bytes(b"someone else's\n")
    with pytest.raises(DirtyTree, match="holds neither its old nor its new bytes") as caught:
        recover(tmp_path)
    staged = journal.effects[0].staged  # type: ignore[union-attr]
    assert str(staged) in (caught.value.hint or "")
    assert staged.read_bytes() == b"new\n" and a.read_bytes() == b"someone else's\n"
    assert (tmp_path / JOURNAL).is_file()  # kept until the user has chosen


def test_a_removal_lands_with_the_commit_and_only_over_the_old_bytes(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_bytes(b"old a\n")
    journal = Journal(tmp_path / JOURNAL, "split")
    journal.stage_file(b, b"new b\n", create=True)
    journal.stage_remove(a)
    assert a.is_file() and journal.staged_bytes(a) is None
    assert recover(tmp_path) is not None and a.read_bytes() == b"old a\n"  # rolled back
    journal = Journal(tmp_path / JOURNAL, "split")
    journal.stage_file(b, b"new b\n", create=True)
    journal.stage_remove(a)
    journal._save(journal_module.COMMITTED)  # killed right after the commit point
    found = recover(tmp_path)
    assert found is not None and found.outcome == "finished"
    assert not a.exists() and b.read_bytes() == b"new b\n" and hidden(tmp_path) == []
    a.write_bytes(b"old a\n")
    journal = Journal(tmp_path / JOURNAL, "split")
    journal.stage_remove(a)
    journal._save(journal_module.COMMITTED)
    a.write_bytes(b"edited since\n")
    with pytest.raises(DirtyTree, match="to remove"):
        recover(tmp_path)
    assert a.read_bytes() == b"edited since\n"


def test_an_unreadable_journal_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / JOURNAL).write_text(json.dumps({"version": 99}))
    with pytest.raises(PatchctlError, match="not a journal patchctl can read"):
        recover(tmp_path)


def test_an_error_inside_a_session_writes_nothing(tmp_path: Path) -> None:
    series_dir = make_project(tmp_path, FILES)
    before = (series_dir / "series.yaml").read_bytes()
    with pytest.raises(RuntimeError), series_session(series_dir) as session:
        session.write_new_patch(series_dir / "0001-x.patch", b"bytes\n")
        raise RuntimeError("a failure after the first staged write")
    assert (series_dir / "series.yaml").read_bytes() == before
    assert sorted(p.name for p in series_dir.iterdir()) == ["series.yaml"]


def test_a_session_finishes_a_killed_capture_before_it_reads_the_series(tmp_path: Path) -> None:
    """A capture killed after its commit point: the next session lands the patch file, the
    series.yaml with the recorded trees, the docs and the clean room's HEAD together."""
    series_dir = make_project(tmp_path, FILES)
    cleanroom_apply(series_dir)
    add_patch(series_dir, "0001-one", "One")
    room = Git(series_dir.parent.parent / "cleanroom" / "demo")
    (room.repo / "main.c").write_bytes(b"int main(void) { return 1; }\n")
    head = room.rev_parse("HEAD")
    with pytest.MonkeyPatch.context() as patch:
        real = Journal.commit

        def commit_then_die(self: Journal) -> list[Path]:
            for effect in self.effects:
                journal_module._check_still_old(effect)
            self._save(journal_module.COMMITTED)
            self.committed = True
            raise KeyboardInterrupt  # killed at the commit point

        patch.setattr(Journal, "commit", commit_then_die)
        with pytest.raises(KeyboardInterrupt):
            capture(series_dir, "0001-one")
        patch.setattr(Journal, "commit", real)
    assert not (series_dir / "0001-one.patch").exists() and room.rev_parse("HEAD") == head
    with series_session(series_dir) as session:
        assert session.series.patch("0001-one").post_tree is not None
    assert (series_dir / "0001-one.patch").is_file()
    assert room.rev_parse("HEAD") != head
    assert room.status_paths() == []  # the index followed the new HEAD
    assert load_series(series_dir).patch("0001-one").post_tree == room.tree_of("HEAD")
    assert hidden(series_dir) == []


def forged(path: Path, effects: list[dict[str, object]], state: str = "committed") -> None:
    """A journal as someone else would write it (committed to a shared repository)."""
    data = {"version": 1, "op": "capture", "pid": 1, "state": state, "effects": effects}
    path.write_text(json.dumps(data))


def test_a_journal_not_written_here_is_never_acted_on(tmp_path: Path) -> None:
    """A committed journal naming a file outside the series, with a staged copy that holds
    the attacker's bytes: recovery refuses it (exit 8) and touches nothing."""
    victim, evil = tmp_path / "victim.txt", tmp_path / "evil"
    victim.write_bytes(b"mine\n")
    evil.write_bytes(b"pwned\n")
    series = tmp_path / "s"
    series.mkdir()
    forged(
        series / JOURNAL,
        [{"kind": "file", "target": str(victim), "staged": str(evil),
          "old": sha256(b"mine\n"), "new": sha256(b"pwned\n"),
          "create": False}],
    )
    with pytest.raises(DirtyTree, match="not written by patchctl for this user") as caught:
        recover(series)
    assert caught.value.exit_code == 8
    assert victim.read_bytes() == b"mine\n" and evil.read_bytes() == b"pwned\n"
    forged(series / JOURNAL, [], state="staging")  # a rollback would delete staged copies
    with pytest.raises(DirtyTree):
        recover(series)


def test_a_signed_journal_still_names_only_staged_siblings(tmp_path: Path) -> None:
    """Even signed with this user's key, an effect whose staged copy is not its target's
    sibling with patchctl's name is refused (the journal is checked, not trusted)."""
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"mine\n")
    data = {
        "version": 1,
        "op": "capture",
        "pid": 1,
        "state": "staging",
        "effects": [
            {
                "kind": "file",
                "target": str(tmp_path / "s" / "a.patch"),
                "staged": str(victim),
                "old": None,
                "new": "0" * 64,
                "create": True,
            }
        ],
    }
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / JOURNAL).write_bytes(signed(data))
    with pytest.raises(PatchctlError, match="is not a staged copy"):
        recover(tmp_path / "s")
    assert victim.read_bytes() == b"mine\n"


def test_a_journal_over_the_limit_is_refused_naming_it_before_it_is_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A journal in a series directory may have come with a repository: it is read within
    PATCHCTL_MAX_JOURNAL_BYTES (exit 5 naming the file, the fix and the variable), and
    nothing it names is touched; at the limit it recovers as always."""
    a = tmp_path / "a.txt"
    a.write_bytes(b"old\n")
    journal = Journal(tmp_path / JOURNAL, "capture")
    journal.stage_file(a, b"new\n")
    size = (tmp_path / JOURNAL).stat().st_size
    before = hidden(tmp_path)
    monkeypatch.setenv("PATCHCTL_MAX_JOURNAL_BYTES", str(size - 1))
    with pytest.raises(ConfigError) as info:
        recover(tmp_path)
    assert info.value.exit_code == 5 and info.value.path == tmp_path / JOURNAL
    assert "the journal is larger than" in str(info.value)
    hint = info.value.hint or ""
    assert "move it aside" in hint and "PATCHCTL_MAX_JOURNAL_BYTES=<bytes>" in hint
    assert hidden(tmp_path) == before and a.read_bytes() == b"old\n"
    monkeypatch.setenv("PATCHCTL_MAX_JOURNAL_BYTES", str(size))
    found = recover(tmp_path)
    assert found is not None and found.outcome == "rolled back"
    assert hidden(tmp_path) == []


def test_a_room_journal_over_the_limit_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    room = tmp_path / "room"
    journal = RoomJournal(room, "cleanroom apply")
    journal.record(head="0" * 40)
    monkeypatch.setenv("PATCHCTL_MAX_JOURNAL_BYTES", "16")
    with pytest.raises(ConfigError, match="the journal is larger than 16 bytes") as info:
        verified(journal.path)
    assert info.value.path == journal.path
