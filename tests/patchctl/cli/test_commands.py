"""The command contract: every command takes `--series DIR` and `--series DIR/series.yaml` the
same way, and the CLI reads --json/--debug from the parsed command line, never from argv."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.series import NEW_FILE_PATCH, make_project

from patchctl.cli.main import main

FILES = {
    "PKG-INFO": b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n",
    "main.c": b"int main(void) { return 0; }\n",
    "CMakeLists.txt": b"cmake_minimum_required(VERSION 3.14)\nproject(demo C)\n"
    b"add_executable(demo main.c)\n",
}


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def every_command(capsys: pytest.CaptureFixture[str], root: Path, series: str) -> Path:
    """Run every command on a fresh project, naming the series as `series` (relative to the
    project's series directory); return that directory."""
    series_dir = make_project(root, FILES)
    room = series_dir.parent.parent / "cleanroom" / "demo"
    named = str(series_dir / series)

    def ok(*args: str) -> dict[str, Any]:
        code, out, err = run(capsys, *args, "--series", named, "--json")
        assert code == 0, f"{args}: {err}"
        data = json.loads(out)
        assert isinstance(data, dict) and data["ok"] is True
        return data

    assert ok("cleanroom", "apply")["cleanroom"] == str(room)
    assert ok("new", "0001-one", "--title", "One")["file"] == str(series_dir / "0001-one.patch")
    (room / "main.c").write_bytes(b"int main(void) { return 1; }\n")
    assert ok("capture", "0001-one")["written"] is True
    (root / "extra.patch").write_bytes(NEW_FILE_PATCH)
    assert [e["id"] for e in ok("import", str(root / "extra.patch"))["imported"]] == ["0002-extra"]
    refreshed = ok("refresh", "--all")["patches"]
    assert [(p["id"], p["refreshed"]) for p in refreshed] == [
        ("0001-one", False),
        ("0002-extra", False),
    ]
    assert ok("docs")["changed"] == []  # import regenerated them already
    assert ok("verify", "--all")["series"] == "demo"
    gate = ok("ci")
    assert gate["exit_code"] == 0 and gate["series"][0]["series"] == named
    listed = ok("split", "0001-one", "--list")
    assert "main.c" in json.dumps(listed)
    applied = ok("cleanroom", "apply")["applied"]
    assert [a["id"] for a in applied] == ["0001-one", "0002-extra"]
    status = ok("cleanroom", "status")
    assert status["cleanroom"] == str(room) and status["pending"] == []
    assert status["pin_matches_series"] is True
    plan = ok("build", "--dry-run", "--backend", "cmake")
    assert plan["tree"] == str(room) and plan["tree_id"] == status["tree"]
    sdist = ok("export", "--sdist", "--output", str(root))
    assert sdist["path"] == str(root / f"demo-{sdist['version']}.tar.gz")
    assert sdist["version"] == f"1.0+patchctl.{status['tree'][:12]}"
    return series_dir


def test_every_command_takes_the_series_dir_or_its_file_alike(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    by_dir = every_command(capsys, tmp_path / "a", ".")
    by_file = every_command(capsys, tmp_path / "b", "series.yaml")
    for name in ("0001-one.patch", "0002-extra.patch", "README.md"):
        assert (by_dir / name).read_bytes() == (by_file / name).read_bytes(), name
    # The same series.yaml but for the archive's sha256 (gzip headers carry a clock).
    lines = [
        [line for line in (d / "series.yaml").read_text().splitlines() if "sha256:" not in line]
        for d in (by_dir, by_file)
    ]
    assert lines[0] == lines[1]


@pytest.mark.parametrize(
    "args",
    [
        ("cleanroom", "status"),
        ("build", "--dry-run"),
        ("capture", "0001-x"),
        ("verify",),
        ("import", "nothing.patch"),
        ("export", "--sdist"),
    ],
    ids=lambda a: a[0],
)
def test_a_series_file_path_never_names_a_clean_room_under_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...]
) -> None:
    series_dir = make_project(tmp_path, FILES)
    code, _, err = run(capsys, *args, "--series", str(series_dir / "series.yaml"))
    assert code == 15  # no clean room yet: the one of the series, not of `series.yaml/..`
    assert "series.yaml/" not in err and "cleanroom/series.yaml" not in err


def test_json_and_debug_come_from_the_parsed_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    series_dir = make_project(tmp_path, FILES)
    # "--json" and "--debug" as option VALUES (a title, a marker) are not the flags.
    code, out, err = run(
        capsys, "new", "bad id", "--title", "--json", "--marker", "--debug",
        "--series", str(series_dir),
    )  # fmt: skip
    assert code == 5 and out == "" and err.startswith("error: ") and "Traceback" not in err
    code, out, _ = run(
        capsys, "new", "bad id", "--title", "t", "--series", str(series_dir), "--json"
    )
    assert code == 5 and json.loads(out)["error"] == "ConfigError"
