"""The hostile-input matrix (docs/reliability.md): every input written by an attacker.

Each case drives the real CLI (`patchctl.cli.main.main`, the console script's entry point) against
real temporary repositories inside a sandbox that holds the project, the cache, the upstream
and victim files around them. Each asserts the exit code, the message, and that nothing
outside the allowed directories changed (a before/after snapshot of types, modes, bytes and
link targets). The case tables below are counted in docs/reliability.md; a test keeps the
two in step.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import re
import shutil
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.hostile.archives import (
    M,
    bad_header,
    build,
    corrupted,
    header_bomb,
    lying_tar,
    truncated,
    zeros_tar,
    zip_bad_crc,
)
from support.hostile.sandbox import Sandbox, serve
from support.repos import new_repo

from patchctl.cli import main as cli
from patchctl.gitlayer.git import Git

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
    # the issue's chained-symlink attack, then a file written "inside" the last link
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
    **{
        f"symlinked-{name.strip('. ~').replace(' ', '')}-alias": ArchiveCase(
            (M(T + "f", data=b"x"), M(T + name, "symlink", target="f")),
            ("tar.gz",),
            "symlink git refuses",
        )
        for name in (".gitmodules.", ".GitAttributes ", "GITMOD~1", "gi7eba~2", ".mail\u200cmap")
    },
    "name-dotdot": ArchiveCase((M("pkg-1.0/../victim.txt", data=b"pwned"),), ALL, "contains '..'"),
    "name-absolute": ArchiveCase((M("/tmp/patchctl-victim", data=b"x"),), ALL, "absolute path"),
    "name-control-character": ArchiveCase(
        (M(T + "f", data=b"x"), M(T + "a\nb", data=b"x")), ("tar.gz", "zip"), "control character"
    ),
    "name-too-deep": ArchiveCase(
        (M(T + "f", data=b"x"), M(T + "a/" * 1500 + "f", data=b"x")),
        ("tar.gz", "zip"),
        "nested deeper than 256 directories",
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
    "hard-link-amplification": ArchiveCase(
        (
            M(T + "f", data=b"x" * 3000),
            *(M(f"{T}h{i}", "hardlink", target=T + "f") for i in range(9)),
        ),
        ("tar", "tar.gz"),
        "add up to more than",
        (("PATCHCTL_MAX_ARCHIVE_BYTES", "20000"),),
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
    # tarfile ends the archive at a bad header: the members after it were silently left out
    "bad-member-header": (TAR, lambda p: bad_header(p, 10)),
    "bad-last-member-header": (TAR, lambda p: bad_header(p, len(SAMPLE) - 1)),
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


@pytest.mark.parametrize("kind", [b"x", b"L"], ids=["pax-header", "gnu-long-name"])
def test_an_extension_header_bomb_is_refused_before_it_is_read(
    box: Sandbox, run: Run, kind: bytes
) -> None:
    """64 MiB of header in a few KiB of gzip: tarfile would read it all into memory."""
    archive = header_bomb(box.upstream / "pkg-1.0.tar.gz", kind, 64 << 20)
    assert archive.stat().st_size < 1 << 20
    _refused_archive(box, run, archive, "an extension header of 64.0 MiB")


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


GIT_ALIASES = (".git.", ".git ", "GIT~1", ".Git. .", ".git::$INDEX_ALLOCATION", ".g\u200cit")


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
        # what git reads as `.git` on NTFS or HFS+ (git refuses to stage them): dropped too
        *(M(T + f"{alias}/hooks/post-checkout", data=b"touch PWNED\n") for alias in GIT_ALIASES),
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
    assert not [p for p in os.listdir(room) if p not in ("README", "bin", "docs", "lib", "sub")
                and p != ".git"]  # fmt: skip
    assert b"PWNED" not in (room / ".git" / "config").read_bytes()
    assert not list(box.root.rglob("PWNED"))
    assert box.unexpected(before, ("cache", "project/cleanroom")) == []
    assert box.victims_intact()


def test_a_path_git_refuses_to_stage_is_exit_7_naming_the_member(
    box: Sandbox, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Extraction mirrors git's verify_path rules for `.git` (test above); a rule it does not
    mirror (here: the mirror switched off) still ends as an archive error, never exit 9."""
    from patchctl.upstream import archive

    monkeypatch.setattr(archive, "is_git_dir_name", lambda part: part == ".git")
    members = (M(T + "README", data=b"hi\n"), M(T + "GIT~1/config", data=b"[core]\n"))
    archive_series(box, build(box.upstream / "pkg-1.0.tar.gz", members))
    before = box.snapshot()
    result = run(*apply_args(box, "--json"))
    refused(result, 7, "member 'GIT~1/config' has a path git refuses to store")
    assert result.json()["error"] == "UnsafeArchive"
    assert box.unexpected(before, ("cache",)) == []


# ============================================================================ package index


def _index(box: Sandbox, entries: object, raw: bytes | None) -> Path:
    """A package index for pkg 1.0 (JSON API and Simple API), with the sdist in packages/."""
    mirror = box.root / "mirror"
    for endpoint, key in (("pypi/pkg/1.0/json", "urls"), ("simple/pkg/index.html", "files")):
        path = mirror / endpoint
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(raw if raw is not None else json.dumps({key: entries}).encode())
    return mirror


def _entry(sdist: Path, filename: str, url: str) -> dict[str, object]:
    digest = {"sha256": sha256(sdist)}
    return {
        "packagetype": "sdist",
        "filename": filename,
        "url": url,
        "digests": digest,
        "hashes": digest,
    }


GOOD_URL = "/packages/pkg-1.0.tar.gz"
INDEX_CASES: dict[str, tuple[Callable[[Path], object], bytes | None, int, str]] = {
    "filename-climbs-out-of-the-cache": (
        lambda sdist: [_entry(sdist, "../../../../../victim.txt", GOOD_URL)],
        None,
        15,
        "has no sdist",
    ),
    "filename-absolute": (
        lambda sdist: [_entry(sdist, f"{sdist.parent}/victim.tar.gz", GOOD_URL)],
        None,
        15,
        "has no sdist",
    ),
    "filename-hidden": (
        lambda sdist: [_entry(sdist, ".pkg-1.0.tar.gz", GOOD_URL)],
        None,
        15,
        "no sdist",
    ),
    "file-url-from-an-http-index": (
        lambda sdist: [_entry(sdist, "pkg-1.0.tar.gz", sdist.as_uri())],
        None,
        15,
        "has no sdist",
    ),
    "malformed-entries": (
        lambda sdist: [1, "x", None, {"packagetype": "sdist"}, {"filename": 3, "url": []}],
        None,
        15,
        "has no sdist",
    ),
    "not-json": (lambda sdist: None, b"<html>rate limited</html>", 1, "did not answer JSON"),
}


