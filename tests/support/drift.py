"""A synthetic upstream in three versions and a series written on the first, for the lifecycle
tests (init, import, refresh, rebase): on the second version one patch applies exactly, one
only at an offset, one only with fuzz; the third version conflicts with a fourth patch.

Every patch carries a header of its own (gbp-pq mail header, DEP-3, format-patch with a
signature trailer, quilt's `Index:` preamble), so the tests can check that each header byte
survives every rewrite.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from patchctl.room.cleanroom import create_cleanroom, default_workdir
from patchctl.series.model import Patch, Series, Upstream, save_series
from support.files import Files
from support.repos import diff_files, new_repo


def lines(prefix: str, count: int) -> bytes:
    """`<prefix> line 1\\n` ... `<prefix> line <count>\\n`."""
    return b"".join(f"{prefix} line {i}\n".encode() for i in range(1, count + 1))


def edit(data: bytes, old: str, new: str) -> bytes:
    """`data` with the line `old` replaced by `new` (which may hold several lines)."""
    needle = f"{old}\n".encode()
    assert data.count(needle) == 1, old
    return data.replace(needle, f"{new}\n".encode())


# The version the patches were written on.
V0: dict[str, bytes] = {
    "README": b"demo project\n",
    "src/a.c": lines("a", 60),
    "src/b.c": lines("b", 60),
    "src/c.c": lines("c", 30),
}
# The pinned upstream: two lines more at the top of a.c (the a.c patch lands at an offset), a
# context line of the b.c patch changed (it applies only with fuzz).
V1: dict[str, bytes] = {
    **V0,
    "src/a.c": b"/* new header line 1 */\n/* new header line 2 */\n" + V0["src/a.c"],
    "src/b.c": edit(V0["src/b.c"], "b line 28", "b line 28 (changed upstream)"),
}
# The next upstream: c.c's line 10 rewritten (the c.c patch conflicts), a.c grows again.
V2: dict[str, bytes] = {
    **V1,
    "src/a.c": b"/* v2 */\n" + V1["src/a.c"],
    "src/c.c": edit(V1["src/c.c"], "c line 10", "c line 10 (rewritten upstream)"),
    "NEWS": b"v2\n",
}

GBP_HEADER = b"""From: Jane Doe <jane@example.org>
Date: Sat, 25 Jun 2022 11:54:43 -0700
Subject: Mention the patch in the README
Bug-Debian: https://bugs.debian.org/1
Gbp-Pq: Name readme.patch

A body paragraph that git am would keep.
---
 README | 1 +
 1 file changed, 1 insertion(+)

"""
DEP3_HEADER = b"""Description: Make a.c louder
 A folded long description line
 and another one.
Author: Someone <someone@example.org>
Origin: upstream, https://example.org/commit/1234
Bug: https://example.org/bug/1
Last-Update: 2024-01-01
---
"""
MAIL_HEADER = b"""From 1111111111111111111111111111111111111111 Mon Sep 17 00:00:00 2001
From: Max Mustermann <max@example.org>
Date: Tue, 2 Jan 2024 10:00:00 +0100
Subject: [PATCH 3/4] b: emphasise line 30

Signed-off-by: Max Mustermann <max@example.org>
---
 src/b.c | 2 +-
 1 file changed, 1 insertion(+), 1 deletion(-)

"""
QUILT_HEADER = b"""Forwarded: no
Author: Local <local@example.org>
Description: c.c local tweak

