"""`patchctl bisect-upstream ID --good PIN --bad PIN`: the upstream commit that broke a patch."""

from __future__ import annotations

from typing import Annotated

import typer

from patchctl.cli.options import DEFAULT_SERIES, JsonOpt, SeriesOpt


def register(app: typer.Typer) -> None:
    """Add `patchctl bisect-upstream` to the app."""
    app.command("bisect-upstream")(bisect_upstream_command)


def bisect_upstream_command(
    patch_id: Annotated[str, typer.Argument(metavar="ID", help="The patch's id.")],
    good: Annotated[
        str, typer.Option("--good", metavar="PIN", help="A commit, tag or branch it applies on.")
    ],
    bad: Annotated[
        str, typer.Option("--bad", metavar="PIN", help="A later one it does not apply on.")
    ],
    series: SeriesOpt = DEFAULT_SERIES,
    as_json: JsonOpt = False,
) -> None:
    """Name the first upstream commit (git upstreams) on which the patch stops applying, with
    the hunks that fail there."""
    from patchctl.cli.console import out, print_json
    from patchctl.ops.bisect import bisect_upstream, report_lines

    report = bisect_upstream(series, patch_id, good, bad)
    if as_json:
        print_json(report.to_json())
        return
    for line in report_lines(report):
        out.print(line, markup=False)
