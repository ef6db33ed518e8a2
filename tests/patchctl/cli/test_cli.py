"""The CLI edge: every bad input gives one line on stderr, its own exit code, nothing touched."""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from support.archives import Special, make_tar
from support.files import CONTENT_MATRIX, Files, Link
from support.repos import Repo
from support.series import git_upstream, write_series

from patchctl import __version__
from patchctl.cli import main as cli
from patchctl.room.cleanroom import load_cleanroom
from patchctl.series.model import Upstream

MakePatch = Callable[[Files, Files], bytes]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    return lines[0]


def listing(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


@pytest.fixture
def upstream(make_repo: Callable[..., Repo]) -> Repo:
    return make_repo(CONTENT_MATRIX, name="upstream")


def five(make_patch: MakePatch) -> bytes:
    data = CONTENT_MATRIX["src/main.c"]
    assert isinstance(data, bytes)
    after = {**CONTENT_MATRIX, "src/main.c": data.replace(b"line 5\n", b"FIVE\n")}
    return make_patch(CONTENT_MATRIX, after)


def test_apply_and_status_human_and_json(
    tmp_path: Path, upstream: Repo, make_patch: MakePatch, capsys: pytest.CaptureFixture[str]
) -> None:
    series = write_series(tmp_path / "s", git_upstream(upstream), [("0001-five", five(make_patch))])
    room = tmp_path / "room"
    code, out, err = run(
        capsys, "cleanroom", "apply", "--series", str(series), "--workdir", str(room)
    )
    assert code == 0, err
    assert f"clean room created: {room}" in out and "applied" in out and "0001-five" in out
    code, out, _ = run(
        capsys, "cleanroom", "apply", "--series", str(series), "--workdir", str(room), "--json"
    )
    report = json.loads(out)
    assert code == 0 and report["ok"] is True and report["created"] is False
    assert [(a["id"], a["reused"]) for a in report["applied"]] == [("0001-five", True)]
    assert report["base_tree"] == upstream.tree
    (room / "crlf.txt").write_bytes(b"dirty\n")
    code, out, _ = run(
        capsys, "cleanroom", "status", "--series", str(series), "--workdir", str(room), "--json"
    )
    status = json.loads(out)
    assert code == 0
    assert [e["id"] for e in status["applied"]] == ["0001-five"]
    assert status["dirty"] == ["crlf.txt"] and status["pending"] == []
    assert status["upstream"]["commit"] == upstream.commit
    assert status["pin_matches_series"] is True
    code, out, _ = run(
        capsys, "cleanroom", "status", "--series", str(series), "--workdir", str(room)
    )
    assert code == 0 and "unsaved  1 path(s): crlf.txt" in out and "applied" in out


def test_dirty_clean_room_is_refused_then_forced(
    tmp_path: Path, upstream: Repo, make_patch: MakePatch, capsys: pytest.CaptureFixture[str]
) -> None:
    series = write_series(tmp_path / "s", git_upstream(upstream), [("0001-five", five(make_patch))])
    room = tmp_path / "room"
    args = ("cleanroom", "apply", "--series", str(series), "--workdir", str(room))
    assert run(capsys, *args)[0] == 0
    (room / "crlf.txt").write_bytes(b"my work\n")
    code, _, err = run(capsys, *args)
    assert code == 8 and "unsaved work" in one_error_line(err)
    assert (room / "crlf.txt").read_bytes() == b"my work\n"
    code, out, err = run(capsys, *args, "--force")
    assert code == 0, err
    assert "saved unsaved work (1 path(s)) to refs/patchctl/backups/1" in out
    assert (tmp_path / "room.backups" / "1.patch").is_file()


def test_status_without_clean_room_is_not_found(
    tmp_path: Path, upstream: Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    series = write_series(tmp_path / "s", git_upstream(upstream))
    code, _, err = run(
        capsys, "cleanroom", "status", "--series", str(series), "--workdir", str(tmp_path / "no")
    )
    assert code == 15 and "no clean room at" in one_error_line(err)


def test_json_errors_are_json_on_stdout(
    tmp_path: Path, upstream: Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    series = write_series(tmp_path / "s", git_upstream(upstream))
    (series / "series.yaml").write_text("version: 1\nupstream: {kind: svn}\n")
    code, out, err = run(capsys, "cleanroom", "apply", "--series", str(series), "--json")
    assert code == 5
    data = json.loads(out)
    assert data["ok"] is False and data["error"] == "ConfigError" and data["key"] == "upstream.kind"
    one_error_line(err)


def test_usage_error_is_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "cleanroom", "apply", "--no-such-flag")
    assert code == 2 and "No such option" in err


def test_internal_error_is_4_with_traceback_only_under_debug(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def boom(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("kaboom")

    monkeypatch.setattr("patchctl.ops.cleanroom.apply.cleanroom_apply", boom)
    code, _, err = run(capsys, "cleanroom", "apply")
    assert code == 4
    assert err.strip().splitlines() == [
        "internal error (a bug in patchctl): RuntimeError: kaboom "
        "(rerun with --debug for a traceback)"
    ]
    code, _, err = run(capsys, "--debug", "cleanroom", "apply")
    assert code == 4 and "Traceback (most recent call last)" in err


# ----------------------------------------------------------------------------- bad input

GOOD_YAML_KEYS = "version: 1\nupstream:\n  kind: git\n  url: ../up\n  commit: {c}\n"


@pytest.mark.parametrize(
    ("text", "code", "needle"),
    [
        ("version: 1\nupstream: [unclosed\n", 5, "malformed YAML at line"),
        (GOOD_YAML_KEYS + "colour: red\n", 5, "colour: unknown key"),
        (
            GOOD_YAML_KEYS + "patches:\n  - {id: 0001-a, file: a.patch}\n"
            "  - {id: 0001-a, file: b.patch}\n",
            5,
            "duplicate id '0001-a'",
        ),
        (
            GOOD_YAML_KEYS + "patches:\n  - {id: 0001-a, file: missing.patch}\n",
            15,
            "does not exist",
        ),
    ],
    ids=["malformed", "unknown-key", "duplicate-id", "missing-patch-file"],
)
def test_bad_series_file(
    tmp_path: Path,
    upstream: Repo,
    capsys: pytest.CaptureFixture[str],
    text: str,
    code: int,
    needle: str,
) -> None:
    series = tmp_path / "s"
    series.mkdir()
    (series / "series.yaml").write_text(text.replace("{c}", upstream.commit))
    for name in ("a.patch", "b.patch"):
        (series / name).write_bytes(b"")
    before = listing(tmp_path)
    got, out, err = run(
        capsys, "cleanroom", "apply", "--series", str(series), "--workdir", str(tmp_path / "room")
    )
    assert got == code
    assert needle in one_error_line(err) and out == ""
    assert listing(tmp_path) == before


def test_patch_that_does_not_apply_touches_nothing(
    tmp_path: Path, upstream: Repo, make_patch: MakePatch, capsys: pytest.CaptureFixture[str]
) -> None:
    series = write_series(tmp_path / "s", git_upstream(upstream))
    room = tmp_path / "room"
    args = ("cleanroom", "apply", "--series", str(series), "--workdir", str(room))
    assert run(capsys, *args)[0] == 0
    head = load_cleanroom(room).head()
    other = {**CONTENT_MATRIX, "src/main.c": b"something else\n"}
    bad = make_patch(other, {**other, "src/main.c": b"changed\n"})
    write_series(tmp_path / "s", git_upstream(upstream), [("0001-bad", bad)])
    code, _, err = run(capsys, *args)
    line = one_error_line(err)
    assert code == 3 and "patch 0001-bad does not apply: hunk #1 in src/main.c" in line
    assert load_cleanroom(room).head() == head and load_cleanroom(room).dirty_paths() == []


def test_patch_needing_an_offset_is_drift(
    tmp_path: Path, upstream: Repo, make_patch: MakePatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = CONTENT_MATRIX["src/main.c"]
    assert isinstance(data, bytes)
    shifted = {**CONTENT_MATRIX, "src/main.c": b"x\n" + data}
    patch = make_patch(shifted, {**shifted, "src/main.c": b"x\n" + data.replace(b"line 9", b"9")})
    series = write_series(tmp_path / "s", git_upstream(upstream), [("0001-drift", patch)])
    room = tmp_path / "room"
    code, _, err = run(
        capsys, "cleanroom", "apply", "--series", str(series), "--workdir", str(room)
    )
    assert code == 10 and "offset -1 line" in one_error_line(err)
    assert load_cleanroom(room).head_tree() == upstream.tree


def test_patch_needing_fuzz_is_drift(
    tmp_path: Path, upstream: Repo, make_patch: MakePatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = CONTENT_MATRIX["src/main.c"]
    assert isinstance(data, bytes)
    other = {**CONTENT_MATRIX, "src/main.c": data.replace(b"line 7\n", b"seven\n")}
    changed = data.replace(b"line 7\n", b"seven\n").replace(b"line 9\n", b"nine\n")
    patch = make_patch(other, {**other, "src/main.c": changed})
    series = write_series(tmp_path / "s", git_upstream(upstream), [("0001-fuzz", patch)])
    room = tmp_path / "room"
    args = ("cleanroom", "apply", "--series", str(series), "--workdir", str(room))
    code, _, err = run(capsys, *args)
    assert code == 10 and "would need fuzz" in one_error_line(err)
    assert load_cleanroom(room).head_tree() == upstream.tree


def sdist_series(tmp_path: Path, upstream: Upstream) -> Path:
    return write_series(tmp_path / "s", upstream)


def test_sdist_checksum_mismatch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sdist = make_tar(tmp_path / "pkg-1.0.tar.gz", {"a.txt": b"a\n"})
    real = hashlib.sha256(sdist.read_bytes()).hexdigest()
    api = tmp_path / "mirror" / "pypi" / "pkg" / "1.0"
    api.mkdir(parents=True)
    entry = {"packagetype": "sdist", "filename": sdist.name, "url": sdist.as_uri()}
    (api / "json").write_text(json.dumps({"urls": [{**entry, "digests": {"sha256": real}}]}))
    monkeypatch.setenv("PATCHCTL_PYPI_URL", (tmp_path / "mirror").as_uri())
    pin = Upstream(kind="pypi-sdist", package="pkg", version="1.0", sha256="7" * 64)
    series = sdist_series(tmp_path, pin)
    before = listing(tmp_path)
    room = tmp_path / "room"
    code, _, err = run(
        capsys, "cleanroom", "apply", "--series", str(series), "--workdir", str(room)
    )
    assert code == 6 and "series pins 7777" in one_error_line(err)
    assert listing(tmp_path) == before
    # With the right pin the same mirror works (the code path downloads).
    series = sdist_series(
        tmp_path, Upstream(kind="pypi-sdist", package="pkg", version="1.0", sha256=real)
    )
    code, _, err = run(
        capsys, "cleanroom", "apply", "--series", str(series), "--workdir", str(room)
    )
    assert code == 0, err
    assert (room / "a.txt").read_bytes() == b"a\n"


@pytest.mark.parametrize(
    ("members", "top", "needle"),
    [
        ({"../evil.txt": b"x"}, None, "contains '..'"),
        ({"/tmp/evil.txt": b"x"}, None, "absolute path"),
        ({"f": b"x", "l": Link("../../../etc/passwd")}, "pkg", "links outside the tree"),
        ({"f": b"x", "d": Special(tarfile.FIFOTYPE)}, "pkg", "fifo"),
    ],
    ids=["dotdot", "absolute", "escaping-link", "fifo"],
)
def test_unsafe_archive(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    members: dict[str, bytes | Link | Special],
    top: str | None,
    needle: str,
) -> None:
    (tmp_path / "s").mkdir()
    archive = make_tar(tmp_path / "s" / "orig.tar.gz", members, top=top)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    series = write_series(
        tmp_path / "s", Upstream(kind="archive", path="orig.tar.gz", sha256=digest)
    )
    room = tmp_path / "room"
    code, _, err = run(
        capsys, "cleanroom", "apply", "--series", str(series), "--workdir", str(room)
    )
    assert code == 7 and needle in one_error_line(err)
    assert not room.exists()
    assert not any(p.name.startswith(".room") for p in tmp_path.iterdir())
    assert not Path("/tmp/evil.txt").exists() and not (tmp_path / "evil.txt").exists()


def test_archive_checksum_mismatch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "s").mkdir()
    make_tar(tmp_path / "s" / "orig.tar.gz", {"a": b"a\n"})
    series = write_series(
        tmp_path / "s", Upstream(kind="archive", path="orig.tar.gz", sha256="8" * 64)
    )
    code, _, err = run(
        capsys, "cleanroom", "apply", "--series", str(series), "--workdir", str(tmp_path / "room")
    )
    assert code == 6 and "expected 8888" in one_error_line(err)
    assert not (tmp_path / "room").exists()


def test_ctrl_c_is_130(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def interrupt(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("patchctl.ops.cleanroom.apply.cleanroom_apply", interrupt)
    code, _, err = run(capsys, "cleanroom", "apply")
    assert code == 130 and "interrupted" in err


def test_quick_help_is_the_apps_help(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from patchctl.cli.app import run as app_run

    monkeypatch.setenv("COLUMNS", "80")
    assert app_run(["--help"]) == 0
    slow = capsys.readouterr().out
    code, fast, _ = run(capsys, "--help")
    assert code == 0 and fast == slow
    code, out, _ = run(capsys, "--version")
    assert (code, out) == (0, f"patchctl {__version__}\n")
    assert app_run(["--version"]) == 0 and capsys.readouterr().out == out
