"""The command line: typer app, global flags, the one error handler, command registration.

Commands live in `patchctl/commands/<group>.py`; each module defines
`register(app: typer.Typer) -> None` and is picked up automatically.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import traceback
from collections.abc import Sequence

import typer

import patchctl.commands
from patchctl import __version__
from patchctl.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_USAGE, PatchctlError
from patchctl.options import RunFlags

app = typer.Typer(
    name="patchctl",
    help="Manage a patch series on a pinned upstream (clean-room apply, build, capture, verify).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    pretty_exceptions_show_locals=False,
    add_completion=False,
)


# Typer may vendor click (typer._click) or depend on it; find its ClickException either way.
ClickException: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"patchctl {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    ctx: typer.Context,
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for internal errors."),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Show the version and exit."
    ),
) -> None:
    """patchctl: a strict, reproducible patch queue over a pinned upstream."""
    if isinstance(ctx.obj, RunFlags):
        ctx.obj.debug = debug


def command_modules() -> list[str]:
    """The fully qualified names of every module in patchctl.commands, sorted."""
    prefix = patchctl.commands.__name__ + "."
    return sorted(
        prefix + info.name
        for info in pkgutil.iter_modules(patchctl.commands.__path__)
        if not info.name.startswith("_")
    )


def register_commands(target: typer.Typer) -> None:
    """Import every command module and let it register its commands on `target`."""
    for name in command_modules():
        importlib.import_module(name).register(target)


register_commands(app)


def _internal_error(exc: BaseException, debug: bool) -> int:
    if debug:
        traceback.print_exception(exc)
    sys.stderr.write(
        f"internal error (a bug in patchctl): {type(exc).__name__}: {exc}"
        + ("" if debug else " (rerun with --debug for a traceback)")
        + "\n"
    )
    return EXIT_INTERNAL


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit status (the one place errors become exit codes)."""
    args = list(sys.argv[1:] if argv is None else argv)
    flags = RunFlags()  # filled in while the command line is parsed
    command = typer.main.get_command(app)
    try:
        result = command.main(args=args, prog_name="patchctl", standalone_mode=False, obj=flags)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except ClickException as exc:
        exc.show()  # type: ignore[attr-defined]
        code = int(getattr(exc, "exit_code", EXIT_USAGE))
        return code if code else EXIT_USAGE
    except (typer.Abort, KeyboardInterrupt):
        sys.stderr.write("interrupted\n")
        return EXIT_INTERRUPTED
    except PatchctlError as exc:
        from patchctl.console import print_error, print_json

        if flags.json:
            print_json({"ok": False, **exc.to_json()})
        print_error(exc)
        if flags.debug:
            traceback.print_exception(exc)
        return exc.exit_code
    except Exception as exc:
        return _internal_error(exc, flags.debug)
    # standalone_mode=False returns typer.Exit's code (or the command's int) instead of raising;
    # this typer returns 130 for Ctrl-C instead of raising Abort.
    code = result if isinstance(result, int) else 0
    if code == EXIT_INTERRUPTED:
        sys.stderr.write("interrupted\n")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
