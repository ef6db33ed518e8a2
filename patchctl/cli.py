"""The command line: typer app, global flags, the one error handler, command registration.

Commands live in `patchctl/commands/<group>.py`; each module defines
`register(app: typer.Typer) -> None` and is picked up automatically.
"""

from __future__ import annotations

import importlib
import io
import pkgutil
import sys
import traceback
from collections.abc import Sequence

import typer

import patchctl.commands
from patchctl import __version__
from patchctl.console import print_error, print_json
from patchctl.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_USAGE, PatchctlError
from patchctl.values import printable

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
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for internal errors."),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Show the version and exit."
    ),
) -> None:
    """patchctl: a strict, reproducible patch queue over a pinned upstream."""


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


def _wants(argv: Sequence[str], flag: str) -> bool:
    return flag in argv[: argv.index("--")] if "--" in argv else flag in argv


def _internal_error(exc: BaseException, args: Sequence[str]) -> int:
    debug = _wants(args, "--debug")
    if debug:
        traceback.print_exception(exc)
    what = printable(f"{type(exc).__name__}: {exc}")
    if _wants(args, "--json"):
        print_json(
            {"ok": False, "error": "InternalError", "exit_code": EXIT_INTERNAL, "message": what}
        )
    sys.stderr.write(
        f"internal error (a bug in patchctl): {what}"
        + ("" if debug else " (rerun with --debug for a traceback)")
        + "\n"
    )
    return EXIT_INTERNAL


def _usage_error(exc: Exception, args: Sequence[str]) -> int:
    code = int(getattr(exc, "exit_code", EXIT_USAGE)) or EXIT_USAGE
    shown = io.StringIO()
    exc.show(file=shown)  # type: ignore[attr-defined]
    if _wants(args, "--json"):
        message = printable(" ".join(exc.format_message().split()))  # type: ignore[attr-defined]
        print_json({"ok": False, "error": "UsageError", "exit_code": code, "message": message})
    sys.stderr.write(printable(shown.getvalue(), keep="\n"))
    return code


def _user_error(exc: PatchctlError, args: Sequence[str]) -> int:
    if _wants(args, "--json"):
        print_json({"ok": False, **exc.to_json()})
    print_error(exc)
    if _wants(args, "--debug"):
        traceback.print_exception(exc)
    return exc.exit_code


def _os_error(exc: OSError) -> PatchctlError:
    """An operating-system error (a path too long, under a file, not readable): the user's to
    fix, reported like any other error (exit 1) rather than as a bug."""
    where = f" {exc.filename}" if exc.filename is not None else ""
    return PatchctlError(
        f"cannot use{where}: {exc.strerror or exc}",
        hint="check the path and its permissions",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit status (the one place errors become exit codes)."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = typer.main.get_command(app)
    try:
        result = command.main(args=args, prog_name="patchctl", standalone_mode=False)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except ClickException as exc:
        return _usage_error(exc, args)
    except (typer.Abort, KeyboardInterrupt) as exc:
        if isinstance(exc.__cause__, EOFError):  # click turns any EOFError into Abort
            return _internal_error(exc.__cause__, args)
        sys.stderr.write("interrupted\n")
        return EXIT_INTERRUPTED
    except PatchctlError as exc:
        return _user_error(exc, args)
    except OSError as exc:
        return _user_error(_os_error(exc), args)
    except Exception as exc:
        return _internal_error(exc, args)
    # standalone_mode=False returns typer.Exit's code (or the command's int) instead of raising;
    # this typer returns 130 for Ctrl-C instead of raising Abort.
    code = result if isinstance(result, int) else 0
    if code == EXIT_INTERRUPTED:
        sys.stderr.write("interrupted\n")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
