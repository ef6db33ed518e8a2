"""A sandbox around a project: victims, snapshots, and the check that nothing else changed."""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

Entry = tuple[str, int, str]  # (type, mode, sha256 of the bytes or the link target)
Snapshot = dict[str, Entry]

VICTIMS = (
    "victim.txt",
    "docs/victim.md",
    "outside/victim.txt",
    "project/victim.txt",
    "project/docs/victim.md",
    "project/patches/victim.txt",
    "project/cleanroom-victim.txt",
)


def snapshot(root: Path) -> Snapshot:
    """Every path under `root` (not following links): type, permission bits, content hash."""
    found: Snapshot = {}
    for folder, dirs, files in os.walk(root, followlinks=False):
        for name in [*dirs, *files]:
            path = Path(folder) / name
            info = path.lstat()
            rel = path.relative_to(root).as_posix()
            mode = stat.S_IMODE(info.st_mode)
            if stat.S_ISLNK(info.st_mode):
                found[rel] = ("link", 0, os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                found[rel] = ("dir", mode, "")
            elif stat.S_ISREG(info.st_mode):
                found[rel] = ("file", mode, hashlib.sha256(path.read_bytes()).hexdigest())
            else:
                found[rel] = ("special", mode, "")
    return found


def changes(before: Snapshot, after: Snapshot) -> list[str]:
    """Paths added, removed or changed (type, mode, bytes or link target)."""
    return sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))


@dataclass
class Sandbox:
    """`root/` holding `project/` (with `patches/demo/`), `cache/`, `upstream/` and victims."""

    root: Path

    @property
    def project(self) -> Path:
        return self.root / "project"

    @property
    def series(self) -> Path:
        return self.project / "patches" / "demo"

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def upstream(self) -> Path:
        return self.root / "upstream"

    @property
    def room(self) -> Path:
        return self.project / "cleanroom" / "demo"

    def plant_victims(self) -> None:
        for rel in VICTIMS:
            path = self.root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(f"victim {rel}\n".encode())
        self.series.mkdir(parents=True, exist_ok=True)
        self.cache.mkdir(exist_ok=True)
        self.upstream.mkdir(exist_ok=True)

    def snapshot(self) -> Snapshot:
        return snapshot(self.root)

    def unexpected(self, before: Snapshot, allowed: tuple[str, ...] = ("cache",)) -> list[str]:
        """Changed paths outside `allowed` (each a path and everything under it).

        The empty `project/cleanroom/` a refused run may leave (the lock's directory) counts
        as unchanged; anything in it does not.
        """
        after = self.snapshot()
        changed = changes(before, after)
        left = [p for p in changed if not any(p == a or p.startswith(a + "/") for a in allowed)]
        lock_dir_only = after.get("project/cleanroom", ("",))[0] == "dir" and not any(
            p.startswith("project/cleanroom/") for p in after
        )
        if lock_dir_only and "project/cleanroom" in left:
            left.remove("project/cleanroom")
        return left

    def victims_intact(self) -> bool:
        return all((self.root / rel).read_bytes() == f"victim {rel}\n".encode() for rel in VICTIMS)


@contextmanager
def serve(directory: Path) -> Iterator[str]:
    """A local HTTP server over `directory` (a package index); yields its base URL."""
    handler = partial(_QuietHandler, directory=str(directory))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass
