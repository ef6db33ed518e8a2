"""Integration: the series-corpus pipeline (support/corpus.py) on real Debian quilt series.

Three small bookworm source packages, each for what its series has that others lack:
- `sqlite3`: a component tarball (`.orig-www.tar.xz`, unpacked by dpkg-source into `www/`)
  beside the orig tarball: the upstream is one tarball of both, laid out as dpkg-source
  unpacks them; and patches quilt takes at an offset (refreshed);
- `vim`: patches in a subdirectory of debian/patches (`debian/...`), and patches that create
  files, all exact as shipped;
- `tar`: `Index:` headers (diffs written by `diff -u`, not git) taken at an offset;
- `postgresql-15`: a patch written by `diff -U0` (`autoconf2.69`: `@@ -22,4 +21,0 @@`, no
  context line), which GNU patch, quilt and dpkg-source apply at its line numbers.

Each runs init (orig tarball as `archive` upstream), import, verify --all, strict apply
(refresh --all and apply again on drift) and verify --all through the real CLI in a
subprocess, and ends at the tree dpkg-source's own `patch` call makes of Debian's files. The
source packages are fetched once and cached (support/debian.py), sha256-checked against their
.dsc on every use. scripts/series_corpus.py runs the same pipeline on the wider list recorded
in docs/benchmarks/series-corpus.md, and beside it (recorded, not judged) `quilt push -a
--fuzz=0` on the same series: here it must apply every patch.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from support.corpus import Outcome, Step, quilt_series, run_package
from support.debian import AptMissing, fetch_debian_source

pytestmark = pytest.mark.integration


def _outcome(package: str, workdir: Path) -> Outcome:
    try:
        fetch_debian_source(package)
    except AptMissing as exc:
        pytest.skip(str(exc))
    return run_package(package, workdir)


def _steps(outcome: Outcome) -> dict[str, Step]:
    return {step.name: step for step in outcome.steps}


def _assert_pipeline_passed(outcome: Outcome) -> dict[str, Step]:
    steps = _steps(outcome)
    assert outcome.result == "ok", [(s.name, s.exit_code, s.error) for s in outcome.steps]
    assert outcome.patches >= 3
    assert steps["import"].summary["imported"] == outcome.patches
    assert steps["import"].summary["bytes_kept"] is True
    assert steps["verify"].summary == {"verified": outcome.patches, "ok": True}
    assert steps["verify-final"].summary == {"verified": outcome.patches, "ok": True}
    oracle = steps["dpkg-source"]  # Debian's files through dpkg-source's `patch`: the same tree
    assert oracle.exit_code == 0 and oracle.summary["equal"] is True, oracle
    assert {"import_apply", "patchctl"} <= outcome.timings.keys()
    assert outcome.quilt is not None
    if shutil.which("quilt") is not None:  # Debian's own tool on the same series, timed
        assert outcome.quilt.exit_code == 0, outcome.quilt.error
        assert outcome.quilt.summary == {"applied": outcome.patches}
        assert outcome.timings["quilt_push"] == outcome.quilt.seconds
    return steps


def _refreshed_after_drift(steps: dict[str, Step], patches: int) -> None:
    """Quilt took some hunks at an offset: strict apply refused (exit 10, naming the patch),
    refresh rewrote exactly the drifted patches, and the strict apply then took all."""
    drifted = steps["import"].summary["drifted"]
    assert drifted >= 1 and steps["import"].summary["kinds"] == ["offset"]
    assert steps["apply"].exit_code == 10 and "stopped_at" in steps["apply"].summary
    assert steps["apply"].error is not None and "refresh" in steps["apply"].error
    assert steps["refresh"].summary == {"refreshed": drifted}
    assert steps["apply-refreshed"].summary["applied"] == patches


def test_sqlite3_component_tarball_is_part_of_the_upstream(tmp_path: Path) -> None:
    outcome = _outcome("sqlite3", tmp_path)
    steps = _assert_pipeline_passed(outcome)
    assert outcome.components == {"www": []}  # listed, with the patches that touch it: none
    assert outcome.upstream["archive"] == "sqlite3_3.40.1.orig+www.tar"
    room = tmp_path / "sqlite3" / "project" / "cleanroom" / "sqlite3"
    assert (room / "www").is_dir() and any((room / "www").iterdir())
    assert (room / "configure").is_file()  # and the orig tarball beside it
    _refreshed_after_drift(steps, outcome.patches)


def test_vim_patches_in_subdirectories(tmp_path: Path) -> None:
    outcome = _outcome("vim", tmp_path)
    steps = _assert_pipeline_passed(outcome)
    quilt = tmp_path / "vim" / "debian" / "patches"
    names = [name for name, _ in quilt_series(quilt / "series")]
    assert sum("/" in name for name in names) >= 2
    created = [n for n in names if b"\n--- /dev/null" in (quilt / n).read_bytes()]
    assert created, "expected a patch that creates a file"
    assert steps["apply"].exit_code == 0 and "refresh" not in steps  # all exact as shipped
    assert steps["apply"].summary["applied"] == outcome.patches


def test_tar_index_headers_at_an_offset(tmp_path: Path) -> None:
    outcome = _outcome("tar", tmp_path)
    steps = _assert_pipeline_passed(outcome)
    quilt = tmp_path / "tar" / "debian" / "patches"
    names = [name for name, _ in quilt_series(quilt / "series")]
    assert any(re.search(rb"^Index: ", (quilt / n).read_bytes(), re.M) for n in names)
    _refreshed_after_drift(steps, outcome.patches)


def test_postgresql_zero_context_hunks_are_applied_at_their_lines(tmp_path: Path) -> None:
    outcome = _outcome("postgresql-15", tmp_path)
    steps = _assert_pipeline_passed(outcome)
    quilt = tmp_path / "postgresql-15" / "debian" / "patches"
    assert b"\n@@ -22,4 +21,0 @@" in (quilt / "autoconf2.69").read_bytes()
    series = tmp_path / "postgresql-15" / "project" / "patches" / "postgresql-15"
    kept = series / "0010-autoconf2.69.patch"
    assert kept.read_bytes() == (quilt / "autoconf2.69").read_bytes()  # exact: not refreshed
    _refreshed_after_drift(steps, outcome.patches)


def test_postgresql_refreshed_patches_keep_their_plain_diff_dialect(tmp_path: Path) -> None:
    """Debian's postgresql-15 patches are plain `diff -u` (no `diff --git`, no `index`):
    the ones refresh rewrites stay so, naming their files as they did."""
    outcome = _outcome("postgresql-15", tmp_path)
    steps = _assert_pipeline_passed(outcome)
    assert steps["refresh"].summary["refreshed"] >= 3
    quilt = tmp_path / "postgresql-15" / "debian" / "patches"
    series = tmp_path / "postgresql-15" / "project" / "patches" / "postgresql-15"
    refreshed = 0
    for number, (name, _options) in enumerate(quilt_series(quilt / "series"), 1):
        original = (quilt / name).read_bytes()
        kept = next(series.glob(f"{number:04d}-*.patch")).read_bytes()
        if kept == original:
            continue
        refreshed += 1
        assert b"diff --git " not in kept and b"\nindex " not in kept, name
        names = {line for line in original.splitlines() if line.startswith((b"--- ", b"+++ "))}
        assert {line for line in kept.splitlines() if line.startswith((b"--- ", b"+++ "))} == names
    assert refreshed == steps["refresh"].summary["refreshed"]
