"""capture: golden bytes across the content matrix, under hostile user git config."""

from __future__ import annotations

import hashlib
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support import paths
from support.drift import rebase_ready
from support.files import CONTENT_MATRIX, CONTENT_MATRIX_AFTER, Entry, Exe, Link, write_files
from support.gitconfig import hostile
from support.repos import new_repo, racy_same_size_edit
from support.series import make_project, make_series

from patchctl.errors import ConfigError, NothingToCapture, PatchChanged
from patchctl.fsio import write_if_changed
from patchctl.ops.capture import capture, capture_patch, capture_trees, new_patch
from patchctl.ops.cleanroom.apply import cleanroom_apply
from patchctl.ops.verify import verify_series
from patchctl.room.cleanroom import open_cleanroom
from patchctl.series.model import Patch, load_series
from patchctl.series.patchfile import diff_trees, patch_header

GOLDEN = paths.GOLDEN / "capture"
UPDATE = os.environ.get("PATCHCTL_UPDATE_GOLDEN") == "1"

BASE: dict[str, Entry] = {
    "crlf.txt": b"one\r\ntwo\r\nthree\r\n",
    "noeol.txt": b"alpha\nbeta",
    "latin1.txt": b"caf\xe9\nna\xefve\n",
    "blob.bin": bytes(range(256)) * 4,
    "script.sh": b"#!/bin/sh\necho hi\n",
    "link": Link("noeol.txt"),
    "old name.txt": b"moved content\n" * 5,
    "gone.txt": b"delete me\n",
    "blank.txt": b"a\n\nb\n\nc\n",
    "dir/keep.c": b"int main(void) { return 0; }\n",
}

CASES: dict[str, dict[str, Entry]] = {
    "crlf": {"crlf.txt": b"one\r\nTWO\r\nthree\r\n", "new-crlf.txt": b"x\r\ny\r\n"},
    "no_eol": {"noeol.txt": b"alpha\nbeta\ngamma", "crlf.txt": b"one\r\ntwo\r\nthree"},
    "latin1": {"latin1.txt": b"caf\xe9\nna\xefve\nd\xe9j\xe0 vu\n"},
    "binary": {"blob.bin": bytes(range(255, -1, -1)) * 4, "new.bin": b"\x00\x01\x02\xff"},
    "mode": {"script.sh": Exe(b"#!/bin/sh\necho hi\n"), "dir/keep.c": Exe(b"int x;\n")},
    "symlink": {"link": Link("crlf.txt"), "dir/up": Link("../gone.txt")},
    "rename": {"old name.txt": None, "new name.txt": b"moved content\n" * 5},
    "delete": {"gone.txt": None, "blob.bin": None},
    "names": {"spaced dir/ünïcode file.txt": b"hello\n", "tab\there.txt": b"t\n"},
    "blank_context": {"blank.txt": b"a\n\nB\n\nc\n"},
    "type_change": {"link": b"now a file\n", "gone.txt": Link("noeol.txt")},
}
CASES["all"] = {k: v for case in list(CASES.values()) for k, v in case.items()}

META = Patch(
    id="0001-matrix",
    file="0001-matrix.patch",
    title="Content matrix édition",
    upstream_status="Inappropriate [test]",
    origin="tests",
)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """BASE committed, the hostile config in the repository too (the seal's HOME has it)."""
    path = tmp_path / "repo"
    new_repo(path, BASE)
    hostile(path)
    return path


def _capture(path: Path) -> tuple[bytes, str, str]:
    from patchctl.gitlayer.git import Git

    git = Git(path)
    pre = git.tree_of("HEAD")
    post = git.snapshot_worktree()
    return capture_trees(git, META, pre, post), pre, post


@pytest.mark.parametrize("case", sorted(CASES))
def test_capture_matches_golden_bytes(repo: Path, case: str) -> None:
    write_files(repo, CASES[case])
    data, _, _ = _capture(repo)
    golden = GOLDEN / f"{case}.patch"
    if UPDATE:
        write_if_changed(golden, data)
    assert golden.is_file(), f"missing golden {golden}: run with PATCHCTL_UPDATE_GOLDEN=1"
    assert data == golden.read_bytes()


