"""`patchctl export --sdist`: the series' patched tree as an installable sdist tarball."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from patchctl.cli.options import DEFAULT_SERIES, JsonOpt, SeriesOpt, WorkdirOpt

if TYPE_CHECKING:
    from patchctl.ops.export import SdistExport


def register(app: typer.Typer) -> None:
    """Add `patchctl export` to the app."""
    app.command("export")(export_command)


def export_command(
    sdist: Annotated[
        bool, typer.Option("--sdist", help="Write a patched sdist (.tar.gz) that pip builds.")
    ] = False,
    series: SeriesOpt = DEFAULT_SERIES,
    workdir: WorkdirOpt = None,
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            metavar="PATH",  # a str, so a trailing slash reaches the core (a Path drops it)
            help="Output file (*.tar.gz), or a directory for it: an existing one, or one named "
            "with a trailing slash, made if missing (default: <project>/dist/).",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace the file --output names if it exists.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Export the verified series: --sdist writes the patched sdist (version marked +patchctl)."""
    if not sdist:
        raise typer.BadParameter("choose what to export: --sdist", param_hint="--sdist")
    from patchctl.cli.console import RichProgress
    from patchctl.ops.export import export_sdist

    with RichProgress(enabled=False if as_json else None) as progress:
        result = export_sdist(
            series,
            None if output is None else Path(output),
            workdir,
            progress,
            force=force,
            output_is_dir=output is not None and output.endswith(("/", os.sep)),
        )
    render_export(result, as_json)


def render_export(result: SdistExport, as_json: bool) -> None:
    """Where the sdist went, its sha256 and version; or the JSON document."""
    from patchctl.cli.console import out, print_json

    if as_json:
        print_json(result.to_json())
        return
    out.print(f"wrote {result.path} ({result.size} bytes, {result.files} files)")
    out.print(f"  version {result.version} (upstream {result.upstream_version})")
    out.print(f"  sha256  {result.sha256}")
    out.print(f"  tree    {result.tree}")
    out.print(f"  install: pip install {shlex.quote(installable(result.path))}")


def installable(path: Path) -> str:
    """`path` as pip takes it for a local file: a bare relative name (`dist`) is looked up on
    the package index, so a relative path gets `./`."""
    text = str(path)
    return text if path.is_absolute() or text.startswith(("./", "../")) else f"./{text}"
