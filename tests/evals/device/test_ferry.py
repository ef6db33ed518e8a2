"""evals/device/ferry.py: files cut into fixed-size chunks for the GPU machine, joined there."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("ferry", ROOT / "evals" / "device" / "ferry.py")
assert _spec and _spec.loader
ferry = importlib.util.module_from_spec(_spec)
sys.modules["ferry"] = ferry
_spec.loader.exec_module(ferry)

CHUNK = 1000


@pytest.fixture
def packed(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    files = {"a.bin": bytes(range(256)) * 6, "b.bin": b"xyz" * 1100}  # 1536 + 3300 bytes
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    out = tmp_path / "ferry"
    ferry.pack(out, [tmp_path / n for n in files], CHUNK)
    return out, files


def _stage(ferry_dir: Path, stage: Path, chunks: list[int]) -> None:
    stage.mkdir(exist_ok=True)
    shutil.copy(ferry_dir / "manifest.json", stage / "manifest.json")
    for i in chunks:
        shutil.copy(ferry_dir / f"c{i:02d}" / "chunk", stage / f"c{i:02d}")


def test_a_file_is_written_only_when_all_its_chunks_are_staged(
    packed: tuple[Path, dict[str, bytes]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out, files = packed
    stage, dest = tmp_path / "stage", tmp_path / "dest"
    _stage(out, stage, [0, 1, 3])  # a.bin is c00-c01; b.bin (1536..4836) lacks c02
    written: list[str] = []
    real_open = Path.open

    def spy(self: Path, mode: str = "r", *args: object, **kw: object):  # type: ignore[no-untyped-def]
        if "w" in mode:
            written.append(self.name)
        return real_open(self, mode, *args, **kw)  # type: ignore[call-overload]

    monkeypatch.setattr(Path, "open", spy)
    assert ferry.unpack(stage, dest) == 1
    monkeypatch.undo()
    assert written == ["a.bin.part"]  # b.bin's staged chunks are not copied while c02 is missing
    assert (dest / "a.bin").read_bytes() == files["a.bin"]
    assert sorted(p.name for p in dest.iterdir()) == ["a.bin"]  # no partial b.bin(.part)
    _stage(out, stage, [2, 4])
    assert ferry.unpack(stage, dest) == 0
    assert (dest / "b.bin").read_bytes() == files["b.bin"]


def test_a_chunk_that_differs_is_refused(
    packed: tuple[Path, dict[str, bytes]], tmp_path: Path
) -> None:
    out, _ = packed
    stage, dest = tmp_path / "stage", tmp_path / "dest"
    _stage(out, stage, [0, 1, 2, 3, 4])
    data = bytearray((stage / "c03").read_bytes())
    data[0] ^= 1
    (stage / "c03").write_bytes(bytes(data))
    assert ferry.unpack(stage, dest) == 2
    assert not (dest / "b.bin").exists() and not (dest / "b.bin.part").exists()