@pytest.mark.parametrize("case", sorted(CASES))
def test_capture_round_trips_through_verify(repo: Path, tmp_path: Path, case: str) -> None:
    write_files(repo, CASES[case])
    data, pre, post = _capture(repo)
    series_dir = tmp_path / "project" / "patches" / "s"
    entry = Patch(**{**META.__dict__, "pre_tree": pre, "post_tree": post, "key_order": ()})
    series = make_series(series_dir, pre, (entry,))
    (series_dir / entry.file).write_bytes(data)
    report = verify_series(series, [repo])
    assert report.ok, report.failures()
    assert [s.step for s in report.patches[0].steps] == [
        "chain",
        "forward",
        "reverse",
        "reexport",
        "markers",
        "bases",
    ]


def test_capture_is_deterministic_and_keeps_the_index(repo: Path) -> None:
    write_files(repo, CASES["all"])
    index = repo / ".git" / "index"
    before = index.read_bytes()
    first, _, post1 = _capture(repo)
    second, _, post2 = _capture(repo)
    assert first == second
    assert post1 == post2
    assert index.read_bytes() == before


def test_capture_sees_same_size_same_second_edits(repo: Path) -> None:
    # Same length, written right after the index: only racy-git checks catch it.
    (repo / "crlf.txt").write_bytes(b"one\r\ntwX\r\nthree\r\n")
    data, _, _ = _capture(repo)
    assert b"+twX\r\n" in data


def test_hostile_config_does_not_leak(repo: Path) -> None:
    write_files(repo, CASES["all"])
    data, _, _ = _capture(repo)
    assert b"\x1b[" not in data  # color.ui=always
    assert b"diff --git a/crlf.txt b/crlf.txt\n" in data  # noprefix / mnemonicPrefix
    assert b"\n \n" in data  # suppressBlankEmpty=false keeps the space on blank context
    assert b"one\r\n" in data  # autocrlf=true did not strip CRs
    assert b"new mode 100755" in data  # filemode=false did not hide the mode change
    assert b"rename from" not in data  # diff.renames=copies ignored: fixed policy


def test_nothing_to_capture(repo: Path) -> None:
    with pytest.raises(NothingToCapture):
        _capture(repo)


def test_header_is_fixed_and_uses_metadata() -> None:
    header = patch_header(META)
    assert header.startswith(b"From 0000000000000000000000000000000000000000 Mon Sep 17")
    assert b"Subject: [PATCH] Content matrix \xc3\xa9dition\n" in header
    assert b"\nPatchctl-Id: 0001-matrix\nUpstream-Status: Inappropriate [test]\n" in header
    assert header.endswith(b"Origin: tests\n---\n")


def test_header_carries_the_description_between_subject_and_trailers() -> None:
    header = patch_header(replace(META, description="Why.\n\nMore why."))
    subject = b"\nSubject: [PATCH] Content matrix \xc3\xa9dition\n"
    assert subject + b"\nWhy.\n\nMore why.\n\nPatchctl-Id:" in header
    assert patch_header(META).count(b"\n\n") == 1  # no description: one blank line, as before


def test_write_if_changed(tmp_path: Path) -> None:
    target = tmp_path / "a.patch"
    assert write_if_changed(target, b"x")
    mtime = target.stat().st_mtime_ns
    assert not write_if_changed(target, b"x")
    assert target.stat().st_mtime_ns == mtime
    assert write_if_changed(target, b"y")


def test_diff_trees_root_is_relative(repo: Path) -> None:
    from patchctl.gitlayer.git import Git

    git = Git(repo)
    write_files(repo, {"dir/keep.c": b"int y;\n"})
    diff = diff_trees(git, git.tree_of("HEAD"), git.snapshot_worktree(), root="dir")
    assert diff.startswith(b"diff --git a/keep.c b/keep.c\n")
    assert git.git_dir() == (repo / ".git").resolve()


def test_foundation_content_matrix_golden(tmp_path: Path) -> None:
    """The foundation issue's matrix (support.files.CONTENT_MATRIX -> _AFTER), under the seal."""
    from patchctl.gitlayer.git import Git

    path = tmp_path / "matrix"
    git = Git.init(path)
    write_files(path, CONTENT_MATRIX)
    git.run("add", "-A", "--", ".")
    base = git.write_tree()
    git.update_ref("HEAD", git.commit_tree(base, b"base\n"))
    hostile(path)
    write_files(path, CONTENT_MATRIX_AFTER)
    post = git.snapshot_worktree()
    data = capture_trees(git, META, base, post)
    golden = GOLDEN / "foundation-matrix.patch"
    if UPDATE:
        write_if_changed(golden, data)
    assert data == golden.read_bytes()
    series_dir = tmp_path / "project" / "patches" / "s"
    entry = Patch(**{**META.__dict__, "pre_tree": base, "post_tree": post, "key_order": ()})
    series = make_series(series_dir, base, (entry,))
    (series_dir / entry.file).write_bytes(data)
    assert verify_series(series, [path]).ok


