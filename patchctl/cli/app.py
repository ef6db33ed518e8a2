"""The typer app: global flags, the one error handler, command registration, and the
command index that lets cli/main.py answer `--version`, `--help` and completion without it.

Commands live in `patchctl/cli/commands/<command>.py`; each module defines
`register(app: typer.Typer) -> None` and is picked up automatically. Help is click's plain
format (rich_markup_mode=None): rich is imported only when a command renders output.
"""

from __future__ import annotations

import importlib
import io
import json
import pkgutil
import sys
import traceback
from collections.abc import Sequence
from enum import Enum
from pathlib import Path
from typing import Any

import typer

import patchctl.cli.commands
from patchctl import __version__, progress
from patchctl.cli.completion import Command, Param
from patchctl.cli.options import RunFlags
from patchctl.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_USAGE, PatchctlError

app = typer.Typer(
    name="patchctl",
    help="Manage a patch series on a pinned upstream (clean-room apply, build, capture, verify).",
    no_args_is_help=True,
    rich_markup_mode=None,
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
    """The fully qualified names of every module in patchctl.cli.commands, sorted."""
    prefix = patchctl.cli.commands.__name__ + "."
    return sorted(
        prefix + info.name
        for info in pkgutil.iter_modules(patchctl.cli.commands.__path__)
        if not info.name.startswith("_")
    )


def register_commands(target: typer.Typer) -> None:
    """Import every command module and let it register its commands on `target`."""
    for name in command_modules():
        importlib.import_module(name).register(target)


register_commands(app)


def _internal_error(exc: BaseException, flags: RunFlags) -> int:
    from patchctl.allowlists import printable

    if flags.debug:
        traceback.print_exception(exc)
    what = printable(f"{type(exc).__name__}: {exc}")
    if flags.json:
        from patchctl.cli.console import print_json

        print_json(
            {"ok": False, "error": "InternalError", "exit_code": EXIT_INTERNAL, "message": what}
        )
    sys.stderr.write(
        f"internal error (a bug in patchctl): {what}"
        + ("" if flags.debug else " (rerun with --debug for a traceback)")
        + "\n"
    )
    return EXIT_INTERNAL


def _usage_error(exc: Exception, json_out: bool) -> int:
    from patchctl.allowlists import printable

    code = int(getattr(exc, "exit_code", EXIT_USAGE)) or EXIT_USAGE
    shown = io.StringIO()
    exc.show(file=shown)  # type: ignore[attr-defined]
    if json_out:
        from patchctl.cli.console import print_json

        message = printable(" ".join(exc.format_message().split()))  # type: ignore[attr-defined]
        print_json({"ok": False, "error": "UsageError", "exit_code": code, "message": message})
    sys.stderr.write(printable(shown.getvalue(), keep="\n"))
    return code


def _json_in(args: Sequence[str]) -> bool:
    """`--json` among the options of a command line that did not parse (so no callback ran)."""
    return "--json" in (args[: args.index("--")] if "--" in args else args)


def _user_error(exc: PatchctlError, flags: RunFlags) -> int:
    from patchctl.cli.console import print_error, print_json

    if flags.json:
        print_json({"ok": False, **exc.to_json()})
    print_error(exc)
    if flags.debug:
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


def run(args: Sequence[str]) -> int:
    """Run the CLI on `args`; return the exit status (the one place errors become exit codes)."""
    flags = RunFlags()  # filled in while the command line is parsed
    command = typer.main.get_command(app)
    progress.notice_sink = _print_notice
    try:
        result = command.main(
            args=list(args), prog_name="patchctl", standalone_mode=False, obj=flags
        )
    except typer.Exit as exc:
        return int(exc.exit_code)
    except ClickException as exc:
        return _usage_error(exc, flags.json or _json_in(args))
    except (typer.Abort, KeyboardInterrupt) as exc:
        if isinstance(exc.__cause__, EOFError):  # click turns any EOFError into Abort
            return _internal_error(exc.__cause__, flags)
        sys.stderr.write("interrupted\n")
        return EXIT_INTERRUPTED
    except PatchctlError as exc:
        return _user_error(exc, flags)
    except OSError as exc:
        return _user_error(_os_error(exc), flags)
    except Exception as exc:
        return _internal_error(exc, flags)
    # standalone_mode=False returns typer.Exit's code (or the command's int) instead of raising;
    # this typer returns 130 for Ctrl-C instead of raising Abort.
    code = result if isinstance(result, int) else 0
    if code == EXIT_INTERRUPTED:
        sys.stderr.write("interrupted\n")
    return code


def _print_notice(text: str) -> None:
    """A core note (progress.notice) as one line on stderr, control characters escaped."""
    from patchctl.allowlists import printable

    sys.stderr.write(printable(text) + "\n")
    sys.stderr.flush()


# ----------------------------------------------------------------------------- the index

HELP_WIDTH = 78  # click's width in a terminal of 80 columns or more


def root_help() -> str:
    """`patchctl --help` as the app prints it (at HELP_WIDTH)."""
    command = typer.main.get_command(app)
    ctx = command.make_context("patchctl", [], resilient_parsing=True, terminal_width=HELP_WIDTH)
    return command.get_help(ctx) + "\n"


def cli_index() -> dict[str, Command]:
    """Every command and group of the app as completion sees it, by command path."""
    found: dict[str, Command] = {}
    todo: list[tuple[str, Any]] = [("", typer.main.get_command(app))]
    while todo:
        path, command = todo.pop()
        subcommands = tuple(getattr(command, "commands", {}))
        params = tuple(_param(p) for p in command.params if not getattr(p, "hidden", False))
        found[path] = Command(_first_line(command.help or ""), params, subcommands)
        todo += [(f"{path} {name}".strip(), command.commands[name]) for name in subcommands]
    return dict(sorted(found.items()))


def _first_line(text: str) -> str:
    return " ".join(text.strip().split("\n\n")[0].split())


def _param(param: Any) -> Param:
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    click_type = getattr(param, "type", None)
    opts = (*param.opts, *param.secondary_opts) if param.param_type_name == "option" else ()
    choices: tuple[str, ...] = ()
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        choices = tuple(str(member.value) for member in annotation)
    else:
        choices = tuple(str(c) for c in getattr(click_type, "choices", ()))
    if getattr(param, "is_flag", False):
        kind = "flag"
    elif choices:
        kind = "choice"
    elif annotation is Path or type(click_type).__name__ == "Path" or param.metavar == "PATH":
        kind = "file"
    else:
        kind = "plain"
    help_text = _first_line(getattr(param, "help", None) or "")
    return Param(tuple(opts), kind, help_text, choices, bool(getattr(param, "multiple", False)))


def render_cli_index() -> str:
    """cliindex.json for the app as it is now (scripts/cli_index.py writes it)."""
    commands = {
        path: {
            "help": command.help,
            "params": [param._asdict() for param in command.params],
            "subcommands": list(command.subcommands),
        }
        for path, command in cli_index().items()
    }
    return json.dumps({"root_help": root_help(), "commands": commands}, indent=1) + "\n"
