"""refresh: drifted patches (offset, fuzz) rewritten so they apply exactly, headers kept."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.drift import (
    DEP3_HEADER,
    GBP_HEADER,
    MAIL_HEADER,
    QUILT_HEADER,
    SIGNATURE,
    V1,
    drifted_project,
    edit,
    sha256,
)
from support.repos import diff_files

from patchctl.errors import PatchDoesNotApply, PatchDrift
from patchctl.ops.cleanroom.apply import cleanroom_apply
from patchctl.ops.refresh import refresh
from patchctl.ops.verify import verify_series
from patchctl.room.cleanroom import open_cleanroom
from patchctl.series.gitapply import is_fuzz
from patchctl.series.model import load_series, save_series
from patchctl.series.parts import split_patch
from patchctl.series.patchfile import patch_header


def _snapshot(series_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(series_dir.iterdir()) if p.is_file()}


def test_refresh_all_rewrites_only_drifted_patches_and_keeps_headers(tmp_path: Path) -> None:
    series_dir = drifted_project(tmp_path)
    before = _snapshot(series_dir)
    with pytest.raises(PatchDrift):  # strict apply refuses the offset patch
        cleanroom_apply(series_dir)

    result = refresh(series_dir)
    by_id = {p.id: p for p in result.patches}
    assert [p.id for p in result.refreshed] == ["0002-louder-a", "0003-b-30"]
    assert not by_id["0001-readme"].refreshed and not by_id["0004-c-10"].refreshed
    offset, fuzz = by_id["0002-louder-a"], by_id["0003-b-30"]
    assert [(d.file, d.hunk) for d in offset.drift] == [("src/a.c", 1), ("src/a.c", 2)]
    assert not offset.fuzz and "offset 2 lines" in offset.drift[0].why
    assert fuzz.fuzz and [(d.file, d.hunk, is_fuzz(d)) for d in fuzz.drift] == [
        ("src/b.c", 1, True)
    ]

    after = _snapshot(series_dir)
    # untouched patches keep every byte; refreshed ones keep header and trailer
    for name in ("0001-readme.patch", "0004-c-10.patch"):
        assert after[name] == before[name]
    for name, header, trailer in (
        ("0002-louder-a.patch", DEP3_HEADER, b""),
        ("0003-b-30.patch", MAIL_HEADER, SIGNATURE),
    ):
        parts = split_patch(after[name])
        assert after[name] != before[name]
        assert parts.header == header and parts.trailer == trailer
        assert split_patch(before[name]).header == header
    assert split_patch(after["0001-readme.patch"]).header == GBP_HEADER
    assert split_patch(after["0004-c-10.patch"]).header == QUILT_HEADER

    series = load_series(series_dir)
    for patch in series.patches:
        assert patch.imported and patch.sha256 == sha256(series.patch_path(patch).read_bytes())
    refreshed = series.patch("0003-b-30")
    assert (refreshed.pre_tree, refreshed.post_tree) == (fuzz.pre_tree, fuzz.post_tree)

    # now strict apply and the round trip pass, and a second refresh changes nothing
    report = cleanroom_apply(series_dir)
    assert [a.id for a in report.applied] == list(series.ids())
    room = open_cleanroom(series_dir)
    assert room.head_tree() == refreshed_tree(series_dir)
    assert verify_series(series, [room.path]).ok
    again = refresh(series_dir)
    assert again.refreshed == () and again.changed == ()
    assert _snapshot(series_dir) == after


def refreshed_tree(series_dir: Path) -> str:
    tree = load_series(series_dir).patches[-1].post_tree
    assert tree is not None
    return tree


def test_the_fuzzed_result_is_what_quilt_would_make(tmp_path: Path) -> None:
    series_dir = drifted_project(tmp_path, ("b-30.patch",))
    refresh(series_dir, ["0003-b-30"])
    cleanroom_apply(series_dir)
    room = open_cleanroom(series_dir)
    expected = edit(V1["src/b.c"], "b line 30", "B LINE 30")
    assert (room.path / "src/b.c").read_bytes() == expected


def test_dry_run_and_one_id_write_only_what_they_say(tmp_path: Path) -> None:
    series_dir = drifted_project(tmp_path)
    before = _snapshot(series_dir)
    dry = refresh(series_dir, dry_run=True)
    assert dry.dry_run and len(dry.refreshed) == 2 and dry.changed == ()
    assert _snapshot(series_dir) == before
    one = refresh(series_dir, ["0003-b-30"])
    assert [p.id for p in one.patches] == ["0003-b-30"]
    after = _snapshot(series_dir)
    changed = {name for name in after if before.get(name) != after[name]}
    assert changed == {"0003-b-30.patch", "series.yaml", "README.md"}


def test_a_conflict_names_patch_file_and_hunk_and_writes_nothing(tmp_path: Path) -> None:
    series_dir = drifted_project(tmp_path, ("readme.patch", "louder-a.patch"))
    series = load_series(series_dir)
    bad = series.patch_path(series.patches[0])
    bad.write_bytes(
        split_patch(bad.read_bytes()).header
        + diff_files(tmp_path / "bad", {"README": b"other\n"}, {"README": b"patched\n"})
    )
    save_series(series)  # the edited bytes are the ones on record
    before = _snapshot(series_dir)
    with pytest.raises(PatchDoesNotApply) as info:
        refresh(series_dir)
    err = info.value
    assert err.exit_code == 3 and err.patch == "0001-readme" and err.file == "README"
    assert err.hunk == 1
    assert _snapshot(series_dir) == before


def test_a_captured_patch_is_refreshed_with_patchctls_header(tmp_path: Path) -> None:
    series_dir = drifted_project(tmp_path, ("louder-a.patch",))
    series = load_series(series_dir)
    entry = series.patches[0]
    from dataclasses import replace

    own = replace(entry, imported=False, sha256=None, title="Louder a")
    path = series.patch_path(own)
    path.write_bytes(patch_header(own) + split_patch(path.read_bytes()).diff)
    save_series(series.with_patch(own))
    refresh(series_dir, ["0002-louder-a"])
    series = load_series(series_dir)
    assert path.read_bytes().startswith(patch_header(own))
    assert series.patches[0].sha256 is None and not series.patches[0].imported
    room = open_cleanroom(series_dir)
    report = verify_series(series, [room.path])
    assert report.ok, report.failures()


def _rewrite(series_dir: Path, name: str, data: bytes) -> None:
    """Replace a patch file's bytes and the sha256 series.yaml records for it."""
    path = series_dir / name
    yaml_file = series_dir / "series.yaml"
    old = sha256(path.read_bytes())
    path.write_bytes(data)
    yaml_file.write_text(yaml_file.read_text().replace(old, sha256(data)))


