"""Shell completion (bash, zsh, fish) answered from the command index, without typer.

The protocol is click's: the shell calls `patchctl` with `_PATCHCTL_COMPLETE=<shell>_source`
(print the script to eval once) or `<shell>_complete` (answer one TAB, with COMP_WORDS and
COMP_CWORD set). Answers come from `cliindex.COMMANDS`, a description of every command that
scripts/cli_index.py writes from the typer app, so a TAB costs a Python start-up and nothing
more (results/startup/2026-12-01/startup.json). Only NamedTuple is used here: dataclasses
would import `inspect`, which costs more than the rest of the answer.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import NamedTuple

COMPLETE_VAR = "_PATCHCTL_COMPLETE"


class Param(NamedTuple):
    """An option (`opts` set) or a positional argument (`opts` empty) of a command."""

    opts: tuple[str, ...]
    kind: str  # "flag" | "plain" | "file" | "dir" | "choice"
    help: str = ""
    choices: tuple[str, ...] = ()
    multiple: bool = False


class Command(NamedTuple):
    """A command or a group (with `subcommands`), as `--help` and completion see it."""

    help: str
    params: tuple[Param, ...]
    subcommands: tuple[str, ...] = ()


class Item(NamedTuple):
    """One completion: `kind` is plain (a word), file or dir (let the shell complete paths)."""

    kind: str
    value: str
    help: str = ""


# ----------------------------------------------------------------------------- answering


def complete(commands: Mapping[str, Command], args: Sequence[str], incomplete: str) -> list[Item]:
    """What may come at the cursor, given the finished words `args` after `patchctl`."""
    path, command, pending, used, positional = _walk(commands, args)
    if pending is not None:
        return _values(pending, incomplete)
    if incomplete.startswith("-"):
        return _options(command, used, incomplete)
    if command.subcommands:
        prefix = f"{path} " if path else ""
        return [
            Item("plain", name, commands[prefix + name].help)
            for name in command.subcommands
            if name.startswith(incomplete)
        ]
    arguments = [p for p in command.params if not p.opts]
    if positional < len(arguments):
        return _values(arguments[positional], incomplete)
    return []


def _walk(
    commands: Mapping[str, Command], args: Sequence[str]
) -> tuple[str, Command, Param | None, set[Param], int]:
    """(command path, command, option awaiting a value, options used, positionals seen)."""
    path, command = "", commands[""]
    pending: Param | None = None
    used: set[Param] = set()
    positional = 0
    for arg in args:
        if pending is not None:
            pending = None
            continue
        option = _option(command, arg.split("=", 1)[0]) if arg.startswith("-") else None
        if option is not None:
            used.add(option)
            pending = option if option.kind != "flag" and "=" not in arg else None
        elif command.subcommands and arg in command.subcommands:
            path = f"{path} {arg}".strip()
            command, used, positional = commands[path], set(), 0
        elif not arg.startswith("-"):
            positional += 1
    return path, command, pending, used, positional


def _option(command: Command, name: str) -> Param | None:
    return next((p for p in command.params if name in p.opts), None)


def _options(command: Command, used: set[Param], incomplete: str) -> list[Item]:
    items = []
    for param in command.params:
        if param.opts and (param.multiple or param not in used):
            items += [Item("plain", o, param.help) for o in param.opts if o.startswith(incomplete)]
    if "--help".startswith(incomplete):
        items.append(Item("plain", "--help", "Show this message and exit."))
    return items


def _values(param: Param, incomplete: str) -> list[Item]:
    if param.kind == "choice":
        return [Item("plain", c) for c in param.choices if c.startswith(incomplete)]
    if param.kind in ("file", "dir"):
        return [Item(param.kind, incomplete)]
    return []


# ----------------------------------------------------------------------------- the shells


def respond(instruction: str, env: Mapping[str, str], commands: Mapping[str, Command]) -> str:
    """The output for `_PATCHCTL_COMPLETE=<instruction>` (ValueError for an unknown one)."""
    shell, _, action = instruction.partition("_")
    if shell not in SOURCES or action not in ("source", "complete"):
        raise ValueError(f"unsupported shell completion instruction {instruction!r}")
    if action == "source":
        return SOURCES[shell]
    words, cword = _words(shell, env)
    args = words[1:cword]
    incomplete = words[cword] if cword < len(words) else ""
    return "".join(FORMATS[shell](item) for item in complete(commands, args, incomplete))


def _words(shell: str, env: Mapping[str, str]) -> tuple[list[str], int]:
    try:
        words = shlex.split(env.get("COMP_WORDS", ""))
    except ValueError:  # an unclosed quote while typing
        words = env.get("COMP_WORDS", "").split()
    if shell == "fish":  # fish passes the line up to the cursor; a trailing space ends a word
        line = env.get("COMP_WORDS", "")
        return words, len(words) - (0 if line.endswith(" ") or not words else 1)
    return words, int(env.get("COMP_CWORD", "0") or 0)


FORMATS = {
    "bash": lambda i: f"{i.kind},{i.value}\n",
    "zsh": lambda i: f"{i.kind}\n{i.value.replace(':', chr(92) + ':')}\n{i.help or '_'}\n",
    "fish": lambda i: f"{i.kind},{i.value}" + (f"\t{i.help}" if i.help else "") + "\n",
}

SOURCES = {
    "bash": """_patchctl_completion() {
    local IFS=$'\\n' response
    response=$(env COMP_WORDS="${COMP_WORDS[*]}" COMP_CWORD=$COMP_CWORD \\
        _PATCHCTL_COMPLETE=bash_complete "$1")
    for completion in $response; do
        IFS=',' read -r kind value <<< "$completion"
        case $kind in
            dir) COMPREPLY=(); compopt -o dirnames ;;
            file) COMPREPLY=(); compopt -o default ;;
            plain) COMPREPLY+=("$value") ;;
        esac
    done
    return 0
}
complete -o nosort -F _patchctl_completion patchctl
""",
    "zsh": """#compdef patchctl
_patchctl_completion() {
    local -a completions completions_with_descriptions response
    local kind value help
    (( ! $+commands[patchctl] )) && return 1
    response=("${(@f)$(env COMP_WORDS="${words[*]}" COMP_CWORD=$((CURRENT-1)) \\
        _PATCHCTL_COMPLETE=zsh_complete patchctl)}")
    for kind value help in "${response[@]}"; do
        if [[ "$kind" == "plain" ]]; then
            if [[ "$help" == "_" ]]; then completions+=("$value")
            else completions_with_descriptions+=("$value":"$help"); fi
        elif [[ "$kind" == "dir" ]]; then _path_files -/
        elif [[ "$kind" == "file" ]]; then _path_files -f
        fi
    done
    [ -n "$completions_with_descriptions" ] && \
        _describe -V unsorted completions_with_descriptions -U
    [ -n "$completions" ] && compadd -U -V unsorted -a completions
}
compdef _patchctl_completion patchctl
""",
    "fish": """function _patchctl_completion
    set -l response (env _PATCHCTL_COMPLETE=fish_complete COMP_WORDS=(commandline -cp) patchctl)
    for completion in $response
        set -l metadata (string split "," -- $completion)
        if test $metadata[1] = "dir"
            __fish_complete_directories $metadata[2]
        else if test $metadata[1] = "file"
            __fish_complete_path $metadata[2]
        else if test $metadata[1] = "plain"
            echo $metadata[2]
        end
    end
end
complete --no-files --command patchctl --arguments "(_patchctl_completion)"
""",
}
