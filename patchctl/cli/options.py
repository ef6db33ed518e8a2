"""Command-line options shared by the command modules (one spelling, one help text), and the
flags the error handler reads from the parsed command line.

Paths given on the command line are checked before any command runs: a path too long for the
file system or lying under a regular file is a usage error (exit 2) naming the option, and
`--workdir` is made absolute with a final symlink followed, so the clean room, its lock and
its backups are all where the link points.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

DEFAULT_SERIES = Path("patches/llamafile")
# How `init UPSTREAM` and `rebase --onto UPSTREAM` name an upstream (patchctl/upstream/pinning.py).
UPSTREAM_HELP = (
    "NAME==VERSION (a PyPI sdist), an archive (.tar.*/.zip path or https URL), or a git "
    "repository (path or URL) with --commit."
)
SUBDIR_HELP = (
    "The directory inside the sdist/archive/repository that holds the tree, e.g. "
    "vendor/llama.cpp; for an sdist or archive, relative to its single top directory "
    "(which is stripped; naming it too also works)."
)
MAX_PATH = 4000  # bytes (PATH_MAX is 4096 on Linux)
MAX_NAME = 255  # bytes of one component (NAME_MAX)


def check_path(path: Path) -> Path:
    """`path`, or typer.BadParameter when no file could ever be made there."""
    raw = os.fsencode(path)
    if len(raw) > MAX_PATH or any(len(part) > MAX_NAME for part in raw.split(b"/")):
        raise typer.BadParameter(f"{str(path)[:80]}... is too long for the file system")
    folder = Path(os.path.abspath(path))
    while not folder.exists() and not folder.is_symlink() and folder != folder.parent:
        folder = folder.parent
    if folder != Path(os.path.abspath(path)) and not folder.is_dir():
        raise typer.BadParameter(f"{path} lies under {folder}, which is not a directory")
    return path


def _series(value: Path) -> Path:
    return check_path(value)


def _workdir(value: Path | None) -> Path | None:
    """--workdir as the clean room's real place: absolute, a final symlink followed."""
    if value is None:
        return None
    path = Path(os.path.abspath(check_path(value)))
    if path.is_symlink():
        target = path.resolve()
        if not target.exists():
            raise typer.BadParameter(f"{value} is a symlink to {target}, which does not exist")
        path = check_path(target)
    if path.parent == path:
        raise typer.BadParameter("the clean room cannot be the file system root")
    return path


@dataclass
class RunFlags:
    """What `cli.main`'s error handler needs from the parsed command line (the click context's
    `obj`): set by the root callback (`--debug`) and by every command's `--json`."""

    debug: bool = False
    json: bool = False


def _record_json(ctx: typer.Context, value: bool) -> bool:
    if value and isinstance(ctx.obj, RunFlags):
        ctx.obj.json = True
    return value


SeriesOpt = Annotated[
    Path,
    typer.Option(
        "--series",
        help="Series directory (or its series.yaml); names the default clean room.",
        callback=_series,
    ),
]
WorkdirOpt = Annotated[
    Path | None,
    typer.Option(
        "--workdir",
        help="Clean-room directory (default: cleanroom/<series name>).",
        callback=_workdir,
    ),
]
# `rebase` and `status --upstreamed`: the other upstream, and its subdir (default: the series' own)
OntoOpt = Annotated[str | None, typer.Option("--onto", metavar="UPSTREAM", help=UPSTREAM_HELP)]
OntoSubdirOpt = Annotated[
    str | None, typer.Option("--subdir", help=SUBDIR_HELP + " Default: the series' own.")
]
JsonOpt = Annotated[
    bool,
    typer.Option("--json", help="Print a JSON report on stdout.", callback=_record_json),
]
