#!/usr/bin/env python3
"""Write patchctl/cli/cliindex.json (the command index cli/main.py answers --help and completion
from) from the typer app. Run it after adding or changing a command;
tests/patchctl/cli/test_completion.py fails until the file matches the app."""

from __future__ import annotations

from pathlib import Path

from patchctl.cli.app import render_cli_index

TARGET = Path(__file__).resolve().parent.parent / "patchctl" / "cli" / "cliindex.json"

if __name__ == "__main__":
    TARGET.write_text(render_cli_index(), encoding="utf-8")
    print(f"wrote {TARGET}")