def test_changes_outside_the_root_are_refused(repo: Path) -> None:
    from patchctl.errors import PatchctlError
    from patchctl.gitlayer.git import Git

    git = Git(repo)
    write_files(repo, {"dir/keep.c": b"int y;\n", "gone.txt": b"changed\n"})
    with pytest.raises(PatchctlError, match=r"outside the series root 'dir'.*gone\.txt"):
        capture_trees(git, META, git.tree_of("HEAD"), git.snapshot_worktree(), root="dir")


def test_worktree_attributes_do_not_change_the_bytes(tmp_path: Path) -> None:
    """An upstream .gitattributes (`-diff`, `diff=cpp`) must not leak into capture: verify
    re-exports in a bare scratch repository that reads no attributes."""
    from patchctl.gitlayer.git import Git

    files: dict[str, Entry] = {
        ".gitattributes": b"*.txt -diff\n*.c diff=cpp\n",
        "notes.txt": b"one\ntwo\n",
        "f.c": b"int f(void)\n{\n\tint a = 1;\n\n\n\n\treturn a;\n}\n",
    }
    path = tmp_path / "attrs"
    new_repo(path, files)
    write_files(
        path,
        {
            "notes.txt": b"one\nTWO\n",
            "f.c": b"int f(void)\n{\n\tint a = 1;\n\n\n\n\treturn 2;\n}\n",
        },
    )
    data, pre, post = _capture(path)
    assert b"-two\n+TWO\n" in data and b"GIT binary patch" not in data
    series_dir = tmp_path / "project" / "patches" / "s"
    entry = Patch(**{**META.__dict__, "pre_tree": pre, "post_tree": post, "key_order": ()})
    series = make_series(series_dir, pre, (entry,))
    (series_dir / entry.file).write_bytes(data)
    assert verify_series(series, [Git(path).repo]).ok


def test_new_patch_validation(tmp_path: Path) -> None:
    from patchctl.errors import ConfigError
    from patchctl.ops.capture import new_patch

    series = make_series(tmp_path / "p" / "patches" / "s", "0" * 40)
    updated, entry = new_patch(series, "0079-fix", "  Fix it  ", markers=("// m",))
    assert entry.file == "0079-fix.patch" and entry.title == "Fix it"
    assert updated.ids() == ("0079-fix",) and entry.upstream_status == "Pending"
    for pid, title, markers in [
        ("79-fix", "t", ()),
        ("0079-fix", "t\nu", ()),
        ("0079-fix", "t", ("a\nb",)),
    ]:
        with pytest.raises(ConfigError):
            new_patch(series, pid, title, markers=markers)
    with pytest.raises(ConfigError, match="already exists"):
        new_patch(updated, "0079-fix", "again")


def test_capture_sees_a_same_size_edit_made_in_the_second_of_the_index_write(
    tmp_path: Path,
) -> None:
    series_dir = make_project(tmp_path, {"main.c": b"int main(void) { return 0; }\n"})
    cleanroom_apply(series_dir)
    series, _entry = new_patch(load_series(series_dir), "0001-one", "Return one")
    room = open_cleanroom(series.dir)
    racy_same_size_edit(room.git, "main.c", b"int main(void) { return 1; }\n")
    _updated, captured = capture_patch(series, room, "0001-one")
    assert b"+int main(void) { return 1; }" in captured.data
    assert room.git.cat_file("blob", f"{captured.post_tree}:main.c").endswith(b"return 1; }\n")


