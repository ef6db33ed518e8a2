"""The hostile-input matrix (docs/reliability.md): every input written by an attacker.

Each case drives the real CLI (`patchctl.cli.main`, the console script's entry point) against
real temporary repositories inside a sandbox that holds the project, the cache, the upstream
and victim files around them. Each asserts the exit code, the message, and that nothing
outside the allowed directories changed (a before/after snapshot of types, modes, bytes and
link targets). The case tables below are counted in docs/reliability.md; a test keeps the
two in step.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hostile.archives import (
    M,
    build,
    corrupted,
    lying_tar,
    truncated,
    zeros_tar,
    zip_bad_crc,
)
from hostile.sandbox import Sandbox

from patchctl import cli

REPO = Path(__file__).resolve().parent.parent
SHA = "0" * 64
COMMIT = "0123456789abcdef0123456789abcdef01234567"
T = "pkg-1.0/"  # the top-level directory of the archives


@dataclass
class Result:
    """What one CLI run printed and returned."""

    code: int
    out: str
    err: str

    def json(self) -> dict[str, object]:
        data = json.loads(self.out)
        assert isinstance(data, dict)
        return data


Run = Callable[..., Result]


@pytest.fixture
def box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sandbox:
    sandbox = Sandbox(tmp_path / "sandbox")
    sandbox.plant_victims()
    monkeypatch.setenv("PATCHCTL_CACHE_DIR", str(sandbox.cache))
    return sandbox


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    def runner(*args: str) -> Result:
        capsys.readouterr()
        code = cli.main(list(args))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return runner


def refused(result: Result, code: int, needle: str) -> None:
    """The run failed with `code`, one error line containing `needle`, and no traceback."""
    assert result.code == code, (result.code, result.out, result.err)
    assert needle in result.err, result.err
    assert "Traceback" not in result.err and "internal error" not in result.err, result.err
    assert "\x1b" not in result.err and "\x1b" not in result.out


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def archive_series(box: Sandbox, archive: Path, subdir: str | None = None) -> None:
    rel = os.path.relpath(archive, box.series)
    sub = f"  subdir: {subdir}\n" if subdir else ""
    (box.series / "series.yaml").write_text(
        f"version: 1\nupstream:\n  kind: archive\n  path: {rel}\n  sha256: {sha256(archive)}\n"
        f"{sub}patches: []\n"
    )


def apply_args(box: Sandbox, *extra: str) -> tuple[str, ...]:
    return ("cleanroom", "apply", "--series", str(box.series), *extra)


# ============================================================================ archives


@dataclass(frozen=True)
class ArchiveCase:
    """A hostile archive: its members, the formats it is tried in, the expected refusal."""

    members: tuple[M, ...]
    formats: tuple[str, ...]
    needle: str
    env: tuple[tuple[str, str], ...] = ()


TAR = ("tar", "tar.gz", "tar.xz")
ALL = ("tar", "tar.gz", "tar.xz", "zip")
CHAIN = (
    M(T + "q", "symlink", target="."),
    M(T + "p", "symlink", target="q/.."),
    M(T + "r", "symlink", target="p/.."),
    M(T + "t", "symlink", target="r/.."),
)
ARCHIVE_CASES: dict[str, ArchiveCase] = {
    # the chained-symlink attack, then a file written "inside" the last link
    "chained-symlinks-then-file": ArchiveCase(
        (*CHAIN, M(T + "t/victim.txt", data=b"pwned\n")), ALL, "lies under 'pkg-1.0/t'"
    ),
    "chained-symlinks-only": ArchiveCase(
        (*CHAIN, M(T + "f", data=b"x")), ALL, "links outside the tree"
    ),
    "chained-symlinks-file-first": ArchiveCase(
        (M(T + "t/victim.txt", data=b"pwned\n"), *CHAIN), ("tar.gz", "zip"), "changes type"
    ),
    "link-through-two-links": ArchiveCase(
        (
            M(T + "sub", "dir"),
            M(T + "b", "symlink", target="sub/.."),
            M(T + "c", "symlink", target="../.."),
            M(T + "a", "symlink", target="b/c"),
        ),
        ("tar.gz", "zip"),
        "links outside the tree",
    ),
    "symlink-to-dir-then-file": ArchiveCase(
        (M(T + "d", "dir"), M(T + "l", "symlink", target="d"), M(T + "l/x", data=b"x")),
        ("tar.gz", "zip"),
        "lies under 'pkg-1.0/l', a symlink",
    ),
    "symlink-up-then-file": ArchiveCase(
        (M(T + "up", "symlink", target=".."), M(T + "up/victim.txt", data=b"pwned\n")),
        ("tar.gz", "zip"),
        "lies under",
    ),
    "symlink-absolute": ArchiveCase(
        (M(T + "f", data=b"x"), M(T + "l", "symlink", target="/etc/passwd")),
        ALL,
        "links to absolute path",
    ),
    "symlink-dotdot": ArchiveCase(
        (M(T + "f", data=b"x"), M(T + "l", "symlink", target="../../victim.txt")),
        ALL,
        "links outside the tree",
    ),
    "symlink-through-a-file": ArchiveCase(
        (M(T + "f", data=b"x"), M(T + "l", "symlink", target="f/../../x")),
        ("tar.gz", "zip"),
        "links outside the tree",
    ),
    "symlink-loop": ArchiveCase(
        (M(T + "a", "symlink", target="b"), M(T + "b", "symlink", target="a")),
        ("tar.gz", "zip"),
        "a loop of symlinks",
    ),
    "symlink-empty-target": ArchiveCase(
        (M(T + "f", data=b"x"), M(T + "l", "symlink", target="")),
        ("tar.gz",),
        "empty target",
    ),
    "symlinked-gitattributes": ArchiveCase(
        (M(T + "f", data=b"x"), M(T + ".gitattributes", "symlink", target="f")),
        ("tar.gz", "zip"),
        "symlink git refuses",
    ),
    "name-dotdot": ArchiveCase((M("pkg-1.0/../victim.txt", data=b"pwned"),), ALL, "contains '..'"),
    "name-absolute": ArchiveCase((M("/tmp/patchctl-victim", data=b"x"),), ALL, "absolute path"),
    "name-control-character": ArchiveCase(
        (M(T + "f", data=b"x"), M(T + "a\nb", data=b"x")), ("tar.gz", "zip"), "control character"
    ),
    "name-too-long": ArchiveCase(
        (M(T + "f", data=b"x"), M(T + "n" * 300, data=b"x")), ("tar.gz", "zip"), "longer than"
    ),
    "hardlink-escape": ArchiveCase(
        (M(T + "f", data=b"x"), M(T + "h", "hardlink", target="../victim.txt")),
        TAR,
        "contains '..'",
    ),
    "hardlink-absolute": ArchiveCase(
        (M(T + "f", data=b"x"), M(T + "h", "hardlink", target="/etc/passwd")),
        ("tar.gz",),
        "absolute path",
    ),
    "hardlink-to-symlink": ArchiveCase(
        (M(T + "l", "symlink", target="x"), M(T + "h", "hardlink", target=T + "l")),
        ("tar.gz",),
        "not a regular file",
    ),
    "hardlink-to-missing": ArchiveCase(
        (M(T + "f", data=b"x"), M(T + "h", "hardlink", target=T + "nope")),
        ("tar.gz",),
        "not a regular file",
    ),
    "char-device": ArchiveCase(
        (M(T + "f", data=b"x"), M(T + "dev", "chr")), ("tar", "tar.gz", "zip"), "device"
    ),
    "block-device": ArchiveCase(
        (M(T + "f", data=b"x"), M(T + "dev", "blk")), ("tar.gz", "zip"), "device"
    ),
    "fifo": ArchiveCase((M(T + "f", data=b"x"), M(T + "pipe", "fifo")), ALL, "fifo"),
    "type-file-then-symlink": ArchiveCase(
        (M(T + "a", data=b"x"), M(T + "a", "symlink", target="../../victim.txt")),
        ALL,
        "changes type from file to symlink",
    ),
    "type-dir-then-file": ArchiveCase(
        (M(T + "d", "dir"), M(T + "d", data=b"x")), ALL, "changes type from dir to file"
    ),
    "type-symlink-then-file": ArchiveCase(
        (M(T + "s", "symlink", target="x"), M(T + "s", data=b"x")),
        ALL,
        "changes type from symlink to file",
    ),
    "type-file-then-dir": ArchiveCase(
        (M(T + "a", data=b"x"), M(T + "a/b", data=b"x")), ("tar.gz", "zip"), "a file"
    ),
    "type-symlink-then-dir": ArchiveCase(
        (M(T + "s", "symlink", target="x"), M(T + "s", "dir")),
        ("tar.gz", "zip"),
        "changes type from symlink to dir",
    ),
    "duplicate-file": ArchiveCase(
        (M(T + "a", data=b"first"), M(T + "a", data=b"second")), ALL, "appears twice"
    ),
    "too-many-members": ArchiveCase(
        tuple(M(f"{T}f{i}", data=b"x") for i in range(30)),
        ("tar.gz", "zip"),
        "more than 20 members",
        (("PATCHCTL_MAX_ARCHIVE_MEMBERS", "20"),),
    ),
    "too-large": ArchiveCase(
        (M(T + "big", data=b"x" * 5000),),
        ("tar.gz", "zip"),
        "add up to more than",
        (("PATCHCTL_MAX_ARCHIVE_BYTES", "4096"),),
    ),
}
ARCHIVE_MATRIX = [(name, fmt) for name, case in ARCHIVE_CASES.items() for fmt in case.formats]


def _refused_archive(box: Sandbox, run: Run, archive: Path, needle: str, code: int = 7) -> None:
    archive_series(box, archive)
    before = box.snapshot()
    result = run(*apply_args(box))
    refused(result, code, needle)
    assert box.unexpected(before) == []
    assert box.victims_intact()


@pytest.mark.parametrize(
    ("case", "fmt"), ARCHIVE_MATRIX, ids=[f"{c}.{f}" for c, f in ARCHIVE_MATRIX]
)
def test_hostile_archive(
    box: Sandbox, run: Run, monkeypatch: pytest.MonkeyPatch, case: str, fmt: str
) -> None:
    spec = ARCHIVE_CASES[case]
    for name, value in spec.env:
        monkeypatch.setenv(name, value)
    archive = build(box.upstream / f"pkg-1.0.{fmt}", spec.members)
    _refused_archive(box, run, archive, spec.needle)


NO_FILTER = [c for c in ARCHIVE_CASES if "tar.gz" in ARCHIVE_CASES[c].formats]


@pytest.mark.parametrize("case", NO_FILTER)
def test_hostile_tar_without_the_stdlib_filter(
    box: Sandbox, run: Run, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """Python 3.11.0-3.11.3 have no tarfile.data_filter: patchctl's own checks must suffice."""
    monkeypatch.delattr(tarfile, "data_filter", raising=False)
    spec = ARCHIVE_CASES[case]
    for name, value in spec.env:
        monkeypatch.setenv(name, value)
    archive = build(box.upstream / "pkg-1.0.tar.gz", spec.members)
    _refused_archive(box, run, archive, spec.needle)


