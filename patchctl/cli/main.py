"""The entry point (`patchctl`, `python -m patchctl`): start-up costs only what is needed.

`--version`, the top-level `--help` and shell completion are answered here from the command
index (cliindex.json, written from the app by scripts/cli_index.py), without importing typer,
rich or any command; everything else goes to the typer app in app.py, whose commands import
the core only when they run. results/startup/2026-12-01/startup.json has the measured times.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from patchctl import __version__


def main(argv: Sequence[str] | None = None) -> int:
    """Run patchctl on `argv` (default: the process arguments); return the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    quick = _quick_answer(args)
    if quick is not None:
        sys.stdout.write(quick)
        sys.stdout.flush()
        return 0
    from patchctl.cli.app import run

    return run(args)


def _quick_answer(args: list[str]) -> str | None:
    """The output for the cheap cases, or None for everything the app must run."""
    from patchctl.cli.completion import COMPLETE_VAR

    instruction = os.environ.get(COMPLETE_VAR)
    if instruction:
        from patchctl.cli.cliindex import COMMANDS
        from patchctl.cli.completion import respond

        try:
            return respond(instruction, os.environ, COMMANDS)
        except ValueError:
            return None  # not ours to answer: the app reports it
    if args == ["--version"]:
        return f"patchctl {__version__}\n"
    if args == ["--help"]:
        from patchctl.cli.cliindex import ROOT_HELP

        return ROOT_HELP
    return None


if __name__ == "__main__":
    raise SystemExit(main())
