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


def extract_trusted_tar(
    tar: tarfile.TarFile, dest: Path, members: list[tarfile.TarInfo] | None = None
) -> None:
    """`tar.extractall(dest, filter="data")` where Python has tarfile's filters (3.11.4+);
    on 3.11.0-3.11.3 (Debian 12's python3 is 3.11.2) the same refusals, checked here: no
    absolute or `..` member names, no link pointing outside `dest`, no device or fifo. For
    archives the tests fetch or make themselves (sdists, Debian tarballs)."""
    chosen = tar.getmembers() if members is None else members
    if hasattr(tarfile, "data_filter"):
        tar.extractall(dest, members=chosen, filter="data")
        return
    root = dest.resolve()
    for member in chosen:
        target = (root / member.name).resolve()
        if member.name.startswith("/") or not target.is_relative_to(root):
            raise tarfile.ExtractError(f"{member.name}: outside {root}")
        if member.isdev() or member.isfifo():
            raise tarfile.ExtractError(f"{member.name}: a device or fifo")
        if member.issym() or member.islnk():
            base = target.parent if member.issym() else root
            if not (base / member.linkname).resolve().is_relative_to(root):
                raise tarfile.ExtractError(f"{member.name}: links outside {root}")
    tar.extractall(dest, members=chosen)  # members checked above
