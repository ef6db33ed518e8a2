#!/usr/bin/env python3
"""Write patchctl/cli/cliindex.py (the command index cli.py answers --help and completion from)
from the typer app. Run it after adding or changing a command; tests/patchctl/cli/test_cli.py checks it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from patchctl.cli.app import render_cli_index

TARGET = Path(__file__).resolve().parent.parent / "patchctl" / "cli" / "cliindex.py"

if __name__ == "__main__":
    TARGET.write_text(render_cli_index(), encoding="utf-8")
    subprocess.run([sys.executable, "-m", "ruff", "format", "-q", str(TARGET)], check=True)
    print(f"wrote {TARGET}")
