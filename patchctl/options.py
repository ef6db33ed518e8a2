"""Command-line options shared by the command modules (one spelling, one help text), and the
flags the error handler reads from the parsed command line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

DEFAULT_SERIES = Path("patches/llamafile")
# How `init UPSTREAM` and `rebase --onto UPSTREAM` name an upstream (patchctl/pinning.py).
UPSTREAM_HELP = (
    "NAME==VERSION (a PyPI sdist), an archive (.tar.*/.zip path or https URL), or a git "
    "repository (path or URL) with --commit."
)
SUBDIR_HELP = (
    "The directory inside the sdist/archive/repository that holds the tree, e.g. "
    "vendor/llama.cpp; for an sdist or archive, relative to its single top directory "
    "(which is stripped; naming it too also works)."
)


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
        "--series", help="Series directory (or its series.yaml); names the default clean room."
    ),
]
WorkdirOpt = Annotated[
    Path | None,
    typer.Option("--workdir", help="Clean-room directory (default: cleanroom/<series name>)."),
]
JsonOpt = Annotated[
    bool,
    typer.Option("--json", help="Print a JSON report on stdout.", callback=_record_json),
]