@pytest.mark.parametrize("case", sorted(INDEX_CASES))
def test_hostile_package_index(
    box: Sandbox, run: Run, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """The index is a remote input: its file names become cache paths, its URLs downloads."""
    make_entries, raw, code, needle = INDEX_CASES[case]
    sdist = build(box.root / "mirror" / "packages" / "pkg-1.0.tar.gz", SAMPLE)
    mirror = _index(box, make_entries(sdist), raw)
    (box.series / "series.yaml").write_text(_sdist(sha256=sha256(sdist)))
    before = box.snapshot()
    with serve(mirror) as url:
        monkeypatch.setenv("PATCHCTL_PYPI_URL", url)
        refused(run(*apply_args(box)), code, needle)
    assert box.unexpected(before) == []
    assert box.victims_intact()


def test_a_download_over_the_limit_keeps_nothing(
    box: Sandbox, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    sdist = build(box.root / "mirror" / "packages" / "pkg-1.0.tar.gz", SAMPLE)
    mirror = _index(box, [_entry(sdist, "pkg-1.0.tar.gz", GOOD_URL)], None)
    (box.series / "series.yaml").write_text(_sdist(sha256=sha256(sdist)))
    monkeypatch.setenv("PATCHCTL_MAX_DOWNLOAD_BYTES", "10000")
    before = box.snapshot()
    with serve(mirror) as url:
        monkeypatch.setenv("PATCHCTL_PYPI_URL", url)
        refused(run(*apply_args(box)), 1, "PATCHCTL_MAX_DOWNLOAD_BYTES")
    # cache/journal.key: the user's journal key, made by the first run that locks a series
    assert box.unexpected(before, ("cache/sha256", "cache/journal.key")) == []
    assert not [p for p in box.cache.rglob("*") if p.is_file() and p.name != "journal.key"]


# ============================================================================ series files

UPSTREAM = f"upstream:\n  kind: git\n  url: ../../../upstream/repo\n  commit: {COMMIT}\n"
BASE = "version: 1\n" + UPSTREAM
# The classic "billion laughs" in 511 bytes: 9^7 copies of "lol" if aliases were expanded.
ALIAS_BOMB = (
    BASE
    + 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    + "".join(
        f"{x}: &{x} [{','.join(['*' + p] * 9)}]\n" for p, x in zip("abcdef", "bcdefg", strict=True)
    )
    + "patches: [{id: 0001-x, file: x.patch, title: *g}]\n"
)


def _with_patch(entry: str) -> str:
    return BASE + f"patches:\n  - {entry}\n"


def _with_upstream(**values: str) -> str:
    fields = {"kind": "git", "url": "../../../upstream/repo", "commit": COMMIT, **values}
    body = "".join(f"  {k}: {json.dumps(v)}\n" for k, v in fields.items())
    return f"version: 1\nupstream:\n{body}"


def _archive_upstream(**values: str) -> str:
    fields = {"kind": "archive", "path": "up.tar.gz", "sha256": SHA, **values}
    body = "".join(f"  {k}: {json.dumps(v)}\n" for k, v in fields.items())
    return f"version: 1\nupstream:\n{body}"


def _sdist(**values: str) -> str:
    fields = {"kind": "pypi-sdist", "package": "pkg", "version": "1.0", "sha256": SHA, **values}
    body = "".join(f"  {k}: {json.dumps(v)}\n" for k, v in fields.items())
    return f"version: 1\nupstream:\n{body}"


# name -> (series.yaml text, needle in the one error line); {root} is the sandbox.
SERIES_CASES: dict[str, tuple[str, str]] = {
    # YAML structure
    "alias-bomb": (ALIAS_BOMB, "aliases (*name) are not allowed"),
    "merge-key": (BASE.replace("  kind: git\n", "  <<: {kind: git}\n"), "merge keys"),
    "deep-nesting": (BASE + "patches: " + "[" * 5000 + "\n", "nested deeper than"),
    "deep-block-nesting": (
        BASE + "patches:\n" + "".join("  " * i + "- \n" for i in range(60)),
        "nested deeper than",
    ),
    "duplicate-top-key": (BASE + UPSTREAM, "duplicate key 'upstream'"),
    "duplicate-patches-key": (
        BASE + "patches: []\npatches: [{id: 0001-a, file: a.patch}]\n",
        "duplicate key 'patches'",
    ),
    "duplicate-upstream-key": (BASE + "  url: /elsewhere\n", "duplicate key 'url'"),
    "duplicate-patch-key": (_with_patch("{id: 0001-a, file: a.patch, file: b.patch}"), "'file'"),
    "duplicate-id": (
        BASE + "patches: [{id: 0001-a, file: a.patch}, {id: 0001-a, file: b.patch}]\n",
        "duplicate id",
    ),
    "duplicate-file-by-case": (
        BASE + "patches: [{id: 0001-a, file: A.patch}, {id: 0002-b, file: a.patch}]\n",
        "duplicate file",
    ),
    "duplicate-id-by-case": (
        BASE + "patches: [{id: 0001-fix, file: a.patch}, {id: 0001-FIX, file: b.patch}]\n",
        "duplicate id",
    ),
    "duplicate-file-by-normalization": (  # NFC and NFD: one file on macOS
        BASE + 'patches: [{id: 0001-a, file: "\u00e9.patch"}, '
        '{id: 0002-b, file: "e\u0301.patch"}]\n',
        "duplicate file",
    ),
    "unhashable-key": (BASE + "[a, b]: 1\n", "malformed YAML"),
    "multi-document": (BASE + "---\n" + BASE, "malformed YAML"),
    "top-level-list": ("- version: 1\n", "top level must be a mapping"),
    "python-object-tag": (
        BASE + 'patches: !!python/object/apply:os.system ["touch {root}/PWNED"]\n',
        "malformed YAML",
    ),
    "binary-tag": (_with_patch("{id: 0001-a, file: a.patch, title: !!binary aGk=}"), "title"),
    "raw-escape-byte": (_with_patch("{id: 0001-a, file: a.patch, title: a\x1bb}"), "YAML"),
    "version-2": (BASE.replace("version: 1", "version: 2"), "version: unsupported"),
    "version-true": (BASE.replace("version: 1", "version: true"), "version: unsupported"),
    "unknown-key-with-escape": (BASE + '"\\e[31mred": 1\n', "unknown key"),
    "long-plain-key": (BASE + "k" * 5000 + ": 1\n", "malformed YAML"),
    "long-explicit-key": (BASE + "? " + "k" * 5000 + "\n: 1\n", "unknown key"),
    "kind-list": (BASE.replace("kind: git", "kind: [git]"), "upstream.kind"),
    # reserved and escaping patch file names
    "file-readme": (_with_patch("{id: 0001-a, file: README.md}"), "patches[0].file"),
    "file-series-yaml": (_with_patch("{id: 0001-a, file: series.yaml}"), "patches[0].file"),
    "file-series-yaml-upper": (_with_patch("{id: 0001-a, file: SERIES.YAML}"), "patches[0].file"),
    "file-hidden": (_with_patch("{id: 0001-a, file: .hidden.patch}"), "hidden"),
    "file-in-hidden-dir": (_with_patch("{id: 0001-a, file: sub/.x/y.patch}"), "hidden"),
    "file-dotdot": (_with_patch("{id: 0001-a, file: ../victim.patch}"), "'..'"),
    "file-absolute": (_with_patch("{id: 0001-a, file: /etc/passwd.patch}"), "relative path"),
    "file-dir-slash": (_with_patch("{id: 0001-a, file: sub/}"), "patches[0].file"),
    "file-not-a-patch": (_with_patch("{id: 0001-a, file: notes.txt}"), "must end in .patch"),
    "file-in-dot-git": (_with_patch("{id: 0001-a, file: .git/x.patch}"), "patches[0].file"),
    "file-leading-dash": (_with_patch("{id: 0001-a, file: -rf.patch}"), "must not start with '-'"),
    "file-backslash": (_with_patch('{id: 0001-a, file: "a\\\\b.patch"}'), "'/' separators"),
    "file-empty-component": (_with_patch("{id: 0001-a, file: a//b.patch}"), "empty components"),
    "file-newline": (_with_patch('{id: 0001-a, file: "a\\nb.patch"}'), "control characters"),
    # values that reach a command line: URLs
    "url-upload-pack": (
        _with_upstream(url="--upload-pack=touch {root}/PWNED;://x"),
        "starts with '-'",
    ),
    "url-ext-helper": (_with_upstream(url="ext::sh -c touch% {root}/PWNED"), "remote helper"),
    "url-fd-helper": (_with_upstream(url="fd::17"), "remote helper"),
    "url-other-helper": (_with_upstream(url="evil::/x"), "remote helper"),
    "url-ssh-proxycommand-host": (
        _with_upstream(url="ssh://-oProxyCommand=touch%20{root}/PWNED/x"),
        "invalid host",
    ),
    "url-ssh-dash-user": (_with_upstream(url="ssh://-oProxyCommand=x@host/x"), "invalid user"),
    "url-scp-dash-host": (_with_upstream(url="git@-oProxyCommand=x:repo"), "invalid host"),
    "url-scp-dash-path": (_with_upstream(url="git@host:-u"), "path starting with '-'"),
    "url-newline": (_with_upstream(url="https://h/x\n--upload-pack=y"), "control characters"),
    "url-ftp": (_with_upstream(url="ftp://host/x.git"), "scheme 'ftp'"),
    "url-remote-file": (_with_upstream(url="file://evil.example/x"), "must be local"),
    "url-whitespace": (_with_upstream(url="https://host/a b"), "whitespace"),
    "url-bad-port": (_with_upstream(url="https://host:99999999/x"), "invalid port"),
    "url-empty": (_with_upstream(url=""), "expected a string"),
    "url-not-a-string": (BASE.replace("url: ../../../upstream/repo", "url: [a]"), "upstream.url"),
    # object ids, paths and names
    "commit-head": (_with_upstream(commit="HEAD"), "upstream.commit"),
    "commit-option": (_with_upstream(commit="--all"), "upstream.commit"),
    "commit-short": (_with_upstream(commit=COMMIT[:39]), "upstream.commit"),
    "commit-upper": (_with_upstream(commit=COMMIT.upper()), "upstream.commit"),
    "commit-revspec": (_with_upstream(commit=COMMIT + "^{tree}"), "upstream.commit"),
    "tree-option": (_with_upstream(tree="-x"), "upstream.tree"),
    "subdir-dotdot": (_with_upstream(subdir="../x"), "upstream.subdir"),
    "subdir-absolute": (_with_upstream(subdir="/etc"), "upstream.subdir"),
    "subdir-option": (_with_upstream(subdir="-x"), "upstream.subdir"),
    "subdir-inner-dotdot": (_with_upstream(subdir="a/../b"), "upstream.subdir"),
    "subdir-dot-git": (_with_upstream(subdir="a/.git/b"), "upstream.subdir"),
    "subdir-dot-slash": (_with_upstream(subdir="./vendor"), "upstream.subdir"),
    "subdir-newline": (_with_upstream(subdir="a\nb"), "upstream.subdir"),
    "root-dotdot": (BASE + "root: ..\n", "root:"),
    "root-option": (BASE + "root: -r\n", "root:"),
    "root-absolute": (BASE + "root: /\n", "root:"),
    "package-path": (_sdist(package="../../x"), "upstream.package"),
    "package-query": (_sdist(package="x?y=1"), "upstream.package"),
    "package-option": (_sdist(package="-x"), "upstream.package"),
    "version-shell": (_sdist(version="1.0; rm -rf /"), "upstream.version"),
    "version-path": (_sdist(version="../1"), "upstream.version"),
    "version-float": (_sdist().replace('version: "1.0"', "version: 1.0"), "quote it"),
    "sha256-not-hex": (_sdist(sha256="z" * 64), "upstream.sha256"),
    "sha256-upper": (_sdist(sha256="A" * 64), "upstream.sha256"),
    "archive-path-option": (_archive_upstream(path="-x.tar.gz"), "upstream.path"),
    "archive-path-not-archive": (_archive_upstream(path="/etc/passwd"), "upstream.path"),
    "archive-path-newline": (_archive_upstream(path="a\nb.tar.gz"), "upstream.path"),
    # one-line text
    "title-escape": (_with_patch('{id: 0001-a, file: a.patch, title: "x\\e[2Jy"}'), "\\x1b"),
    "title-newline": (_with_patch('{id: 0001-a, file: a.patch, title: "a\\nFrom: x"}'), "\\n"),
    "title-carriage-return": (_with_patch('{id: 0001-a, file: a.patch, title: "a\\rb"}'), "\\r"),
    "title-nul": (_with_patch('{id: 0001-a, file: a.patch, title: "a\\0b"}'), "\\x00"),
    "title-bidi-override": (
        _with_patch('{id: 0001-a, file: a.patch, title: "a\\u202eb"}'),
        "u202e",
    ),
    "title-line-separator": (_with_patch('{id: 0001-a, file: a.patch, title: "a\\Lb"}'), "u2028"),
    "title-too-long": (_with_patch("{id: 0001-a, file: a.patch, title: " + "t" * 600 + "}"), "600"),
    "origin-carriage-return": (
        _with_patch('{id: 0001-a, file: a.patch, origin: "a\\rb"}'),
        "origin",
    ),
    "status-escape": (
        _with_patch('{id: 0001-a, file: a.patch, upstream_status: "\\e[31m"}'),
        "upstream_status",
    ),
    "marker-newline": (
        _with_patch('{id: 0001-a, file: a.patch, markers: ["a\\nb"]}'),
        "markers[0]",
    ),
    "marker-blank": (_with_patch('{id: 0001-a, file: a.patch, markers: ["  "]}'), "blank"),
    "marker-too-long": (
        _with_patch("{id: 0001-a, file: a.patch, markers: [" + "m" * 300 + "]}"),
        "300",
    ),
    "id-dotdot": (_with_patch("{id: 0001-../x, file: a.patch}"), "patches[0].id"),
    "id-slash": (_with_patch("{id: 0001-a/b, file: a.patch}"), "patches[0].id"),
    "id-no-number": (_with_patch("{id: fix, file: a.patch}"), "patches[0].id"),
    "pre-tree-option": (_with_patch("{id: 0001-a, file: a.patch, pre_tree: --all}"), "pre_tree"),
    "imported-string": (_with_patch("{id: 0001-a, file: a.patch, imported: 'yes'}"), "imported"),
}


@pytest.mark.parametrize("case", sorted(SERIES_CASES))
def test_hostile_series_file(box: Sandbox, run: Run, case: str) -> None:
    text, needle = SERIES_CASES[case]
    (box.series / "series.yaml").write_text(text.replace("{root}", str(box.root)))
    for name in ("a.patch", "b.patch", "A.patch", "x.patch", "\u00e9.patch", "e\u0301.patch"):
        (box.series / name).write_bytes(b"")
    before = box.snapshot()
    for command in (
        ("cleanroom", "apply"),
        ("docs",),
        ("verify",),
        ("new", "0009-x", "--title", "t"),
        ("ci",),
        ("ci", "--fast"),
    ):
        result = run(*command, "--series", str(box.series), "--json")
        refused(result, 5, needle)
        assert len(result.err.strip().splitlines()) == 1 and len(result.err) < 1000
        assert result.json()["exit_code"] == 5 and result.json()["path"]
    assert box.unexpected(before, ()) == []
    assert not (box.root / "PWNED").exists()


def test_the_alias_bomb_stops_at_its_first_alias(box: Sandbox, run: Run) -> None:
    assert len(ALIAS_BOMB.encode()) - len(BASE.encode()) <= 511
    (box.series / "series.yaml").write_text(ALIAS_BOMB)
    first_alias = ALIAS_BOMB[: ALIAS_BOMB.index("*")].count("\n") + 1
    result = run("docs", "--series", str(box.series))
    refused(result, 5, f"malformed YAML at line {first_alias}: aliases (*name) are not allowed")


def test_a_huge_series_file_is_refused_before_parsing(box: Sandbox, run: Run) -> None:
    (box.series / "series.yaml").write_text(BASE + "#" + "x" * (1 << 20) + "\n")
    refused(run("docs", "--series", str(box.series)), 5, "larger than 1.0 MiB")


def test_a_patch_file_symlinked_out_of_the_series_is_refused(box: Sandbox, run: Run) -> None:
    (box.series / "series.yaml").write_text(_with_patch("{id: 0001-a, file: a.patch}"))
    (box.series / "a.patch").symlink_to(box.root / "victim.txt")
    before = box.snapshot()
    refused(run("docs", "--series", str(box.series)), 5, "outside the series directory")
    (box.series / "a.patch").unlink()
    (box.series / "sub").symlink_to(box.root / "outside")
    (box.series / "series.yaml").write_text(_with_patch("{id: 0001-a, file: sub/victim.patch}"))
    refused(run("new", "0002-b", "--title", "b", "--series", str(box.series)), 5, "outside")
    assert box.unexpected(before, ("project/patches/demo",)) == []


def test_a_patch_file_that_is_a_directory_is_refused(box: Sandbox, run: Run) -> None:
    (box.series / "series.yaml").write_text(_with_patch("{id: 0001-a, file: d.patch}"))
    (box.series / "d.patch").mkdir()
    refused(run("docs", "--series", str(box.series)), 5, "is a directory")


def test_a_patch_file_over_the_size_limit_is_refused(
    box: Sandbox, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATCHCTL_MAX_PATCH_BYTES", "100")
    (box.series / "series.yaml").write_text(_with_patch("{id: 0001-a, file: a.patch}"))
    (box.series / "a.patch").write_bytes(b"x" * 101)
    refused(run("docs", "--series", str(box.series)), 5, "PATCHCTL_MAX_PATCH_BYTES")


GIT_PINS: dict[str, tuple[Callable[[Git, str], dict[str, str]], int, str]] = {
    "commit-is-a-tree": (lambda g, c: {"commit": g.tree_of(c)}, 5, "is a tree, not a commit"),
    "commit-is-a-blob": (
        lambda g, c: {"commit": g.rev_parse(f"{c}:README")},
        5,
        "is a blob, not a commit",
    ),
    "subdir-missing": (lambda g, c: {"commit": c, "subdir": "nope"}, 15, "no directory 'nope'"),
    "subdir-is-a-file": (lambda g, c: {"commit": c, "subdir": "README"}, 15, "no directory"),
}


@pytest.mark.parametrize("case", sorted(GIT_PINS))
def test_a_git_pin_that_names_no_commit_or_no_directory(box: Sandbox, run: Run, case: str) -> None:
    """Object ids of another kind, or a subdir that is not a directory of the commit: the
    error names the key (never a raw git failure, exit 9)."""
    upstream = new_repo(box.upstream / "repo", FILES)
    upstream.git.run("tag", "-a", "-m", "v1", "v1", upstream.commit)
    make, code, needle = GIT_PINS[case]
    (box.series / "series.yaml").write_text(_with_upstream(**make(upstream.git, upstream.commit)))
    result = run(*apply_args(box, "--json"))
    refused(result, code, needle)
    assert "upstream." in result.err
    tag = upstream.git.rev_parse("v1")  # an annotated tag's id pins its commit: accepted
    (box.series / "series.yaml").write_text(_with_upstream(commit=tag, tree=upstream.tree))
    assert run(*apply_args(box)).code == 0


def _git_bomb(path: Path, levels: int, width: int) -> tuple[str, str]:
    """A repository whose commit's tree repeats one subtree `width` times per level: a few
    objects that check out as width**levels files (https://github.com/Katee/git-bomb)."""
    git = Git.init(path)
    blob = git.run("hash-object", "-w", "--stdin", stdin=b"x" * 100).decode().strip()
    entry, kind = blob, "blob"
    for _ in range(levels):
        mode = "100644" if kind == "blob" else "040000"
        listing = "".join(f"{mode} {kind} {entry}\td{i}\n" for i in range(width))
        entry, kind = git.run("mktree", stdin=listing.encode()).decode().strip(), "tree"
    commit = git.commit_tree(entry, b"bomb\n")
    git.update_ref("HEAD", commit)
    return commit, entry


@pytest.mark.parametrize(
    ("variable", "value", "needle"),
    [
        ("PATCHCTL_MAX_ARCHIVE_MEMBERS", "1000", "more than 1000 files"),
        ("PATCHCTL_MAX_ARCHIVE_BYTES", "100000", "more than 97.7 KiB"),
    ],
)
def test_a_git_upstream_over_the_tree_limits_is_refused_before_checkout(
    box: Sandbox, run: Run, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, needle: str
) -> None:
    """A git tree, like an archive, is bounded (files, bytes) before anything is written: a
    commit of a few objects can repeat one subtree into billions of files."""
    commit, tree = _git_bomb(box.upstream / "repo", levels=4, width=8)  # 4096 files, 400 KiB
    (box.series / "series.yaml").write_text(_with_upstream(commit=commit, tree=tree))
    monkeypatch.setenv(variable, value)
    before = box.snapshot()
    result = run(*apply_args(box, "--json"))
    refused(result, 5, needle)
    assert variable in result.err and "upstream.commit" in result.err
    assert box.unexpected(before, ("cache",)) == []
    monkeypatch.delenv(variable)
    assert run(*apply_args(box)).code == 0  # within the defaults


ACCEPTED_URLS = (
    "https://github.com/ggml-org/llama.cpp.git",
    "http://[::1]:8080/x.git",
    "git@github.com:org/repo.git",
    "ssh://git@host.example:2222/x.git",
    "git://host.example/x",
    "file:///srv/git/x.git",
    "../relative/repo",
    "/abs/path with spaces/repo",
    "user@host:path/with:colon",
)


@pytest.mark.parametrize("url", ACCEPTED_URLS)
def test_allowed_url_forms_load(box: Sandbox, run: Run, url: str) -> None:
    (box.series / "series.yaml").write_text(_with_upstream(url=url))
    result = run("docs", "--series", str(box.series))
    assert result.code == 0, result.err


SECRET = "s3cr3t-T0KEN"
CREDENTIAL_URLS = (
    f"https://user:{SECRET}@127.0.0.1:9/x.git",
    f"https://{SECRET}@127.0.0.1:9/x.git",  # a token as the user name (GitHub accepts it)
    f"http://user:{SECRET}@[::1]:9/x.git",
    f"ssh://git:{SECRET}@127.0.0.1:9/x.git",
)


@pytest.mark.parametrize("url", CREDENTIAL_URLS)
def test_credentials_in_a_url_are_never_printed_or_written(
    box: Sandbox, run: Run, url: str
) -> None:
    """A URL with a password or token: git may use it, but no message, JSON document or
    generated doc (README.md, the registry: both committed) shows the secret."""
    (box.series / "series.yaml").write_text(_with_upstream(url=url))
    s = str(box.series)
    for args in (apply_args(box), apply_args(box, "--json"), ("docs", "--series", s, "--json")):
        result = run(*args)
        assert SECRET not in result.out + result.err, (args, result.out, result.err)
    assert "://" in run(*apply_args(box)).err  # the URL is still named, without the secret
    written = [p for p in box.root.rglob("*") if p.is_file() and p.name != "series.yaml"]
    assert written and not [p for p in written if SECRET.encode() in p.read_bytes()]


# ============================================================================ patches

FILES = {
    "main.c": b"int main(void)\n{\n\treturn 0;\n}\n",
    "README": b"hello\n",
    "victim.txt": b"in-tree file\n",
}


@pytest.fixture
def project(box: Sandbox, run: Run) -> Sandbox:
    """The sandbox with a git upstream, its series and an applied clean room."""
    upstream = new_repo(box.upstream / "repo", FILES)
    git, tree = upstream.git, upstream.tree
    box.series.joinpath("series.yaml").write_text(
        f"version: 1\nupstream:\n  kind: git\n  url: ../../../upstream/repo\n"
        f"  commit: {git.rev_parse('HEAD')}\n  tree: {tree}\npatches: []\n"
    )
    result = run(*apply_args(box))
    assert result.code == 0, result.err
    return box


def set_patches(box: Sandbox, patches: list[tuple[str, bytes]]) -> None:
    text = (box.series / "series.yaml").read_text().replace("patches: []\n", "patches:\n")
    text = text.split("patches:\n")[0] + "patches:\n"
    for pid, data in patches:
        (box.series / f"{pid}.patch").write_bytes(data)
        text += f"  - {{id: {pid}, file: {pid}.patch}}\n"
    (box.series / "series.yaml").write_text(text)


def _new_file(path: str, body: bytes, mode: str = "100644") -> bytes:
    return (
        f"diff --git a/{path} b/{path}\nnew file mode {mode}\n--- /dev/null\n+++ b/{path}\n"
    ).encode() + body


def _renamed(how: str, source: str, target: str) -> bytes:
    return (
        f"diff --git a/{source} b/{target}\nsimilarity index 100%\n"
        f"{how} from {source}\n{how} to {target}\n"
    ).encode()


VICTIM_LINE = b"-victim project/victim.txt\n+pwned\n"
HOSTILE_PATCHES: dict[str, tuple[list[tuple[str, bytes]], str]] = {
    "path-escaping-the-tree": (
        [
            (
                "0001-up",
                b"diff --git a/../../victim.txt b/../../victim.txt\n--- a/../../victim.txt\n"
                b"+++ b/../../victim.txt\n@@ -1 +1 @@\n" + VICTIM_LINE,
            )
        ],
        "does not apply",
    ),
    "absolute-path": (
        [("0001-abs", _new_file("/tmp/patchctl-abs-victim", b"@@ -0,0 +1 @@\n+x\n"))],
        "does not apply",
    ),
    "symlink-then-file-through-it": (
        [
            (
                "0001-link",
                _new_file("l", b"@@ -0,0 +1 @@\n+../..\n\\ No newline at end of file\n", "120000")
                + _new_file("l/victim.txt", b"@@ -0,0 +1 @@\n+pwned\n"),
            )
        ],
        "beyond a symbolic link",
    ),
    "symlink-then-file-in-the-next-patch": (
        [
            (
                "0001-link",
                _new_file("l", b"@@ -0,0 +1 @@\n+../..\n\\ No newline at end of file\n", "120000"),
            ),
            ("0002-through", _new_file("l/victim.txt", b"@@ -0,0 +1 @@\n+pwned\n")),
        ],
        "beyond a symbolic link",
    ),
    "into-dot-git": (
        [("0001-git", _new_file(".git/hooks/post-commit", b"@@ -0,0 +1 @@\n+touch PWNED\n"))],
        "does not apply",
    ),
    **{
        f"into-a-dot-git-alias-{n}": (
            [
                (
                    "0001-git",
                    _new_file(f"{alias}/hooks/post-commit", b"@@ -0,0 +1 @@\n+touch PWNED\n"),
                )
            ],
            "does not apply",
        )
        for n, alias in enumerate(GIT_ALIASES)
    },
    "into-dot-git-uppercase": (
        [("0001-git", _new_file(".GIT/config", b"@@ -0,0 +1 @@\n+[core]\n"))],
        "does not apply",
    ),
    "garbage": ([("0001-junk", b"\x00\xff not a patch at all\n")], "does not apply"),
    **{
        name: ([("0001-x", data)], "does not apply")
        for name, data in {
            "rename-out-of-the-tree": _renamed("rename", "README", "../../victim2.txt"),
            "rename-into-dot-git": _renamed("rename", "README", ".git/hooks/post-commit"),
            "copy-into-dot-git": _renamed("copy", "README", ".git/config"),
            "copy-from-outside": _renamed("copy", "../../victim.txt", "stolen"),
            "dot-slash-dot-git": _new_file("./.git/hooks/post-commit", b"@@ -0,0 +1 @@\n+x\n"),
            "dotdot-into-dot-git": _new_file("a/../.git/hooks/x", b"@@ -0,0 +1 @@\n+x\n"),
            "mode-to-symlink-then-through-it": (
                b"diff --git a/README b/README\nold mode 100644\nnew mode 120000\n"
                + _new_file("README/x", b"@@ -0,0 +1 @@\n+x\n")
            ),
        }.items()
    },
}


@pytest.mark.parametrize("case", sorted(HOSTILE_PATCHES))
def test_hostile_patch(project: Sandbox, run: Run, case: str) -> None:
    patches, needle = HOSTILE_PATCHES[case]
    set_patches(project, patches)
    before = project.snapshot()
    result = run(*apply_args(project, "--json"))
    refused(result, 3, needle)
    assert result.json()["exit_code"] == 3
    gate = run("ci", "--series", str(project.series), "--json")  # the same patch, every check
    report = gate.json()["ci"]
    assert gate.code in (3, 12) and isinstance(report, dict) and report["findings"], gate.out
    assert "Traceback" not in gate.err and "internal error" not in gate.err, gate.err
    assert "\x1b" not in gate.out and "\x1b" not in gate.err
    assert project.unexpected(before, ("cache", "project/cleanroom")) == []
    assert project.victims_intact() and not list(project.root.rglob("PWNED"))
    assert not Path("/tmp/patchctl-abs-victim").exists()


def _binary_patch(box: Sandbox, kind: str) -> bytes:
    """A real `GIT binary patch` (git's own bytes) making `blob.bin` 64 KiB: a literal for a
    new file, a delta (a few bytes: its size is in the delta's header) for a grown one."""
    from support.repos import diff_files

    seed = random.Random(7).randbytes(3000)
    before = {"README": b"hello\n", **({"blob.bin": seed} if kind == "delta" else {})}
    after = {"README": b"hello\n", "blob.bin": seed + bytes(64 << 10)}
    data = diff_files(box.root / f"scratch-{kind}", before, after)
    assert f"\n{kind} ".encode() in data  # git chose the form under test
    return data


@pytest.mark.parametrize("kind", ["literal", "delta"])
def test_a_binary_patch_over_the_blob_limit_is_refused_before_git_apply(
    project: Sandbox, run: Run, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """A binary hunk declares the size of the file it makes (a literal's, or a delta's result
    size in its header); git apply allocates it whole. A few KiB of patch can declare many
    GiB: it is refused from the declaration, before git runs."""
    data = _binary_patch(project, kind)
    if kind == "delta":  # the clean room needs the file the delta applies to
        seed = random.Random(7).randbytes(3000)
        upstream = new_repo(project.upstream / "repo", {"blob.bin": seed})
        text = (project.series / "series.yaml").read_text()
        text = re.sub(r"commit: \S+", f"commit: {upstream.commit}", text)
        text = re.sub(r"tree: \S+", f"tree: {upstream.tree}", text)
        (project.series / "series.yaml").write_text(text)
    set_patches(project, [("0001-bin", data)])
    monkeypatch.setenv("PATCHCTL_MAX_BLOB_BYTES", "65536")
    before = project.snapshot()
    result = run(*apply_args(project, "--json"))
    refused(result, 3, "PATCHCTL_MAX_BLOB_BYTES")
    assert "blob.bin" in result.err and "68536" in result.err
    assert project.unexpected(before, ("cache", "project/cleanroom")) == []
    monkeypatch.setenv("PATCHCTL_MAX_BLOB_BYTES", "68536")  # at the limit: applies
    assert run(*apply_args(project)).code == 0
    assert (project.room / "blob.bin").stat().st_size == 68536


ODD_NAMES: dict[str, bytes] = {
    "x b/y b": b"",  # the issue's case: an empty new file whose path contains " b/"
    "a b/c b": b"content\n",
    "tab\there": b"t\n",
    'q"uote': b"q\n",
    "back\\slash": b"b\n",
    "-rf": b"dash\n",
    "new\nline": b"n\n",
    os.fsdecode(b"lat\xe9n-not-utf8"): b"latin\n",
    "\u65e5\u672c b/x": b"// patchctl odd\n",
    "bin b": b"\x00\x01\x02 binary",
    "[/] rich": b"markup\n",
}


def test_capture_of_odd_paths_round_trips(project: Sandbox, run: Run) -> None:
    """New files with " b/", quotes, tabs, newlines, non-UTF-8 bytes, leading dashes."""
    s = str(project.series)
    result = run("new", "0001-odd", "--title", "odd [/] names", "--marker", "// patchctl odd",
                 "--series", s)  # fmt: skip
    assert result.code == 0, result.err
    assert "odd" in result.out
    for name, data in ODD_NAMES.items():
        path = project.room / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    result = run("capture", "0001-odd", "--series", s, "--json")
    assert result.code == 0, result.err
    assert result.json()["written"] is True
    for command in (("verify", "--all"), ("docs", "--check"), ("cleanroom", "status")):
        result = run(*command, "--series", s)
        assert result.code == 0, (command, result.out, result.err)
    assert "\x1b" not in result.out
    readme = (project.series / "README.md").read_text()
    assert "`x b/y b`" in readme and "`tab\\there`" in readme and "lat\\xe9n" in readme


def test_capture_validates_before_its_first_write(project: Sandbox, run: Run) -> None:
    """A registry patchctl did not write: capture refuses before the patch or commit exist."""
    s = str(project.series)
    assert run("new", "0001-a", "--title", "a", "--series", s).code == 0
    (project.room / "main.c").write_bytes(b"int main(void) { return 1; }\n")
    registry = project.project / "docs" / "UPSTREAM_SYNC.md"
    registry.write_text("# my own notes\n")
    head = Git(project.room).rev_parse("HEAD")
    before = project.snapshot()
    refused(run("capture", "0001-a", "--series", s), 8, "not generated by patchctl")
    # only unreferenced objects of the work-tree snapshot: no ref, index, file or patch moved
    assert project.unexpected(before, ("cache", "project/cleanroom/demo/.git/objects")) == []
    assert Git(project.room).rev_parse("HEAD") == head
    assert not (project.series / "0001-a.patch").exists()


def test_capture_checks_every_target_is_writable_first(project: Sandbox, run: Run) -> None:
    s = str(project.series)
    assert run("new", "0001-a", "--title", "a", "--series", s).code == 0
    (project.room / "main.c").write_bytes(b"int main(void) { return 2; }\n")
    (project.series / "README.md").mkdir()  # the docs cannot be written there
    head = Git(project.room).rev_parse("HEAD")
    before = project.snapshot()
    refused(run("capture", "0001-a", "--series", s), 1, "is a directory")
    assert project.unexpected(before, ("cache", "project/cleanroom/demo/.git/objects")) == []
    assert Git(project.room).rev_parse("HEAD") == head


def test_binary_and_crlf_patches_import_and_verify(project: Sandbox, run: Run) -> None:
    git = Git(project.upstream / "repo")
    base = git.rev_parse("HEAD")
    (project.upstream / "repo" / "dos.txt").write_bytes(b"one\r\ntwo\r\n")
    (project.upstream / "repo" / "blob.bin").write_bytes(bytes(range(256)) * 8)
    git.run("add", "-A")
    tree = git.write_tree()
    diff = git.run("diff", "--binary", "--full-index", "--no-color", "--no-ext-diff",
                   "--src-prefix=a/", "--dst-prefix=b/", base, tree)  # fmt: skip
    mail = b"From 0 Mon Sep 17 00:00:00 2001\nFrom: a <a@b>\nSubject: [PATCH] bin\n\n---\n" + diff
    (project.root / "in.mbox").write_bytes(mail)
    s = str(project.series)
    result = run("import", str(project.root / "in.mbox"), "--series", s, "--json")
    assert result.code == 0, result.err
    stored = project.series / f"{result.json()['imported'][0]['id']}.patch"  # type: ignore[index]
    assert stored.read_bytes() == mail
    assert run("cleanroom", "apply", "--series", s).code == 0
    assert (project.room / "dos.txt").read_bytes() == b"one\r\ntwo\r\n"
    assert run("verify", "--all", "--series", s).code == 0


# ============================================================================ upstream attributes

MERGE_ATTRIBUTES = {
    "union": b"* merge=union\n",
    "binary": b"* binary\n",
    "short-markers": b"* conflict-marker-size=3\n",
    "unknown-driver": b"* merge=evil\n[attr]evil merge=union\n",
}


@pytest.mark.parametrize("case", sorted(MERGE_ATTRIBUTES))
def test_upstream_merge_attributes_never_decide_a_rebase(box: Sandbox, run: Run, case: str) -> None:
    """An upstream's `.gitattributes` picks a merge driver: union would merge a conflict
    silently (both lines kept, no stop), binary or short markers would hide it from the
    report. A rebase must stop at the conflict with git's own markers, whatever it says."""
    files = {".gitattributes": MERGE_ATTRIBUTES[case], "f.txt": b"a\nb\nc\n"}
    upstream = new_repo(box.upstream / "repo", files)
    (box.series / "series.yaml").write_text(
        f"version: 1\nupstream:\n  kind: git\n  url: ../../../upstream/repo\n"
        f"  commit: {upstream.commit}\n  tree: {upstream.tree}\npatches: []\n"
    )
    s = str(box.series)
    assert run(*apply_args(box)).code == 0
    assert run("new", "0001-b", "--title", "b", "--series", s).code == 0
    (box.room / "f.txt").write_bytes(b"a\nB from the patch\nc\n")
    assert run("capture", "0001-b", "--series", s).code == 0
    onto = new_repo(box.upstream / "repo", {"f.txt": b"a\nB upstream\nc\n"}).commit
    result = run("rebase", "--series", s, "--onto", str(box.upstream / "repo"),
                 "--commit", onto, "--json")  # fmt: skip
    assert result.code == 3, (result.out, result.err)
    stop = result.json()["report"]["stop"]  # type: ignore[index]
    assert stop["files"] == ["f.txt"] and stop["markers"], stop
    merged = (box.room / "f.txt").read_bytes()
    assert merged.startswith(b"a\n<<<<<<< ") and b"\n=======\n" in merged, merged
    assert b"B from the patch" in merged and b"B upstream" in merged


def test_a_patch_shipping_gitattributes_changes_no_bytes(project: Sandbox, run: Run) -> None:
    """A patch adds a .gitattributes asking for eol conversion, ident expansion, a filter and a
    re-encoding: the next patch's file is captured, re-applied in a new clean room and
    verified with exactly its bytes."""
    s = str(project.series)
    attributes = b"* text eol=crlf ident filter=x working-tree-encoding=UTF-16 diff=x\n"
    data = b"$Id$\r\nline\n\xff\xfe\n"
    for pid, name, content in (
        ("0001-attr", ".gitattributes", attributes),
        ("0002-id", "id.txt", data),
    ):
        assert run("new", pid, "--title", pid, "--series", s).code == 0
        (project.room / name).write_bytes(content)
        assert run("capture", pid, "--series", s).code == 0
    assert b"+$Id$\r\n+line\n" in (project.series / "0002-id.patch").read_bytes()
    shutil.rmtree(project.room)
    assert run(*apply_args(project)).code == 0
    assert (project.room / "id.txt").read_bytes() == data
    result = run("verify", "--all", "--series", s)
    assert result.code == 0, result.out


# ============================================================================ mboxes


def mail(subject: str, body: str = "", diff: str = "") -> bytes:
    diff = diff or (
        "diff --git a/README b/README\n--- a/README\n+++ b/README\n@@ -1 +1,2 @@\n hello\n+world\n"
    )
    return (
        f"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        f"From: A <a@example.org>\nDate: Thu, 1 Jan 1970 00:00:00 +0000\nSubject: {subject}\n\n"
        f"{body}---\n{diff}-- \n2.39.5\n\n"
    ).encode()


def _import(project: Sandbox, run: Run, data: bytes, *extra: str) -> Result:
    source = project.root / "in.mbox"
    source.write_bytes(data)
    return run("import", str(source), "--series", str(project.series), *extra)


def _titles(project: Sandbox) -> list[str]:
    from patchctl.series.model import load_series

    return [p.title for p in load_series(project.series).patches]


MAIN_DIFF = (
    "diff --git a/main.c b/main.c\n--- a/main.c\n+++ b/main.c\n@@ -1,4 +1,4 @@\n"
    " int main(void)\n {\n-\treturn 0;\n+\treturn 1;\n }\n"
)
MBOX_CASES: dict[str, tuple[bytes, list[str]]] = {
    "from-line-in-body": (
        mail("[PATCH] one", "Body.\n\nFrom the start this was wrong.\nFrom: not a header\n\n"),
        ["one"],
    ),
    "asctime-from-line-in-body": (
        mail("[PATCH] one", "Quoted:\n\nFrom x Mon Sep 17 00:00:00 2001\nbody text\n\n"),
        ["one"],
    ),
    "rfc2047-control-characters": (
        mail("=?UTF-8?q?evil=0D=0AInjected:_x=1B[31mred=07?="),
        ["evil Injected: x [31mred"],
    ),
    "rfc2047-bidi-override": (mail("=?UTF-8?q?abc=E2=80=AEgnp.exe?="), ["abc gnp.exe"]),
    "rich-markup-subject": (
        mail("[PATCH] fix [/] and [bold]x[/bold]"),
        ["fix [/] and [bold]x[/bold]"],
    ),
    "unknown-charset": (mail("=?x-no-such-charset?q?abc?="), ["=?x-no-such-charset?q?abc?="]),
    "long-subject": (mail("[PATCH] " + "s" * 3000), ["s" * 497 + "..."]),
    "two-messages": (
        mail("[PATCH 1/2] one") + mail("[PATCH 2/2] two", diff=MAIN_DIFF),
        ["one", "two"],
    ),
}


@pytest.mark.parametrize("case", sorted(MBOX_CASES))
def test_hostile_mbox(project: Sandbox, run: Run, case: str) -> None:
    data, titles = MBOX_CASES[case]
    before = project.snapshot()
    result = _import(project, run, data)
    assert result.code == 0, result.err
    assert _titles(project) == titles
    assert "\x1b" not in result.out and "\r" not in result.out
    allowed = ("cache", "in.mbox", "project/cleanroom", "project/patches/demo", "project/docs")
    assert project.unexpected(before, allowed) == []
    assert run("verify", "--all", "--series", str(project.series)).code == 0


NEW_FILE_DIFF = (
    "diff --git a/new.txt b/new.txt\nnew file mode 100644\n--- /dev/null\n+++ b/new.txt\n"
    "@@ -0,0 +1,2 @@\n+one\n+two\n"
)
QP_DIFF = MAIN_DIFF.replace("+\treturn 1;", "+\tint x =3D 1;\n+\treturn 1;").replace(
    "+1,4", "+1,5"
)


def _encoded(cte: str, body: str, multipart: bool = False) -> bytes:
    head = mail("[PATCH] enc").split(b"\n\n", 1)[0].decode()
    if not multipart:
        return f"{head}\nMIME-Version: 1.0\nContent-Transfer-Encoding: {cte}\n\n{body}\n".encode()
    return (
        f'{head}\nMIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="b0"\n\n'
        f"--b0\nContent-Type: text/plain\n\nSee the attachment.\n"
        f"--b0\nContent-Type: text/x-patch\nContent-Transfer-Encoding: {cte}\n\n{body}\n"
        f"--b0--\n"
    ).encode()


ENCODED_MAILS: dict[str, tuple[bytes, str | None]] = {
    # `=3D` is `=` encoded: stored as is, git apply would add `int x =3D 1;`
    "quoted-printable": (_encoded("quoted-printable", "---\n" + QP_DIFF), "quoted-printable"),
    "quoted-printable-attachment": (
        _encoded("quoted-printable", QP_DIFF, multipart=True),
        "quoted-printable",
    ),
    "base64": (_encoded("base64", base64.encodebytes(MAIN_DIFF.encode()).decode()), "base64"),
    "base64-attachment": (
        _encoded("base64", base64.encodebytes(MAIN_DIFF.encode()).decode(), multipart=True),
        "base64",
    ),
    # an encoding that changes none of the diff's bytes: kept, byte for byte
    "quoted-printable-no-op": (_encoded("quoted-printable", "---\n" + MAIN_DIFF), None),
    # every line converted to CRLF on the way (git writes a diff's header lines with LF):
    # git apply would write CR bytes into the files it creates; git am strips them
    "crlf-converted": (mail("[PATCH] enc", diff=NEW_FILE_DIFF).replace(b"\n", b"\r\n"), "CRLF"),
}


@pytest.mark.parametrize("case", sorted(ENCODED_MAILS))
def test_a_transfer_encoded_or_converted_diff_is_refused(
    project: Sandbox, run: Run, case: str
) -> None:
    """git apply reads a stored patch as it is: a diff that only decoding would give (a mail
    part in quoted-printable or base64) would apply its encoded text, or nothing; one whose
    line ends became CRLF on the way would write CR bytes into the files."""
    data, encoding = ENCODED_MAILS[case]
    before = project.snapshot()
    result = _import(project, run, data, "--json")
    if encoding is None:
        assert result.code == 0, result.err
        assert (project.series / "0001-enc.patch").read_bytes() == data
        return
    refused(result, 5, "line ends were converted to CRLF" if encoding == "CRLF" else
            f"its diff is {encoding}-encoded")  # fmt: skip
    assert result.json()["exit_code"] == 5
    assert project.unexpected(before, ("cache", "in.mbox", "project/cleanroom/demo/.git")) == []


def test_mboxrd_quoted_from_lines_are_unquoted_once(project: Sandbox, run: Run) -> None:
    body = "Keep:\n>From here\n>>From there\n\n"
    result = _import(project, run, mail("[PATCH] quoted", body))
    assert result.code == 0, result.err
    stored = (project.series / "0001-quoted.patch").read_bytes()
    assert b"\nFrom here\n>From there\n" in stored
    assert stored.endswith(b"@@ -1 +1,2 @@\n hello\n+world\n-- \n2.39.5\n\n")


def test_import_never_overwrites_a_patch_file(project: Sandbox, run: Run) -> None:
    (project.series / "0001-one.patch").write_bytes(b"my own work\n")
    before = project.snapshot()
    result = _import(project, run, mail("[PATCH] one"), "--json")
    refused(result, 8, "refusing to overwrite")
    assert result.json()["exit_code"] == 8
    assert project.unexpected(before, ("cache", "in.mbox", "project/cleanroom/demo/.git")) == []


def test_quilt_duplicates_get_unique_ids(project: Sandbox, run: Run) -> None:
    # The name's number (7) is kept while it is not below the patch's place in the stack, so
    # importing the same name twice derives the same id twice: the second gets `-2`.
    quilt = project.root / "quilt"
    quilt.mkdir()
    # a number at or above the patch's place is kept (a lower one is replaced by the place:
    # README "import"), so importing 0005-fix twice gives the same id twice
    (quilt / "0005-fix.patch").write_bytes(mail("[PATCH] fix"))
    (quilt / "series").write_bytes(b"0005-fix.patch\n")
    s = str(project.series)
    assert run("import", str(quilt / "series"), "--series", s).code == 0
    (quilt / "0005-fix.patch").write_bytes(mail("[PATCH] fix", diff=MAIN_DIFF))
    assert run("import", str(quilt / "series"), "--series", s).code == 0
    from patchctl.series.model import load_series

    assert load_series(project.series).ids() == ("0005-fix", "0005-fix-2")


QUILT_CASES: dict[str, tuple[bytes, str]] = {
    "dotdot-name": (b"../../victim.txt\n", "is not a relative name"),
    "absolute-name": (b"/etc/passwd\n", "is not a relative name"),
    "not-utf8-name": (b"caf\xe9.patch\n", "not UTF-8"),
    "escape-in-name": (b"a\x1b[31m.patch\n", "is not a relative name"),
    "unsupported-option": (b"a.patch -p0\n", "unsupported patch options"),
}


@pytest.mark.parametrize("case", sorted(QUILT_CASES))
def test_hostile_quilt_series(project: Sandbox, run: Run, case: str) -> None:
    text, needle = QUILT_CASES[case]
    quilt = project.root / "quilt"
    quilt.mkdir()
    (quilt / "a.patch").write_bytes(mail("[PATCH] a"))
    (quilt / "series").write_bytes(text)
    before = project.snapshot()
    refused(run("import", str(quilt / "series"), "--series", str(project.series)), 5, needle)
    assert project.unexpected(before) == []


@pytest.mark.parametrize("kind", ["quilt", "format-patch"])
def test_a_patch_symlinked_out_of_its_directory(project: Sandbox, run: Run, kind: str) -> None:
    source = project.root / "source"
    source.mkdir()
    (source / "a.patch").symlink_to(project.root / "outside" / "victim.txt")
    if kind == "quilt":
        (source / "series").write_bytes(b"a.patch\n")
    before = project.snapshot()
    refused(run("import", str(source), "--series", str(project.series)), 5, "outside")
    assert project.unexpected(before) == []


def test_an_import_source_over_the_size_limit(
    project: Sandbox, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATCHCTL_MAX_PATCH_BYTES", "200")
    refused(_import(project, run, mail("[PATCH] big")), 5, "PATCHCTL_MAX_PATCH_BYTES")


@pytest.mark.parametrize("kind", ["quilt", "format-patch"])
def test_an_import_over_the_total_limit_stops_before_reading_the_rest(
    project: Sandbox, run: Run, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Each file under the patch limit, all of them together over the import limit."""
    source = project.root / "incoming"
    source.mkdir()
    names = [f"{n:04d}-part.patch" for n in range(1, 6)]
    for name in names:
        (source / name).write_bytes(b"x" * 300)
    if kind == "quilt":
        (source / "series").write_bytes(b"".join(n.encode() + b"\n" for n in names))
    monkeypatch.setenv("PATCHCTL_MAX_IMPORT_BYTES", "1000")  # 4 files of 300 bytes: over it
    before = project.snapshot()
    result = run("import", str(source), "--series", str(project.series))
    refused(result, 5, "PATCHCTL_MAX_IMPORT_BYTES")
    assert "first 4 patch files" in result.err
    assert project.unexpected(before) == []


def test_id_generation_is_bounded() -> None:
    from patchctl.errors import ConfigError
    from patchctl.ops.import_.sources import MAX_SUFFIX, unique_id

    taken = {"0001-x", *(f"0001-x-{n}" for n in range(2, MAX_SUFFIX + 1))}
    with pytest.raises(ConfigError, match="no free id"):
        unique_id("0001-x", taken)
    assert unique_id("0001-" + "y" * 63, {"0001-" + "Y" * 63}) == "0001-" + "y" * 61 + "-2"


# ============================================================================ environments


def _hostile_home(root: Path) -> dict[str, str]:
    home = root / "outside" / "home"
    (home / ".config" / "git").mkdir(parents=True)
    config = (
        f'[url "ext::sh -c touch% {root}/PWNED% #"]\n\tinsteadOf = /\n'
        f"[core]\n\tfsmonitor = touch {root}/PWNED\n\thooksPath = {root}/outside\n"
        f"[include]\n\tpath = {root}/outside/included\n"
    )
    (home / ".gitconfig").write_text(config)
    (home / ".config" / "git" / "config").write_text(config)
    (root / "outside" / "included").write_text(f"[core]\n\tsshCommand = touch {root}/PWNED\n")
    return {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}


ENV_CASES: dict[str, Callable[[Path], dict[str, str]]] = {
    "GIT_DIR-and-GIT_WORK_TREE": lambda r: {
        "GIT_DIR": f"{r}/outside/victim-repo/.git",
        "GIT_WORK_TREE": f"{r}/outside/victim-repo",
    },
    "GIT_INDEX_FILE": lambda r: {"GIT_INDEX_FILE": f"{r}/outside/victim-index"},
    "GIT_OBJECT_DIRECTORY": lambda r: {"GIT_OBJECT_DIRECTORY": f"{r}/outside/objects"},
    "GIT_ALTERNATE_OBJECT_DIRECTORIES": lambda r: {
        "GIT_ALTERNATE_OBJECT_DIRECTORIES": f"{r}/outside/victim-repo/.git/objects"
    },
    "GIT_CONFIG_COUNT-fsmonitor": lambda r: {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "core.fsmonitor",
        "GIT_CONFIG_VALUE_0": f"touch {r}/PWNED",
    },
    "GIT_CONFIG_PARAMETERS": lambda r: {
        "GIT_CONFIG_PARAMETERS": f"'core.fsmonitor'='touch {r}/PWNED'"
    },
    "GIT_CONFIG_GLOBAL": lambda r: {"GIT_CONFIG_GLOBAL": f"{r}/outside/home/.gitconfig"},
    "GIT_TRACE-files": lambda r: {
        "GIT_TRACE": f"{r}/outside/trace",
        "GIT_TRACE2_EVENT": f"{r}/outside/trace2",
        "GIT_TRACE_PACKET": f"{r}/outside/trace-packet",
    },
    "GIT_EXTERNAL_DIFF": lambda r: {"GIT_EXTERNAL_DIFF": f"touch {r}/PWNED"},
    "GIT_SSH_COMMAND": lambda r: {"GIT_SSH_COMMAND": f"touch {r}/PWNED", "GIT_SSH": "/bin/false"},
    "GIT_EXEC_PATH": lambda r: {"GIT_EXEC_PATH": f"{r}/outside"},
    "GIT_TEMPLATE_DIR": lambda r: {"GIT_TEMPLATE_DIR": f"{r}/outside/templates"},
    "hostile-home-gitconfig": _hostile_home,
    "editors-and-pagers": lambda r: {
        "EDITOR": f"touch {r}/PWNED",
        "VISUAL": f"touch {r}/PWNED",
        "PAGER": f"touch {r}/PWNED",
        "GIT_EDITOR": f"touch {r}/PWNED",
        "GIT_PAGER": f"touch {r}/PWNED",
    },
}


@pytest.mark.parametrize("case", sorted(ENV_CASES))
def test_hostile_environment(
    box: Sandbox, run: Run, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """Apply, capture and verify under the environment; the bytes and the world stay put."""
    new_repo(box.root / "outside" / "victim-repo", {"v.txt": b"v\n"})
    hooks = box.root / "outside" / "templates" / "hooks"
    hooks.mkdir(parents=True)
    (hooks / "post-checkout").write_text(f"#!/bin/sh\ntouch {box.root}/PWNED\n")
    (hooks / "post-checkout").chmod(0o755)
    upstream = new_repo(box.upstream / "repo", FILES)
    git, tree = upstream.git, upstream.tree
    with (box.upstream / "repo" / ".git" / "config").open("a") as config:
        config.write(
            f"[core]\n\tfsmonitor = touch {box.root}/PWNED\n"
            f"[uploadpack]\n\tpackObjectsHook = touch {box.root}/PWNED\n"
        )
    (box.series / "series.yaml").write_text(
        f"version: 1\nupstream:\n  kind: git\n  url: ../../../upstream/repo\n"
        f"  commit: {git.rev_parse('HEAD')}\n  tree: {tree}\npatches: []\n"
    )
    for name, value in ENV_CASES[case](box.root).items():
        monkeypatch.setenv(name, value)
    before = box.snapshot()
    s = str(box.series)
    assert run(*apply_args(box)).code == 0
    assert run("new", "0001-a", "--title", "a", "--series", s).code == 0
    (box.room / "main.c").write_bytes(b"int main(void)\n{\n\treturn 1;\n}\n")
    result = run("capture", "0001-a", "--series", s)
    assert result.code == 0, result.err
    assert run("verify", "--all", "--series", s).code == 0
    patch = (box.series / "0001-a.patch").read_bytes()
    assert b"--- a/main.c\n+++ b/main.c\n@@ -1,4 +1,4 @@\n" in patch  # pins held
    assert not (box.root / "PWNED").exists()
    allowed = (
        "cache",
        "project/cleanroom",
        "project/patches/demo",
        "project/docs/UPSTREAM_SYNC.md",
    )
    assert box.unexpected(before, allowed) == []


# ============================================================================ command line


def test_workdir_symlink_is_followed_and_left_alone(box: Sandbox, run: Run) -> None:
    archive_series(box, build(box.upstream / "pkg-1.0.tar.gz", SAMPLE))
    target = box.root / "outside" / "room"
    target.mkdir()
    link = box.project / "room-link"
    link.symlink_to(target)
    result = run(*apply_args(box, "--workdir", str(link), "--json"))
    assert result.code == 0, result.err
    assert result.json()["cleanroom"] == str(target)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert (target / "README").read_bytes() == b"hello\n"


CLI_CASES: dict[str, tuple[Callable[[Sandbox], tuple[str, ...]], int, str]] = {
    "workdir-dangling-symlink": (
        lambda b: apply_args(b, "--workdir", str(_dangling(b))),
        2,
        "does not exist",
    ),
    "workdir-under-a-file": (
        lambda b: apply_args(b, "--workdir", str(b.root / "victim.txt" / "room")),
        2,
        "not a directory",
    ),
    "workdir-too-long": (lambda b: apply_args(b, "--workdir", "/tmp/" + "w" * 5000), 2, "too long"),
    "workdir-long-component": (lambda b: apply_args(b, "--workdir", "w" * 300), 2, "too long"),
    "workdir-filesystem-root": (lambda b: apply_args(b, "--workdir", "/"), 2, "file system root"),
    "workdir-foreign-directory": (
        lambda b: apply_args(b, "--workdir", str(b.project)),
        8,
        "not a patchctl clean room",
    ),
    "series-too-long": (lambda b: ("docs", "--series", "s" * 5000), 2, "too long"),
    "series-under-a-file": (
        lambda b: ("docs", "--series", str(b.root / "victim.txt" / "s")),
        2,
        "not a directory",
    ),
    "capture-id-dotdot": (
        lambda b: ("capture", "../../victim", "--series", str(b.series)),
        15,
        "no patch with id",
    ),
    "verify-id-slash": (
        lambda b: ("verify", "0001-a/../x", "--series", str(b.series)),
        15,
        "no patch with id",
    ),
    "upto-dotdot": (lambda b: apply_args(b, "--upto", "../x"), 15, "no patch with id"),
    "new-id-dotdot": (
        lambda b: ("new", "0001-../x", "--title", "t", "--series", str(b.series)),
        5,
        "not NNNN-slug",
    ),
    "new-title-escape": (
        lambda b: ("new", "0001-x", "--title", "a\x1b]0;pwned\x07", "--series", str(b.series)),
        5,
        "control characters",
    ),
    "new-title-newline": (
        lambda b: ("new", "0001-x", "--title", "a\nSubject: b", "--series", str(b.series)),
        5,
        "control characters",
    ),
    "new-marker-newline": (
        lambda b: ("new", "0001-x", "--title", "t", "--marker", "a\nb", "--series", str(b.series)),
        5,
        "control characters",
    ),
    "new-origin-carriage-return": (
        lambda b: ("new", "0001-x", "--title", "t", "--origin", "a\rb", "--series", str(b.series)),
        5,
        "control characters",
    ),
    "new-over-an-existing-file": (
        lambda b: ("new", "0007-mine", "--title", "t", "--series", str(b.series)),
        8,
        "refusing to overwrite",
    ),
    "import-source-too-long": (
        lambda b: ("import", "/tmp/" + "i" * 5000, "--series", str(b.series)),
        1,
        "File name too long",
    ),
    "unknown-option": (lambda b: ("cleanroom", "apply", "--bogus"), 2, "No such option"),
    "build-target-option": (
        lambda b: ("build", "-t", f"-f{b.root / 'evil.mk'}", "--series", str(b.series)),
        1,
        "starts with '-'",
    ),
    "build-target-make-variable": (
        lambda b: ("build", "-t", f"CC=touch {b.root / 'x'}", "--series", str(b.series)),
        1,
        "is not a build target name",
    ),
}


def _dangling(box: Sandbox) -> Path:
    link = box.root / "dangling"
    link.symlink_to(box.root / "nowhere")
    return link


@pytest.mark.parametrize("case", sorted(CLI_CASES))
def test_hostile_command_line(box: Sandbox, run: Run, case: str) -> None:
    archive_series(box, build(box.upstream / "pkg-1.0.tar.gz", SAMPLE))
    assert run(*apply_args(box)).code == 0
    (box.series / "0007-mine.patch").write_bytes(b"mine\n")
    make_args, code, needle = CLI_CASES[case]
    args = make_args(box)
    before = box.snapshot()
    result = run(*args, "--json")
    refused(result, code, needle)
    assert result.json()["ok"] is False and result.json()["exit_code"] == code
    assert box.unexpected(before) == []


def test_internal_errors_are_json_too(
    box: Sandbox, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("kaboom \x1b[31m")

    monkeypatch.setattr("patchctl.ops.docs.update_docs", boom)
    result = run("docs", "--series", str(box.series), "--json")
    assert result.code == 4
    assert result.json() == {
        "ok": False,
        "error": "InternalError",
        "exit_code": 4,
        "message": "RuntimeError: kaboom \\x1b[31m",
    }
    assert "\x1b" not in result.err


def test_rich_markup_in_a_project_path_is_printed_as_text(tmp_path: Path, run: Run) -> None:
    box = Sandbox(tmp_path / "a[/]b [bold]")
    box.plant_victims()
    archive_series(box, build(box.upstream / "pkg-1.0.tar.gz", SAMPLE))
    result = run(*apply_args(box))
    assert result.code == 0, result.err
    assert f"clean room created: {box.room}" in result.out


# ============================================================================ docs location


def test_a_series_outside_patches_writes_its_registry_in_its_own_root(
    box: Sandbox, run: Run
) -> None:
    """The issue's case: a series in <x>/s wrote <x>/../docs; now <x>/docs (never above)."""
    series = box.root / "x" / "s"
    series.mkdir(parents=True)
    (series / "series.yaml").write_text(_with_upstream())
    before = box.snapshot()
    assert run("docs", "--series", str(series)).code == 0
    assert box.unexpected(before, ("x", "cache/journal.key")) == []
    assert (box.root / "x" / "docs" / "UPSTREAM_SYNC.md").is_file()
    assert not (box.root / "docs" / "UPSTREAM_SYNC.md").exists()


def test_two_series_in_one_patches_folder_keep_their_own_sections(box: Sandbox, run: Run) -> None:
    other = box.project / "patches" / "other"
    other.mkdir()
    for series, marker in ((box.series, "// demo"), (other, "// other")):
        (series / "series.yaml").write_text(
            _with_patch(f'{{id: 0001-a, file: a.patch, markers: ["{marker}"]}}')
        )
        (series / "a.patch").write_bytes(f"--- a/f\n+++ b/f\n@@ -0,0 +1 @@\n+{marker}\n".encode())
        assert run("docs", "--series", str(series)).code == 0
    registry = (box.project / "docs" / "UPSTREAM_SYNC.md").read_text()
    assert "`patches/demo`" in registry and "`// demo`" in registry
    assert "`patches/other`" in registry and "`// other`" in registry
    for series in (box.series, other):
        assert run("docs", "--check", "--series", str(series)).code == 0
    shutil.rmtree(other)  # a removed series' section goes with the next write
    assert run("docs", "--check", "--series", str(box.series)).code == 16
    assert run("docs", "--series", str(box.series)).code == 0
    assert "patches/other" not in (box.project / "docs" / "UPSTREAM_SYNC.md").read_text()


def test_a_docs_symlink_out_of_the_project_is_refused(box: Sandbox, run: Run) -> None:
    shutil.rmtree(box.project / "docs")
    (box.project / "docs").symlink_to(box.root / "outside")
    (box.series / "series.yaml").write_text(_with_upstream())
    before = box.snapshot()
    refused(run("docs", "--series", str(box.series)), 8, "outside the project root")
    assert box.unexpected(before) == []


def test_a_cleanroom_symlink_out_of_the_project_is_refused(box: Sandbox, run: Run) -> None:
    """A `cleanroom` committed as a symlink would carry the default clean room (a whole tree,
    its builds, later its deletion on a pin change) out of the project; `--workdir` is how a
    clean room lives elsewhere."""
    archive_series(box, build(box.upstream / "pkg-1.0.tar.gz", SAMPLE))
    (box.project / "cleanroom").symlink_to(box.root / "outside")
    before = box.snapshot()
    for args in (apply_args(box), ("cleanroom", "status", "--series", str(box.series))):
        refused(run(*args), 8, "outside the project root")
    (box.project / "cleanroom").unlink()
    (box.project / "cleanroom").mkdir()
    (box.project / "cleanroom" / "demo").symlink_to(box.root / "outside")  # the room itself
    refused(run(*apply_args(box)), 8, "outside the project root")
    assert box.unexpected(before, ("cache", "project/cleanroom")) == []
    room = box.root / "outside" / "room"
    assert run(*apply_args(box, "--workdir", str(room))).code == 0
    assert (room / "README").read_bytes() == b"hello\n"


def test_a_hand_written_registry_is_never_overwritten(box: Sandbox, run: Run) -> None:
    (box.project / "docs" / "UPSTREAM_SYNC.md").write_text("# our own sync notes\n")
    (box.series / "series.yaml").write_text(_with_upstream())
    before = box.snapshot()
    refused(run("docs", "--series", str(box.series)), 8, "not generated by patchctl")
    assert box.unexpected(before) == []


def test_a_huge_registry_is_refused_before_it_is_read(
    box: Sandbox, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = box.project / "docs" / "UPSTREAM_SYNC.md"
    registry.parent.mkdir(parents=True, exist_ok=True)
    registry.write_bytes(b"<!-- generated by patchctl -->\n" + b"x" * 4096)
    (box.series / "series.yaml").write_text(_with_upstream())
    monkeypatch.setenv("PATCHCTL_MAX_REGISTRY_BYTES", "1024")
    before = box.snapshot()
    refused(run("docs", "--series", str(box.series)), 5, "PATCHCTL_MAX_REGISTRY_BYTES")
    assert box.unexpected(before) == []


def test_a_readme_symlink_is_replaced_not_written_through(box: Sandbox, run: Run) -> None:
    (box.series / "series.yaml").write_text(_with_upstream())
    (box.series / "README.md").symlink_to(box.root / "victim.txt")
    assert run("docs", "--series", str(box.series)).code == 0
    assert not (box.series / "README.md").is_symlink()
    assert box.victims_intact()


# ========================================================================== generated docs content

MARKDOWN = "![x](https://evil.example/p.png) [click](https://evil.example) <img src=x>"


def test_markdown_from_mails_and_file_names_stays_text_in_the_docs(
    project: Sandbox, run: Run
) -> None:
    """README.md and the registry are rendered (a forge shows them): a mail subject, an
    Origin header or a file name with a backtick must not become an image, a link or HTML."""
    name = "tick`" + MARKDOWN.replace("/", "_")  # a file name cannot hold '/'
    diff = (
        f"diff --git a/{name} b/{name}\nnew file mode 100644\n--- /dev/null\n+++ b/{name}\n"
        "@@ -0,0 +1 @@\n+// patchctl md\n"
    )
    data = mail("[PATCH] " + MARKDOWN, diff=diff).replace(
        b"Subject:", f"Origin: {MARKDOWN}\nSubject:".encode()
    )
    result = _import(project, run, data)
    assert result.code == 0, result.err
    readme = (project.series / "README.md").read_text()
    registry = (project.project / "docs" / "UPSTREAM_SYNC.md").read_text()
    link = re.compile(r"(?<!\\)\[[^\]]*(?<!\\)\]\(")  # [text]( or ![alt]( unescaped
    for doc in (readme, registry):
        assert not link.search(doc) and not re.search(r"(?<!\\)<img", doc), doc
    assert "\\[click\\](https://evil.example)" in readme  # escaped: shown as typed
    assert run("docs", "--check", "--series", str(project.series)).code == 0


# ============================================================================ the matrix's counts

# Every test of this module belongs to one row of the matrix in docs/reliability.md.
CATEGORY = {
    "archives: hostile members and limits": (
        "test_hostile_archive",
        "test_hostile_tar_without_the_stdlib_filter",
        "test_compression_bomb_stops_at_its_header",
        "test_a_member_declaring_a_terabyte_is_refused_at_its_header",
        "test_an_extension_header_bomb_is_refused_before_it_is_read",
        "test_a_bad_limit_variable_is_a_config_error",
        "test_safe_archive_with_internal_links_and_a_smuggled_git_dir",
        "test_a_path_git_refuses_to_stage_is_exit_7_naming_the_member",
    ),
    "archives: truncated and corrupt": (
        "test_damaged_archive_is_exit_7_with_the_library_message",
        "test_zip_with_a_bad_crc_in_its_last_member_leaves_nothing",
    ),
    "package index answers": (
        "test_hostile_package_index",
        "test_a_download_over_the_limit_keeps_nothing",
    ),
    "series files and values": (
        "test_hostile_series_file",
        "test_the_alias_bomb_stops_at_its_first_alias",
        "test_a_huge_series_file_is_refused_before_parsing",
        "test_a_patch_file_symlinked_out_of_the_series_is_refused",
        "test_a_patch_file_that_is_a_directory_is_refused",
        "test_a_patch_file_over_the_size_limit_is_refused",
        "test_a_git_pin_that_names_no_commit_or_no_directory",
        "test_a_git_upstream_over_the_tree_limits_is_refused_before_checkout",
    ),
    "URLs accepted": (
        "test_allowed_url_forms_load",
        "test_credentials_in_a_url_are_never_printed_or_written",
    ),
    "patches and capture": (
        "test_hostile_patch",
        "test_a_binary_patch_over_the_blob_limit_is_refused_before_git_apply",
        "test_capture_of_odd_paths_round_trips",
        "test_capture_validates_before_its_first_write",
        "test_capture_checks_every_target_is_writable_first",
        "test_binary_and_crlf_patches_import_and_verify",
    ),
    "upstream attributes": (
        "test_upstream_merge_attributes_never_decide_a_rebase",
        "test_a_patch_shipping_gitattributes_changes_no_bytes",
    ),
    "mboxes and quilt series": (
        "test_hostile_mbox",
        "test_a_transfer_encoded_or_converted_diff_is_refused",
        "test_mboxrd_quoted_from_lines_are_unquoted_once",
        "test_import_never_overwrites_a_patch_file",
        "test_quilt_duplicates_get_unique_ids",
        "test_hostile_quilt_series",
        "test_a_patch_symlinked_out_of_its_directory",
        "test_an_import_source_over_the_size_limit",
        "test_an_import_over_the_total_limit_stops_before_reading_the_rest",
        "test_id_generation_is_bounded",
    ),
    "environments": ("test_hostile_environment",),
    "command line": (
        "test_workdir_symlink_is_followed_and_left_alone",
        "test_hostile_command_line",
        "test_internal_errors_are_json_too",
        "test_rich_markup_in_a_project_path_is_printed_as_text",
    ),
    "generated docs content": ("test_markdown_from_mails_and_file_names_stays_text_in_the_docs",),
    "generated docs location": (
        "test_a_series_outside_patches_writes_its_registry_in_its_own_root",
        "test_two_series_in_one_patches_folder_keep_their_own_sections",
        "test_a_docs_symlink_out_of_the_project_is_refused",
        "test_a_cleanroom_symlink_out_of_the_project_is_refused",
        "test_a_hand_written_registry_is_never_overwritten",
        "test_a_huge_registry_is_refused_before_it_is_read",
        "test_a_readme_symlink_is_replaced_not_written_through",
    ),
}


def cases_of(name: str) -> int:
    """How many cases a test function runs (the product of its parametrize lists)."""
    count = 1
    for mark in getattr(globals()[name], "pytestmark", []):
        if mark.name == "parametrize":
            count *= len(mark.args[1])
    return count


def test_reliability_doc_counts_match_the_matrix() -> None:
    tests = [
        n
        for n in globals()
        if n.startswith("test_") and n != "test_reliability_doc_counts_match_the_matrix"
    ]
    categorized = [t for names in CATEGORY.values() for t in names]
    assert sorted(categorized) == sorted(tests), "give every hostile test a CATEGORY row"
    doc = (REPO / "docs" / "reliability.md").read_text()
    total = 0
    for row, names in CATEGORY.items():
        count = sum(cases_of(n) for n in names)
        total += count
        assert f"| {row} | {count} |" in doc, f"docs/reliability.md: row {row!r} should say {count}"
    assert f"| **total** | **{total}** |" in doc