def test_recapturing_an_imported_patch_keeps_its_header_and_records_its_sha256(
    tmp_path: Path,
) -> None:
    from support.drift import GBP_HEADER, SIGNATURE, drifted_project, sha256

    from patchctl.ops.capture import capture
    from patchctl.series.parts import split_patch

    series_dir = drifted_project(tmp_path, ("readme.patch",))
    cleanroom_apply(series_dir)
    room = open_cleanroom(series_dir)
    (room.path / "README").write_bytes(b"demo project\npatched again\n")
    result = capture(series_dir, "0001-readme")
    data = result.file.read_bytes()
    parts = split_patch(data)
    assert parts.header == GBP_HEADER and parts.trailer == SIGNATURE
    assert b"+patched again" in parts.diff
    series = load_series(series_dir)
    entry = series.patches[0]
    assert entry.imported and entry.sha256 == sha256(data)
    assert verify_series(series, [room.path]).ok


UPSTREAM_IGNORES: dict[str, bytes] = {
    ".gitignore": b"# build output\n/build/\n*.o\n",
    "tools/.gitignore": b"out/\n",
    "src/main.c": b"int main(void) { return 0; }\n",
    "tools/gen.py": b"print(1)\n",
}


def test_a_gitignore_the_upstream_does_not_have_hides_nothing_from_capture(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A .gitignore added in the clean room (by a patch or an edit) that ignores `*.c` and
    `src/` does not leave the user's new files out of the patch (lost work); what the
    upstream's own rules ignore (build output: /build/, *.o, tools/**/out/) stays out, and
    .git/info/exclude, the user's own, is honoured."""
    from patchctl import progress
    from patchctl.ops.capture import add_patch, capture

    series_dir = make_project(tmp_path, UPSTREAM_IGNORES)
    cleanroom_apply(series_dir)
    add_patch(series_dir, "0001-one", "One")
    room = series_dir.parent.parent / "cleanroom" / "demo"
    write_files(
        room,
        {
            ".gitignore": b"/build/\n*.o\n*.c\nsrc/\n!keep.o\n",  # hostile, and one negation
            "src/.gitignore": b"*\n",
            "src/new.c": b"int new_work;\n",
            "src/deep/new.h": b"#define NEW 1\n",
            "out/kept.c": b"int kept;\n",  # tools/.gitignore's out/ is for tools/ only
            "keep.o": b"shipped object\n",  # ignored upstream, un-ignored by the tree
            "build/CMakeCache.txt": b"cache\n",
            "src/main.o": b"object\n",
            "tools/out/gen.bin": b"\x00generated\n",
            "scratch.txt": b"my notes\n",
        },
    )
    (room / ".git" / "info").mkdir(exist_ok=True)
    (room / ".git" / "info" / "exclude").write_bytes(b"/scratch.txt\n")
    notes: list[str] = []
    monkeypatch.setattr(progress, "notice_sink", notes.append)
    result = capture(series_dir, "0001-one")
    data = result.captured.data
    names = sorted(line.split(b" b/")[-1] for line in data.splitlines()
                   if line.startswith(b"diff --git "))  # fmt: skip
    assert names == [
        b".gitignore", b"keep.o", b"out/kept.c", b"src/.gitignore", b"src/deep/new.h",
        b"src/new.c",
    ]  # fmt: skip
    assert b"+int new_work;" in data and b"+#define NEW 1" in data
    assert len(notes) == 1 and "captured 4 new file(s)" in notes[0]
    for name in ("src/.gitignore", "src/deep/new.h", "src/new.c", "out/kept.c"):
        assert name in notes[0]
    assert verify_series(load_series(series_dir), [room]).ok


def test_capture_refuses_bytes_that_differ_from_the_recorded_sha256(tmp_path: Path) -> None:
    series_dir, _onto = rebase_ready(tmp_path)
    patch = series_dir / "0004-c-10.patch"
    good = patch.read_bytes()
    recorded = load_series(series_dir).patch("0004-c-10").sha256
    assert recorded is not None
    added = good.index(b"\n+", good.index(b"\n@@ ")) + 2
    damaged = good[:added] + b"X" + good[added + 1 :]
    bad = hashlib.sha256(damaged).hexdigest()
    yaml_file = series_dir / "series.yaml"
    text = yaml_file.read_text()
    # a clean room whose commit of the patch came from the damaged bytes (as an apply made it
    # before apply checked the sha256), then the file restored
    yaml_file.write_text(text.replace(recorded, bad))
    patch.write_bytes(damaged)
    cleanroom_apply(series_dir)
    yaml_file.write_text(text)
    patch.write_bytes(good)
    with pytest.raises(PatchChanged, match=f"applied from bytes with sha256 {bad}") as refused:
        capture(series_dir, "0004-c-10")
    assert recorded in refused.value.message and "--accept-changed" in (refused.value.hint or "")
    assert patch.read_bytes() == good and yaml_file.read_text() == text

    # a clean room applied from the recorded bytes, but the file damaged since
    cleanroom_apply(series_dir)
    patch.write_bytes(damaged)
    with pytest.raises(PatchChanged, match=f"0004-c-10.patch has sha256 {bad}"):
        capture(series_dir, "0004-c-10")
    assert yaml_file.read_text() == text
    patch.write_bytes(good)
    cleanroom_apply(series_dir, force=True)
    (tmp_path / "project" / "cleanroom" / "demo" / "src" / "c.c").write_bytes(b"meant\n")
    patch.write_bytes(good + b"-- \n2.39\n")  # a changed trailer, meant
    result = capture(series_dir, "0004-c-10", accept_changed=True)
    assert result.captured.data.endswith(b"-- \n2.39\n")
    assert (
        load_series(series_dir).patch("0004-c-10").sha256
        == hashlib.sha256(result.captured.data).hexdigest()
    )


def test_capture_refuses_a_patch_over_the_patch_size_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    series_dir, _onto = rebase_ready(tmp_path)
    room = tmp_path / "project" / "cleanroom" / "demo"
    before = {p.name: p.read_bytes() for p in series_dir.iterdir() if p.is_file()}
    head = open_cleanroom(series_dir).head()
    (room / "src" / "big.c").write_bytes(b"int x;\n" * 2000)  # a 14 KB patch
    monkeypatch.setenv("PATCHCTL_MAX_PATCH_BYTES", "8192")
    with pytest.raises(ConfigError, match=r"patch 0004-c-10 would be .* more than") as refused:
        capture(series_dir, "0004-c-10")
    assert "PATCHCTL_MAX_PATCH_BYTES" in (refused.value.hint or "")
    assert {p.name: p.read_bytes() for p in series_dir.iterdir() if p.is_file()} == before
    assert open_cleanroom(series_dir).head() == head
    monkeypatch.setenv("PATCHCTL_MAX_PATCH_BYTES", str(1 << 20))
    assert len(capture(series_dir, "0004-c-10").captured.data) > 8192


# ----------------------------------------------------------------------------- later patches

LATER_FILES = {
    "a.c": b"".join(f"a {i}\n".encode() for i in range(1, 41)),
    "b.c": b"".join(f"b {i}\n".encode() for i in range(1, 21)),
}


def _edit(series_dir: Path, rel: str, old: bytes, new: bytes) -> None:
    path = open_cleanroom(series_dir).path / rel
    data = path.read_bytes()
    assert data.count(old) == 1
    path.write_bytes(data.replace(old, new))


def _three_patches(tmp_path: Path) -> Path:
    """0001 edits a.c's line 5, 0002 a.c's line 30, 0003 b.c: each captured in turn."""
    from patchctl.ops.capture import add_patch

    series_dir = make_project(tmp_path, LATER_FILES)
    cleanroom_apply(series_dir)
    for pid, rel, old, new in (
        ("0001-a5", "a.c", b"a 5\n", b"A 5\n"),
        ("0002-a30", "a.c", b"a 30\n", b"A 30\n"),
        ("0003-b", "b.c", b"b 10\n", b"B 10\n"),
    ):
        add_patch(series_dir, pid, f"edit {rel}")
        _edit(series_dir, rel, old, new)
        capture(series_dir, pid)
    return series_dir


def _patch_bytes(series_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(series_dir.glob("*.patch"))}


def test_capture_of_a_lower_patch_re_records_the_later_ones_that_apply_exactly(
    tmp_path: Path,
) -> None:
    series_dir = _three_patches(tmp_path)
    before = load_series(series_dir)
    later_bytes = {k: v for k, v in _patch_bytes(series_dir).items() if not k.startswith("0001")}
    cleanroom_apply(series_dir, upto="0001-a5")
    _edit(series_dir, "a.c", b"A 5\n", b"A five\n")  # same line count: the others still fit
    result = capture(series_dir, "0001-a5")
    assert [(p.id, p.state) for p in result.later] == [
        ("0002-a30", "re-recorded"),
        ("0003-b", "re-recorded"),
    ]
    assert result.refresh is None and result.extending == ()
    after = load_series(series_dir)
    assert after.patch("0002-a30").pre_tree == result.captured.post_tree
    assert after.patch("0002-a30").pre_tree != before.patch("0002-a30").pre_tree
    assert after.patch("0003-b").pre_tree == after.patch("0002-a30").post_tree
    # 0003 (b.c) keeps every byte; 0002 (a.c, which 0001 changed) only its `index` line,
    # which names a.c's blobs; the whole series then verifies without a refresh
    now = _patch_bytes(series_dir)
    assert now["0003-b.patch"] == later_bytes["0003-b.patch"]
    old_lines = later_bytes["0002-a30.patch"].split(b"\n")
    new_lines = now["0002-a30.patch"].split(b"\n")
    changed = [(a, b) for a, b in zip(old_lines, new_lines, strict=True) if a != b]
    assert len(changed) == 1 and all(x.startswith(b"index ") for x in changed[0])
    assert [p.index_lines for p in result.later] == [True, False]
    cleanroom_apply(series_dir)
    report = verify_series(after, [open_cleanroom(series_dir).path])
    assert report.ok, [(p.id, s) for p in report.patches for s in p.steps if not s.ok]

    # capturing the same bytes again: every later patch's trees are already current; an
    # entry `new` added on top, never captured, has nothing recorded to go stale
    from patchctl.ops.capture import add_patch

    cleanroom_apply(series_dir, upto="0001-a5")
    add_patch(series_dir, "0004-next", "not captured yet")
    again = capture(series_dir, "0001-a5")
    assert [p.state for p in again.later] == ["current", "current", "uncaptured"]
    assert again.refresh is None and again.hint is None


def test_a_later_patch_that_no_longer_applies_exactly_is_reported_stale(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from patchctl.cli.main import main
    from patchctl.ops.refresh import refresh

    series_dir = _three_patches(tmp_path)
    before = load_series(series_dir)
    old_bytes = _patch_bytes(series_dir)
    cleanroom_apply(series_dir, upto="0001-a5")
    # two lines more before line 30: 0002 now applies only at an offset (a byte change)
    _edit(series_dir, "a.c", b"A 5\n", b"A 5\nnew 1\nnew 2\n")
    code = main(["capture", "0001-a5", "--series", str(series_dir), "--json"])
    assert code == 0
    import json

    data = json.loads(capsys.readouterr().out)
    assert [(p["id"], p["state"]) for p in data["later"]] == [
        ("0002-a30", "stale"),
        ("0003-b", "stale"),
    ]
    assert "drift" in data["later"][0]["why"] and "before it is stale" in data["later"][1]["why"]
    assert data["stale"] == ["0002-a30", "0003-b"]
    assert data["refresh_command"] == f"patchctl refresh 0002-a30 0003-b --series {series_dir}"
    # the stale ones keep their trees and their bytes; verify says their chain is broken
    after = load_series(series_dir)
    for pid in ("0002-a30", "0003-b"):
        assert after.patch(pid) == before.patch(pid)
    assert {k: v for k, v in _patch_bytes(series_dir).items() if not k.startswith("0001")} == {
        k: v for k, v in old_bytes.items() if not k.startswith("0001")
    }
    cleanroom_apply(series_dir, upto="0001-a5")
    assert not verify_series(after, [open_cleanroom(series_dir).path]).ok
    # the command it names re-records them (0002 regenerated at its new lines)
    refresh(series_dir, ["0002-a30", "0003-b"])
    cleanroom_apply(series_dir)
    assert verify_series(load_series(series_dir), [open_cleanroom(series_dir).path]).ok

    # the text form names the stale patches and the command
    cleanroom_apply(series_dir, upto="0001-a5")
    _edit(series_dir, "a.c", b"new 2\n", b"new 2\nnew 3\n")
    assert main(["capture", "0001-a5", "--series", str(series_dir)]) == 0
    text = capsys.readouterr().out
    assert "stale: 0002-a30: recorded trees left as they were" in text
    assert f"patchctl refresh 0002-a30 0003-b --series {series_dir}" in text


# ----------------------------------------------------------------------------- the real series

REPO = Path(__file__).resolve().parents[3]
KV_HEADER = "src/llama-kv-cache.h"
KV_ANCHOR = b"    ggml_tensor * get_k_storage(int32_t il) const;\n"
KV_INSERT = b"    // patchctl 0082-llama-dca: a note of six lines\n" + b"    //\n" * 5
DCA_ANCHOR = (
    b"// patchctl 0082-llama-dca: Dual Chunk Attention (see llama-dca.h for where the upstream"
    b" files call in)\n"
)


@pytest.mark.integration
def test_the_real_series_after_a_lower_capture(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The real move's case: 0082 of patches/llamafile recaptured with six lines more in
    # llama-kv-cache.h where the 0.3.34 move put its accessor. Every later patch applies
    # exactly on the new tree and is re-recorded, no byte of it changed: `verify --all`
    # passes with no refresh (the move needed one). Then six lines at the top of
    # llama-dca.cpp, which 0088 also changes: 0088 applies only at an offset, so it and the
    # patches after it are stale, and the refresh capture names makes verify pass again.
    # patches/llama-cpp-python, which extends the series, is named with the commands that
    # re-record it, and they work.
    import json
    import pwd
    import shlex
    import shutil

    from patchctl.cli.main import main
    from patchctl.ops.verify import verify

    home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    cache = Path(os.environ.get("PATCHCTL_TEST_CACHE", home / ".cache" / "patchctl-test"))
    monkeypatch.setenv("PATCHCTL_CACHE_DIR", str(cache))
    patches = tmp_path / "proj" / "patches"
    for name in ("llamafile", "llama-cpp-python"):
        shutil.copytree(REPO / "patches" / name, patches / name)
    series_dir, python = patches / "llamafile", patches / "llama-cpp-python"
    room = tmp_path / "room"
    old = {p.name: p.read_bytes() for p in series_dir.glob("*.patch")}
    # every patch after 0082, in the series' order (0083 first, then 0088, which the second
    # capture makes drift, and whatever the series carries after it)
    ids = list(load_series(series_dir).ids())
    later = ids[ids.index("0082-llama-dca") + 1 :]
    assert later[:2] == ["0083-dca-tools", "0088-llama-dca-qwen35"]

    def capture_0082(path: str, anchor: bytes) -> dict[str, Any]:
        cleanroom_apply(series_dir, room, "0082-llama-dca")
        header = room / path
        data = header.read_bytes()
        assert data.count(anchor) == 1
        header.write_bytes(data.replace(anchor, anchor + KV_INSERT))
        code = main(["capture", "0082-llama-dca", "--series", str(series_dir), "--workdir",
                     str(room), "--json"])  # fmt: skip
        assert code == 0
        report: dict[str, Any] = json.loads(capsys.readouterr().out)
        return report

    first = capture_0082(KV_HEADER, KV_ANCHOR)
    assert [(p["id"], p["state"], p["index_lines_rewritten"]) for p in first["later"]] == [
        (pid, "re-recorded", False) for pid in later
    ]
    assert first["refresh_command"] is None and first["stale"] == []
    for pid in later:
        assert (series_dir / f"{pid}.patch").read_bytes() == old[f"{pid}.patch"]
    cleanroom_apply(series_dir, room)
    assert verify(series_dir, workdir=room).report.ok

    before = load_series(series_dir)
    second = capture_0082("src/llama-dca.cpp", DCA_ANCHOR)
    states = [(p["id"], p["state"]) for p in second["later"]]
    assert states == [(later[0], "re-recorded"), *((pid, "stale") for pid in later[1:])]
    why = second["later"][1]["why"]
    assert "drift" in why and "src/llama-dca.cpp" in why
    command = second["refresh_command"]
    assert (
        command == f"patchctl refresh {' '.join(later[1:])} --series {series_dir} --workdir {room}"
    )
    after = load_series(series_dir)
    for pid in later[1:]:  # the stale ones keep their recorded trees
        assert after.patch(pid) == before.patch(pid)
    assert after.patch(later[0]).pre_tree == after.patch("0082-llama-dca").post_tree
    assert main(shlex.split(command)[1:]) == 0  # the command capture named
    capsys.readouterr()
    cleanroom_apply(series_dir, room)
    assert verify(series_dir, workdir=room).report.ok

    [ext] = second["extending"]
    assert ext["series"] == str(python)
    python_room = tmp_path / "python-room"
    for line in ext["commands"]:
        assert main([*shlex.split(line)[1:], "--workdir", str(python_room)]) == 0
    assert verify(python, workdir=python_room).report.ok
