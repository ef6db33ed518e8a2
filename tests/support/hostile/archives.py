"""Hostile archives: raw members written with tarfile/zipfile exactly as given."""

from __future__ import annotations

import io
import tarfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer
from pathlib import Path

TAR_TYPES = {
    "file": tarfile.REGTYPE,
    "dir": tarfile.DIRTYPE,
    "symlink": tarfile.SYMTYPE,
    "hardlink": tarfile.LNKTYPE,
    "chr": tarfile.CHRTYPE,
    "blk": tarfile.BLKTYPE,
    "fifo": tarfile.FIFOTYPE,
}
ZIP_MODES = {
    "file": 0o100644,
    "dir": 0o040755,
    "symlink": 0o120777,
    "chr": 0o020644,
    "blk": 0o060644,
    "fifo": 0o010644,
}


@dataclass(frozen=True)
class M:
    """One raw archive member."""

    name: str
    kind: str = "file"
    data: bytes = b""
    target: str = ""  # symlink / hardlink target
    mode: int = 0o644


TarWriteMode = Literal["w:gz", "w:xz", "w:bz2", "w"]


def tar_mode(path: Path) -> TarWriteMode:
    name = path.name
    if name.endswith((".tar.gz", ".tgz")):
        return "w:gz"
    if name.endswith((".tar.xz", ".txz")):
        return "w:xz"
    if name.endswith(".tar.bz2"):
        return "w:bz2"
    return "w"


def build(path: Path, members: Sequence[M]) -> Path:
    """Write `members` to `path` (.tar, .tar.gz, .tar.xz, .tar.bz2 or .zip), in order."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith(".zip"):
        return _zip(path, members)
    with tarfile.open(path, tar_mode(path), format=tarfile.PAX_FORMAT) as tar:
        for m in members:
            info = tarfile.TarInfo(m.name)
            info.mtime = 0
            info.type = TAR_TYPES[m.kind]
            info.mode = m.mode
            info.linkname = m.target
            body = None
            if m.kind == "file":
                info.size = len(m.data)
                body = io.BytesIO(m.data)
            tar.addfile(info, body)
    return path


def _zip(path: Path, members: Sequence[M]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for m in members:
            name = m.name + ("/" if m.kind == "dir" and not m.name.endswith("/") else "")
            info = zipfile.ZipInfo(name)
            info.create_system = 3
            mode = ZIP_MODES[m.kind] | (m.mode & 0o777 if m.kind == "file" else 0)
            info.external_attr = mode << 16
            data = m.target.encode() if m.kind == "symlink" else m.data
            zf.writestr(info, data)
    return path


def zeros_tar(path: Path, name: str, size: int) -> Path:
    """A compressed tar with one member of `size` zero bytes (streamed: no big buffer)."""

    class Zeros(io.RawIOBase):
        def __init__(self) -> None:
            self.left = size

        def readable(self) -> bool:
            return True

        def readinto(self, buffer: WriteableBuffer) -> int:
            view = memoryview(buffer).cast("B")
            n = min(len(view), self.left)
            view[:n] = bytes(n)
            self.left -= n
            return n

    with tarfile.open(path, tar_mode(path)) as tar:
        info = tarfile.TarInfo(name)
        info.size = size
        tar.addfile(info, io.BufferedReader(Zeros()))
    return path


def lying_tar(path: Path, name: str, declared: int, data: bytes) -> Path:
    """A plain tar whose one member declares `declared` bytes but holds `data`."""
    info = tarfile.TarInfo(name)
    info.size = declared
    header = info.tobuf(tarfile.PAX_FORMAT)
    padding = b"\0" * (-len(data) % tarfile.BLOCKSIZE)
    path.write_bytes(header + data + padding + b"\0" * (2 * tarfile.BLOCKSIZE))
    return path


def header_bomb(path: Path, kind: bytes, size: int) -> Path:
    """A .tar.gz whose first header is a pax (b"x") or GNU long-name (b"L") extension header
    declaring `size` bytes of zeros, streamed through gzip (nothing big is held in memory)."""
    import gzip

    info = tarfile.TarInfo("././@LongLink" if kind == b"L" else "./PaxHeaders/x")
    info.type = kind
    info.size = size
    with gzip.open(path, "wb") as out:
        out.write(info.tobuf(tarfile.GNU_FORMAT))
        block = bytes(1 << 20)
        left = size + (-size % tarfile.BLOCKSIZE)
        while left:
            out.write(block[: min(left, len(block))])
            left -= min(left, len(block))
        out.write(b"\0" * (2 * tarfile.BLOCKSIZE))
    return path


def truncated(path: Path, keep: float = 0.5) -> Path:
    """`path` cut to a fraction of its bytes (a download that stopped)."""
    data = path.read_bytes()
    path.write_bytes(data[: max(1, int(len(data) * keep))])
    return path


def corrupted(path: Path, at: float = 0.5, count: int = 16) -> Path:
    """`path` with `count` bytes flipped from a fraction of its length on."""
    data = bytearray(path.read_bytes())
    start = int(len(data) * at)
    for i in range(start, min(start + count, len(data))):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    return path


def bad_header(path: Path, member: int) -> Path:
    """`path` (a plain or compressed tar) with the header checksum of its `member`-th member
    broken: Python's tarfile takes such a header for the end of the archive (GNU tar reports
    it and skips to the next header)."""
    import bz2
    import gzip
    import lzma

    codec = {"w:gz": gzip, "w:xz": lzma, "w:bz2": bz2}.get(tar_mode(path))
    raw = bytearray(codec.decompress(path.read_bytes()) if codec else path.read_bytes())
    with tarfile.open(fileobj=io.BytesIO(bytes(raw))) as tar:
        offset = tar.getmembers()[member].offset
    raw[offset + 150] ^= 0x01  # a digit of the checksum field (bytes 148-155)
    path.write_bytes(codec.compress(bytes(raw)) if codec else bytes(raw))
    return path


def zip_bad_crc(path: Path, members: Sequence[M]) -> Path:
    """A stored zip whose last member's bytes were changed after its CRC was written."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for m in members:
            zf.writestr(m.name, m.data)
    raw = bytearray(path.read_bytes())
    last = members[-1].data
    at = raw.rfind(last)
    raw[at] ^= 0xFF
    path.write_bytes(bytes(raw))
    return path
