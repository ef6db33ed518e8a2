"""ops/cleanroom/apply.py: strict apply of hostile content; conflicts, drift, already-applied,
unsaved work."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from support.drift import rebase_ready
from support.files import CONTENT_MATRIX, CONTENT_MATRIX_AFTER, Files
from support.gitconfig import HOSTILE_GITCONFIG
from support.repos import Repo, tree_of_files
from support.series import git_upstream, write_series

from patchctl.cli.main import main
from patchctl.errors import (
    AlreadyApplied,
    DirtyTree,
    NotFound,
    PatchChanged,
    PatchDoesNotApply,
    PatchDrift,
)
from patchctl.ops.cleanroom.apply import cleanroom_apply
from patchctl.progress import RecordingProgress
from patchctl.room.cleanroom import BACKUP_REFS, load_cleanroom

MakePatch = Callable[[Files, Files], bytes]
LINES = {"src/main.c": b"".join(b"line %d\n" % i for i in range(1, 41))}


def edit(files: Files, name: str, old: bytes, new: bytes) -> Files:
    data = files[name]
    assert isinstance(data, bytes) and old in data
    return {**files, name: data.replace(old, new)}


@pytest.fixture
def upstream(make_repo: Callable[..., Repo]) -> Repo:
    return make_repo(CONTENT_MATRIX, name="upstream")


def test_content_matrix_applies_to_the_exact_tree(
    tmp_path: Path, upstream: Repo, make_patch: MakePatch
) -> None:
    patch = make_patch(CONTENT_MATRIX, CONTENT_MATRIX_AFTER)
    series = write_series(tmp_path / "s", git_upstream(upstream), [("0001-matrix", patch)])
    progress = RecordingProgress()
    report = cleanroom_apply(series, workdir=tmp_path / "room", progress=progress)
    expected = tree_of_files(tmp_path / "expected", CONTENT_MATRIX_AFTER)
    assert report.tree == expected
    assert [a.id for a in report.applied] == ["0001-matrix"]
    room = load_cleanroom(tmp_path / "room")
    assert room.applied_patches() == ["0001-matrix"]
    assert room.commit_for("0001-matrix") == report.head
    assert room.dirty_paths() == []
    # Bytes on disk are the blob bytes: CRLF, trailing whitespace and modes kept.
    assert (room.path / "crlf.txt").read_bytes() == b"one\r\nTWO\r\nthree\r\n"
    assert (room.path / "trailing-ws.txt").read_bytes() == b"keep   \nthese\t\nadded  \n"
    assert os.access(room.path / "plain-to-exec.sh", os.X_OK)
    assert os.readlink(room.path / "link") == "no-eol.txt"
    assert ("done", "apply", None) in progress.events


def test_commit_ids_are_reproducible_across_clean_rooms(
    tmp_path: Path, upstream: Repo, make_patch: MakePatch
) -> None:
    patch = make_patch(CONTENT_MATRIX, CONTENT_MATRIX_AFTER)
    series = write_series(tmp_path / "s", git_upstream(upstream), [("0001-matrix", patch)])
    one = cleanroom_apply(series, workdir=tmp_path / "one")
    two = cleanroom_apply(series, workdir=tmp_path / "two")
    assert one.head == two.head and one.base_commit == two.base_commit
    message = load_cleanroom(tmp_path / "one").git.run("cat-file", "commit", one.head)
    assert b"\nPatchctl-Id: 0001-matrix\n" in message
    assert b"author patchctl <patchctl@invalid> 0 +0000" in message


def two_patch_series(
    tmp_path: Path, upstream: Repo, make_patch: MakePatch, second_before: Files | None = None
) -> Path:
    first_after = edit(CONTENT_MATRIX, "src/main.c", b"line 5\n", b"FIVE\n")
    second_after = edit(first_after, "src/main.c", b"line 30\n", b"THIRTY\n")
    patches = [
        ("0001-five", make_patch(CONTENT_MATRIX, first_after)),
        ("0002-thirty", make_patch(second_before or first_after, second_after)),
    ]
    return write_series(tmp_path / "s", git_upstream(upstream), patches)


def test_upto_and_incremental_reuse(tmp_path: Path, upstream: Repo, make_patch: MakePatch) -> None:
    series = two_patch_series(tmp_path, upstream, make_patch)
    room_path = tmp_path / "room"
    first = cleanroom_apply(series, workdir=room_path, upto="0001-five")
    assert [a.id for a in first.applied] == ["0001-five"] and first.created
    stamp = (room_path / "crlf.txt").stat().st_mtime_ns
    full = cleanroom_apply(series, workdir=room_path)
    assert [(a.id, a.reused) for a in full.applied] == [("0001-five", True), ("0002-thirty", False)]
    assert not full.created
    assert (room_path / "crlf.txt").stat().st_mtime_ns == stamp  # untouched file kept
    again = cleanroom_apply(series, workdir=room_path)
    assert again.head == full.head and all(a.reused for a in again.applied)
    back = cleanroom_apply(series, workdir=room_path, upto="0001-five")
    assert back.head == first.head
    assert b"THIRTY" not in (room_path / "src" / "main.c").read_bytes()
    with pytest.raises(NotFound):
        cleanroom_apply(series, workdir=room_path, upto="0009-nope")


def test_changed_patch_file_is_reapplied(
    tmp_path: Path, upstream: Repo, make_patch: MakePatch
) -> None:
    series = two_patch_series(tmp_path, upstream, make_patch)
    room_path = tmp_path / "room"
    before = cleanroom_apply(series, workdir=room_path)
    new = make_patch(CONTENT_MATRIX, edit(CONTENT_MATRIX, "src/main.c", b"line 5\n", b"5!\n"))
    (series / "0001-five.patch").write_bytes(new)
    after = cleanroom_apply(series, workdir=room_path)
    assert [a.reused for a in after.applied] == [False, False]
    assert after.head != before.head
    data = (room_path / "src" / "main.c").read_bytes()
    assert b"5!\n" in data and b"FIVE" not in data and b"THIRTY" in data


def test_conflict_names_patch_file_hunk_and_keeps_last_good(
    tmp_path: Path, upstream: Repo, make_patch: MakePatch
) -> None:
    wrong_base = edit(CONTENT_MATRIX, "src/main.c", b"line 31\n", b"not upstream\n")
    series = two_patch_series(tmp_path, upstream, make_patch, second_before=wrong_base)
    room_path = tmp_path / "room"
    with pytest.raises(PatchDoesNotApply) as info:
        cleanroom_apply(series, workdir=room_path)
    exc = info.value
    assert type(exc) is PatchDoesNotApply and exc.exit_code == 3
    assert (exc.patch, exc.file, exc.hunk) == ("0002-thirty", "src/main.c", 1)
    assert exc.one_line().startswith("patch 0002-thirty does not apply: hunk #1 in src/main.c")
    room = load_cleanroom(room_path)
    assert room.applied_patches() == ["0001-five"]
    assert room.dirty_paths() == []
    assert b"FIVE" in (room_path / "src" / "main.c").read_bytes()


def test_offset_is_drift_not_accepted(
    tmp_path: Path, upstream: Repo, make_patch: MakePatch
) -> None:
    shifted = {**CONTENT_MATRIX, "src/main.c": b"extra\nextra\n" + LINES["src/main.c"]}
    patch = make_patch(shifted, edit(shifted, "src/main.c", b"line 20\n", b"twenty\n"))
    series = write_series(tmp_path / "s", git_upstream(upstream), [("0001-shift", patch)])
    with pytest.raises(PatchDrift) as info:
        cleanroom_apply(series, workdir=tmp_path / "room")
    exc = info.value
    assert exc.exit_code == 10 and exc.file == "src/main.c" and exc.hunk == 1
    assert "offset -2 lines" in str(exc)
    room = load_cleanroom(tmp_path / "room")
    assert room.head_tree() == upstream.tree and room.dirty_paths() == []


def test_already_applied_is_reported(
    tmp_path: Path, make_repo: Callable[..., Repo], make_patch: MakePatch
) -> None:
    after = edit(CONTENT_MATRIX, "src/main.c", b"line 5\n", b"FIVE\n")
    patched_upstream = make_repo(after, name="upstream-with-fix")
    patch = make_patch(CONTENT_MATRIX, after)
    series = write_series(tmp_path / "s", git_upstream(patched_upstream), [("0001-five", patch)])
    with pytest.raises(AlreadyApplied) as info:
        cleanroom_apply(series, workdir=tmp_path / "room")
    assert info.value.exit_code == 11 and info.value.patch == "0001-five"


def test_whitespace_is_never_fixed(tmp_path: Path, upstream: Repo, make_patch: MakePatch) -> None:
    # The hostile ~/.gitconfig says apply.whitespace=fix; the trailing blanks must survive.
    after = {**CONTENT_MATRIX, "trailing-ws.txt": b"keep   \nthese\t\n \t \n"}
    series = write_series(
        tmp_path / "s", git_upstream(upstream), [("0001-ws", make_patch(CONTENT_MATRIX, after))]
    )
    cleanroom_apply(series, workdir=tmp_path / "room")
    assert (tmp_path / "room" / "trailing-ws.txt").read_bytes() == b"keep   \nthese\t\n \t \n"


def test_unsaved_work_is_refused_then_backed_up_with_force(
    tmp_path: Path, upstream: Repo, make_patch: MakePatch
) -> None:
    series = two_patch_series(tmp_path, upstream, make_patch)
    room_path = tmp_path / "room"
    cleanroom_apply(series, workdir=room_path, upto="0001-five")
    (room_path / "crlf.txt").write_bytes(b"my edit\r\n")
    (room_path / "scratch.txt").write_bytes(b"new work\n")
    with pytest.raises(DirtyTree) as info:
        cleanroom_apply(series, workdir=room_path)
    assert info.value.exit_code == 8 and "2 changed path(s)" in str(info.value)
    assert (room_path / "crlf.txt").read_bytes() == b"my edit\r\n"
    assert (room_path / "scratch.txt").exists()
    report = cleanroom_apply(series, workdir=room_path, force=True)
    assert report.backup is not None
    assert sorted(report.backup.paths) == ["crlf.txt", "scratch.txt"]
    saved = report.backup.patch_file.read_bytes()
    assert b"+my edit\r\n" in saved and b"+new work\n" in saved
    room = load_cleanroom(room_path)
    assert room.applied_patches() == ["0001-five", "0002-thirty"] and room.dirty_paths() == []
    assert room.git.run("cat-file", "blob", f"{report.backup.ref}:crlf.txt") == b"my edit\r\n"


def test_a_nested_repository_is_refused_even_with_force_and_nothing_is_saved(
    tmp_path: Path, upstream: Repo, make_repo: Callable[..., Repo]
) -> None:
    """A backup of a nested repository would hold only a gitlink: --force would save a link,
    delete nothing, and find the same unsaved work on every run. It is refused instead."""
    series = write_series(tmp_path / "s", git_upstream(upstream))
    room_path = tmp_path / "room"
    cleanroom_apply(series, workdir=room_path)
    make_repo({"mine.c": b"int mine;\n"}, name="room/vendor/own")
    for force in (False, True):
        with pytest.raises(DirtyTree, match="git repositories of its own") as info:
            cleanroom_apply(series, workdir=room_path, force=force)
        assert "vendor/own/" in str(info.value) and "move them out" in (info.value.hint or "")
    room = load_cleanroom(room_path)
    assert room.git.refs(BACKUP_REFS) == [] and not room.backups_dir().exists()
    assert (room_path / "vendor" / "own" / "mine.c").read_bytes() == b"int mine;\n"


def test_foreign_commits_count_as_unsaved_work(tmp_path: Path, upstream: Repo) -> None:
    series = write_series(tmp_path / "s", git_upstream(upstream))
    room_path = tmp_path / "room"
    cleanroom_apply(series, workdir=room_path)
    room = load_cleanroom(room_path)
    (room_path / "crlf.txt").write_bytes(b"committed by hand\n")
    room.git.run("add", "crlf.txt")
    mine = room.git.commit_tree(room.git.write_tree(), b"my commit\n", (room.head(),))
    room.git.update_ref("HEAD", mine)
    with pytest.raises(DirtyTree):
        cleanroom_apply(series, workdir=room_path)
    report = cleanroom_apply(series, workdir=room_path, force=True)
    assert report.backup is not None
    assert room.git.rev_parse(f"{report.backup.ref}^") == mine
    assert room.head() == room.base_commit()


def test_root_targets_a_subdirectory(
    tmp_path: Path, make_repo: Callable[..., Repo], make_patch: MakePatch
) -> None:
    inner = {"CMakeLists.txt": b"project(x)\n", "src/a.c": b"int a;\n"}
    outer = {"README": b"llamafile\n", **{f"llama.cpp/{k}": v for k, v in inner.items()}}
    repo = make_repo(outer, name="llamafile")
    patch = make_patch(inner, {**inner, "src/a.c": b"int a = 1;\n"})
    series = write_series(
        tmp_path / "s", git_upstream(repo), [("0001-root", patch)], root="llama.cpp"
    )
    cleanroom_apply(series, workdir=tmp_path / "room")
    assert (tmp_path / "room" / "llama.cpp" / "src" / "a.c").read_bytes() == b"int a = 1;\n"
    assert (tmp_path / "room" / "README").read_bytes() == b"llamafile\n"


def test_empty_patch_is_a_conflict(tmp_path: Path, upstream: Repo) -> None:
    series = write_series(tmp_path / "s", git_upstream(upstream), [("0001-empty", b"")])
    with pytest.raises(PatchDoesNotApply) as info:
        cleanroom_apply(series, workdir=tmp_path / "room")
    assert str(info.value).endswith("does not apply: the patch file contains no changes")
    assert info.value.hint is not None and "remove it from the series" in info.value.hint


def test_new_upstream_pin_rebuilds_the_clean_room_and_keeps_backups(
    tmp_path: Path, make_repo: Callable[..., Repo]
) -> None:
    old = make_repo({"a.txt": b"old\n"}, name="old-upstream")
    new = make_repo({"a.txt": b"new\n", "b.txt": b"b\n"}, name="new-upstream")
    room_path = tmp_path / "room"
    series = write_series(tmp_path / "s", git_upstream(old))
    cleanroom_apply(series, workdir=room_path)
    write_series(tmp_path / "s", git_upstream(new))
    report = cleanroom_apply(series, workdir=room_path)
    assert report.created and report.base_tree == new.tree
    assert (room_path / "b.txt").read_bytes() == b"b\n"
    (room_path / "a.txt").write_bytes(b"my edit\n")
    write_series(tmp_path / "s", git_upstream(old))
    with pytest.raises(DirtyTree):
        cleanroom_apply(series, workdir=room_path)
    assert (room_path / "a.txt").read_bytes() == b"my edit\n"
    report = cleanroom_apply(series, workdir=room_path, force=True)
    assert report.created and report.base_tree == old.tree and report.backup is not None
    room = load_cleanroom(room_path)
    assert room.git.run("cat-file", "blob", f"{report.backup.ref}:a.txt") == b"my edit\n"
    assert report.backup.patch_file.is_file()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_hostile_repo_local_config_is_overridden_by_the_pins(
    tmp_path: Path, upstream: Repo, make_patch: MakePatch
) -> None:
    # Someone edits the clean room's own .git/config; the -c pins still win.
    patch = make_patch(CONTENT_MATRIX, CONTENT_MATRIX_AFTER)
    series = write_series(tmp_path / "s", git_upstream(upstream), [("0001-matrix", patch)])
    room_path = tmp_path / "room"
    write_series(tmp_path / "s", git_upstream(upstream))
    cleanroom_apply(series, workdir=room_path)
    with (room_path / ".git" / "config").open("ab") as config:
        config.write(HOSTILE_GITCONFIG)
    write_series(tmp_path / "s", git_upstream(upstream), [("0001-matrix", patch)])
    report = cleanroom_apply(series, workdir=room_path)
    assert report.tree == tree_of_files(tmp_path / "expected", CONTENT_MATRIX_AFTER)
    assert (room_path / "crlf.txt").read_bytes() == b"one\r\nTWO\r\nthree\r\n"
    assert (room_path / "link").is_symlink()
    assert load_cleanroom(room_path).dirty_paths() == []


def test_patch_that_would_need_fuzz_is_drift_and_is_not_applied(
    tmp_path: Path, upstream: Repo, make_patch: MakePatch
) -> None:
    # The patch was made on a base whose line 18 differs: with less context it would apply
    # (GNU patch would fuzz it in); patchctl reports drift and applies nothing.
    other = edit(CONTENT_MATRIX, "src/main.c", b"line 18\n", b"eighteen\n")
    patch = make_patch(other, edit(other, "src/main.c", b"line 20\n", b"twenty\n"))
    series = write_series(tmp_path / "s", git_upstream(upstream), [("0001-fuzz", patch)])
    with pytest.raises(PatchDrift) as info:
        cleanroom_apply(series, workdir=tmp_path / "room")
    exc = info.value
    assert exc.exit_code == 10 and (exc.file, exc.hunk) == ("src/main.c", 1)
    assert "would need fuzz" in str(exc)
    room = load_cleanroom(tmp_path / "room")
    assert room.head_tree() == upstream.tree and room.dirty_paths() == []


def test_new_file_patch_on_a_tree_that_has_it_is_already_applied(
    tmp_path: Path, make_repo: Callable[..., Repo], make_patch: MakePatch
) -> None:
    after = {**CONTENT_MATRIX, "added.txt": b"new\n"}
    repo = make_repo(after, name="upstream-has-it")
    patch = make_patch(CONTENT_MATRIX, after)
    series = write_series(tmp_path / "s", git_upstream(repo), [("0001-add", patch)])
    with pytest.raises(AlreadyApplied):
        cleanroom_apply(series, workdir=tmp_path / "room")


def test_recording_the_tree_later_keeps_the_clean_room(tmp_path: Path) -> None:
    from dataclasses import replace

    from support.series import make_project

    from patchctl.errors import ChecksumMismatch
    from patchctl.series.model import load_series, save_series

    series_dir = make_project(tmp_path, {"a.txt": b"a\n"})
    first = cleanroom_apply(series_dir)
    assert first.created
    series = load_series(series_dir)
    marker = first.cleanroom / ".git" / "patchctl-cleanroom.json"
    stamp = marker.stat().st_mtime_ns
    up = series.upstream
    save_series(series.with_upstream(replace(up, tree=first.base_tree, commit="1" * 40)))
    again = cleanroom_apply(series_dir)
    assert not again.created and marker.stat().st_mtime_ns == stamp
    save_series(series.with_upstream(replace(up, tree="2" * 40)))
    with pytest.raises(ChecksumMismatch):  # a wrong tree is still refused
        cleanroom_apply(series_dir)
    assert load_cleanroom(first.cleanroom).base_tree() == first.base_tree


def test_a_patch_whose_bytes_differ_from_the_recorded_sha256_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    series_dir, _onto = rebase_ready(tmp_path)
    room = tmp_path / "project" / "cleanroom" / "demo"
    head = load_cleanroom(room).head()
    patch = series_dir / "0003-b-30.patch"
    data = patch.read_bytes()
    recorded = hashlib.sha256(data).hexdigest()
    added = data.index(b"\n+", data.index(b"\n@@ ")) + 2  # a byte inside an added line
    damaged = data[:added] + b"X" + data[added + 1 :]
    patch.write_bytes(damaged)
    with pytest.raises(PatchChanged) as refused:
        cleanroom_apply(series_dir)
    message = refused.value.one_line()
    assert "0003-b-30" in message and recorded in message
    assert hashlib.sha256(damaged).hexdigest() in message and "git restore" in message
    assert load_cleanroom(room).head() == head  # nothing moved
    assert main(["cleanroom", "apply", "--series", str(series_dir)]) == 12
    assert "0003-b-30" in capsys.readouterr().err
