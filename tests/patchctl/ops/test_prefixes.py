"""patchctl build --upto and check-prefixes: every prefix of a series applied and built (a
tiny CMake project, about a second per build; never llama.cpp)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from support.files import Files
from support.repos import Repo
from support.series import git_upstream, write_series

from patchctl.cli.main import main
from patchctl.errors import PrefixFailed
from patchctl.ops.build.config import BuildConfig
from patchctl.ops.prefixes import check_prefixes

pytestmark = pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake not installed")

TINY: Files = {
    "CMakeLists.txt": b"cmake_minimum_required(VERSION 3.14)\nproject(tiny C)\n"
    b"add_library(tiny SHARED lib.c)\nadd_executable(hello main.c)\n"
    b"target_link_libraries(hello tiny)\n",
    "lib.c": b"int tiny(void) { return 42; }\n",
    "main.c": b'#include <stdio.h>\nint tiny(void);\nint main(void) { printf("%d\\n", tiny()); }\n',
}
LIB_43 = b"int tiny(void) { return 43; }\n"
BROKEN_MAIN = b"int tiny(void);\nint main(void) { return tiny() + undeclared_thing; }\n"
FIXED_MAIN = b"int tiny(void);\nint main(void) { return tiny() - 43; }\n"
CONFIG = BuildConfig(targets=("hello",), jobs=2)


@pytest.fixture
def tiny_series(
    make_repo: Callable[..., Repo],
    make_patch: Callable[[Files, Files], bytes],
    tmp_path: Path,
) -> Callable[[bool], Path]:
    """A series of three patches over the tiny project; `broken`: the second does not build
    (the third fixes it, so only the prefix check sees it)."""

    def factory(broken: bool) -> Path:
        upstream = make_repo(TINY, name="upstream")
        one = {**TINY, "lib.c": LIB_43}
        two = {**one, "main.c": BROKEN_MAIN if broken else FIXED_MAIN}
        three = {**one, "main.c": FIXED_MAIN}
        patches = [
            ("0001-lib", make_patch(TINY, one)),
            ("0002-main", make_patch(one, two)),
        ]
        if broken:
            patches.append(("0003-fix", make_patch(two, three)))
        return write_series(tmp_path / "patches" / "tiny", git_upstream(upstream), patches)

    return factory


def test_build_upto_applies_that_prefix_then_builds(
    tiny_series: Callable[[bool], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    series = tiny_series(False)
    args = ["build", "--series", str(series), "-t", "hello", "-j", "2", "--json"]
    assert main([*args, "--upto", "0001-lib"]) == 0
    manifest = json.loads(capsys.readouterr().out)
    room = tmp_path / "cleanroom" / "tiny"
    assert (room / "lib.c").read_bytes() == LIB_43 and (room / "main.c").read_bytes() == TINY[
        "main.c"
    ]
    assert main([*args, "--upto", "0002-main"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert (room / "main.c").read_bytes() == FIXED_MAIN
    assert second["tree_id"] != manifest["tree_id"]
    assert main([*args, "--upto", "0009-none"]) == 15
    assert main([*args, "--upto", "0001-lib", "--dry-run"]) == 2


def test_every_prefix_builds_and_the_command_runs_in_each(
    tiny_series: Callable[[bool], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    series = tiny_series(False)
    run = 'echo "$PATCHCTL_PATCH_ID" >> ../ran.txt; test -x "$PATCHCTL_BIN_DIR/hello"'
    args = ["check-prefixes", "--series", str(series), "-t", "hello", "-j", "2", "--run", run]
    assert main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True and report["not_checked"] == []
    assert [(p["id"], p["ok"]) for p in report["prefixes"]] == [
        ("0001-lib", True),
        ("0002-main", True),
    ]
    assert all(p["build_s"] > 0 and p["log"].endswith("check.log") for p in report["prefixes"])
    assert (tmp_path / "cleanroom" / "ran.txt").read_text() == "0001-lib\n0002-main\n"
    assert main(args) == 0  # the text form; builds are reused (same tree ids)
    out = capsys.readouterr().out
    assert "ok      0001-lib" in out and "2 prefix(es) ok, 0 failed" in out


def test_a_prefix_that_does_not_build_stops_the_loop_naming_the_patch(
    tiny_series: Callable[[bool], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    series = tiny_series(True)
    code = main(["check-prefixes", "--series", str(series), "-t", "hello", "--json"])
    error = json.loads(capsys.readouterr().out)
    assert code == 13 and error["error"] == "PrefixFailed"
    assert "up to 0002-main fails at build" in error["message"]
    prefixes = error["report"]["prefixes"]
    assert [(p["id"], p["ok"], p["step"]) for p in prefixes] == [
        ("0001-lib", True, None),
        ("0002-main", False, "build"),
    ]
    assert error["report"]["not_checked"] == ["0003-fix"]
    with pytest.raises(PrefixFailed) as info:
        check_prefixes(series, None, CONFIG, keep_going=True)
    report = info.value.report.to_json()
    prefixes = report["prefixes"]
    assert isinstance(prefixes, list) and [p["ok"] for p in prefixes] == [True, False, True]


def test_a_failing_command_fails_its_prefix_and_from_starts_later(
    tiny_series: Callable[[bool], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    series = tiny_series(False)
    run = 'test "$PATCHCTL_PATCH_ID" != 0002-main || { echo "bad output"; exit 3; }'
    args = ["check-prefixes", "--series", str(series), "-t", "hello", "--run", run]
    assert main([*args, "--from", "0002-main"]) == 13
    captured = capsys.readouterr()
    assert "FAILED  0002-main  at run" in captured.out and "0001-lib" not in captured.out
    assert "exited 3: bad output" in captured.err
    assert main([*args, "--from", "0001-lib", "--keep-going", "--json"]) == 13
    prefixes = json.loads(capsys.readouterr().out)["report"]["prefixes"]
    assert [(p["id"], p["step"]) for p in prefixes] == [("0001-lib", None), ("0002-main", "run")]


def test_a_prefix_that_does_not_apply_fails_at_apply(
    make_repo: Callable[..., Repo],
    make_patch: Callable[[Files, Files], bytes],
    tmp_path: Path,
) -> None:
    upstream = make_repo(TINY, name="upstream")
    stray = make_patch({"lib.c": b"int other;\n"}, {"lib.c": b"int other2;\n"})
    series = write_series(
        tmp_path / "patches" / "tiny", git_upstream(upstream), [("0001-x", stray)]
    )
    with pytest.raises(PrefixFailed, match="up to 0001-x fails at apply"):
        check_prefixes(series, None, CONFIG)


def test_the_launcher_reaches_every_prefix_build(
    tiny_series: Callable[[bool], Path], capsys: pytest.CaptureFixture[str], ccache_on_path: Path
) -> None:
    ccache = shutil.which("ccache")
    assert ccache is not None and Path(ccache).samefile(ccache_on_path)
    series = tiny_series(False)
    args = ["check-prefixes", "--series", str(series), "-t", "hello", "--launcher", "ccache"]
    assert main([*args, "--json"]) == 0
    for prefix in json.loads(capsys.readouterr().out)["prefixes"]:
        configure = (Path(prefix["build_dir"]) / "logs" / "configure.log").read_text()
        assert f"-DCMAKE_C_COMPILER_LAUNCHER={ccache}" in configure.splitlines()[0]