def _as_plain(data: bytes) -> bytes:
    """A git diff as `diff -u` writes it: no `diff --git`/`index` lines, dates after TABs."""
    out = []
    for line in data.splitlines(keepends=True):
        if line.startswith((b"diff --git ", b"index ")):
            continue
        if line.startswith((b"--- a/", b"+++ b/")):
            line = line.rstrip(b"\n") + b"\t2024-01-01 00:00:00.000000000 +0000\n"
        out.append(line)
    return b"".join(out)


def _abbreviated(data: bytes) -> bytes:
    """A git diff with 7-hex `index` ids, as `git format-patch` writes by default."""
    full = rb"(?m)^index ([0-9a-f]{7})[0-9a-f]*\.\.([0-9a-f]{7})[0-9a-f]*"
    return re.sub(full, rb"index \1..\2", data)


def test_refresh_keeps_each_patchs_own_diff_dialect_unless_asked(tmp_path: Path) -> None:
    series_dir = drifted_project(tmp_path)
    plain = _as_plain((series_dir / "0002-louder-a.patch").read_bytes())
    short = _abbreviated((series_dir / "0003-b-30.patch").read_bytes())
    _rewrite(series_dir, "0002-louder-a.patch", plain)
    _rewrite(series_dir, "0003-b-30.patch", short)
    names = [line for line in plain.splitlines() if line.startswith((b"--- ", b"+++ "))]

    result = refresh(series_dir)
    assert [p.id for p in result.refreshed] == ["0002-louder-a", "0003-b-30"]
    new_plain = (series_dir / "0002-louder-a.patch").read_bytes()
    assert new_plain != plain and b"diff --git" not in new_plain and b"\nindex " not in new_plain
    assert [line for line in new_plain.splitlines() if line.startswith((b"--- ", b"+++ "))] == names
    new_short = (series_dir / "0003-b-30.patch").read_bytes()
    assert new_short != short
    assert re.search(rb"(?m)^index [0-9a-f]{7}\.\.[0-9a-f]{7} 100644$", new_short)
    assert cleanroom_apply(series_dir).applied  # exact now
    assert verify_series(load_series(series_dir), [open_cleanroom(series_dir).path]).ok

    # asked: git diffs with full ids
    again = drifted_project(tmp_path / "again")
    _rewrite(again, "0002-louder-a.patch", plain)
    refresh(again, git_style=True)
    git_style = (again / "0002-louder-a.patch").read_bytes()
    assert b"diff --git a/src/a.c b/src/a.c" in git_style
    assert re.search(rb"(?m)^index [0-9a-f]{40}\.\.[0-9a-f]{40} 100644$", git_style)
