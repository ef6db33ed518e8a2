"""recovery.py and the clean-room journal: what a killed `cleanroom apply` leaves (a half-applied
patch, a half-built or half-swapped clean room, git's lock files) is undone or finished by the
next run, and nothing of the user's is lost on the way; a pin change keeps an old clean room
that holds what patchctl did not make."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
from support.series import make_project

from patchctl.gitlayer.git import Git
from patchctl.ops.capture import add_patch, capture
from patchctl.ops.cleanroom.apply import aside_path, cleanroom_apply
from patchctl.room.cleanroom import BACKUP_REFS, load_cleanroom, partial_path
from patchctl.room.journal import RoomJournal, room_journal_path
from patchctl.room.recovery import recover_room
from patchctl.txn.session import series_session

FILES = {"main.c": b"int main(void) { return 0; }\n", "util.c": b"int util;\n"}


@pytest.fixture
def series_dir(tmp_path: Path) -> Path:
    """A project whose series has one captured patch (0001-one edits main.c, adds new.c)."""
    series = make_project(tmp_path, FILES)
    cleanroom_apply(series)
    add_patch(series, "0001-one", "One")
    room = room_of(series)
    (room / "main.c").write_bytes(b"int main(void) { return 1; }\n")
    (room / "new.c").write_bytes(b"int fresh;\n")
    capture(series, "0001-one")
    cleanroom_apply(series, upto=None)
    return series


def room_of(series: Path) -> Path:
    return series.parent.parent / "cleanroom" / "demo"


def half_apply(series: Path) -> RoomJournal:
    """What a kill in the middle of `cleanroom apply` leaves: the journal, the clean room reset
    to the base and patch 0001 in the work tree and index, but not committed."""
    room = load_cleanroom(room_of(series))
    journal = RoomJournal(room.path, "cleanroom apply")
    patch = series / "0001-one.patch"
    data = patch.read_bytes()
    journal.record(
        head=room.head(),
        reset_to=room.base_commit(),
        plan=[["0001-one", hashlib.sha256(data).hexdigest(), str(patch)]],
        root=".",
    )
    room.reset_to(room.base_commit())
    room.git.run("apply", "--index", stdin=data)  # the patch in the work tree and index
    (room.git.git_dir() / "index.lock").write_bytes(b"")  # a killed git's lock
    return journal


def test_a_half_applied_patch_is_undone_without_a_backup(series_dir: Path) -> None:
    half_apply(series_dir)
    room = load_cleanroom(room_of(series_dir))
    assert room.dirty_paths()  # what the next run used to call the user's unsaved work
    found = recover_room(room.path)
    assert found is not None and found.outcome == "rolled back"
    assert any("undid 2 path(s)" in note for note in found.notes)
    assert room.dirty_paths() == [] and room.git.refs(BACKUP_REFS) == []
    assert not (room.git.git_dir() / "index.lock").exists()
    assert not room_journal_path(room.path).exists()
    assert cleanroom_apply(series_dir).applied[-1].id == "0001-one"


def test_an_edit_made_after_the_kill_is_saved_before_the_reset(series_dir: Path) -> None:
    half_apply(series_dir)
    room = load_cleanroom(room_of(series_dir))
    (room.path / "util.c").write_bytes(b"int util; /* mine */\n")
    found = recover_room(room.path)
    assert found is not None
    note = " ".join(found.notes)
    assert "util.c" in note and f"{BACKUP_REFS}1" in note
    assert room.dirty_paths() == []
    saved = room.backups_dir() / "1.patch"
    assert b"+int util; /* mine */" in saved.read_bytes()


def test_the_next_command_recovers_through_the_session(series_dir: Path) -> None:
    half_apply(series_dir)
    report = cleanroom_apply(series_dir)  # no exit 8 for patchctl's own half-applied patch
    assert [a.id for a in report.applied] == ["0001-one"]
    assert load_cleanroom(room_of(series_dir)).dirty_paths() == []


def test_a_partly_built_clean_room_is_removed(series_dir: Path) -> None:
    room = room_of(series_dir)
    partial = partial_path(room).with_name(f".{room.name}.partial-999999")
    (partial / ".git").mkdir(parents=True)
    found = recover_room(room)
    assert found is not None and not partial.exists()
    assert room.is_dir()


def test_a_half_done_swap_is_finished_and_the_old_room_kept_unless_discardable(
    series_dir: Path,
) -> None:
    room = room_of(series_dir)
    partial = partial_path(room)
    Git.init(partial)
    aside = aside_path(room)
    journal = RoomJournal(room, "cleanroom apply")
    journal.record(stage="swapping", partial=partial, aside=aside, discard=False)
    room.rename(aside)  # killed between the two renames
    found = recover_room(room)
    assert found is not None and found.outcome == "finished"
    assert (room / ".git").is_dir() and not partial.exists()
    assert (aside / ".git").is_dir()  # not discardable: kept, and said so
    assert any(str(aside) in note for note in found.notes)


def test_a_swap_that_never_started_puts_the_old_room_back(series_dir: Path) -> None:
    room = room_of(series_dir)
    head = Git(room).rev_parse("HEAD")
    aside = aside_path(room)
    journal = RoomJournal(room, "cleanroom apply")
    journal.record(stage="building", partial=partial_path(room), aside=aside, discard=True)
    room.rename(aside)  # (cannot happen before `swapping`, but recovery must not lose it)
    found = recover_room(room)
    assert found is not None and found.outcome == "rolled back"
    assert Git(room).rev_parse("HEAD") == head and not aside.exists()


# ----------------------------------------------------------------------------- pin change


def repin(series: Path, tmp_path: Path) -> None:
    """Point the series at a second archive (main.c and util.c as before, one more file)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in sorted({**FILES, "added.c": b"int added;\n"}.items()):
            info = tarfile.TarInfo(f"demo-1.1/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    archive = tmp_path / "demo-1.1.tar.gz"
    archive.write_bytes(buffer.getvalue())
    path = series / "series.yaml"
    text = path.read_text()
    old_sha = text.split("sha256: ")[1].split()[0]
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    text = text.replace("demo-1.0.tar.gz", "demo-1.1.tar.gz").replace(old_sha, sha)
    path.write_text(text)


def test_a_pin_change_keeps_an_old_clean_room_holding_the_users_things(
    series_dir: Path, tmp_path: Path
) -> None:
    room = room_of(series_dir)
    git = Git(room)
    (room / ".git" / "info" / "exclude").write_text("build/\n")
    (room / "build").mkdir()
    (room / "build" / "app.o").write_bytes(b"\x7fELF object")
    git.update_ref("refs/heads/wip", git.rev_parse("HEAD"))
    repin(series_dir, tmp_path)
    report = cleanroom_apply(series_dir)
    assert report.created and report.old_cleanroom is not None
    old = report.old_cleanroom
    assert old.path == room.with_name("demo.old")
    holds = "; ".join(old.holds)
    assert "build/" in holds and "refs/heads/wip" in holds
    assert (old.path / "build" / "app.o").read_bytes() == b"\x7fELF object"
    assert Git(old.path).maybe_rev("refs/heads/wip") is not None
    assert (room / "added.c").is_file() and not (room / "build").exists()
    assert not room_journal_path(room).exists()


def test_a_pin_change_removes_an_old_clean_room_with_nothing_of_the_users(
    series_dir: Path, tmp_path: Path
) -> None:
    room = room_of(series_dir)
    repin(series_dir, tmp_path)
    report = cleanroom_apply(series_dir)
    assert report.created and report.old_cleanroom is None
    assert sorted(p.name for p in room.parent.iterdir()) == ["demo"]


def test_a_pin_change_json_names_the_kept_clean_room(
    series_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from patchctl.cli.commands.cleanroom import apply_json

    room = room_of(series_dir)
    Git(room).update_ref("refs/stash", Git(room).rev_parse("HEAD"))
    repin(series_dir, tmp_path)
    data = apply_json(cleanroom_apply(series_dir))
    json.dumps(data)
    assert data["old_cleanroom"]["path"] == str(room.with_name("demo.old"))
    assert "refs/stash" in data["old_cleanroom"]["holds"][0]


def test_recovery_runs_under_the_session_that_takes_the_lock(series_dir: Path) -> None:
    half_apply(series_dir)
    with series_session(series_dir) as session:
        session.lock_cleanroom(None)
        assert session.recovered and session.recovered[0].op == "cleanroom apply"


def test_the_cli_says_what_it_recovered_on_stderr_and_keeps_json_on_stdout(
    series_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from patchctl.cli.app import run

    half_apply(series_dir)
    capsys.readouterr()
    assert run(["cleanroom", "apply", "--series", str(series_dir), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["ok"] is True
    assert "note: an interrupted `patchctl cleanroom apply` was rolled back" in captured.err
    assert "undid 2 path(s)" in captured.err


def test_status_says_a_killed_run_is_waiting_to_be_recovered(series_dir: Path) -> None:
    from patchctl.ops.cleanroom.status import cleanroom_status

    assert cleanroom_status(series_dir).to_json()["interrupted"] is None
    half_apply(series_dir)
    data = cleanroom_status(series_dir).to_json()
    assert data["interrupted"] == "cleanroom apply" and data["dirty"]


def test_a_room_journal_naming_other_directories_is_refused(
    series_dir: Path, tmp_path: Path
) -> None:
    """Signed or not, recovery moves or deletes only the clean room's own siblings with
    patchctl's names: a journal naming any other directory is refused, nothing removed."""
    from patchctl.errors import DirtyTree, PatchctlError
    from patchctl.room.journal import signed

    room = room_of(series_dir)
    precious = tmp_path / "precious"
    (precious / "data").mkdir(parents=True)
    path = room_journal_path(room)
    body = {"version": 1, "op": "cleanroom apply", "pid": 1, "stage": "building"}
    path.write_bytes(signed({**body, "partial": str(precious)}))
    with pytest.raises(PatchctlError, match=r"not .*'s own"):
        recover_room(room)
    path.write_text(json.dumps({**body, "partial": str(precious)}))  # unsigned
    with pytest.raises(DirtyTree, match="not written by patchctl"):
        recover_room(room)
    assert (precious / "data").is_dir() and (room / ".git").is_dir()


def test_a_lock_file_of_a_git_killed_before_any_change_is_removed(series_dir: Path) -> None:
    """The session marks the clean room in use before its first git call, so the lock file of
    a git killed even then (a status refreshing the index) does not block every later run."""
    room = room_of(series_dir)
    RoomJournal(room, "cleanroom apply").record()  # the mark a killed session leaves
    (room / ".git" / "index.lock").write_bytes(b"")
    assert cleanroom_apply(series_dir).applied[-1].id == "0001-one"
    assert not (room / ".git" / "index.lock").exists()
    assert not room_journal_path(room).exists()
