"""The ignore rules capture trusts: the upstream's own `.gitignore` files and the clean room's
`.git/info/exclude`, never a rule that a patch or an edit of the clean room added.

A `.gitignore` inside the edited tree must not decide what a patch holds: a patch (or the
user) that adds `*.c` or `src/` would make `git add -A` leave out a file the user created,
and the capture would silently lose it. Build output must still stay out, and the upstream's
own rules are what name it (`build*/`, `*.o` in llama.cpp); `.git/info/exclude` is the
user's own, which no patch can write. Capture stages what `git add -A` stages plus every
untracked file these rules alone do not ignore (`Git.snapshot_trusting`), so a file is left
out only when both the tree's rules and the trusted ones ignore it.

git reads an exclude file (`--exclude-from`) with patterns relative to the top of the tree,
so each upstream `.gitignore` is rewritten into root-relative patterns (`relocated`), the
files in order of depth so that a deeper file's rules come later and win, as in git.

`worktree_snapshot` is the snapshot itself, shared by `capture` and `rebase --continue`, and
`outside_root` names the changed paths a patch of the series' root cannot hold.
"""

from __future__ import annotations

import re

from patchctl import allowlists
from patchctl.gitlayer.git import Git
from patchctl.progress import notice

GITIGNORE = b".gitignore"
REGULAR = ("100644", "100755")  # a .gitignore that is a symlink is not read by git either
GLOB_CHARS = re.compile(rb"([*?\[\\])")


def trusted_rules(git: Git, base_tree: str) -> bytes:
    """The exclude lines (root-relative) of the upstream tree `base_tree`'s `.gitignore` files,
    then those of the clean room's `.git/info/exclude`."""
    found = [
        e
        for e in git.ls_tree(base_tree)
        if e.path.rsplit(b"/", 1)[-1] == GITIGNORE and e.mode in REGULAR
    ]
    found.sort(key=lambda e: (e.path.count(b"/"), e.path))
    blobs = git.cat_blobs([e.oid for e in found]) if found else []
    parts = [
        relocated(entry.path[: -len(GITIGNORE)].rstrip(b"/"), blob)
        for entry, blob in zip(found, blobs, strict=True)
    ]
    exclude = git.git_dir() / "info" / "exclude"
    if exclude.is_file() and not exclude.is_symlink():
        parts.append(relocated(b"", exclude.read_bytes()))
    return b"".join(parts)


def relocated(directory: bytes, text: bytes) -> bytes:
    """The lines of `directory`'s `.gitignore` as patterns relative to the root.

    A pattern with a `/` before its end is relative to the directory of its file (`/D/p`); one
    without matches at any depth below it (`/D/**/p`); `!` stays in front, comments and blank
    lines go. Glob characters in the directory's name are escaped.
    """
    lines = text.splitlines()
    if not directory:
        return b"".join(line + b"\n" for line in lines)
    prefix = b"/" + GLOB_CHARS.sub(rb"\\\1", directory) + b"/"
    out = []
    for line in lines:
        if not line.strip() or line.startswith(b"#"):
            continue
        negate = line.startswith(b"!")
        body = line[1:] if negate else line
        anchored = b"/" in body.rstrip(b" \r").rstrip(b"/")
        rule = prefix + body.lstrip(b"/") if anchored else prefix + b"**/" + body
        out.append((b"!" if negate else b"") + rule + b"\n")
    return b"".join(out)


# ----------------------------------------------------------------------------- the snapshot


def worktree_snapshot(git: Git, base_tree: str) -> str:
    """The tree a capture takes from a clean room's work tree: what `git add -A` stages, plus
    the untracked files that only a `.gitignore` the upstream (tree `base_tree`) does not have
    hides (one a patch or an edit added: the rules above), named in a notice. Files the upstream's
    own rules (or .git/info/exclude) ignore, build output, stay out."""
    tree, hidden = git.snapshot_trusting(trusted_rules(git, base_tree))
    if hidden:
        shown = ", ".join(allowlists.shown(name) for name in hidden[:5])
        more = f" and {len(hidden) - 5} more" if len(hidden) > 5 else ""
        notice(
            f"note: captured {len(hidden)} new file(s) that a .gitignore the upstream does not "
            f"have hides (added by a patch or in the clean room): {shown}{more}; if they are "
            "build output, delete them (or build outside the clean room) and capture again"
        )
    return tree


def outside_root(paths: list[str], root: str) -> list[str]:
    """The `paths` that lie outside `root` (none for root '.')."""
    if root in (".", ""):
        return []
    prefix = root.rstrip("/") + "/"
    return [n for n in paths if not n.startswith(prefix)]
