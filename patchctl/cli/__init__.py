"""The command line: the entry point (main.py), the typer app, the consoles, the shared options,
completion, the generated command index and one module per command (commands/).

The top layer: nothing below it imports typer, rich or this package. A command module parses
options, calls one core entry point in patchctl.ops and renders the result.
"""
