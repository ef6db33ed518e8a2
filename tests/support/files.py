"""The one file-map vocabulary for all tests: path -> bytes | Link | Exe | None (delete)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Link:
    """A symlink entry for `write_files`."""

    target: str


@dataclass(frozen=True)
class Exe:
    """An executable file entry for `write_files`."""

    data: bytes


Entry = bytes | Link | Exe | None
Files = Mapping[str, Entry]


def write_files(root: Path, files: Files) -> None:
    """Create/overwrite/delete files under `root` (None deletes)."""
    for name, entry in files.items():
        path = root / name
        if path.is_symlink() or path.exists():
            path.unlink()
        if entry is None:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(entry, Link):
            os.symlink(entry.target, path)
        elif isinstance(entry, Exe):
            path.write_bytes(entry.data)
            path.chmod(0o755)
        else:
            path.write_bytes(entry)
            path.chmod(0o644)


# Hostile content: every case that has broken a patch tool somewhere.
CONTENT_MATRIX: dict[str, Entry] = {
    "crlf.txt": b"one\r\ntwo\r\nthree\r\n",
    "no-eol.txt": b"first\nlast without newline",
    "latin1.txt": "caf\xe9 na\xefve\n".encode("latin-1"),
    "binary.bin": bytes(range(256)) * 4,
    "tool.sh": Exe(b"#!/bin/sh\necho hi\n"),
    "plain-to-exec.sh": b"#!/bin/sh\nexit 0\n",
    "link": Link("crlf.txt"),
    "dir with spaces/file name.txt": b"spaces\n",
    "n\u00e4me-\u65e5\u672c.txt": b"non-ascii name\n",
    "trailing-ws.txt": b"keep   \nthese\t\n",
    "src/main.c": b"".join(b"line %d\n" % i for i in range(1, 41)),
}

# The matrix after a patch: every entry changes in its own hostile way.
CONTENT_MATRIX_AFTER: dict[str, Entry] = {
    **CONTENT_MATRIX,
    "crlf.txt": b"one\r\nTWO\r\nthree\r\n",
    "no-eol.txt": b"first\nlast still without newline",
    "latin1.txt": "caf\xe9 na\xefve \xe0 la carte\n".encode("latin-1"),
    "binary.bin": bytes(range(255, -1, -1)) * 4,
    "plain-to-exec.sh": Exe(b"#!/bin/sh\nexit 0\n"),
    "link": Link("no-eol.txt"),
    "dir with spaces/file name.txt": b"spaces\nand more\n",
    "n\u00e4me-\u65e5\u672c.txt": None,
    "new \u00fcml\u00e4ut.txt": b"new file\n",
    "trailing-ws.txt": b"keep   \nthese\t\nadded  \n",
    "src/main.c": b"".join(b"line %d\n" % i for i in range(1, 41)).replace(b"line 20\n", b"L20\n"),
}
