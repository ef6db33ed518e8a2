"""limits.py: defaults, environment overrides, and the errors that name them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.drift import rebase_ready
from support.paths import REPO

from patchctl.errors import ConfigError, PatchctlError
from patchctl.limits import (
    ALL_LIMITS,
    ARCHIVE_BYTES,
    PATCH_BYTES,
    SERIES_BYTES,
    human,
    read_bounded,
)


def test_defaults_and_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    for limit in ALL_LIMITS:
        monkeypatch.delenv(limit.env, raising=False)
        assert limit.value() == limit.default > 0
    monkeypatch.setenv(ARCHIVE_BYTES.env, " 1234 ")
    assert ARCHIVE_BYTES.value() == 1234
    assert "PATCHCTL_MAX_ARCHIVE_BYTES=" in ARCHIVE_BYTES.hint()


@pytest.mark.parametrize("raw", ["x", "-1", "0", "1.5"])
def test_bad_values_are_config_errors_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv(ARCHIVE_BYTES.env, raw)
    with pytest.raises(ConfigError, match=ARCHIVE_BYTES.env):
        ARCHIVE_BYTES.value()


def test_every_limit_is_documented() -> None:
    doc = (REPO / "docs" / "reliability.md").read_text()
    for limit in ALL_LIMITS:
        assert f"| `{limit.env}` |" in doc


def test_human_sizes() -> None:
    assert human(12) == "12 bytes" and human(1536) == "1.5 KiB" and human(8 << 30) == "8.0 GiB"


# A regular file that cannot be read: opening it works, reading it fails with EIO, and the
# OSError names no file (root cannot be kept out of a chmod 000 file; this works as root).
UNREADABLE = Path("/proc/self/mem")


def test_read_bounded_reads_up_to_the_limit_and_names_the_file_past_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "series.yaml"
    path.write_bytes(b"x" * 10)
    monkeypatch.setenv(SERIES_BYTES.env, "10")
    assert read_bounded(path, SERIES_BYTES, "series file") == b"x" * 10
    path.write_bytes(b"x" * 11)
    with pytest.raises(ConfigError, match="series file is larger than 10 bytes") as info:
        read_bounded(path, SERIES_BYTES, "series file")
    assert info.value.path == path and info.value.exit_code == 5
    assert info.value.hint is not None and SERIES_BYTES.env in info.value.hint


@pytest.mark.parametrize("kind", ["directory", "fifo", "read error", "no permission"])
def test_a_file_that_cannot_be_read_is_named_with_the_fix(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "0001-x.patch"
    if kind == "directory":
        path.mkdir()
        fix = "not a directory"
    elif kind == "fifo":  # refused at once, never waiting for a writer
        os.mkfifo(path)
        fix = "regular file you can read"
    elif kind == "read error":
        if not UNREADABLE.is_file():
            pytest.skip("no /proc/self/mem here (the directory case still runs)")
        path = UNREADABLE
        fix = "regular file you can read"
    else:
        path.write_bytes(b"x")
        path.chmod(0)
        if os.access(path, os.R_OK):
            pytest.skip("running as root: chmod 000 does not keep root out")
        fix = "chmod u+r"
    with pytest.raises(PatchctlError) as info:
        read_bounded(path, PATCH_BYTES, "patch file")
    assert type(info.value) is PatchctlError and info.value.exit_code == 1
    assert str(info.value).startswith(f"cannot read the patch file {path}: ")
    assert info.value.hint is not None and fix in info.value.hint


GIB = 1 << 30
MEASURE = (
    "import resource, subprocess, sys, time\n"
    "start = time.monotonic()\n"
    "code = subprocess.run(sys.argv[1:], capture_output=True).returncode\n"
    "usage = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(code, usage.ru_maxrss, time.monotonic() - start)\n"
)


def _run_measured(cwd: Path, *args: str) -> tuple[int, int, float]:
    """(exit code, peak RSS in KiB of the patchctl process and its children, seconds) of
    `patchctl ARGS`, run in a child of its own so the measure is its alone."""
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, sys.executable, "-m", "patchctl", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    code, rss, seconds = done.stdout.split()
    return int(code), int(rss), float(seconds)


def _sparse(path: Path) -> None:
    """Make `path` a 2 GiB file without writing 2 GiB (a sparse file: its old bytes, then
    holes)."""
    path.touch()
    os.truncate(path, 2 * GIB)


@pytest.mark.parametrize(
    ("case", "args", "code"),
    [
        ("series.yaml", ("docs",), 5),  # read under the series lock
        ("series.yaml", ("capture", "0004-c-10"), 5),
        ("0001-readme.patch", ("cleanroom", "status"), 5),  # an applied patch's file
        (".patchctl-journal.json", ("cleanroom", "status"), 5),  # a planted journal
        ("README.md", ("docs",), 0),  # the generated README, rewritten without reading it
        ("README.md", ("docs", "--check"), 16),
    ],
)
def test_a_huge_input_is_refused_before_it_is_read(
    tmp_path: Path, case: str, args: tuple[str, ...], code: int
) -> None:
    series_dir, _onto = rebase_ready(tmp_path)
    _sparse(series_dir / case)
    exit_code, rss_kib, seconds = _run_measured(series_dir, *args, "--series", str(series_dir))
    assert exit_code == code
    assert rss_kib < 400 * 1024, f"peak RSS {rss_kib} KiB: the file was read"
    assert seconds < 30
    if case == "README.md" and code == 0:
        assert (series_dir / case).stat().st_size < 64 * 1024  # regenerated
