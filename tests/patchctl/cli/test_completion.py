"""completion.py: shell completion from the command index, and the index matches the app."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from patchctl.cli import cliindex
from patchctl.cli.app import cli_index, render_cli_index, root_help
from patchctl.cli.completion import SOURCES, Item, complete, respond
from patchctl.ops.build import BACKENDS


def words(line: str) -> list[Item]:
    """Completions at the end of `line` (a trailing space starts a new word)."""
    parts = line.split()
    if not line or line.endswith(" "):
        return complete(cliindex.COMMANDS, parts, "")
    return complete(cliindex.COMMANDS, parts[:-1], parts[-1])


def values(items: list[Item]) -> list[str]:
    return [i.value for i in items]


def test_the_index_is_the_app() -> None:
    # Fails after a command changed without `python scripts/cli_index.py`.
    assert cli_index() == cliindex.COMMANDS
    assert root_help() == cliindex.ROOT_HELP


def test_the_index_file_is_what_the_script_writes() -> None:
    # The generated data, byte for byte: a hand edit or a stale file fails here.
    assert cliindex.INDEX_FILE.read_text(encoding="utf-8") == render_cli_index()


def test_the_index_reads_back_what_was_written(tmp_path: Path) -> None:
    index = tmp_path / "cliindex.json"
    index.write_text(render_cli_index(), encoding="utf-8")
    assert cliindex.load(index) == (root_help(), cli_index())
    broken = json.loads(index.read_text(encoding="utf-8"))
    broken["commands"]["build"]["help"] = "changed"
    index.write_text(json.dumps(broken), encoding="utf-8")
    assert cliindex.load(index)[1] != cli_index()


def test_commands_groups_and_subcommands() -> None:
    assert values(words("")) == list(cliindex.COMMANDS[""].subcommands)
    assert values(words("c")) == ["capture", "check-prefixes", "ci", "cleanroom"]
    assert values(words("cleanroom ")) == ["apply", "status"]
    assert values(words("cleanroom st")) == ["status"]
    assert words("cleanroom apply ") == []  # no positional arguments


def test_options_values_and_used_options() -> None:
    assert values(words("build --b")) == ["--backend", "--build-dir"]
    assert values(words("build --backend ")) == list(BACKENDS)
    assert values(words("build --backend=cmake --b")) == ["--build-dir"]  # used once
    assert values(words("build -t x -t y --tar")) == ["--target"]  # repeatable
    assert words("cleanroom apply --series ") == [Item("file", "")]
    assert words("import ") == [Item("file", "")]  # SOURCE is a path
    assert words("import a.patch ") == []
    assert "--help" in values(words("verify --"))
    assert values(words("--d")) == ["--debug"]


@pytest.mark.parametrize(
    ("shell", "env", "expected"),
    [
        ("bash", {"COMP_WORDS": "patchctl cleanroom ap", "COMP_CWORD": "2"}, "plain,apply\n"),
        (
            "zsh",
            {"COMP_WORDS": "patchctl cleanroom ap", "COMP_CWORD": "2"},
            "plain\napply\nMaterialize the pinned upstream and apply the series strictly (no "
            "fuzz, no offsets).\n",
        ),
        ("fish", {"COMP_WORDS": "patchctl build --backend "}, "plain,auto\nplain,cmake\n"),
    ],
)
def test_shell_formats(shell: str, env: dict[str, str], expected: str) -> None:
    assert respond(f"{shell}_complete", env, cliindex.COMMANDS).startswith(expected)


def test_source_scripts_and_unknown_instructions() -> None:
    assert "_PATCHCTL_COMPLETE=bash_complete" in respond("bash_source", {}, cliindex.COMMANDS)
    with pytest.raises(ValueError):
        respond("tcsh_complete", {}, cliindex.COMMANDS)
    if shutil.which("bash"):
        subprocess.run(["bash", "-n"], input=SOURCES["bash"].encode(), check=True)


def test_the_quick_paths_import_neither_typer_nor_rich_nor_the_core() -> None:
    # Not a timing test: what start-up costs is in benchmarks/startup.py. This checks the
    # reason it is cheap, which can regress silently.
    probe = (
        "import io, os, sys, contextlib\n"
        "from patchctl.cli import main as cli\n"
        "heavy = ('typer', 'click', 'rich', 'yaml', 'patchctl.cli.app', 'patchctl.series.model',\n"
        "         'patchctl.gitlayer.git', 'patchctl.cli.commands')\n"
        "def loaded():\n"
        "    return sorted(m for m in sys.modules if m.startswith(heavy))\n"
        "assert loaded() == [], loaded()\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert cli.main(['--version']) == 0 and cli.main(['--help']) == 0\n"
        "    os.environ.update(_PATCHCTL_COMPLETE='bash_complete',\n"
        "                      COMP_WORDS='patchctl build --backend ', COMP_CWORD='3')\n"
        "    assert cli.main([]) == 0\n"
        "assert loaded() == [], loaded()\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True)
