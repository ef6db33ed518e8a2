"""The only module that runs git: bytes in, bytes out, pinned flags, hermetic environment.

Every call is `git -C <repo> -c <pins...> <args>` with an environment that ignores the user's
and the system's git configuration, so user settings such as `diff.noprefix`,
`apply.whitespace=fix` or `core.autocrlf=true` can never change the bytes patchctl reads or
writes (house-style.md; patch-tools-anchors.md §d1).
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from functools import cache
from pathlib import Path

from patchctl.errors import GitFailed

IDENTITY_NAME = "patchctl"
IDENTITY_EMAIL = "patchctl@invalid"
# Fixed dates make commit ids a function of tree, parents and message only: reproducible.
FIXED_DATE = "1970-01-01T00:00:00Z"

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
    ("maintenance.auto", "false", "no background maintenance either"),
    ("commit.gpgSign", "false", "commits are reproducible and need no key"),
    ("tag.gpgSign", "false", "as above, for tags"),
    ("i18n.commitEncoding", "UTF-8", "commit messages are UTF-8"),
    ("init.defaultBranch", "main", "a stable branch name without advice"),
    ("advice.detachedHead", "false", "no advice chatter on stderr"),
    ("status.showUntrackedFiles", "all", "dirty checks see every untracked file"),
    ("protocol.file.allow", "always", "local paths are valid upstream urls"),
    ("user.useConfigOnly", "false", "identity comes from the environment below"),
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


@cache
def empty_home() -> Path:
    """An empty directory used as HOME/XDG_CONFIG_HOME for git (removed at exit)."""
    home = Path(tempfile.mkdtemp(prefix="patchctl-home-"))
    atexit.register(shutil.rmtree, home, True)
    return home


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
            "GIT_CEILING_DIRECTORIES": str(repo.resolve().parent),
            "GIT_TERMINAL_PROMPT": "0",
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


class Git:
    """A git repository (or a directory to run git in) driven through the pinned runner."""

    def __init__(self, repo: Path) -> None:
        self.repo = Path(repo)

    def __repr__(self) -> str:
        return f"Git({str(self.repo)!r})"

    @classmethod
    def init(cls, path: Path, *, bare: bool = False) -> Git:
        """Create a new repository at `path` (made if missing) and return its runner."""
        path.mkdir(parents=True, exist_ok=True)
        git = cls(path)
        # An empty template dir: no sample hooks, no info/exclude from the system templates.
        template = empty_home() / "template"
        template.mkdir(exist_ok=True)
        git.run("init", "-q", *(["--bare"] if bare else []), f"--template={template}")
        return git

    def command(self, *args: str) -> list[str]:
        """The full argv for `git <args>` in this repo, pins included."""
        return ["git", "-C", str(self.repo), *pinned_flags(), *args]

    def run_full(
        self,
        *args: str,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
    ) -> tuple[int, bytes, bytes]:
        """Run git; return (returncode, stdout, stderr) without judging the status."""
        proc = subprocess.run(
            self.command(*args),
            input=stdin if stdin is not None else b"",
            capture_output=True,
            env=hermetic_env(self.repo, env),
            check=False,
        )
        return proc.returncode, proc.stdout, proc.stderr

    def run(
        self,
        *args: str,
        stdin: bytes | None = None,
        ok: tuple[int, ...] = (0,),
        env: Mapping[str, str] | None = None,
    ) -> bytes:
        """Run git; return stdout unchanged; raise GitFailed unless the status is in `ok`."""
        code, out, err = self.run_full(*args, stdin=stdin, env=env)
        if code not in ok:
            raise GitFailed(["git", *args], code, err)
        return out

    def text(self, *args: str, env: Mapping[str, str] | None = None) -> str:
        """Run git and decode its output strictly as UTF-8 (ids, ref names), stripped."""
        return self.run(*args, env=env).decode("utf-8").strip()

    def rev_parse(self, rev: str) -> str:
        """The full object id of `rev` (raises GitFailed when it does not exist)."""
        return self.text("rev-parse", "--verify", "--end-of-options", rev)

    def maybe_rev(self, rev: str) -> str | None:
        """The full object id of `rev`, or None when it does not resolve."""
        code, out, _ = self.run_full("rev-parse", "--verify", "-q", "--end-of-options", rev)
        return out.decode("utf-8").strip() if code == 0 else None

    def tree_of(self, rev: str) -> str:
        """The tree id of a commit-ish."""
        return self.rev_parse(f"{rev}^{{tree}}")

    def write_tree(self) -> str:
        """Write the index as a tree object and return its id."""
        return self.text("write-tree")

    def add_all(self) -> None:
        """Stage everything, including files a .gitignore would hide (`add -A -f`)."""
        self.run("add", "-A", "-f", "--", ".")

    def commit_tree(self, tree: str, message: bytes, parents: tuple[str, ...] = ()) -> str:
        """Create a commit object with fixed identity and dates; return its id."""
        args = ["commit-tree", tree]
        for parent in parents:
            args += ["-p", parent]
        return self.run(*args, stdin=message).decode("utf-8").strip()

    def update_ref(self, ref: str, new: str, reason: str = "patchctl") -> None:
        """Point `ref` at `new`."""
        self.run("update-ref", "-m", reason, ref, new)

    def is_repo(self) -> bool:
        """True when `repo` is the top of a git work tree or a git dir."""
        code, _, _ = self.run_full("rev-parse", "--git-dir")
        return code == 0
