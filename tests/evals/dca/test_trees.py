"""The DCA tests' tree provisioning (tests/evals/dca/trees.py + builds.produce) on a tiny CMake
upstream: which clean room is used, that unsaved work is never touched, that builds are keyed
and reused, and that a failed build fails the fixture with the compiler's error."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from support.files import Files
from support.repos import Repo
from support.series import git_upstream, write_series

from patchctl.errors import BuildStepFailed, DirtyTree
from patchctl.ops.build.run import builds_root
from patchctl.room.cleanroom import default_workdir, load_cleanroom
from patchctl.series.model import Series, load_series

from . import builds
from .trees import (
    TerminalProgress,
    TreeBuilder,
    at_target,
    bring_to,
    build_config,
    dca_room,
    upstream_room,
)

TINY: Files = {
    "CMakeLists.txt": b"cmake_minimum_required(VERSION 3.14)\nproject(tiny C)\n"
    b"add_library(tiny SHARED lib.c)\nadd_executable(hello main.c)\n"
    b"target_link_libraries(hello tiny)\n",
    "lib.c": b"int tiny(void) { return 42; }\n",
    "main.c": b"int tiny(void);\nint main(void) { return tiny() == 42 ? 0 : 1; }\n",
}
PATCHED = {**TINY, "lib.c": b"int tiny(void) { return 43; }\n"}
BROKEN = {**TINY, "main.c": b"int main(void) { return undeclared_thing; }\n"}
TARGETS = ("hello",)


def _series(
    tmp_path: Path,
    make_repo: Callable[..., Repo],
    make_patch: Callable[[Files, Files], bytes],
    after: Files = PATCHED,
) -> Series:
    upstream = git_upstream(make_repo(TINY, name="upstream"))
    patch = make_patch(TINY, after)
    directory = write_series(tmp_path / "proj" / "patches" / "tiny", upstream, [("0001-x", patch)])
    return load_series(directory)


@pytest.fixture
def series(
    tmp_path: Path, make_repo: Callable[..., Repo], make_patch: Callable[[Files, Files], bytes]
) -> Series:
    return _series(tmp_path, make_repo, make_patch)


def _lines() -> tuple[list[str], Callable[[str], None]]:
    lines: list[str] = []
    return lines, lines.append


def test_dca_room_is_the_default_clean_room_fully_applied(series: Series, tmp_path: Path) -> None:
    _lines_seen, say = _lines()
    room = dca_room(series, say)
    assert room.path == tmp_path / "proj" / "cleanroom" / "tiny"
    assert room.applied_patches() == ["0001-x"]
    assert (room.path / "lib.c").read_bytes() == PATCHED["lib.c"]
    assert at_target(room, series)
    # a second call reuses it as it is
    assert dca_room(series, say).head() == room.head()


def test_upstream_room_stops_at_the_base(series: Series, tmp_path: Path) -> None:
    _seen, say = _lines()
    dca = dca_room(series, say)
    up = upstream_room(series, say)
    assert up.path == tmp_path / "proj" / "cleanroom" / "tiny-upstream"
    assert up.applied_patches() == []
    assert up.head() == up.base_commit() and up.head_tree() == series.upstream.tree
    assert (up.path / "lib.c").read_bytes() == TINY["lib.c"]
    assert dca.applied_patches() == ["0001-x"]  # the DCA room is untouched


def _snapshot(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and ".git" not in p.parts}


@pytest.mark.parametrize("state", ["unsaved-edit", "new-file", "foreign-commit", "other-pin"])
def test_default_room_with_unsaved_work_is_left_alone(
    series: Series, state: str, tmp_path: Path, make_repo: Callable[..., Repo]
) -> None:
    seen, say = _lines()
    default = dca_room(series, say).path
    if state == "unsaved-edit":
        (default / "main.c").write_bytes(b"/* my work */\n")
    elif state == "new-file":
        (default / "notes.txt").write_bytes(b"mine\n")
    elif state == "foreign-commit":
        room = load_cleanroom(default)
        (default / "main.c").write_bytes(b"/* committed by hand */\n")
        room.git.run("add", "main.c")
        commit = room.git.commit_tree(room.git.write_tree(), b"mine\n", (room.head(),))
        room.git.update_ref("HEAD", commit, "by hand")
    else:
        other = git_upstream(make_repo({**TINY, "extra.c": b"int x;\n"}, name="other"))
        bring_to(series.with_upstream(other).with_patches(()), default, say)
    before = _snapshot(default)
    head = load_cleanroom(default).head()

    room = dca_room(series, say)
    assert room.path == default.with_name("tiny-test")
    assert room.applied_patches() == ["0001-x"]
    assert any("left alone" in line and "tiny-test" in line for line in seen)
    assert _snapshot(default) == before and load_cleanroom(default).head() == head


def test_clean_default_room_at_another_state_is_brought_to_the_series(series: Series) -> None:
    seen, say = _lines()
    default = bring_to(series.with_patches(()), default_workdir(series.dir), say)
    assert default.applied_patches() == []
    room = dca_room(series, say)
    assert room.path == default.path and room.applied_patches() == ["0001-x"]
    assert (room.path / "lib.c").read_bytes() == PATCHED["lib.c"]
    assert not default.path.with_name("tiny-test").exists()
    assert any("applying the whole series" in line for line in seen)


def test_test_owned_room_with_unsaved_work_is_refused_not_reset(series: Series) -> None:
    _seen, say = _lines()
    path = dca_room(series, say).path.with_name("tiny-upstream")
    upstream_room(series, say)
    (path / "lib.c").write_bytes(b"/* precious */\n")
    with pytest.raises(DirtyTree, match="unsaved work"):
        upstream_room(series, say)
    assert (path / "lib.c").read_bytes() == b"/* precious */\n"


def _built_files(build_dir: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in build_dir.rglob("*.o")}


def test_builds_are_keyed_by_tree_and_reused(series: Series) -> None:
    seen, say = _lines()
    config = build_config(TARGETS)
    dca = TreeBuilder(say, config).build(dca_room(series, say), "DCA")
    assert dca.build.build_dir.parent == builds_root(dca.room)
    assert dca.build.build_dir.name.startswith(dca.tree_id)
    assert (dca.build.bin_dir / "hello").is_file()
    objects = _built_files(dca.build.build_dir)
    assert objects

    # a new session (new builder) reuses the build dir without recompiling anything
    again = TreeBuilder(say, config).build(dca_room(series, say), "DCA")
    assert again.build.build_dir == dca.build.build_dir
    assert _built_files(again.build.build_dir) == objects

    # the upstream room has another tree: its own build under its own .builds dir
    builder = TreeBuilder(say, config)
    up = builder.build(upstream_room(series, say), "UPSTREAM")
    assert up.tree_id == series.upstream.tree != dca.tree_id
    assert up.build.build_dir.parent == builds_root(up.room) != builds_root(dca.room)
    # the same tree id is built once per session, even from another room
    assert builder.build(load_cleanroom(up.room), "again") is up
    assert any("already built this session" in line for line in seen)


def test_build_failure_fails_the_fixture_with_the_compiler_error(
    tmp_path: Path,
    make_repo: Callable[..., Repo],
    make_patch: Callable[[Files, Files], bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broken = _series(tmp_path, make_repo, make_patch, after=BROKEN)
    _seen, say = _lines()
    builder = TreeBuilder(say, build_config(TARGETS))
    with pytest.raises(BuildStepFailed) as info:
        builder.build(dca_room(broken, say), "DCA")
    assert "undeclared_thing" in info.value.excerpt

    monkeypatch.setenv("PATCHCTL_DCA_SERIES", str(broken.dir))
    with pytest.raises(pytest.fail.Exception) as failed:
        builds.produce("DCA", dca_room, builder)
    message = str(failed.value)
    assert "DCA llama.cpp tree could not be produced" in message
    assert "first errors:" in message and "undeclared_thing" in message


def test_terminal_progress_prints_start_tenths_and_done() -> None:
    seen, say = _lines()
    progress = TerminalProgress(say)
    progress.start("build", 100)
    for _ in range(100):
        progress.advance("build")
    progress.done("build")
    progress.start("extract", 1000)
    progress.advance("extract", 1000)
    progress.done("extract")
    assert seen[0] == "  build: 0/100" and seen[-3] == "  build: done (100/100)"
    assert len(seen) == 1 + 10 + 1 + 2  # build: start, every 10 %, done; extract: start, done
    assert seen[-2:] == ["  extract: 0/1000", "  extract: done (1000/1000)"]
