"""patchctl.fsio: atomic writes leave the old bytes or the new ones and no temporary file."""

from __future__ import annotations

from pathlib import Path

from patchctl.fsio import write_atomic, write_if_changed


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
