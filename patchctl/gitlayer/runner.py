"""Running git: the pinned configuration, the hermetic environment, the temporary directories
of patchctl's processes and the one check of an object id; and `streamed`, the one runner of a
tool that is not git (zstd, decoding an archive).

Every git call is `git -C <repo> -c <pins...> <args>` (`Git.command`) with an environment that
ignores the user's and the system's git configuration, so user settings such as
`diff.noprefix`, `apply.whitespace=fix` or `core.autocrlf=true` can never change the bytes
patchctl reads or writes (docs/architecture.md, "The git layer"). `PINNED_CONFIG` lists each
pin with its reason.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import IO

from patchctl.allowlists import GIT_SCHEMES
from patchctl.fsio import process_alive

IDENTITY_NAME = "patchctl"
IDENTITY_EMAIL = "patchctl@invalid"
# Fixed dates make commit ids a function of tree, parents and message only: reproducible.
FIXED_DATE = "1970-01-01T00:00:00Z"
# A full object id (sha1 or sha256): the only values passed where git has no --end-of-options.
OBJECT_ID = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")

# (key, value, why). Applied with `-c` on every call, so even a clean room's own
# .git/config cannot override them.
PINNED_CONFIG: tuple[tuple[str, str, str], ...] = (
    ("core.autocrlf", "false", "worktree bytes must equal blob bytes"),
    ("core.safecrlf", "false", "no CRLF warnings or refusals: CRLF content is data"),
    ("core.eol", "lf", "no platform-dependent eol conversion"),
    ("core.filemode", "true", "mode changes are part of a patch"),
    ("core.symlinks", "true", "symlinks are stored and checked out as links"),
    ("core.quotepath", "false", "non-ASCII paths appear verbatim in plumbing output"),
    ("core.ignorecase", "false", "paths are case-sensitive bytes"),
    ("core.precomposeunicode", "false", "never rewrite path bytes (macOS)"),
    ("core.protectNTFS", "true", "paths NTFS reads as .git (`git~1`) refused on any platform"),
    ("core.protectHFS", "true", "paths HFS+ reads as .git (`.g\u200cit`) refused on any platform"),
    ("core.hooksPath", "/dev/null", "no hooks run inside patchctl's repos"),
    ("core.fsmonitor", "false", "no daemon answers for the worktree"),
    ("core.untrackedCache", "false", "status is computed, not cached"),
    ("core.attributesFile", "/dev/null", "no user-level attributes (eol, filters)"),
    ("core.pager", "cat", "never page"),
    ("core.editor", "false", "never open an editor"),
    ("diff.noprefix", "false", "patches always have a/ and b/ prefixes"),
    ("diff.mnemonicPrefix", "false", "no i/ w/ c/ prefixes"),
    ("diff.relative", "false", "paths are relative to the tree root"),
    ("diff.context", "3", "the context size is part of the patch bytes"),
    ("diff.interHunkContext", "0", "hunk merging is part of the patch bytes"),
    ("diff.algorithm", "myers", "one fixed diff algorithm: stable re-export"),
    ("diff.suppressBlankEmpty", "false", "blank context lines keep their leading space"),
    ("diff.indentHeuristic", "true", "git's default, pinned so it cannot be turned off"),
    ("diff.ignoreSubmodules", "none", "gitlinks are compared like any entry"),
    ("color.ui", "never", "no escape codes in output we parse or store"),
    ("apply.whitespace", "nowarn", "apply never rewrites whitespace (fix would change bytes)"),
    ("apply.ignoreWhitespace", "no", "whitespace differences are conflicts"),
    ("gc.auto", "0", "no background gc while patchctl holds the repo"),
    ("fetch.unpackLimit", "1", "a fetch keeps its pack, which appears whole: a killed fetch"),
    ("transfer.unpackLimit", "1", "never leaves some loose objects of a commit and not others"),
    ("maintenance.auto", "false", "no background maintenance either"),
    ("commit.gpgSign", "false", "commits are reproducible and need no key"),
    ("tag.gpgSign", "false", "as above, for tags"),
    ("i18n.commitEncoding", "UTF-8", "commit messages are UTF-8"),
    ("init.defaultBranch", "main", "a stable branch name without advice"),
    ("advice.detachedHead", "false", "no advice chatter on stderr"),
    ("status.showUntrackedFiles", "all", "dirty checks see every untracked file"),
    ("protocol.allow", "never", "transports not named below (ext::, fd::, helpers) never run"),
    ("protocol.file.allow", "always", "local paths are valid upstream urls"),
    ("protocol.https.allow", "always", "the upstream url forms values.GIT_SCHEMES allows"),
    ("protocol.http.allow", "always", "as above"),
    ("protocol.ssh.allow", "always", "as above"),
    ("protocol.git.allow", "always", "as above"),
    ("merge.conflictStyle", "diff3", "rebase conflict markers show the old base's lines too"),
    ("merge.renames", "true", "a rebase follows files upstream renamed"),
    ("merge.directoryRenames", "conflict", "a new file in a renamed directory is asked about"),
    ("merge.renormalize", "false", "merges compare bytes, never re-normalized line ends"),
    ("user.useConfigOnly", "false", "identity comes from the environment below"),
)
# The `info/attributes` of every repository patchctl makes (the highest-priority attributes
# file, above any `.gitattributes` an upstream or a patch ships): worktree bytes equal blob
# bytes (no eol conversion, filter, ident or re-encoding), and diffs and merges use git's
# built-in text rules, never a driver, `binary` or a marker size an upstream picks (`merge=union`
# would merge a conflict silently; `conflict-marker-size=3` would hide it from the report).
PINNED_ATTRIBUTES = (
    b"* -text -eol -filter -ident -working-tree-encoding !merge !conflict-marker-size !diff\n"
)
# diff.external is deliberately NOT pinned: `-c diff.external=` makes git try to run "".
# Callers pass --no-ext-diff / --no-textconv to diff commands instead, and the
# environment scrub removes GIT_EXTERNAL_DIFF.


def pinned_flags() -> tuple[str, ...]:
    """The `-c key=value` arguments that precede every git subcommand."""
    flags: list[str] = []
    for key, value, _why in PINNED_CONFIG:
        flags += ["-c", f"{key}={value}"]
    return tuple(flags)


TEMP_KINDS = ("home", "index", "scratch", "apply")
"""The kinds of temporary directory patchctl makes (`temp_prefix`); the sweep knows each."""
TEMP_NAME = re.compile(rf"patchctl-(?:{'|'.join(TEMP_KINDS)})-(\d+)-[^/]*")


def temp_prefix(kind: str) -> str:
    """The name prefix of this process's temporary directories: `patchctl-<kind>-<pid>-`
    (`kind` one of TEMP_KINDS, so that `sweep_temp_dirs` removes them after a kill)."""
    if kind not in TEMP_KINDS:
        raise ValueError(f"temporary directory kind {kind!r} is not in TEMP_KINDS")
    return f"patchctl-{kind}-{os.getpid()}-"


def sweep_temp_dirs() -> list[Path]:
    """Remove the temporary directories of patchctl processes that are gone (a SIGKILL
    skips their clean-up); a directory whose process still runs is left alone."""
    root = Path(tempfile.gettempdir())
    removed = []
    for path in root.glob("patchctl-*-*-*"):
        found = TEMP_NAME.fullmatch(path.name)
        if found and path.is_dir() and not path.is_symlink() and not process_alive(int(found[1])):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


@cache
def empty_home() -> Path:
    """An empty directory used as HOME/XDG_CONFIG_HOME for git (removed at exit)."""
    home = Path(tempfile.mkdtemp(prefix=temp_prefix("home")))
    atexit.register(shutil.rmtree, home, True)
    return home


@lru_cache(maxsize=64)
def _ceiling(repo: str) -> str:
    """The parent of `repo` resolved (git looks for no repository above it); asked once per
    repository and process: a rebase calls git hundreds of times in the same few."""
    return str(Path(repo).resolve().parent)


def hermetic_env(repo: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a git call: inherited GIT_* removed, user config unreachable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    home = str(empty_home())
    env.update(
        {
            "LC_ALL": "C",
            "LANGUAGE": "C",
            "HOME": home,
            "XDG_CONFIG_HOME": home,
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_ATTR_NOSYSTEM": "1",
            "GIT_CEILING_DIRECTORIES": _ceiling(str(repo)),
            "GIT_TERMINAL_PROMPT": "0",
            # Only these transports, whatever a url, a redirect or a submodule asks for.
            "GIT_ALLOW_PROTOCOL": ":".join(GIT_SCHEMES),
            "GIT_AUTHOR_NAME": IDENTITY_NAME,
            "GIT_AUTHOR_EMAIL": IDENTITY_EMAIL,
            "GIT_COMMITTER_NAME": IDENTITY_NAME,
            "GIT_COMMITTER_EMAIL": IDENTITY_EMAIL,
            "GIT_AUTHOR_DATE": FIXED_DATE,
            "GIT_COMMITTER_DATE": FIXED_DATE,
            "GIT_EDITOR": "false",
            "GIT_PAGER": "cat",
        }
    )
    env.update(extra or {})
    return env


def object_id(value: str) -> str:
    """`value` itself when it is a full object id; ValueError otherwise (a bug in the caller).

    For the few subcommands without `--end-of-options` (reset, grep): there, only ids that
    git itself printed are passed, and this check keeps it so.
    """
    if not OBJECT_ID.fullmatch(value):
        raise ValueError(f"not a full object id: {value!r}")
    return value


# ----------------------------------------------------------------------------- other tools


@dataclass
class Streamed:
    """A tool's output read as a stream; `returncode` and the start of `stderr` are set when
    the `streamed` block has ended."""

    stdout: IO[bytes]
    returncode: int = 0
    stderr: bytes = b""


@contextmanager
def streamed(command: Sequence[str]) -> Iterator[Streamed]:
    """Run `command` (a tool other than git, by absolute path) and hand its stdout to the
    block; the tool is killed when the block raises (a reader that stops early: a limit).
    Only the archive reader uses it, for `zstd -d` (Python before 3.14 has no zstd)."""
    with subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE) as child:
        assert child.stdout is not None and child.stderr is not None
        result = Streamed(child.stdout)
        try:
            yield result
        except BaseException:
            child.kill()
            raise
        result.stderr = child.stderr.read(4096)
    result.returncode = child.returncode