"""
SIGNATURE = b"-- \n2.39.5\n\n"


def patch_bytes(scratch: Path, header: bytes, after: Files, trailer: bytes = b"") -> bytes:
    """header + the git diff V0 -> V0 with `after` applied + trailer."""
    return header + diff_files(scratch, V0, {**V0, **after}) + trailer


def quilt_style(diff: bytes, name: str) -> bytes:
    """A git diff of one file as quilt writes it: `Index:` preamble, no `diff --git`/`index`."""
    kept = [
        line
        for line in diff.splitlines(keepends=True)
        if not line.startswith((b"diff --git ", b"index "))
    ]
    return f"Index: {name}\n{'=' * 67}\n".encode() + b"".join(kept)


def quilt_series(scratch: Path, target: Path) -> dict[str, bytes]:
    """Write a quilt series (debian/patches style) into `target`; name -> bytes, in order."""
    patches = {
        "readme.patch": patch_bytes(
            scratch / "1", GBP_HEADER, {"README": b"demo project\npatched\n"}, SIGNATURE
        ),
        "louder-a.patch": patch_bytes(
            scratch / "2",
            DEP3_HEADER,
            {"src/a.c": edit(edit(V0["src/a.c"], "a line 20", "A LINE 20"), "a line 50", "A 50")},
        ),
        "b-30.patch": patch_bytes(
            scratch / "3",
            MAIL_HEADER,
            {"src/b.c": edit(V0["src/b.c"], "b line 30", "B LINE 30")},
            SIGNATURE,
        ),
        "c-10.patch": QUILT_HEADER
        + quilt_style(
            diff_files(
                scratch / "4", V0, {**V0, "src/c.c": edit(V0["src/c.c"], "c line 10", "C 10")}
            ),
            "src/c.c",
        ),
    }
    target.mkdir(parents=True, exist_ok=True)
    for name, data in patches.items():
        (target / name).write_bytes(data)
    (target / "series").write_bytes(b"".join(f"{name}\n".encode() for name in patches))
    return patches


def drifted_project(tmp: Path, names: tuple[str, ...] | None = None) -> Path:
    """A project whose series (on a git upstream at V1) holds the quilt series' patches as
    imported entries, as an older `patchctl import` recorded them (no trees); the clean room
    is made. The series directory."""
    upstream = new_repo(tmp / "upstream", V1)
    patches = quilt_series(tmp / "scratch", tmp / "debian" / "patches")
    series_dir = tmp / "project" / "patches" / "demo"
    series_dir.mkdir(parents=True)
    entries = []
    for n, (name, data) in enumerate(patches.items(), 1):
        if names is not None and name not in names:
            continue
        pid = f"{n:04d}-{name.removesuffix('.patch')}"
        (series_dir / f"{pid}.patch").write_bytes(data)
        entries.append(
            Patch(id=pid, file=f"{pid}.patch", title=name, imported=True, sha256=sha256(data))
        )
    up = Upstream(kind="git", url=str(upstream.path), commit=upstream.commit, tree=upstream.tree)
    series = Series(series_dir / "series.yaml", up, tuple(entries))
    save_series(series)
    create_cleanroom(series, default_workdir(series_dir))
    return series_dir


def sha256(data: bytes) -> str:
    """The hex sha256 of bytes."""
    return hashlib.sha256(data).hexdigest()


def rebase_ready(tmp: Path) -> tuple[Path, str]:
    """The drifted project refreshed and applied, and its upstream repository given a second
    commit holding V2: (series directory, the V2 commit to rebase onto)."""
    from patchctl.ops.cleanroom.apply import cleanroom_apply
    from patchctl.ops.refresh import refresh

    series_dir = drifted_project(tmp)
    refresh(series_dir)
    cleanroom_apply(series_dir)
    return series_dir, new_repo(tmp / "upstream", V2).commit


def resolve_conflicts(path: Path, choose: str) -> None:
    """Replace every diff3 conflict block of the file at `path` by the line `choose`."""
    out, inside = [], False
    for line in path.read_bytes().splitlines(keepends=True):
        if line.startswith(b"<<<<<<< "):
            inside = True
            out.append(choose.encode() + b"\n")
        elif line.startswith(b">>>>>>> "):
            inside = False
        elif not inside:
            out.append(line)
    path.write_bytes(b"".join(out))
