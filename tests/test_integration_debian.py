"""Integration: import and verify a real third-party quilt series (Debian's `less`).

The source package is fetched with `apt-get source --download-only` through a test-owned apt
configuration (support/debian.py: a deb-src line for bookworm in a private sources.list, private
lists and cache dirs: the system's apt setup is never touched), and cached between runs in
`$PATCHCTL_TEST_CACHE` (default ~/.cache/patchctl-test). The orig tarball becomes an `archive`
upstream; the Debian patches are imported byte-for-byte, then verified forward and reverse,
and refreshed so that strict `cleanroom apply` takes them (their headers kept byte for byte).
The cached files are checked against the sha256 sums the .dsc lists on every use.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

import pytest
from support.corpus import quilt_series
from support.debian import AptMissing, DebianSource, fetch_debian_source, source_files
from unidiff import PatchSet

from patchctl.cli.main import main
from patchctl.errors import PatchDrift
from patchctl.ops.cleanroom.apply import cleanroom_apply
from patchctl.ops.refresh import refresh
from patchctl.series.model import load_series
from patchctl.series.parts import split_patch
from patchctl.upstream.archive import extract_archive

PACKAGE = "less"

pytestmark = pytest.mark.integration


def _cli(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(args))
    return code, capsys.readouterr().out


@pytest.fixture(scope="module")
def debian_source() -> DebianSource:
    """less's source package, fetched once and checked against the .dsc's sha256 sums on
    every use."""
    try:
        return source_files(fetch_debian_source(PACKAGE))
    except AptMissing as exc:
        pytest.skip(str(exc))


def test_import_and_verify_real_quilt_series(
    tmp_path: Path, debian_source: DebianSource, capsys: pytest.CaptureFixture[str]
) -> None:
    orig = debian_source.orig
    debian = tmp_path / "debian"
    extract_archive(debian_source.debian, debian)  # strips debian/
    quilt = debian / "patches"
    listed = [name for name, _options in quilt_series(quilt / "series")]
    assert len(listed) >= 3, "expected a real multi-patch quilt series"

    series_dir = tmp_path / "project" / "patches" / PACKAGE
    series_dir.mkdir(parents=True)
    sha = hashlib.sha256(orig.read_bytes()).hexdigest()
    (series_dir / "series.yaml").write_text(
        f"version: 1\nupstream:\n  kind: archive\n  path: {orig}\n  sha256: {sha}\npatches: []\n"
    )
    cleanroom_apply(series_dir)  # materialize the orig tarball as the clean room's base

    code, out = _cli("import", str(quilt), "--series", str(series_dir), "--json", capsys=capsys)
    assert code == 0, out
    imported = json.loads(out)["imported"]
    assert len(imported) == len(listed)
    # Debian's quilt accepts offsets; import says which patches strict apply will refuse
    assert any("offset" in (entry["drift"] or "") for entry in imported)
    series = load_series(series_dir)
    for entry, name in zip(series.patches, listed, strict=True):
        assert entry.imported
        assert series.patch_path(entry).read_bytes() == (quilt / name).read_bytes()

    code, out = _cli("verify", "--all", "--series", str(series_dir), "--json", capsys=capsys)
    report = json.loads(out)
    assert code == 0, out
    assert report["ok"] and len(report["patches"]) == len(listed)
    for patch in report["patches"]:
        steps = {s["step"]: s["ok"] for s in patch["steps"]}
        assert steps["forward"] and steps["reverse"] and steps["chain"], patch

    # Flip one byte inside a hunk of the last patch: verify must now fail (exit 12).
    last = series.patch_path(series.patches[-1])
    data = last.read_bytes()
    hunk = data.index(b"\n@@ ") + 1
    body = data.index(b"\n-", hunk) + 2
    last.write_bytes(data[:body] + bytes([data[body] ^ 0x20]) + data[body + 1 :])
    code, out = _cli("verify", "--all", "--series", str(series_dir), capsys=capsys)
    assert code == 12, out


def test_strict_apply_reports_debian_offsets_as_drift(
    tmp_path: Path, debian_source: DebianSource
) -> None:
    """Debian's quilt accepts hunks at an offset; patchctl's strict clean-room apply does not.

    This pins the known behaviour: `verify` (tree-exact) passes on the imported series, while
    `cleanroom apply` stops with PatchDrift (exit 10) at the first patch that needs an offset.
    """
    orig = debian_source.orig
    debian = tmp_path / "debian"
    extract_archive(debian_source.debian, debian)
    series_dir = tmp_path / "project" / "patches" / PACKAGE
    series_dir.mkdir(parents=True)
    sha = hashlib.sha256(orig.read_bytes()).hexdigest()
    (series_dir / "series.yaml").write_text(
        f"version: 1\nupstream:\n  kind: archive\n  path: {orig}\n  sha256: {sha}\npatches: []\n"
    )
    cleanroom_apply(series_dir)
    assert main(["import", str(debian / "patches"), "--series", str(series_dir)]) == 0
    with pytest.raises(PatchDrift, match="offset"):
        cleanroom_apply(series_dir)

    # refresh: the drifted patches now apply exactly, their headers and trailers byte for byte
    before = {p.id: series_bytes(series_dir, p.id) for p in load_series(series_dir).patches}
    result = refresh(series_dir)
    assert result.refreshed, "expected Debian's offsets to need a refresh"
    for report in result.patches:
        after = series_bytes(series_dir, report.id)
        if report.refreshed:
            old, new = split_patch(before[report.id]), split_patch(after)
            assert (old.header, old.trailer) == (new.header, new.trailer), report.id
        else:
            assert after == before[report.id], report.id
    applied = cleanroom_apply(series_dir)  # strict
    assert len(applied.applied) == len(before)
    assert main(["verify", "--all", "--series", str(series_dir)]) == 0


def series_bytes(series_dir: Path, patch_id: str) -> bytes:
    series = load_series(series_dir)
    return series.patch_path(patch_id).read_bytes()


def _first_removed_line(data: bytes) -> tuple[str, int, bytes] | None:
    """(file, first line of its hunk's context in the old file, a removed line) of the first hunk
    that removes a line, read from patch bytes."""
    for patched in PatchSet.from_string(data, encoding="latin-1"):
        for hunk in patched:
            for line in hunk:
                if line.is_removed and len(line.value.strip()) > 8:
                    return patched.path, hunk.source_start, line.value.encode("latin-1")
    return None


def _next_release(orig: Path, series_dir: Path, target: Path) -> tuple[Path, str, Path]:
    """A made-up next upstream release of the real orig tarball (archive `target`): lines
    inserted five lines above the first hunk of every file the series patches (so hunks move),
    and the last patch's removed line changed upstream (a real conflict). Returns the archive,
    the conflicted file and the last patch's path."""
    tree = target.parent / "next-release"
    extract_archive(orig, tree)
    series = load_series(series_dir)
    starts: dict[str, int] = {}
    for patch in series.patches:
        for patched in PatchSet.from_string(
            series.patch_path(patch).read_bytes(), encoding="latin-1"
        ):
            if patched.is_modified_file and len(patched):
                starts.setdefault(patched.path, patched[0].source_start)
    for name, start in starts.items():
        lines = (tree / name).read_bytes().splitlines(keepends=True)
        if start > 6:
            lines[start - 6 : start - 6] = [b"next release: a moved line\n"] * 3
        (tree / name).write_bytes(b"".join(lines))
    last = series.patch_path(series.patches[-1])
    found = _first_removed_line(last.read_bytes())
    assert found is not None, "the last Debian patch removes no line"
    name, _start, removed = found
    data = (tree / name).read_bytes()
    assert data.count(removed) == 1, f"{removed!r} is not unique in {name}"
    (tree / name).write_bytes(data.replace(removed, removed.rstrip(b"\n") + b" /* next */\n"))
    with tarfile.open(target, "w:gz") as tar:
        tar.add(tree, arcname="less-next")
    return target, name, last


def _keep_the_patch_side(path: Path) -> None:
    """Resolve every diff3 conflict block of `path` by the patch's side (after =======)."""
    out, side = [], "common"
    for line in path.read_bytes().splitlines(keepends=True):
        if line.startswith(b"<<<<<<< "):
            side = "upstream"
        elif line.startswith(b"||||||| ") and side == "upstream":
            side = "base"
        elif line.startswith(b"=======") and side == "base":
            side = "patch"
        elif line.startswith(b">>>>>>> ") and side == "patch":
            side = "common"
        elif side in ("common", "patch"):
            out.append(line)
    path.write_bytes(b"".join(out))


def test_the_lifecycle_from_the_cli_keeps_every_header_byte(
    tmp_path: Path, debian_source: DebianSource, capsys: pytest.CaptureFixture[str]
) -> None:
    """init -> import (offsets) -> refresh -> strict apply -> verify -> rebase onto another
    release (a conflict, resolved, --continue) -> verify, all through the CLI on Debian's
    series; every patch keeps its header and trailer bytes throughout."""
    orig = debian_source.orig
    debian = tmp_path / "debian"
    extract_archive(debian_source.debian, debian)
    quilt = debian / "patches"
    series_dir = tmp_path / "project" / "patches" / PACKAGE
    s = str(series_dir)

    code, out = _cli("init", str(orig), "--series", s, "--json", capsys=capsys)
    assert code == 0, out
    assert load_series(series_dir).upstream.tree is not None
    code, out = _cli("import", str(quilt), "--series", s, "--json", capsys=capsys)
    assert code == 0, out
    assert any("offset" in (entry["drift"] or "") for entry in json.loads(out)["imported"])
    original = {p.id: series_bytes(series_dir, p.id) for p in load_series(series_dir).patches}
    code, out = _cli("refresh", "--all", "--series", s, "--json", capsys=capsys)
    assert code == 0, out
    assert _cli("cleanroom", "apply", "--series", s, capsys=capsys)[0] == 0  # strict
    assert _cli("verify", "--all", "--series", s, capsys=capsys)[0] == 0

    onto, conflicted, last = _next_release(orig, series_dir, tmp_path / "less-next.tar.gz")
    code, out = _cli("rebase", "--onto", str(onto), "--series", s, "--json", capsys=capsys)
    data = json.loads(out)
    assert code == 3 and data["error"] == "RebaseStopped", out
    stop = data["report"]["stop"]
    assert stop["patch"] == load_series(series_dir).patches[-1].id
    assert conflicted in stop["files"]
    moved = [p["how"] for p in data["report"]["patches"]]
    assert len(moved) == len(original) - 1 and "merged" in moved, moved
    room = tmp_path / "project" / "cleanroom" / PACKAGE
    _keep_the_patch_side(room / conflicted)
    code, out = _cli("rebase", "--continue", "--series", s, "--json", capsys=capsys)
    assert code == 0, out
    assert json.loads(out)["state"] == "done"
    series = load_series(series_dir)
    assert series.upstream.path is not None and Path(series.upstream.path).name == onto.name
    assert _cli("verify", "--all", "--series", s, capsys=capsys)[0] == 0
    assert series.upstream.sha256 == hashlib.sha256(onto.read_bytes()).hexdigest()
    assert b"next release: a moved line" in (room / conflicted).read_bytes()
    assert last.is_file()
    for patch in series.patches:
        old, new = split_patch(original[patch.id]), split_patch(series_bytes(series_dir, patch.id))
        assert (old.header, old.trailer) == (new.header, new.trailer), patch.id
