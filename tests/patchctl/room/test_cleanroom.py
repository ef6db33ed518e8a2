"""cleanroom.py: creation, marker, stack introspection, unsaved work and backups."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from support.archives import make_tar
from support.files import CONTENT_MATRIX
from support.repos import Repo, racy_same_size_edit, tree_of_files
from support.series import git_upstream, write_series

from patchctl.errors import ChecksumMismatch, DirtyTree, NotFound, PatchctlError
from patchctl.ops.cleanroom.apply import cleanroom_apply
from patchctl.room.cleanroom import (
    create_cleanroom,
    default_workdir,
    discard_cleanroom,
    load_cleanroom,
    locked,
    marker_path,
    open_cleanroom,
)
from patchctl.series.model import Upstream, load_series


@pytest.fixture
def upstream(make_repo: Callable[..., Repo]) -> Repo:
    return make_repo(CONTENT_MATRIX, name="upstream")


def test_default_workdir_is_project_cleanroom(tmp_path: Path) -> None:
    series_dir = tmp_path / "proj" / "patches" / "llamafile"
    assert default_workdir(series_dir) == tmp_path / "proj" / "cleanroom" / "llamafile"


def test_create_records_base_and_marker(tmp_path: Path, upstream: Repo) -> None:
    series = load_series(write_series(tmp_path / "s", git_upstream(upstream)))
    room = create_cleanroom(series, tmp_path / "room")
    assert room.base_tree() == upstream.tree
    assert room.head() == room.base_commit()
    assert room.head_tree() == upstream.tree
    assert room.applied_patches() == []
    assert room.dirty_paths() == []
    meta = json.loads(marker_path(room.path).read_text())
    assert meta["upstream"]["commit"] == upstream.commit
    assert meta["base_tree"] == upstream.tree
    assert (room.path / "link").is_symlink()
    assert (room.path / "crlf.txt").read_bytes() == b"one\r\ntwo\r\nthree\r\n"
    assert load_cleanroom(room.path).meta == room.meta


def test_base_commit_is_reproducible(tmp_path: Path, upstream: Repo) -> None:
    series = load_series(write_series(tmp_path / "s", git_upstream(upstream)))
    one = create_cleanroom(series, tmp_path / "one")
    two = create_cleanroom(series, tmp_path / "two")
    assert one.base_commit() == two.base_commit()


def test_tree_pin_mismatch_leaves_nothing(tmp_path: Path, upstream: Repo) -> None:
    up = git_upstream(upstream)
    series = load_series(write_series(tmp_path / "s", replace(up, tree="6" * 40)))
    with pytest.raises(ChecksumMismatch):
        create_cleanroom(series, tmp_path / "room")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s", "upstream"]


def test_refuses_a_directory_it_did_not_create(tmp_path: Path, upstream: Repo) -> None:
    series = load_series(write_series(tmp_path / "s", git_upstream(upstream)))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "precious.txt").write_bytes(b"do not touch\n")
    with pytest.raises(DirtyTree) as info:
        create_cleanroom(series, mine)
    assert info.value.exit_code == 8
    assert [p.name for p in mine.iterdir()] == ["precious.txt"]
    with pytest.raises(DirtyTree):
        cleanroom_apply(series.dir, workdir=mine)
    assert (mine / "precious.txt").read_bytes() == b"do not touch\n"
    with pytest.raises(NotFound):
        open_cleanroom(series.dir, mine)


def test_dirty_paths_and_backup(tmp_path: Path, upstream: Repo) -> None:
    series = load_series(write_series(tmp_path / "s", git_upstream(upstream)))
    room = create_cleanroom(series, tmp_path / "room")
    (room.path / "dir with spaces" / "file name.txt").write_bytes(b"edited\n")
    (room.path / "n\u00e4me-\u65e5\u672c.txt").unlink()
    (room.path / "new \u00fcml\u00e4ut.txt").write_bytes(b"new\n")
    dirty = sorted(room.dirty_paths())
    assert dirty == sorted(
        ["dir with spaces/file name.txt", "n\u00e4me-\u65e5\u672c.txt", "new \u00fcml\u00e4ut.txt"]
    )
    backup = room.save_unsaved_work()
    assert backup.ref == "refs/patchctl/backups/1"
    assert backup.patch_file == tmp_path / "room.backups" / "1.patch"
    data = backup.patch_file.read_bytes()
    assert b"+edited" in data and b"new file mode" in data and b"deleted file mode" in data
    assert room.git.run("cat-file", "blob", f"{backup.ref}:new \u00fcml\u00e4ut.txt") == b"new\n"
    # The backup does not change the work tree; a second backup gets the next number.
    assert sorted(room.dirty_paths()) == dirty
    assert room.save_unsaved_work().ref == "refs/patchctl/backups/2"


def test_discard_keeps_a_room_holding_an_ignored_file(tmp_path: Path, upstream: Repo) -> None:
    series = load_series(write_series(tmp_path / "s", git_upstream(upstream)))
    room = create_cleanroom(series, tmp_path / "room")
    (room.path / ".git" / "info" / "exclude").write_text("*.gguf\n")
    (room.path / "model.gguf").write_bytes(b"GGUF weights nobody else has")
    assert room.dirty_paths() == []  # git status does not show it
    with pytest.raises(DirtyTree, match=r"1 ignored file\(s\): model\.gguf"):
        discard_cleanroom(room)
    assert (room.path / "model.gguf").read_bytes() == b"GGUF weights nobody else has"
    (room.path / "model.gguf").unlink()
    discard_cleanroom(room)
    assert not room.path.exists()


def test_backup_sees_a_same_size_edit_made_in_the_second_of_the_index_write(
    tmp_path: Path, upstream: Repo
) -> None:
    series = load_series(write_series(tmp_path / "s", git_upstream(upstream)))
    room = create_cleanroom(series, tmp_path / "room")
    racy_same_size_edit(room.git, "crlf.txt", b"one\r\nTWO\r\nthree\r\n")
    backup = room.save_unsaved_work()
    assert room.git.cat_file("blob", f"{backup.commit}:crlf.txt") == b"one\r\nTWO\r\nthree\r\n"
    assert b"+TWO\r" in backup.patch_file.read_bytes()


def test_concurrent_runs_are_refused(tmp_path: Path, upstream: Repo) -> None:
    series = write_series(tmp_path / "s", git_upstream(upstream))
    with locked(tmp_path / "room"):
        with pytest.raises(PatchctlError) as info:
            cleanroom_apply(series, workdir=tmp_path / "room")
        assert "another patchctl is working in" in str(info.value)
        assert not (tmp_path / "room").exists()
    assert cleanroom_apply(series, workdir=tmp_path / "room").created


def test_archive_upstream_gives_the_same_tree_as_git(tmp_path: Path, upstream: Repo) -> None:
    # CRLF, no EOL, latin-1, binary, exec bits, symlinks, spaces and non-ASCII names survive
    # extraction + `add -A -f` exactly: the tree id equals the git upstream's.
    (tmp_path / "s").mkdir()
    archive = make_tar(tmp_path / "s" / "orig.tar.gz", {**CONTENT_MATRIX, ".gitignore": b"*.bin\n"})
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    expected = tree_of_files(tmp_path / "expected", {**CONTENT_MATRIX, ".gitignore": b"*.bin\n"})
    up = Upstream(kind="archive", path="orig.tar.gz", sha256=digest, tree=expected)
    series = load_series(write_series(tmp_path / "s", up))
    room = create_cleanroom(series, tmp_path / "room")
    assert room.base_tree() == expected
    assert room.git.run("cat-file", "blob", "HEAD:binary.bin") == CONTENT_MATRIX["binary.bin"]


def test_corrupt_marker_is_a_clear_error(tmp_path: Path, upstream: Repo) -> None:
    series = load_series(write_series(tmp_path / "s", git_upstream(upstream)))
    room = create_cleanroom(series, tmp_path / "room")
    marker_path(room.path).write_bytes(b"{not json")
    with pytest.raises(PatchctlError) as info:
        load_cleanroom(room.path)
    assert type(info.value) is PatchctlError and "unreadable" in str(info.value)
