"""The `cat-file --batch` output format, read in one place: a header `<oid> <type> <size>`,
the object's bytes and a newline, or `<name> missing` (`<name> ambiguous`) for an object
that cannot be read. `Git.cat_batch` (one run, whole output), `ObjectReader` and
`unsound_objects` (one long-lived process) all read records with `read_record`.
"""

from __future__ import annotations

from collections.abc import Callable

KINDS = (b"blob", b"tree", b"commit", b"tag")


def read_record(
    line: Callable[[], bytes], exactly: Callable[[int], bytes]
) -> tuple[bytes, bytes] | None:
    """One record: (type, bytes) of the object, or None when git names it missing.

    `line` gives the next line without its newline, `exactly(n)` the next n bytes."""
    header = line().rsplit(b" ", 2)
    if len(header) != 3 or header[1] not in KINDS or not header[2].isdigit():
        return None  # "<name> missing" / "<name> ambiguous" (a name may hold spaces)
    data = exactly(int(header[2]) + 1)[:-1]
    return header[1], data


def records(out: bytes, count: int) -> list[tuple[bytes, bytes] | None]:
    """The `count` records of a whole `cat-file --batch` output, in order."""
    pos = 0

    def line() -> bytes:
        nonlocal pos
        end = out.index(b"\n", pos)
        raw, pos = out[pos:end], end + 1
        return raw

    def exactly(size: int) -> bytes:
        nonlocal pos
        raw, pos = out[pos : pos + size], pos + size
        return raw

    return [read_record(line, exactly) for _ in range(count)]
