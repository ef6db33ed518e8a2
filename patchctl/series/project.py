"""The project root of a series: the one directory patchctl writes in, besides the series.

A series defines its project root by where it lives:
- `<project>/patches/<series>/` (the documented layout): the root is `<project>`;
- any other `<dir>/<series>/`: the root is `<dir>`, the directory holding the series.
The series directory is resolved first (a symlinked series counts where it really is). Inside
the root patchctl writes only `cleanroom/` (the default clean rooms, their backups and builds)
and `docs/UPSTREAM_SYNC.md` (the marker registry, one section per series); it never writes
above the root. docs/architecture.md ("Project root") is the reference.
"""

from __future__ import annotations

from pathlib import Path

from patchctl.errors import DirtyTree

PATCHES_DIR = "patches"
REGISTRY = Path("docs") / "UPSTREAM_SYNC.md"


def project_root(series_dir: Path) -> Path:
    """The project a series belongs to: the parent of `patches/`, else the series' parent."""
    parent = series_dir.resolve().parent
    return parent.parent if parent.name == PATCHES_DIR else parent


def series_key(series_dir: Path) -> str:
    """The series directory relative to its project root, e.g. `patches/llamafile`."""
    resolved = series_dir.resolve()
    return resolved.relative_to(project_root(resolved)).as_posix()


def registry_path(series_dir: Path) -> Path:
    """The marker registry of the series' project: `<root>/docs/UPSTREAM_SYNC.md`."""
    return project_root(series_dir) / REGISTRY


OUT_OF_PROJECT_HINT = "remove the symlink that leads out of the project (see docs/architecture.md)"


def check_inside(path: Path, root: Path, *, hint: str | None = None) -> None:
    """DirtyTree (exit 8) unless `path` (its directories resolved) stays inside `root`.

    A `docs` or `cleanroom` that is a symlink to elsewhere would otherwise carry a write out of
    the project.
    """
    where = path.parent.resolve() / path.name
    if not where.is_relative_to(root.resolve()):
        raise DirtyTree(
            f"refusing to write {path}: it resolves to {where}, outside the project root {root}",
            hint=hint or OUT_OF_PROJECT_HINT,
        )
