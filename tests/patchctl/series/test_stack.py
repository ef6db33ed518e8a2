"""stack.py: a series that extends another (its patches under a subdirectory, then its own),
through every command that honours it: apply, capture, verify, status, docs, new, import."""

from __future__ import annotations

import os
import shlex
from dataclasses import replace
from pathlib import Path

import pytest
from support.repos import MakeRepo, Repo
from support.series import NEW_FILE_PATCH

from patchctl.cli.main import main
from patchctl.errors import ChecksumMismatch, ConfigError, NotFound
from patchctl.ops.capture import add_patch, capture
from patchctl.ops.cleanroom.apply import apply_series, cleanroom_apply
from patchctl.ops.cleanroom.status import cleanroom_status
from patchctl.ops.docs import update_docs
from patchctl.ops.import_.record import import_series
from patchctl.ops.refresh import refresh
from patchctl.ops.verify import verify
from patchctl.room.cleanroom import BACKUP_REFS, open_cleanroom
from patchctl.room.journal import RoomJournal
from patchctl.room.recovery import recover_room
from patchctl.series.docs import doc_paths
from patchctl.series.model import Extends, Series, Upstream, load_series, save_series
from patchctl.series.stack import join_root, load_stack

FILES = {
    "pyproject.toml": b"[project]\nname = 'pkg'\n",
    "pkg/mod.py": b"X = 1\n",
    "vendor/lib/core.c": b"int core(void) { return 1; }\n",
    "vendor/lib/core.h": b"int core(void);\n",
}