SAMPLE = (
    M(T + "README", data=b"hello\n"),
    # incompressible (seeded): gzip stores it, so a flipped byte is found only by the CRC
    *(M(f"{T}src/f{i}.c", data=random.Random(i).randbytes(3000)) for i in range(20)),
)


def _emptied(path: Path) -> Path:
    path.write_bytes(b"")
    return path


def _replaced_by_html(path: Path) -> Path:
    path.write_bytes(b"<html>404 Not Found</html>\n")
    return path


DAMAGE: dict[str, tuple[tuple[str, ...], Callable[[Path], Path]]] = {
    "truncated-half": (ALL, lambda p: truncated(p, 0.5)),
    "truncated-to-20-bytes": (("tar.gz", "tar.xz", "zip"), lambda p: truncated(p, 0.0005)),
    "corrupt-middle": (("tar.gz", "tar.xz", "zip"), lambda p: corrupted(p, 0.5)),
    "corrupt-end": (("tar.gz", "tar.xz", "zip"), lambda p: corrupted(p, 0.98, 8)),
    "empty-file": (ALL, _emptied),
    "not-an-archive": (ALL, _replaced_by_html),
}
DAMAGE_MATRIX = [(name, fmt) for name, (fmts, _) in DAMAGE.items() for fmt in fmts]


