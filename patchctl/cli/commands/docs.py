"""`patchctl docs [--check]`: the generated series README and marker registry."""

from __future__ import annotations

from typing import Annotated

import typer

from patchctl.cli.options import DEFAULT_SERIES, JsonOpt, SeriesOpt


def register(app: typer.Typer) -> None:
    """Add `patchctl docs` to the app."""
    app.command("docs")(docs_command)


def docs_command(
    series: SeriesOpt = DEFAULT_SERIES,
    check: Annotated[
        bool, typer.Option("--check", help="Write nothing; exit 16 when the docs are stale.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Regenerate the series README (## Current series) and docs/UPSTREAM_SYNC.md."""
    from patchctl.cli.console import out, print_json
    from patchctl.ops.docs import update_docs

    result = update_docs(series, check=check)  # --check: stale docs raise (exit 16)
    if as_json:
        if check:
            print_json({"ok": True, "stale": []})
        else:
            docs, changed = [str(p) for p in result.docs], [str(p) for p in result.changed]
            print_json({"ok": True, "docs": docs, "changed": changed})
        return
    if not check:
        for path in result.docs:
            out.print(f"{'wrote' if path in result.changed else 'unchanged:'} {path}")
