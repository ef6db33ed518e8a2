"""The one hostile git configuration: every user setting known to change patch bytes or git
output. The hermetic seal (conftest.py) puts it in the fake HOME for every test; `hostile`
also writes it into one repository's own .git/config. patchctl must produce the same bytes."""

from __future__ import annotations

from pathlib import Path

HOSTILE_GITCONFIG = b"""[core]
\tautocrlf = true
\tsafecrlf = true
\teol = crlf
\tfilemode = false
\tsymlinks = false
\tquotepath = true
\tabbrev = 7
\thooksPath = /nonexistent-hooks
[diff]
\tnoprefix = true
\tmnemonicPrefix = true
\texternal = /bin/false
\tcontext = 1
\tinterHunkContext = 5
\talgorithm = patience
\tsuppressBlankEmpty = true
\trelative = true
\trenames = copies
\tindentHeuristic = false
[color]
\tui = always
\tdiff = always
[apply]
\twhitespace = fix
[grep]
\tlineNumber = true
\tpatternType = perl
[format]
\tsignature = hostile
[commit]
\tgpgSign = true
[init]
\tdefaultBranch = hostile
[user]
\tname = Hostile User
\temail = hostile@example.invalid
"""

# Env vars that would redirect or reconfigure git; removed so the seal starts clean.
GIT_ENV_TO_DROP = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_CONFIG",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG_NOSYSTEM",
    "GIT_CONFIG_COUNT",
    "GIT_CEILING_DIRECTORIES",
    "GIT_EXTERNAL_DIFF",
    "PATCHCTL_CACHE_DIR",
    "PATCHCTL_PYPI_URL",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
)


def install_user_config(home: Path) -> None:
    """The hostile config as `home`'s ~/.gitconfig and XDG git config."""
    (home / ".gitconfig").write_bytes(HOSTILE_GITCONFIG)
    (home / ".config" / "git").mkdir(parents=True, exist_ok=True)
    (home / ".config" / "git" / "config").write_bytes(HOSTILE_GITCONFIG)


def hostile(repo: Path) -> None:
    """Append the hostile config to a repository's own .git/config."""
    with (repo / ".git" / "config").open("ab") as fh:
        fh.write(HOSTILE_GITCONFIG)
