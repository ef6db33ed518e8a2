"""`GIT binary patch` hunks: the size of the file each one makes, read before git applies it.

A binary hunk is `literal N` (the file's N bytes, deflated, in base85 lines) or `delta N` (a
git delta of N bytes against the preimage; the delta's header holds the size of its result).
git apply allocates that size whole before it checks anything else, and deflate and deltas
compress a run of zeros thousands of times: a patch of a few KiB can declare a file of many
GiB. `oversized` reads each declaration (inflating only a delta's first bytes, its header)
and names the first one over `PATCHCTL_MAX_BLOB_BYTES`, so such a patch is refused as one
that does not apply, before git runs.
"""

from __future__ import annotations

import base64
import binascii
import re
import zlib
from collections.abc import Iterator

from patchctl.limits import BLOB_BYTES, human
from patchctl.patchfmt.parse import display, header_names

HUNK = re.compile(rb"^(literal|delta) (\d+)\r?$")
MARK = b"GIT binary patch"
HEADER_BYTES = 20  # a delta header: two sizes of at most 10 base-128 digits each


def oversized(data: bytes) -> str | None:
    """None when every binary hunk of patch `data` makes a file within the limit, else the
    one-line error for the first that does not."""
    if MARK not in data:
        return None  # the common case: no binary hunk at all
    limit = BLOB_BYTES.value()
    for path, kind, size in declared_sizes(data):
        if size > limit:
            what = "makes a file of" if kind == "literal" else "(a delta) makes a file of"
            return (
                f"error: the binary patch of {path} {what} {size} bytes ({human(size)}), over "
                f"{human(limit)} (limit {BLOB_BYTES.env}; if the patch is trusted, raise it: "
                f"{BLOB_BYTES.env}={size})"
            )
    return None


def declared_sizes(data: bytes) -> Iterator[tuple[str, str, int]]:
    """(path, "literal" | "delta", size of the file it makes) for each binary hunk: the one
    after a `GIT binary patch` line, and the reverse one after its data and a blank line."""
    lines = data.splitlines()
    path, expect, in_data = "?", False, False
    for i, line in enumerate(lines):
        if line.startswith(b"diff --git "):
            names = header_names(line[len(b"diff --git ") :])
            path = display(names[1] if names else line[len(b"diff --git ") :])
            expect = in_data = False
        elif line.startswith(MARK):
            expect = True
        elif expect:
            expect, found = False, HUNK.match(line)
            if found is not None:
                kind, size = found.group(1).decode(), int(found.group(2))
                if kind == "delta":
                    size = max(size, _delta_result_size(lines, i + 1))
                yield path, kind, size
                in_data = True
        elif in_data and not line.strip():
            expect, in_data = True, False  # the reverse hunk may follow


def _delta_result_size(lines: list[bytes], start: int) -> int:
    """The result size in the header of the delta whose base85 lines start at `start` (0 when
    it cannot be read: git then refuses the corrupt patch itself)."""
    inflate = zlib.decompressobj()
    header = b""
    for line in lines[start:]:
        if not line.strip() or len(header) >= HEADER_BYTES:
            break
        try:
            chunk = _base85_line(line)
            header += inflate.decompress(chunk, HEADER_BYTES - len(header))
        except (ValueError, zlib.error):
            return 0
    sizes = list(_varints(header))
    return sizes[1] if len(sizes) >= 2 else 0


def _base85_line(line: bytes) -> bytes:
    """One line of git's base85: a length character (A-Z: 1-26, a-z: 27-52), then the data."""
    length = line[:1]
    if b"A" <= length <= b"Z":
        count = length[0] - ord("A") + 1
    elif b"a" <= length <= b"z":
        count = length[0] - ord("a") + 27
    else:
        raise ValueError("not a base85 line")
    try:
        return base64.b85decode(line[1:].rstrip(b"\r"))[:count]
    except (ValueError, binascii.Error):
        raise ValueError("not a base85 line") from None


def _varints(header: bytes) -> Iterator[int]:
    """The base-128 little-endian sizes at the start of a delta (source, then result)."""
    value = shift = 0
    for byte in header:
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            yield value
            value = shift = 0