def _write(directory: Path, upstream: Upstream, extends: Extends | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    save_series(Series(directory / "series.yaml", upstream, extends=extends))
    return directory


def _edit_and_capture(series: Path, patch_id: str, rel: str, data: bytes) -> None:
    add_patch(series, patch_id, f"Edit {rel}")
    room = open_cleanroom(series)
    (room.path / rel).write_bytes(data)
    capture(series, patch_id)


@pytest.fixture
def upstream(make_repo: MakeRepo) -> Repo:
    return make_repo(FILES, name="upstream")


@pytest.fixture
def project(tmp_path: Path, upstream: Repo) -> tuple[Path, Path]:
    """(base, package): `base` pins vendor/lib with patch 0001-core captured; `package` pins
    the whole tree, extends `base` under vendor/lib and has its own 0002-bind captured."""
    patches = tmp_path / "project" / "patches"
    sub = upstream.git.rev_parse(f"{upstream.commit}:vendor/lib")
    pin = Upstream(kind="git", url=str(upstream.path), commit=upstream.commit)
    base = _write(patches / "base", replace(pin, subdir="vendor/lib", tree=sub))
    cleanroom_apply(base)
    _edit_and_capture(base, "0001-core", "core.c", b"int core(void) { return 2; }\n")
    package = _write(
        patches / "package", replace(pin, tree=upstream.tree), Extends("base", "vendor/lib")
    )
    cleanroom_apply(package)
    _edit_and_capture(package, "0002-bind", "pkg/mod.py", b"X = 2\n")
    return base, package


def test_the_stack_puts_the_extended_series_first_under_its_root(
    project: tuple[Path, Path],
) -> None:
    _base, package = project
    stack = load_stack(load_series(package))
    assert stack.ids() == ("0001-core", "0002-bind")
    first, second = stack.entries
    assert (first.root, first.prefix, first.inherited) == ("vendor/lib", "vendor/lib", True)
    assert (second.root, second.prefix, second.inherited) == (".", ".", False)
    assert first.file.name == "0001-core.patch" and first.file.parent.name == "base"
    assert (
        join_root("a", ".") == "a" and join_root(".", "b") == "b" and join_root("a", "b") == "a/b"
    )


def test_a_series_extending_another_at_the_top_still_stacks_its_patches_first(
    project: tuple[Path, Path], upstream: Repo
) -> None:
    # `extends.root: .`: both series pin the same tree, so the prefix alone ("." for both)
    # cannot tell the extended series' patches from the own ones
    base, _package = project
    pin = Upstream(kind="git", url=str(upstream.path), commit=upstream.commit)
    whole = _write(base.parent / "whole", replace(pin, tree=upstream.tree))
    cleanroom_apply(whole)
    _edit_and_capture(whole, "0003-head", "vendor/lib/core.h", b"int core(void); /* w */\n")
    top = _write(base.parent / "top", replace(pin, tree=upstream.tree), Extends("whole", "."))
    stack = load_stack(load_series(top))
    [entry] = stack.inherited()
    assert (entry.id, entry.inherited, entry.prefix) == ("0003-head", True, ".")
    assert entry.local_tree(open_cleanroom(whole).git, upstream.tree) == upstream.tree
    with pytest.raises(NotFound, match="belongs to the extended series whole"):
        stack.own_entry("0003-head")
    report = cleanroom_apply(top)
    assert [a.id for a in report.applied] == ["0003-head"]
    assert (open_cleanroom(top).path / "vendor/lib/core.h").read_bytes().endswith(b"/* w */\n")


def test_apply_commits_both_series_and_the_trees_match_their_records(
    project: tuple[Path, Path], upstream: Repo
) -> None:
    base, package = project
    report = cleanroom_apply(package)
    assert [(a.id, a.ladder) for a in report.applied] == [("0001-core", "ok"), ("0002-bind", "ok")]
    room = open_cleanroom(package)
    assert (room.path / "vendor/lib/core.c").read_bytes() == b"int core(void) { return 2; }\n"
    assert (room.path / "pkg/mod.py").read_bytes() == b"X = 2\n"
    core = load_series(base).patch("0001-core")
    assert room.git.rev_parse(f"{report.applied[0].commit}:vendor/lib") == core.post_tree
    assert load_series(package).patch("0002-bind").pre_tree == report.applied[0].tree
    again = cleanroom_apply(package)  # nothing changed: both commits kept
    assert [a.reused for a in again.applied] == [True, True]


def test_verify_all_checks_every_patch_of_the_stack(project: tuple[Path, Path]) -> None:
    _base, package = project
    outcome = verify(package)
    assert outcome.report.ok and not outcome.stale_docs
    assert [p.id for p in outcome.report.patches] == ["0001-core", "0002-bind"]
    assert all(len(p.steps) == 6 for p in outcome.report.patches)
    only = verify(package, ["0002-bind"])
    assert [p.id for p in only.report.patches] == ["0002-bind"] and only.report.ok
    with pytest.raises(NotFound):
        verify(package, ["0099-nope"])


def test_verify_fails_on_a_changed_extended_patch_until_the_own_patch_is_recaptured(
    project: tuple[Path, Path],
) -> None:
    base, package = project
    cleanroom_apply(base)
    room = open_cleanroom(base)
    (room.path / "core.h").write_bytes(b"int core(void); /* v2 */\n")
    result = capture(base, "0001-core")  # the extended series moves on: its own verify passes
    assert verify(base).report.ok
    # capture names the series that extends this one and the commands that re-record it
    [ext] = result.extending
    assert ext.series == package and ext.commands == (
        f"patchctl cleanroom apply --series {package} --upto 0002-bind",
        f"patchctl capture 0002-bind --series {package}",
    )
    report = verify(package).report
    core, bind = report.patches
    assert core.ok and not bind.ok
    # From the recorded trees: the own patch's transform of its recorded pre_tree still holds;
    # its link to the tree the changed extended series now makes does not.
    failed = [s for s in bind.steps if not s.ok]
    assert [s.step for s in failed] == ["chain"]
    for command in ext.commands:  # the documented fix: re-apply, then re-capture the own patch
        assert main(shlex.split(command)[1:]) == 0
    assert verify(package).report.ok


def test_a_kill_mid_apply_of_an_extended_patch_is_undone_under_its_own_root(
    project: tuple[Path, Path],
) -> None:
    _base, package = project
    series = load_series(package)
    room = open_cleanroom(package)
    journal = RoomJournal(room.path, "cleanroom apply")
    apply_series(series, room, journal=journal)
    plan = journal.fields["plan"]
    assert [(e[0], e[3]) for e in plan] == [("0001-core", "vendor/lib"), ("0002-bind", ".")]
    # What a kill leaves while 0001-core goes in: the clean room at its base, the patch in the
    # work tree (under vendor/lib, where the stack applies it) and nothing committed.
    room.reset_to(room.base_commit())
    journal.record(head=room.head(), reset_to=room.base_commit(), plan=plan)
    data = Path(plan[0][2]).read_bytes()
    room.git.run("apply", "--index", "--directory=vendor/lib", stdin=data)
    assert room.dirty_paths() == ["vendor/lib/core.c"]
    found = recover_room(room.path)
    assert found is not None and found.outcome == "rolled back"
    assert room.dirty_paths() == [] and room.git.refs(BACKUP_REFS) == []  # patchctl's: no backup
    assert [a.id for a in cleanroom_apply(package).applied] == ["0001-core", "0002-bind"]


def test_capture_refuses_a_patch_of_the_extended_series(project: tuple[Path, Path]) -> None:
    base, package = project
    with pytest.raises(NotFound) as info:
        capture(package, "0001-core")
    assert "belongs to the extended series base" in str(info.value)
    assert str(base) in (info.value.hint or "")
    with pytest.raises(ConfigError, match="already exists"):
        add_patch(package, "0001-core", "Same id as the extended series")


def test_an_upstream_without_the_extended_tree_is_a_checksum_mismatch(
    project: tuple[Path, Path], tmp_path: Path
) -> None:
    _base, package = project
    series = load_series(package)
    assert series.extends is not None
    save_series(replace(series, extends=replace(series.extends, root="pkg")))
    with pytest.raises(ChecksumMismatch) as info:
        cleanroom_apply(package)
    assert info.value.exit_code == 6 and "at 'pkg'" in str(info.value)
    with pytest.raises(ChecksumMismatch):
        verify(package)


def test_status_lists_the_pending_patches_of_both_series(project: tuple[Path, Path]) -> None:
    _base, package = project
    cleanroom_apply(package, upto="0001-core")
    status = cleanroom_status(package)
    assert status.pending() == ["0002-bind"] and status.stale() == []
    (package.parent / "base" / "0001-core.patch").write_bytes(b"changed\n")
    assert cleanroom_status(package).stale() == ["0001-core"]


def test_docs_of_an_extending_series_leave_the_project_registry_alone(
    project: tuple[Path, Path],
) -> None:
    base, package = project
    readme, registry = doc_paths(load_series(base))
    before = registry.read_bytes()
    assert doc_paths(load_series(package)) == (package / "README.md",)
    update_docs(package)
    assert registry.read_bytes() == before
    text = (package / "README.md").read_text()
    assert "Extends series `base`: its 1 patch(es) apply first, under `vendor/lib`" in text
    assert "`0002-bind`" in text and "`0001-core`" not in text
    assert readme.read_text() != text


def test_import_into_an_extending_series_starts_after_the_extended_patches(
    project: tuple[Path, Path], tmp_path: Path
) -> None:
    _base, package = project
    series = load_series(package)
    save_series(series.with_patches(()))
    (package / "0002-bind.patch").unlink()
    source = tmp_path / "incoming"
    source.mkdir()
    (source / "0001-extra.patch").write_bytes(NEW_FILE_PATCH)
    cleanroom_apply(package, force=True)
    result = import_series(package, source)
    (added,) = result.added
    assert added.id != "0001-core"  # ids stay unique across the stack
    stack_top = cleanroom_apply(package).applied
    assert [a.id for a in stack_top] == ["0001-core", added.id]
    assert added.pre_tree == stack_top[0].tree
    assert verify(package).report.ok


def test_stack_load_errors_name_the_extended_series(project: tuple[Path, Path]) -> None:
    base, package = project
    series = load_series(package)
    assert series.extends is not None
    missing = replace(series, extends=replace(series.extends, series="nope"))
    with pytest.raises(NotFound, match="no series 'nope' next to it"):
        load_stack(missing)
    base_series = load_series(base)
    save_series(replace(base_series, upstream=replace(base_series.upstream, tree=None)))
    with pytest.raises(ConfigError, match=r"records no upstream\.tree"):
        load_stack(series)
    save_series(replace(base_series, extends=Extends("package", ".")))
    with pytest.raises(ConfigError, match="one level is supported"):
        load_stack(series)
    save_series(base_series)
    for pid in ("0001-core", "0001-CORE"):  # ids differing only in case are one too
        dup = series.with_patch(replace(series.patches[0], id=pid, file="x.patch"))
        with pytest.raises(ConfigError) as info:
            load_stack(dup)
        assert info.value.key == "patches[1].id"


def test_a_sibling_symlinked_out_of_the_folder_is_refused(
    project: tuple[Path, Path], tmp_path: Path
) -> None:
    base, package = project
    outside = tmp_path / "elsewhere" / "base"
    outside.parent.mkdir()
    os.rename(base, outside)
    base.symlink_to(outside)
    with pytest.raises(ConfigError, match="resolves outside"):
        load_stack(load_series(package))


def test_capture_in_an_extending_series_names_refresh_for_its_stale_patches(
    project: tuple[Path, Path],
) -> None:
    # refresh replays an extending series from the extended series' patches (as apply does), so
    # capture names it for the stale ones there too (the next test runs refresh on such a series)
    _base, package = project
    room = open_cleanroom(package)
    (room.path / "pkg/mod.py").write_bytes(
        b"X = 2\n" + b"".join(b"Y%d = 0\n" % i for i in range(9))
    )
    add_patch(package, "0003-tail", "Edit pkg/mod.py's tail")
    (room.path / "pkg/mod.py").write_bytes((room.path / "pkg/mod.py").read_bytes() + b"Z = 3\n")
    capture(package, "0003-tail")
    cleanroom_apply(package, upto="0002-bind")
    (room.path / "pkg/mod.py").write_bytes(b"# head\n" + (room.path / "pkg/mod.py").read_bytes())
    result = capture(package, "0002-bind")
    assert [(p.id, p.state) for p in result.later] == [("0003-tail", "stale")]
    assert result.refresh == f"patchctl refresh 0003-tail --series {package}"
    assert result.hint is not None and result.hint.startswith(result.refresh)
    assert not verify(package).report.ok


def test_refresh_of_an_extending_series_starts_from_the_extended_patches(
    project: tuple[Path, Path],
) -> None:
    # the own patches' recorded trees hold the extended series' changes under its root: refresh
    # must replay from there, not from the pristine upstream, or it records trees that verify's
    # chain step then refuses
    _base, package = project
    before = load_series(package).patch("0002-bind")
    result = refresh(package)
    [report] = result.patches
    assert not report.refreshed and report.pre_tree == before.pre_tree
    after = load_series(package).patch("0002-bind")
    assert (after.pre_tree, after.post_tree) == (before.pre_tree, before.post_tree)
    assert verify(package).report.ok