@pytest.mark.parametrize(("case", "fmt"), DAMAGE_MATRIX, ids=[f"{c}.{f}" for c, f in DAMAGE_MATRIX])
def test_damaged_archive_is_exit_7_with_the_library_message(
    box: Sandbox, run: Run, case: str, fmt: str
) -> None:
    archive = DAMAGE[case][1](build(box.upstream / f"pkg-1.0.{fmt}", SAMPLE))
    archive_series(box, archive)
    before = box.snapshot()
    result = run(*apply_args(box, "--json"))
    refused(result, 7, "pkg-1.0." + fmt)
    assert "interrupted" not in result.err
    assert result.json()["exit_code"] == 7 and result.json()["error"] == "UnsafeArchive"
    assert box.unexpected(before) == []


def test_zip_with_a_bad_crc_in_its_last_member_leaves_nothing(box: Sandbox, run: Run) -> None:
    """The damage is found while writing (after earlier members were written): all removed."""
    members = (*SAMPLE[:5], M(T + "last.txt", data=b"the last member " * 100))
    archive = zip_bad_crc(box.upstream / "pkg-1.0.zip", members)
    archive_series(box, archive)
    before = box.snapshot()
    refused(run(*apply_args(box)), 7, "Bad CRC-32")
    assert box.unexpected(before) == []


