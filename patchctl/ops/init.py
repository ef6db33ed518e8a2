"""`patchctl init UPSTREAM --series DIR`: start a series on a pinned upstream.

The upstream is named as a person would (pinning.py: `NAME==VERSION`, an archive path or
https URL, a git repository with `--commit`); patchctl downloads or reads it, computes its
sha256, materializes it into the series' new clean room (which gives its git tree id), and
writes series.yaml with the whole pin. Nobody is asked for a checksum or a tree id.

series.yaml is validated by the loader a hand-written file goes through before it is put in
place, and an existing series is never overwritten (DirtyTree, exit 8): the file is linked
into place, which fails if one appeared meanwhile. A failure after the clean room was made
removes that clean room again, so `init` can simply be run again.
"""

from __future__ import annotations

import os
from contextlib import suppress
from dataclasses import dataclass, replace
from pathlib import Path

from patchctl.errors import DirtyTree
from patchctl.fsio import locked_dir
from patchctl.progress import Progress
from patchctl.room.cleanroom import (
    Cleanroom,
    create_cleanroom,
    default_workdir,
    discard_cleanroom,
    locked,
)
from patchctl.series.docs import write_docs
from patchctl.series.model import (
    SERIES_FILE,
    Series,
    Upstream,
    dump_series,
    load_series,
    series_dir,
)
from patchctl.upstream.pinning import Where, parse_upstream, pin

HEADER = (
    "# Patch series made by `patchctl init`. Schema: docs/architecture.md (series.yaml).\n"
    "# Edit by hand or with `patchctl new/capture/import/refresh/rebase`.\n"
)


@dataclass(frozen=True)
class InitResult:
    """What `patchctl init` made: the series, its clean room and the docs it wrote."""

    series: Series
    cleanroom: Path
    docs: tuple[Path, ...]


def init_series(
    series_path: Path,
    upstream: str,
    *,
    commit: str | None = None,
    subdir: str | None = None,
    root: str = ".",
    workdir: Path | None = None,
    progress: Progress | None = None,
) -> InitResult:
    """Create `series_path`/series.yaml pinned to `upstream`, and its clean room."""
    directory = series_dir(Path(series_path))
    target = directory / SERIES_FILE
    _refuse_existing(target)
    where = Where(series_dir=directory, cwd=Path.cwd())
    wanted = parse_upstream(upstream, where, commit=commit, subdir=subdir)
    room_path = workdir or default_workdir(directory)
    made = _missing_dirs(directory) + _missing_dirs(room_path.parent)
    try:
        with locked_dir(directory):
            _refuse_existing(target)
            series, room = _init_locked(target, wanted, root, room_path, progress)
            docs = tuple(write_docs(series))
    except BaseException:
        _remove_empty(made)  # leave no empty directory behind a failed init
        raise
    return InitResult(series, room.path, docs)


def _missing_dirs(path: Path) -> list[Path]:
    """`path` and the directories above it that do not exist yet (deepest first): those a
    failed init removes again when it leaves them empty (`patches/`, `cleanroom/`)."""
    missing = []
    for candidate in (path, *path.parents):
        if candidate.exists() or candidate.is_symlink():
            break
        missing.append(candidate)
    return missing


def _remove_empty(made: list[Path]) -> None:
    """Remove each of `made` that is an empty directory, deepest first."""
    for path in sorted(made, key=lambda p: len(p.parts), reverse=True):
        with suppress(OSError):
            if path.is_dir() and not path.is_symlink() and not any(path.iterdir()):
                path.rmdir()


def _init_locked(
    target: Path, wanted: Upstream, root: str, path: Path, progress: Progress | None
) -> tuple[Series, Cleanroom]:
    pinned = pin(wanted, target.parent, progress)
    draft = Series(target, pinned, (), root, header=HEADER)
    with locked(path):
        room = create_cleanroom(draft, path, progress)
        try:
            series = _write_new(replace(draft, upstream=replace(pinned, tree=room.base_tree())))
        except BaseException:
            _discard(room)
            raise
    return series, room


def _refuse_existing(target: Path) -> None:
    if target.exists() or target.is_symlink():
        raise DirtyTree(
            f"{target} already exists; `patchctl init` never overwrites a series",
            hint="choose another --series directory, or edit that series.yaml",
        )


def _write_new(series: Series) -> Series:
    """Validate the bytes with the loader, then link them into place (never over a file)."""
    target = series.path
    tmp = target.with_name(f".{target.name}.init{os.getpid()}")
    tmp.write_bytes(dump_series(series))
    try:
        load_series(tmp, check_files=False)  # exactly as a hand-written file is checked
        try:
            os.link(tmp, target)
        except FileExistsError:
            _refuse_existing(target)
            raise
    finally:
        tmp.unlink(missing_ok=True)
    return load_series(target)


def _discard(room: Cleanroom) -> None:
    with suppress(DirtyTree, OSError):  # never remove what is not only what init made
        discard_cleanroom(room)
