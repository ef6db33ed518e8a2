"""patchctl.fsio: atomic writes leave the old bytes or the new ones and no temporary file."""

from __future__ import annotations

import hashlib
from pathlib import Path

from patchctl.fsio import sha256_file, write_atomic, write_if_changed


def test_write_atomic_creates_parents_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "f.bin"
    write_atomic(target, b"\x00\xffbytes\r\n")
    assert target.read_bytes() == b"\x00\xffbytes\r\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["f.bin"]


def test_write_if_changed_skips_equal_bytes(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    assert write_if_changed(target, b"one\n") is True
    mtime = target.stat().st_mtime_ns
    assert write_if_changed(target, b"one\n") is False
    assert target.stat().st_mtime_ns == mtime
    assert write_if_changed(target, b"two\n") is True
    assert target.read_bytes() == b"two\n"


def test_sha256_file_reads_in_blocks(tmp_path: Path) -> None:
    data = bytes(range(256)) * 5000  # more than one 1 MiB block
    (tmp_path / "f").write_bytes(data)
    assert sha256_file(tmp_path / "f") == hashlib.sha256(data).hexdigest()