@pytest.mark.parametrize("fmt", ["tar.gz", "tar.xz", "zip"])
def test_compression_bomb_stops_at_its_header(box: Sandbox, run: Run, fmt: str) -> None:
    """80 MiB of zeros in a few KiB: over the 100x ratio limit, refused before extraction."""
    path = box.upstream / f"pkg-1.0.{fmt}"
    if fmt == "zip":
        import zipfile

        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            zf.writestr(T + "zeros", bytes(80 << 20))
    else:
        zeros_tar(path, T + "zeros", 80 << 20)
    assert path.stat().st_size < 1 << 20
    _refused_archive(box, run, path, "PATCHCTL_MAX_ARCHIVE_RATIO")


def test_a_member_declaring_a_terabyte_is_refused_at_its_header(box: Sandbox, run: Run) -> None:
    archive = lying_tar(box.upstream / "pkg-1.0.tar", T + "f", 1 << 40, b"x" * 100)
    _refused_archive(box, run, archive, "PATCHCTL_MAX_ARCHIVE_BYTES")


@pytest.mark.parametrize("value", ["abc", "-5", "0"])
def test_a_bad_limit_variable_is_a_config_error(
    box: Sandbox, run: Run, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("PATCHCTL_MAX_ARCHIVE_MEMBERS", value)
    archive = build(box.upstream / "pkg-1.0.tar.gz", SAMPLE)
    _refused_archive(box, run, archive, "PATCHCTL_MAX_ARCHIVE_MEMBERS", code=5)


def test_safe_archive_with_internal_links_and_a_smuggled_git_dir(box: Sandbox, run: Run) -> None:
    """The positive control: links that stay inside are kept; `.git` members are dropped."""
    members = (
        M(T + "README", data=b"hello\n"),
        M(T + "bin/run", data=b"#!/bin/sh\n", mode=0o755),
        M(T + "docs/link", "symlink", target="../README"),
        M(T + "lib", "symlink", target="sub"),
        M(T + "sub/x.c", data=b"int x;\n"),
        M(T + "sub/up", "symlink", target="../lib/x.c"),
        M(T + ".git/hooks/post-checkout", data=b"#!/bin/sh\ntouch PWNED\n", mode=0o755),
        M(T + "vendor/.GIT/config", data=b"[core]\n\tfsmonitor = touch PWNED\n"),
    )
    archive = build(box.upstream / "pkg-1.0.tar.gz", members)
    archive_series(box, archive)
    before = box.snapshot()
    result = run(*apply_args(box))
    assert result.code == 0, result.err
    room = box.room
    assert os.readlink(room / "docs" / "link") == "../README"
    assert (room / "lib").is_symlink() and (room / "sub" / "up").is_symlink()
    assert os.access(room / "bin" / "run", os.X_OK)
    assert not (room / "vendor" / ".GIT").exists()
    assert b"PWNED" not in (room / ".git" / "config").read_bytes()
    assert not list(box.root.rglob("PWNED"))
    assert box.unexpected(before, ("cache", "project/cleanroom")) == []
    assert box.victims_intact()
