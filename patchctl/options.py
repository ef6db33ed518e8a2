"""Command-line options shared by the command modules (one spelling, one help text)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

DEFAULT_SERIES = Path("patches/llamafile")

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
JsonOpt = Annotated[bool, typer.Option("--json", help="Print a JSON report on stdout.")]
