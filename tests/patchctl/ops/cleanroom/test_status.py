"""ops/cleanroom/status.py: `cleanroom status` measures a clean room against its series,
read-only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.drift import rebase_ready


def _status(series_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "patchctl", "cleanroom", "status", "--series", str(series_dir)],
        capture_output=True,
        text=True,
        timeout=120,  # a fifo read blocking would hang here
        check=False,
    )


@pytest.mark.parametrize("kind", ["fifo", "link-to-dev-zero"])
def test_a_series_file_that_is_not_a_regular_file_is_refused(tmp_path: Path, kind: str) -> None:
    series_dir, _onto = rebase_ready(tmp_path)
    assert _status(series_dir).returncode == 0
    target = series_dir / "series.yaml"
    target.unlink()
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to("/dev/zero")
    done = _status(series_dir)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "cannot read the series file" in done.stderr and "series.yaml" in done.stderr


def test_a_series_without_its_file_is_a_clean_room_on_its_own(tmp_path: Path) -> None:
    series_dir, _onto = rebase_ready(tmp_path)
    (series_dir / "series.yaml").unlink()
    done = _status(series_dir)
    assert done.returncode == 0, done.stderr
