"""`patchctl init UPSTREAM --series DIR`: a new series pinned to an upstream."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from patchctl.cli.options import SUBDIR_HELP, UPSTREAM_HELP, JsonOpt, WorkdirOpt

if TYPE_CHECKING:
    from patchctl.ops.init import InitResult


def register(app: typer.Typer) -> None:
    """Add `patchctl init` to the app."""
    app.command("init")(init_command)


def init_command(
    upstream: Annotated[str, typer.Argument(metavar="UPSTREAM", help=UPSTREAM_HELP)],
    series: Annotated[
        Path,
        typer.Option("--series", help="The new series directory (series.yaml goes there)."),
    ],
    commit: Annotated[
        str | None,
        typer.Option("--commit", help="git: the commit (full id, or a branch or tag to resolve)."),
    ] = None,
    subdir: Annotated[str | None, typer.Option("--subdir", help=SUBDIR_HELP)] = None,
    root: Annotated[
        str, typer.Option("--root", help="The subdirectory of the tree the patches target.")
    ] = ".",
    workdir: WorkdirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Start a series: pin UPSTREAM (sha256 and tree computed), write series.yaml, make its
    clean room."""
    from patchctl.cli.console import RichProgress
    from patchctl.ops.init import init_series

    with RichProgress(enabled=False if as_json else None) as progress:
        result = init_series(
            series,
            upstream,
            commit=commit,
            subdir=subdir,
            root=root,
            workdir=workdir,
            progress=progress,
        )
    render_init(result, as_json)


def init_json(result: InitResult) -> dict[str, Any]:
    """The --json form of an init."""
    from patchctl.series.model import series_to_dict

    return {
        "ok": True,
        "series": str(result.series.path),
        "upstream": series_to_dict(result.series)["upstream"],
        "root": result.series.root,
        "cleanroom": str(result.cleanroom),
        "docs": [str(p) for p in result.docs],
    }


def render_init(result: InitResult, as_json: bool) -> None:
    """An init, as JSON or for humans."""
    from patchctl.cli.console import out, print_json

    if as_json:
        print_json(init_json(result))
        return
    up = result.series.upstream
    out.print(f"wrote {result.series.path}: {up.describe()}", markup=False)
    for key in ("sha256", "tree", "commit"):
        value = getattr(up, key)
        if value is not None:
            out.print(f"  {key:6} {value}", markup=False)
    out.print(f"  clean room {result.cleanroom}", markup=False)
    out.print("  next: `patchctl import SOURCE` or `patchctl new ID --title T`", markup=False)
