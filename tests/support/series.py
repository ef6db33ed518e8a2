"""Series directories and whole projects over fake upstreams."""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Sequence
from pathlib import Path

from patchctl.series.model import Patch, Series, Upstream, save_series
from support.repos import Repo

# A patch that adds extra.txt (to import on top of any project's stack).
NEW_FILE_PATCH = b"""diff --git a/extra.txt b/extra.txt
new file mode 100644
--- /dev/null
+++ b/extra.txt
@@ -0,0 +1 @@
+extra
"""


def write_series(
    directory: Path,
    upstream: Upstream,
    patches: Sequence[tuple[str, bytes]] = (),
    *,
    root: str = ".",
) -> Path:
    """A series directory: series.yaml plus one `<id>.patch` per (id, bytes)."""
    directory.mkdir(parents=True, exist_ok=True)
    entries = []
    for pid, data in patches:
        (directory / f"{pid}.patch").write_bytes(data)
        entries.append(Patch(id=pid, file=f"{pid}.patch", title=f"Patch {pid}"))
    save_series(Series(directory / "series.yaml", upstream, tuple(entries), root))
    return directory


def git_upstream(repo: Repo) -> Upstream:
    """A `git` upstream pin of a fake upstream repository (tree recorded)."""
    return Upstream(kind="git", url=str(repo.path), commit=repo.commit, tree=repo.tree)


def make_series(directory: Path, base: str, patches: tuple[Patch, ...] = ()) -> Series:
    """A series.yaml in `directory` (an archive upstream pinned to tree `base`)."""
    directory.mkdir(parents=True, exist_ok=True)
    upstream = Upstream(kind="archive", path="orig.tar.gz", sha256="0" * 64, tree=base)
    series = Series(directory / "series.yaml", upstream, patches)
    save_series(series)
    return series


def make_project(root: Path, files: dict[str, bytes]) -> Path:
    """A project with patches/demo/series.yaml over an `archive` upstream holding `files`."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(f"demo-1.0/{name}")
            info.size = len(data)
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    archive = root / "demo-1.0.tar.gz"
    root.mkdir(parents=True, exist_ok=True)
    archive.write_bytes(buffer.getvalue())
    series_dir = root / "project" / "patches" / "demo"
    series_dir.mkdir(parents=True)
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    (series_dir / "series.yaml").write_text(
        "version: 1\nupstream:\n  kind: archive\n"
        f"  path: ../../../{archive.name}\n  sha256: {sha}\npatches: []\n"
    )
    return series_dir


# A sample project for `patchctl ci`: two source files that cmake builds, one captured patch
# with a hunk in each (the second file's patch has two hunks, the second at line 15).
CI_FILES = {
    "CMakeLists.txt": b"cmake_minimum_required(VERSION 3.14)\nproject(demo C)\n"
    b"add_executable(demo main.c util.c)\n",
    "main.c": b"int main(void) {\n  return 0;\n}\n",
    "util.c": b"".join(b"int f%d;\n" % i for i in range(20)),
}
CI_EDITS = {
    "main.c": b"int main(void) {\n  return 1;\n}\n",
    "util.c": CI_FILES["util.c"].replace(b"f3;", b"g3;").replace(b"f17;", b"g17;"),
}


def captured_project(root: Path) -> Path:
    """A project (`root/project`) with series patches/demo over an archive upstream, its
    clean room applied and patch 0001-one captured through the CLI (docs generated); the
    series directory."""
    from patchctl.cli.main import main

    series_dir = make_project(root, CI_FILES)
    named = str(series_dir)
    assert main(["cleanroom", "apply", "--series", named, "--json"]) == 0
    assert main(["new", "0001-one", "--title", "One", "--series", named, "--json"]) == 0
    room = series_dir.parent.parent / "cleanroom" / "demo"
    for name, data in CI_EDITS.items():
        (room / name).write_bytes(data)
    assert main(["capture", "0001-one", "--series", named, "--json"]) == 0
    return series_dir


def repin(root: Path, series_dir: Path, files: dict[str, bytes], tree: str | None = None) -> None:
    """Pin the series to a new archive `demo-1.1.tar.gz` holding `files`, as a maintainer
    does by hand: path and sha256 changed, and `tree` (the tree id of `files`) recorded."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(f"demo-1.1/{name}")
            info.size = len(data)
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    (root / "demo-1.1.tar.gz").write_bytes(buffer.getvalue())
    sha = hashlib.sha256(buffer.getvalue()).hexdigest()
    lines = []
    text = (series_dir / "series.yaml").read_text()
    for line in text.splitlines(keepends=True):
        if line.startswith("  path: "):
            line = "  path: ../../../demo-1.1.tar.gz\n"
        elif line.startswith("  sha256: "):
            line = f"  sha256: {sha}\n"
        elif line.startswith("  tree: "):
            continue
        lines.append(line)
        if line.startswith("  sha256: ") and tree is not None:
            lines.append(f"  tree: {tree}\n")
    (series_dir / "series.yaml").write_text("".join(lines))
