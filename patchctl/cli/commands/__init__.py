"""Command modules: each defines `register(app: typer.Typer) -> None`.

`cli/app.py` imports every module in this package (pkgutil) and calls its `register`, so a new
command group is added by dropping a module here.
"""

from __future__ import annotations
