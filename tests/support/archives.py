"""Tar archives for the upstream and extraction tests, hostile members included."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from support.files import Entry, Exe, Link


@dataclass(frozen=True)
class Special:
    """A raw tar member for hostile archives: type is a tarfile type constant."""

    type: bytes
    linkname: str = ""


def make_tar(path: Path, files: Mapping[str, Entry | Special], top: str | None = "pkg-1.0") -> Path:
    """A .tar.gz with `files` (under a single `top` directory unless None)."""
    with tarfile.open(path, "w:gz") as tar:
        for name, entry in files.items():
            if entry is None:
                continue
            full = f"{top}/{name}" if top else name
            info = tarfile.TarInfo(full)
            info.mtime = 0
            data = b""
            if isinstance(entry, Special):
                info.type = entry.type
                info.linkname = entry.linkname
            elif isinstance(entry, Link):
                info.type = tarfile.SYMTYPE
                info.linkname = entry.target
            else:
                data = entry.data if isinstance(entry, Exe) else entry
                info.mode = 0o755 if isinstance(entry, Exe) else 0o644
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data else None)
    return path
