"""The only module that runs git: bytes in, bytes out, pinned flags, hermetic environment.

Every call is `git -C <repo> -c <pins...> <args>` with an environment that ignores the user's
and the system's git configuration, so user settings such as `diff.noprefix`,
`apply.whitespace=fix` or `core.autocrlf=true` can never change the bytes patchctl reads or
writes (docs/architecture.md, "The git layer").

The vocabulary the features use lives here too: `Index` (an index file patchctl owns:
read-tree, add-all, apply, write-tree, checkout), `temp_index`, `Git.snapshot_worktree` (the
one work-tree snapshot), `Git.status_paths` and `scratch_repo` (a throwaway bare repository
borrowing objects through alternates), and two long-lived processes for work that touches many
objects: `ObjectReader` (`cat-file --batch-command`) and `TreeWriter` (`mktree --batch`).
Every method separates options from values: a value
(URL, ref, path, object id) follows `--end-of-options` where the subcommand supports it, or is
checked to be an object id where it does not, and pathspecs follow `--`. So no value from a
series file or the command line can ever be read by git as an option.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

from patchctl import binarypatch, killpoint
from patchctl.errors import GitFailed, NotFound, PatchctlError
from patchctl.fsio import process_alive
from patchctl.values import GIT_SCHEMES

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


@dataclass(frozen=True)
class TreeEntry:
    """One entry of a tree listed recursively: mode, object type, id, size, raw path bytes."""

    mode: str  # "100644", "100755", "120000" (symlink) or "160000" (gitlink)
    kind: str  # "blob" or "commit"
    oid: str
    size: int  # bytes of the blob (0 for a gitlink)
    path: bytes


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
        git.pin_attributes(path if bare else path / ".git")
        return git

    def pin_attributes(self, git_dir: Path | None = None) -> None:
        """Write PINNED_ATTRIBUTES as the repository's `info/attributes` (unless it is there:
        a clean room made by an older patchctl gets the current set)."""
        info = (git_dir or self.git_dir()) / "info"
        path = info / "attributes"
        with suppress(OSError):
            if path.read_bytes() == PINNED_ATTRIBUTES:
                return
        info.mkdir(exist_ok=True)
        path.write_bytes(PINNED_ATTRIBUTES)

    # ------------------------------------------------------------------------- the runner

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
        if killpoint.armed():  # the kill test: this git call may be where the process dies
            return self._run_killable(args, stdin, env)
        proc = subprocess.run(
            self.command(*args),
            input=stdin if stdin is not None else b"",
            capture_output=True,
            env=hermetic_env(self.repo, env),
            check=False,
        )
        return proc.returncode, proc.stdout, proc.stderr

    def _run_killable(
        self, args: Sequence[str], stdin: bytes | None, env: Mapping[str, str] | None
    ) -> tuple[int, bytes, bytes]:
        pipe, command = subprocess.PIPE, self.command(*args)
        env = hermetic_env(self.repo, env)
        with subprocess.Popen(command, stdin=pipe, stdout=pipe, stderr=pipe, env=env) as child:
            killpoint.running(f"git {args[0] if args else ''}", child)
            out, err = child.communicate(stdin if stdin is not None else b"")
        return child.returncode, out, err

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

    def read_patch(self, data: bytes) -> tuple[int, bytes]:
        """`git apply --numstat` of patch bytes on stdin: (exit status, stderr). git reads the
        patch as `apply` would (a corrupt one is refused, naming its line) and changes
        nothing: no index, no tree, no file. A binary hunk declaring a file over
        PATCHCTL_MAX_BLOB_BYTES is status 1 without running git (binarypatch.py)."""
        refused = binarypatch.oversized(data)
        if refused is not None:
            return 1, refused.encode() + b"\n"
        code, _out, err = self.run_full("apply", "--numstat", "-p1", stdin=data)
        return code, err

    def text(self, *args: str, env: Mapping[str, str] | None = None) -> str:
        """Run git and decode its output strictly as UTF-8 (ids, ref names), stripped."""
        return self.run(*args, env=env).decode("utf-8").strip()

    # ------------------------------------------------------------------------- objects and refs

    def rev_parse(self, rev: str) -> str:
        """The full object id of `rev` (raises GitFailed when it does not exist)."""
        return self.text("rev-parse", "--verify", "--end-of-options", rev)

    def maybe_rev(self, rev: str) -> str | None:
        """The full object id of `rev`, or None when it does not resolve."""
        code, out, _ = self.run_full("rev-parse", "--verify", "-q", "--end-of-options", rev)
        return out.decode("utf-8").strip() if code == 0 else None

    def has_complete_commit(self, commit: str) -> bool:
        """True when commit `commit` and every object of its tree are in the repository
        (a fetch that was killed may have left the commit without all of its tree)."""
        args = ("rev-list", "--objects", "--no-walk", "--missing=error", "--end-of-options")
        code, _out, _err = self.run_full(*args, commit)
        return code == 0

    def tree_of(self, rev: str) -> str:
        """The tree id of a commit-ish."""
        return self.rev_parse(f"{rev}^{{tree}}")

    def trees_of(self, commits: Sequence[str]) -> list[str]:
        """The tree ids of many commits (full ids) in one process."""
        if not commits:
            return []
        query = "".join(f"{object_id(c)}^{{tree}}\n" for c in commits).encode("ascii")
        out = self.run("cat-file", "--batch-check=%(objectname) %(objecttype)", stdin=query)
        trees = [line.split(" ") for line in out.decode("ascii").splitlines()]
        if len(trees) != len(commits) or any(kind != "tree" for _oid, kind in trees):
            raise GitFailed(["git", "cat-file", "--batch-check"], 128, out)
        return [oid for oid, _kind in trees]

    def tree_objects(self, tree: str) -> list[str]:
        """The ids of `tree` and of every tree and blob below it (gitlinks left out)."""
        out = self.run("ls-tree", "-r", "-t", "-z", "--full-tree", "--end-of-options", tree)
        found = [object_id(tree)]
        for record in out.split(b"\0"):
            info = record.partition(b"\t")[0].split(b" ")
            if len(info) == 3 and info[1] in (b"tree", b"blob"):
                found.append(info[2].decode("ascii"))
        return found

    def has_tree(self, oid: str | None) -> bool:
        """True when `oid` names a tree (or a commit's tree) this repository can read."""
        if oid is None:
            return False
        code, _, _ = self.run_full("cat-file", "-e", "--end-of-options", f"{oid}^{{tree}}")
        return code == 0

    def subtree(self, tree: str, path: str) -> str | None:
        """The tree id of directory `path` inside `tree` (None when it is not a directory)."""
        oid = self.maybe_rev(f"{tree}:{path}")
        if oid is None:
            return None
        kind = self.text("cat-file", "-t", "--end-of-options", oid)
        return oid if kind == "tree" else None

    def ls_tree(self, tree: str) -> list[TreeEntry]:
        """Every file, symlink and gitlink of `tree`, recursively, in git's order."""
        out = self.run("ls-tree", "-r", "-l", "-z", "--full-tree", "--end-of-options", tree)
        entries = []
        for record in out.split(b"\0")[:-1]:
            meta, path = record.split(b"\t", 1)
            mode, kind, oid, size = meta.decode("ascii").split()
            entries.append(TreeEntry(mode, kind, oid, 0 if size == "-" else int(size), path))
        return entries

    def tree_size(self, tree: str, max_files: int, max_bytes: int) -> tuple[int, int]:
        """(files, bytes) of `tree` listed recursively, counted as git lists them and cut off
        past either maximum (the counts then exceed it): a tree that repeats one subtree lists
        billions of entries from a few objects, so the listing is never read whole."""
        command = self.command("ls-tree", "-r", "-l", "-z", "--full-tree", "--end-of-options", tree)
        files = size = 0
        pipe = subprocess.PIPE
        with subprocess.Popen(
            command, stdout=pipe, stderr=pipe, env=hermetic_env(self.repo)
        ) as child:
            assert child.stdout is not None and child.stderr is not None
            rest = b""
            while (files <= max_files and size <= max_bytes) and (
                block := child.stdout.read(1 << 16)
            ):
                *records, rest = (rest + block).split(b"\0")
                for record in records:
                    files += 1
                    length = record.partition(b"\t")[0].rsplit(b" ", 1)[-1].strip()
                    size += int(length) if length.isdigit() else 0
            if files > max_files or size > max_bytes:
                child.kill()
                return files, size
            error = child.stderr.read()
        if child.returncode != 0:
            raise GitFailed(["git", "ls-tree", "-r", tree], child.returncode, error)
        return files, size

    def cat_blobs(self, oids: Sequence[str]) -> list[bytes]:
        """The bytes of blobs `oids` (full ids), in order, from one `cat-file --batch`: the
        stored bytes, never filtered or converted (no attributes are involved)."""
        query = "".join(f"{object_id(oid)}\n" for oid in oids).encode("ascii")
        out = self.run("cat-file", "--batch", stdin=query)
        blobs, pos = [], 0
        for _oid in oids:
            end = out.index(b"\n", pos)
            header = out[pos:end].split(b" ")
            if len(header) != 3 or header[1] != b"blob":
                raise GitFailed(["git", "cat-file", "--batch"], 0, b"not a blob: " + out[pos:end])
            size = int(header[2])
            blobs.append(out[end + 1 : end + 1 + size])
            pos = end + 1 + size + 1
        return blobs

    def cat_file(self, kind: str, oid: str) -> bytes:
        """The raw bytes of object `oid`, which must be of type `kind` (blob, commit, tree)."""
        return self.run("cat-file", kind, "--end-of-options", oid)

    def write_tree(self) -> str:
        """Write the index as a tree object and return its id."""
        return self.text("write-tree")

    def write_blob(self, data: bytes) -> str:
        """Store `data` as a blob, byte for byte (no filters, no attributes); its id."""
        return self.text_in("hash-object", "-w", "--no-filters", "--stdin", stdin=data)

    def text_in(self, *args: str, stdin: bytes) -> str:
        """Run git with `stdin` and decode its output strictly as UTF-8, stripped."""
        return self.run(*args, stdin=stdin).decode("utf-8").strip()

    def add_all(self) -> None:
        """Stage everything, including files a .gitignore would hide (`add -A -f`)."""
        self.run("add", "-A", "-f", "--", ".")

    def commit_tree(self, tree: str, message: bytes, parents: tuple[str, ...] = ()) -> str:
        """Create a commit object with fixed identity and dates; return its id."""
        args = ["commit-tree"]
        for parent in parents:
            args += ["-p", parent]
        return self.run(*args, "--end-of-options", tree, stdin=message).decode("utf-8").strip()

    def update_ref(
        self, ref: str, new: str, reason: str = "patchctl", *, old: str | None = None
    ) -> None:
        """Point `ref` (HEAD or a name under refs/) at `new` (with `old`: only if it is there
        now, a compare-and-swap; GitFailed otherwise)."""
        if ref != "HEAD" and not ref.startswith("refs/"):
            raise ValueError(f"not a ref patchctl writes: {ref!r}")
        self.run("update-ref", "-m", reason, "--end-of-options", ref, new, *([old] if old else []))

    def set_head(self, branch: str) -> None:
        """Make HEAD the symbolic ref `branch` (e.g. refs/heads/main)."""
        self.run("symbolic-ref", "--end-of-options", "HEAD", branch)

    def detach_head(self, commit: str) -> None:
        """Point HEAD itself at `commit` (detached), leaving the branch it named where it is."""
        self.run("update-ref", "--no-deref", "-m", "patchctl", "--end-of-options", "HEAD", commit)

    def delete_ref(self, ref: str) -> None:
        """Delete `ref` (a name under refs/); nothing happens when it does not exist."""
        if not ref.startswith("refs/"):
            raise ValueError(f"not a ref patchctl deletes: {ref!r}")
        self.run("update-ref", "-d", "--end-of-options", ref)

    def merge_trees(self, base: str, ours: str, theirs: str, labels: tuple[str, str]) -> Merged:
        """The three-way merge of trees `ours` and `theirs` from `base` (git's ort merge, as a
        cherry-pick does it), without touching the index or the work tree.

        The conflict markers name the sides `labels` (ref-name-safe words); the returned tree
        holds the merged files, conflict markers included. git 2.38's `merge-tree` takes
        commits, so the three trees get throw-away commits with `base` as their parent.
        """
        for label in labels:
            if not LABEL.fullmatch(label):
                raise ValueError(f"not a merge label: {label!r}")
        self.pin_attributes()  # the work tree's .gitattributes never pick the merge driver
        root = self.commit_tree(base, b"patchctl merge base\n")
        sides = [
            self.commit_tree(tree, b"patchctl merge side\n", (root,)) for tree in (ours, theirs)
        ]
        refs = [f"refs/patchctl/merge/{label}" for label in labels]
        for ref, commit in zip(refs, sides, strict=True):
            self.update_ref(ref, commit, "patchctl merge")
        try:
            names = [ref.removeprefix("refs/") for ref in refs]
            out = self.run(
                "merge-tree", "--write-tree", "-z", "--end-of-options", *names, ok=(0, 1)
            )
        finally:
            for ref in refs:
                self.delete_ref(ref)
        return parse_merge_tree(out)

    def merge_commits(self, ours: str, theirs: str) -> Merged:
        """`merge-tree --write-tree` of commits `ours` and `theirs`, their merge base found
        from their parents (one process; nothing else written). A cherry-pick of commit C
        onto tree T is this merge with `ours` a commit of T whose parent is C's parent: the
        result is `merge_trees(C's parent's tree, T, C's tree)`. Conflict markers name the
        sides by commit id: for a conflict shown to a user, `merge_trees` gives labels."""
        out = self.run(
            "merge-tree", "--write-tree", "-z", "--end-of-options",
            object_id(ours), object_id(theirs), ok=(0, 1),
        )  # fmt: skip
        return parse_merge_tree(out)

    def range_diff(self, old: tuple[str, str], new: tuple[str, str]) -> bytes:
        """`git range-diff old_base..old_tip new_base..new_tip` without color (commit ids)."""
        ranges = [f"{object_id(a)}..{object_id(b)}" for a, b in (old, new)]
        return self.run("range-diff", "--no-color", "--creation-factor=60", *ranges)

    def refs(self, prefix: str) -> list[str]:
        """The full names of the refs under `prefix` (e.g. refs/patchctl/backups/)."""
        return self.text("for-each-ref", "--format=%(refname)", "--end-of-options", prefix).split()

    def log_records(self, fmt: str, revisions: str) -> list[str]:
        """`git log --reverse -z --format=<fmt> <revisions>`, split at NUL (oldest first)."""
        raw = self.run(
            "log", "--reverse", "-z", f"--format={fmt}", "--end-of-options", revisions, "--"
        )
        return raw.decode("utf-8").split("\0")

    def patch_ids(self, revisions: str, prefix: str = "") -> dict[str, str]:
        """commit -> `git patch-id --stable` of each non-merge commit in `revisions`, over the
        paths under `prefix` (named relative to it; "" for the whole tree)."""
        relative = (f"--relative={prefix.strip('/')}/",) if prefix.strip("/.") else ()
        log = self.run(
            "log", "-p", "--no-merges", "--no-color", "--no-ext-diff", "--no-textconv",
            "--format=commit %H", *relative, "--end-of-options", revisions, "--",
        )  # fmt: skip
        out = self.run("patch-id", "--stable", stdin=log).decode("ascii")
        return {commit: pid for pid, commit in (line.split() for line in out.splitlines())}

    def patch_ids_of(self, patches: Sequence[bytes]) -> list[str]:
        """`git patch-id --stable` of each patch (bytes of a patch file), in order ("" for one
        without a diff git reads), in one process: each is fed after a `commit <n>` line."""
        if not patches:
            return []
        feed = b"".join(b"commit %040x\n" % (n + 1) + data for n, data in enumerate(patches))
        out = self.run("patch-id", "--stable", stdin=feed).decode("ascii")
        found = {
            int(commit, 16) - 1: pid for pid, commit in (line.split() for line in out.splitlines())
        }
        return [found.get(n, "") for n in range(len(patches))]

    def tree_entries(self, tree: str) -> dict[str, str]:
        """Every file of `tree` (recursively): path -> "mode object-id"."""
        out = self.run("ls-tree", "-r", "-z", "--full-tree", "--end-of-options", tree)
        entries = {}
        for record in out.split(b"\0"):
            if record:
                meta, _tab, name = record.partition(b"\t")
                mode, _kind, oid = meta.decode("ascii").split(" ")
                entries[os.fsdecode(name)] = f"{mode} {oid}"
        return entries

    def changed_paths(self, pre: str, post: str) -> list[str]:
        """The paths whose entry differs between trees `pre` and `post` (no rename pairing)."""
        flags = ("-r", "--name-only", "-z", "--no-renames")
        out = self.run("diff-tree", *flags, "--end-of-options", pre, post, "--")
        return [os.fsdecode(name) for name in out.split(b"\0") if name]

    def raw_changes(
        self, pairs: Sequence[tuple[str, str]]
    ) -> list[dict[bytes, tuple[tuple[str, str] | None, tuple[str, str] | None]]]:
        """For each (old tree, new tree) pair, in one `diff-tree --stdin` process: every
        path whose entry differs, as path -> (old (mode, id) or None, new (mode, id) or
        None). git echoes each input line before that pair's records."""
        if not pairs:
            return []
        query = "".join(f"{object_id(a)} {object_id(b)}\n" for a, b in pairs).encode("ascii")
        out = self.run("diff-tree", "-r", "-z", "--no-renames", "--stdin", stdin=query)
        found: list[dict[bytes, tuple[tuple[str, str] | None, tuple[str, str] | None]]] = []
        pos = 0
        for a, b in pairs:
            head = f"{a} {b}\n".encode("ascii")
            if not out.startswith(head, pos):
                raise GitFailed(["git", "diff-tree", "--stdin"], 0, out[pos : pos + 200])
            pos += len(head)
            changes: dict[bytes, tuple[tuple[str, str] | None, tuple[str, str] | None]] = {}
            while out.startswith(b":", pos):
                meta_end = out.index(b"\0", pos)
                path_end = out.index(b"\0", meta_end + 1)
                old_mode, new_mode, old_oid, new_oid, _status = (
                    out[pos + 1 : meta_end].decode("ascii").split(" ")
                )
                old = None if old_mode == "000000" else (old_mode.lstrip("0"), old_oid)
                new = None if new_mode == "000000" else (new_mode.lstrip("0"), new_oid)
                changes[out[meta_end + 1 : path_end]] = (old, new)
                pos = path_end + 1
            found.append(changes)
        return found

    def fetch(self, source: str, *refspecs: str) -> None:
        """Fetch `refspecs` (object ids or `+src:dst`) from the repository or URL `source`."""
        self.run("fetch", "--quiet", "--no-tags", "--end-of-options", source, *refspecs)

    def push(self, target: str, *refspecs: str) -> None:
        """Push `refspecs` to the repository `target` (no hooks run)."""
        self.run("push", "--quiet", "--no-verify", "--end-of-options", target, *refspecs)

    def is_repo(self) -> bool:
        """True when `repo` is the top of a git work tree or a git dir."""
        code, _, _ = self.run_full("rev-parse", "--git-dir")
        return code == 0

    def git_dir(self) -> Path:
        """The absolute .git directory of the repository."""
        return Path(os.fsdecode(self.run("rev-parse", "--absolute-git-dir").strip()))

    def index_path(self) -> Path:
        """The repository's own index file (which may not exist yet)."""
        path = Path(os.fsdecode(self.run("rev-parse", "--git-path", "index").strip()))
        return path if path.is_absolute() else self.repo / path

    # ------------------------------------------------------------------------- the work tree

    def read_tree(self, tree: str, *, reset: bool = False, update: bool = False) -> None:
        """Load `tree` into the index (`reset`: drop unmerged entries; `update`: and the files)."""
        flags = [*(["--reset"] if reset else []), *(["-u"] if update else [])]
        self.run("read-tree", *flags, "--end-of-options", tree)

    def switch_tree(self, old: str, new: str) -> None:
        """The index holds tree `old` and the work tree its files: make both hold `new`,
        rewriting only the files that differ (`read-tree -m -u`, a two-tree merge as `git
        checkout` makes it; git refuses when a file to rewrite is not as the index says)."""
        self.run("read-tree", "-m", "-u", "--end-of-options", old, new)

    def refresh_index(self) -> None:
        """Refresh the index's stat data so later status/diff calls hash only changed files."""
        self.run("update-index", "-q", "--refresh", ok=(0, 1))

    def reset_keep(self, commit: str) -> None:
        """Move the branch to `commit`, touching only files that differ (`reset --keep`)."""
        self.run("reset", "--quiet", "--keep", object_id(commit), "--")

    def reset_hard_to_head(self) -> None:
        """Tracked files and the index back to HEAD (untracked files are left alone)."""
        self.run("reset", "--quiet", "--hard", "HEAD", "--")

    def tracked_paths(self) -> set[bytes]:
        """The paths in the index, as bytes."""
        return set(self.run("ls-files", "-z").split(b"\0")) - {b""}

    def ignored_paths(self) -> list[str]:
        """Ignored files and directories (a directory once, with a trailing slash)."""
        raw = self.run("status", "--porcelain=v1", "-z", "--ignored", "--untracked-files=normal")
        entries = [os.fsdecode(e) for e in raw.split(b"\0") if e]
        return sorted(e[3:] for e in entries if e.startswith("!! "))

    def remove_stale_locks(self) -> list[Path]:
        """Remove the lock files a killed git left (`index.lock`, `HEAD.lock`, a ref's
        `.lock`); the removed paths. Only for a repository patchctl owns, holding its lock."""
        git_dir = self.git_dir()
        found = [*git_dir.glob("*.lock"), *(git_dir / "refs").rglob("*.lock")]
        for path in found:
            path.unlink(missing_ok=True)
        return sorted(found)

    def status_paths(self) -> list[str]:
        """Paths with unsaved work: modified, staged, deleted or untracked (not ignored)."""
        raw = self.run("status", "--porcelain=v1", "-z", "--untracked-files=all")
        return parse_status(raw)

    def snapshot_worktree(self) -> str:
        """The tree id of the work tree as `git add -A` would stage it; the index is untouched.

        The one snapshot of a work tree (capture, build, backups). It runs in a copy of the
        repository's index made with `copy2`: the copy keeps the index file's mtime, which is
        what git's racy-clean check compares file mtimes with, so a same-size edit made in the
        same second as the last index write is still re-read (a copy with a fresh mtime would
        trust the stale stat data and return the old tree). Without an index, it starts from
        HEAD's tree, so tracked files that a .gitignore matches are kept.
        """
        return self.snapshot_trusting(None)[0]

    def snapshot_trusting(self, rules: bytes | None) -> tuple[str, list[str]]:
        """`snapshot_worktree`, and with `rules` (exclude lines relative to the root: the only
        ignore rules trusted, ignores.py) also every untracked file that the tree's own ignore
        files hide but `rules` do not: (tree id, those files)."""
        seed = self.index_path()
        with temp_index(self, seed if seed.is_file() else None) as index:
            if not seed.is_file() and self.maybe_rev("HEAD") is not None:
                index.read_tree("HEAD")
            index.add_all()
            hidden = [] if rules is None else index.untracked_beyond(rules)
            if hidden:
                index.add_forced(hidden)
            return index.write_tree(), hidden


# A merge label: one ref-name component (patch ids and upstream labels are of this form).
LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


@dataclass(frozen=True)
class Merged:
    """A tree merge: the result tree, the conflicted paths and git's CONFLICT messages."""

    tree: str
    conflicts: tuple[str, ...]
    messages: tuple[str, ...]

    @property
    def clean(self) -> bool:
        """True when nothing conflicted."""
        return not self.conflicts


def parse_merge_tree(raw: bytes) -> Merged:
    """`merge-tree --write-tree -z` output: the tree, `<mode> <oid> <stage>\t<path>` entries
    up to an empty field, then messages as `<n>, <n paths>, <type>, <text>` fields."""
    fields = raw.split(b"\0")
    tree = fields[0].decode("ascii")
    conflicts: dict[str, None] = {}
    i = 1
    while i < len(fields) and fields[i]:
        conflicts[os.fsdecode(fields[i].split(b"\t", 1)[1])] = None
        i += 1
    messages = []
    i += 1
    while i < len(fields) and fields[i].isdigit():
        count = int(fields[i])
        paths = [os.fsdecode(f) for f in fields[i + 1 : i + 1 + count]]
        kind, text = fields[i + 1 + count], fields[i + 2 + count]
        if kind.startswith(b"CONFLICT"):
            messages.append(text.decode("utf-8", "backslashreplace").strip())
            conflicts.update(dict.fromkeys(paths))
        i += 3 + count
    return Merged(tree, tuple(conflicts), tuple(messages))


def parse_status(raw: bytes) -> list[str]:
    """The paths of `git status --porcelain=v1 -z` output (a rename's source not repeated)."""
    paths: list[str] = []
    fields = raw.split(b"\0")
    i = 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if len(entry) < 4:
            continue
        if entry[:1] in (b"R", b"C"):
            i += 1  # the rename/copy source follows as its own field
        paths.append(os.fsdecode(entry[3:]))
    return paths


# ----------------------------------------------------------------------------- index files


class Index:
    """An index file patchctl owns (never a repository's own): the staging area of one job."""

    def __init__(self, git: Git, path: Path) -> None:
        self.git = git
        self.path = path
        self.env = {"GIT_INDEX_FILE": str(path)}

    def run(self, *args: str, stdin: bytes | None = None, ok: tuple[int, ...] = (0,)) -> bytes:
        """Run git with this index selected."""
        return self.git.run(*args, stdin=stdin, ok=ok, env=self.env)

    def read_tree(self, tree: str) -> None:
        """Replace the index's content with `tree`."""
        self.run("read-tree", "--end-of-options", tree)

    def add_all(self) -> None:
        """Stage the whole work tree: modified, new, deleted files (ignored files stay out)."""
        self.run("add", "-A", "--", ".")

    def untracked_beyond(self, rules: bytes) -> list[str]:
        """The untracked files (not in this index) that exclude lines `rules` alone do not
        ignore: the work tree's .gitignore files and info/exclude are not read."""
        with tempfile.TemporaryDirectory(prefix=temp_prefix("index")) as tmp:
            exclude = Path(tmp) / "exclude"
            exclude.write_bytes(rules)
            out = self.run("ls-files", "-z", "--others", f"--exclude-from={exclude}")
        return [os.fsdecode(p) for p in out.split(b"\0") if p]

    def add_forced(self, paths: Sequence[str]) -> None:
        """Stage `paths` (literal, not patterns), whatever ignore rules say (`add -f`)."""
        names = b"".join(os.fsencode(p) + b"\0" for p in paths)
        env = {**self.env, "GIT_LITERAL_PATHSPECS": "1"}
        args = ("add", "-f", "--pathspec-from-file=-", "--pathspec-file-nul")
        self.git.run(*args, stdin=names, env=env)

    def apply(self, data: bytes, flags: Sequence[str]) -> tuple[int, bytes]:
        """`git apply --cached <flags>` of patch bytes on stdin: (exit status, stderr).

        The status is negative when git died of a signal (git 2.39 aborts on some corrupt
        patches, apply.c assertion): the index lock it leaves is removed, so the index stays
        usable, and the crash is reported in the returned stderr. A binary hunk declaring a
        file over PATCHCTL_MAX_BLOB_BYTES is status 1 without running git (binarypatch.py).
        """
        refused = binarypatch.oversized(data)
        if refused is not None:
            return 1, refused.encode() + b"\n"
        code, _out, err = self.git.run_full("apply", "--cached", *flags, stdin=data, env=self.env)
        if code < 0:
            self.path.with_name(self.path.name + ".lock").unlink(missing_ok=True)
            err += f"error: git apply crashed (signal {-code})\n".encode()
        return code, err

    def write_tree(self) -> str:
        """Write the index as a tree object and return its id."""
        return self.run("write-tree").decode("ascii").strip()

    def remove_entries(self, paths: Sequence[bytes], hexlen: int = 40) -> None:
        """Remove the entries `paths` (raw bytes) from the index without touching any file
        (`--index-info` with mode 0 and a null id drops a path; `hexlen`: the object id
        length of the repository, 40 for sha1, 64 for sha256)."""
        zero = "0" * hexlen
        lines = b"".join(f"0 {zero}\t".encode("ascii") + path + b"\0" for path in paths)
        self.run("update-index", "-z", "--index-info", stdin=lines)

    def add_entries(self, entries: Mapping[bytes, tuple[str, str]]) -> None:
        """Add (or replace) entries `path -> (mode, object id)` without touching any file.

        Paths are raw bytes, fed NUL-terminated on stdin (`update-index -z --index-info`), so
        no path is ever read as an option or unquoted.
        """
        lines = b"".join(
            f"{mode} {oid}\t".encode("ascii") + path + b"\0"
            for path, (mode, oid) in entries.items()
        )
        self.run("update-index", "-z", "--index-info", stdin=lines)

    def move(self, old: str, new: str) -> None:
        """The index holds tree `old`: make it hold tree `new`, rewriting only the entries
        that differ (`diff-tree -r` of the two trees into `update-index --index-info`; much
        less than a `read-tree` of a large tree when few paths changed)."""
        if old == new:
            return
        raw = self.git.run("diff-tree", "-r", "-z", "--no-renames", "--end-of-options", old, new)
        fields = raw.split(b"\0")
        lines = []
        for meta, path in zip(fields[0::2], fields[1::2], strict=False):
            if not meta.startswith(b":"):
                continue
            _old_mode, mode, _old_oid, oid, _status = meta[1:].decode("ascii").split(" ")
            lines.append(f"{mode} {oid}\t".encode("ascii") + path + b"\0")
        if lines:
            self.run("update-index", "-z", "--index-info", stdin=b"".join(lines))

    def entries(self) -> dict[bytes, tuple[str, str]]:
        """The index's entries as `path -> (mode, object id)` (stage 0 only; raw path bytes)."""
        found: dict[bytes, tuple[str, str]] = {}
        for record in self.run("ls-files", "-s", "-z").split(b"\0"):
            if not record:
                continue
            info, _tab, path = record.partition(b"\t")
            mode, oid, stage = info.decode("ascii").split(" ")
            if stage == "0":
                found[path] = (mode, oid)
        return found

    def checkout(self, prefix: Path) -> None:
        """Write every entry of the index as files under directory `prefix`."""
        self.run("checkout-index", "-a", "-f", f"--prefix={prefix}/")


@contextmanager
def temp_index(git: Git, seed: Path | None = None) -> Iterator[Index]:
    """A throwaway index for `git` (a `copy2` of `seed` when given), removed afterwards."""
    with tempfile.TemporaryDirectory(prefix=temp_prefix("index")) as tmp:
        path = Path(tmp) / "index"
        if seed is not None:
            shutil.copy2(seed, path)  # stat data AND mtime kept: racy-git checks stay valid
        yield Index(git, path)


# ----------------------------------------------------------------------------- scratch repositories


def objects_dir(source: Path) -> Path:
    """The object directory of a repository given as work tree, git dir or objects dir."""
    for candidate in (source / ".git" / "objects", source / "objects", source):
        if (candidate / "info").is_dir() or (candidate / "pack").is_dir():
            return candidate.resolve()
    raise NotFound(f"{source} is not a git repository", hint="run patchctl cleanroom apply first")


def share_objects(
    source: Git, target: Git, oids: Iterable[str] | None = None, *, replace: bool = False
) -> set[str]:
    """Give `target` the loose objects of `source` (`oids`, or all of them) as hard links.

    A loose object is an immutable file named by its id: git writes a new object to a
    temporary file and renames it into place, and never writes to an existing one, so two
    repositories can share the file (removing it from one, as gc does, unlinks only that
    name). Where a link cannot be made (another file system) the file is copied to a
    temporary name and renamed, so a concurrent reader never sees half an object. Objects
    `target` already has as loose files are skipped, unless `replace` (the caller trusts
    `source`'s copies over `target`'s: a damaged object in `target` is mended). Returns the
    ids asked for that `source` does not hold as loose files (packed ones: the caller
    fetches those instead).
    """
    src, dst = objects_dir(source.git_dir()), objects_dir(target.git_dir())
    wanted = _loose_ids(src) if oids is None else {object_id(o) for o in oids}
    missing: set[str] = set()
    fans: set[str] = set()
    for oid in sorted(wanted):
        fan, rest = oid[:2], oid[2:]
        if fan not in fans:
            os.makedirs(dst / fan, exist_ok=True)
            fans.add(fan)
        source_name, target_name = f"{src}/{fan}/{rest}", f"{dst}/{fan}/{rest}"
        try:
            os.link(source_name, target_name)  # the common case: one system call
            continue
        except FileNotFoundError:
            if replace or not os.path.isfile(target_name):
                missing.add(oid)  # not a loose object of `source`
            continue
        except FileExistsError:
            if not replace:
                continue
        except OSError:
            pass  # another file system: copied below
        if os.path.isfile(source_name):
            _link_or_copy(Path(source_name), Path(target_name))
        else:
            missing.add(oid)
    return missing


def loose_missing(target: Git, oids: Iterable[str]) -> list[str]:
    """The ids among `oids` that `target` does not hold as loose object files, in order (an
    object it holds only packed counts as missing): what `share_objects` would give it."""
    dst = objects_dir(target.git_dir())
    return [o for o in oids if not os.path.isfile(f"{dst}/{o[:2]}/{o[2:]}")]


def _loose_ids(objects: Path) -> set[str]:
    found: set[str] = set()
    for fan in os.listdir(objects):
        if len(fan) == 2 and (objects / fan).is_dir():
            found.update(fan + name for name in os.listdir(objects / fan))
    return {oid for oid in found if OBJECT_ID.fullmatch(oid)}


def _link_or_copy(source: Path, target: Path) -> None:
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:
        shutil.copyfile(source, tmp)
    os.replace(tmp, target)


@contextmanager
def scratch_repo(sources: Sequence[Path]) -> Iterator[Git]:
    """A temporary bare repository that reads objects from `sources` (via alternates).

    Bare and empty, it reads no .gitattributes: diffs made here (capture and verify's
    re-export alike) never depend on a work tree's `diff=`/`-diff`/`binary` attributes.
    Its own index files (`Index(git, git.repo / "<name>.index")`) die with it.
    """
    with tempfile.TemporaryDirectory(prefix=temp_prefix("scratch")) as tmp:
        git = Git.init(Path(tmp) / "scratch.git", bare=True)
        # A throwaway repository: nothing in it needs to survive a crash, so no fsync.
        with (git.repo / "config").open("a", encoding="utf-8") as config:
            # index v4 (prefix-compressed paths) makes each apply/write-tree read less.
            config.write("[core]\n\tfsync = none\n[index]\n\tversion = 4\n")
        found = [objects_dir(s) for s in sources]
        if any("\n" in str(f) or "\r" in str(f) for f in found):
            raise PatchctlError("an object directory path contains a line break; not using it")
        alternates = "".join(f"{f}\n" for f in found)
        (git.repo / "objects" / "info").mkdir(parents=True, exist_ok=True)
        (git.repo / "objects" / "info" / "alternates").write_text(alternates)
        yield git


# ----------------------------------------------------------------------------- long-lived processes


class Pipe:
    """One long-lived git process spoken to over stdin/stdout, for work that touches many
    objects (one process instead of one per object). stderr goes to a temporary file, so a
    chatty process can never block on a full pipe; it is quoted when the process fails."""

    def __init__(self, git: Git, *args: str, env: Mapping[str, str] | None = None) -> None:
        self.args = ("git", *args)
        self._errors = tempfile.TemporaryFile()  # noqa: SIM115 (closed in close())
        self._proc = subprocess.Popen(
            git.command(*args),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._errors,
            env=hermetic_env(git.repo, env),
        )

    def ask(self, request: bytes) -> None:
        """Send `request` (complete records) and flush it."""
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(request)
            self._proc.stdin.flush()
        except BrokenPipeError:
            raise self._failure() from None

    def line(self) -> bytes:
        """One line of the answer, without its newline."""
        assert self._proc.stdout is not None
        raw = self._proc.stdout.readline()
        if not raw.endswith(b"\n"):
            raise self._failure()
        return raw[:-1]

    def exactly(self, size: int) -> bytes:
        """`size` bytes of the answer."""
        assert self._proc.stdout is not None
        data = self._proc.stdout.read(size)
        if len(data) != size:
            raise self._failure()
        return data

    def _failure(self) -> GitFailed:
        code = self._proc.poll()
        self._errors.seek(0)
        return GitFailed(self.args, -1 if code is None else code, self._errors.read())

    def finish(self) -> None:
        """Close stdin and wait for the process to exit, however long its work takes;
        GitFailed unless it exits 0."""
        if self._proc.stdin is not None:
            with suppress(BrokenPipeError):
                self._proc.stdin.close()
        if self._proc.wait() != 0:
            raise self._failure()

    def close(self) -> None:
        """End the process (its stdin closed; killed if it does not exit)."""
        if self._proc.stdin is not None:
            with suppress(BrokenPipeError):
                self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._errors.close()


# update-index frees the buffers of each object it writes (zlib's among them) at the top of
# its heap, and glibc gives that memory back to the kernel and asks for it again at the next
# file: two brk calls and fresh zeroed pages per file. A trim threshold above those buffers
# keeps them (measured on a kernel tree: git add makes 19 brk calls for 3,000 files,
# update-index 12,585, and half its system time went there). Other allocators ignore it.
FEED_MALLOC = {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=67108864"}


class IndexFeed:
    """Stages files into `git`'s index while they are being written: one `git update-index
    --add -z --stdin` reads their paths (relative to the work tree named at `start`, which may
    be a staging directory the files move out of later) and hashes each as it comes, so
    staging a large tree overlaps writing it. The archive.Sink of a clean room's extraction.

    `ok` tells whether every path told was staged; when it is False (git stopped, or ignored
    a path it refuses), the index is the caller's to throw away and re-make.
    """

    def __init__(self, git: Git) -> None:
        self.git = git
        self.told = 0
        self._pipe: Pipe | None = None
        self._failed = False

    def start(self, root: Path) -> None:
        """Start git with `root` as the work tree the paths given to `add` are relative to."""
        args = (f"--work-tree={root}", "update-index", "--add", "-z", "--stdin")
        self._pipe = Pipe(self.git, *args, env=FEED_MALLOC)

    def add(self, path: str) -> None:
        """Stage `path` (a file or symlink under the work tree, complete on disk)."""
        if self._pipe is None or self._failed:
            return
        try:
            self._pipe.ask(os.fsencode(path) + b"\0")
            self.told += 1
        except GitFailed:
            self._failed = True

    def flush(self) -> None:
        """Wait until git has staged every path told and written the index."""
        if self._pipe is None or self._failed:
            return
        try:
            self._pipe.finish()
        except GitFailed:
            self._failed = True

    @property
    def ok(self) -> bool:
        """True when git staged every path told, and the index holds those paths only."""
        return (
            self._pipe is not None
            and not self._failed
            and self.told == len(self.git.tracked_paths())
        )

    def close(self) -> None:
        """End git (waited for, or killed if it lingers)."""
        if self._pipe is not None:
            self._pipe.close()


def unsound_objects(git: Git, oids: Sequence[str], chunk: int = 256) -> list[str]:
    """The ids among `oids` that `git` lacks, or whose bytes do not hash to the id.

    Every object is read (`cat-file --batch`, `chunk` ids at a time, so neither pipe can
    fill while the other waits) and hashed as git names it: `<type> <size>\\0<bytes>`.
    """
    pipe = Pipe(git, "cat-file", "--batch")
    bad = []
    try:
        for start in range(0, len(oids), chunk):
            batch = [object_id(o) for o in oids[start : start + chunk]]
            pipe.ask("".join(f"{o}\n" for o in batch).encode("ascii"))
            for oid in batch:
                header = pipe.line().split(b" ")
                if len(header) != 3:
                    bad.append(oid)  # "<oid> missing"
                    continue
                data = pipe.exactly(int(header[2]) + 1)[:-1]
                digest = hashlib.sha1 if len(oid) == 40 else hashlib.sha256
                named = digest(header[1] + b" %d\0" % len(data) + data).hexdigest()
                if named != oid:
                    bad.append(oid)
    finally:
        pipe.close()
    return bad


class ObjectReader:
    """Reads objects by id through one `git cat-file --batch-command` process."""

    def __init__(self, git: Git) -> None:
        self._pipe = Pipe(git, "cat-file", "--batch-command")

    def read(self, oid: str) -> tuple[str, bytes] | None:
        """(type, raw bytes) of object `oid`, or None when it is missing."""
        self._pipe.ask(f"contents {object_id(oid)}\n".encode("ascii"))
        header = self._pipe.line().split(b" ")
        if len(header) != 3:
            return None  # "<oid> missing"
        data = self._pipe.exactly(int(header[2]) + 1)[:-1]
        return header[1].decode("ascii"), data

    def close(self) -> None:
        """End the process."""
        self._pipe.close()


class CommitWriter:
    """Writes commit objects through one `git hash-object -t commit -w --stdin-paths` process
    (one process for many commits instead of one `commit-tree` each). A commit is written
    as `commit-tree` writes it under the pinned identity and fixed date, so its id is the
    one `Git.commit_tree` gives for the same tree, parents and message; hash-object checks
    the object's format before it is stored."""

    def __init__(self, git: Git) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix=temp_prefix("index")))
        self._pipe = Pipe(git, "hash-object", "-t", "commit", "-w", "--stdin-paths")
        self._count = 0

    def __enter__(self) -> CommitWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def commit(self, tree: str, message: bytes, parents: tuple[str, ...] = ()) -> str:
        """The id of the commit of `tree` with `parents` and `message` (stored)."""
        who = f"{IDENTITY_NAME} <{IDENTITY_EMAIL}> 0 +0000"
        head = f"tree {object_id(tree)}\n"
        head += "".join(f"parent {object_id(p)}\n" for p in parents)
        head += f"author {who}\ncommitter {who}\n\n"
        self._count += 1
        path = self._dir / f"c{self._count}"
        path.write_bytes(head.encode("ascii") + message)
        if "\n" in str(path):
            raise PatchctlError("a temporary path contains a line break; not using it")
        self._pipe.ask(os.fsencode(path) + b"\n")
        oid = object_id(self._pipe.line().decode("ascii"))
        path.unlink()
        return oid

    def close(self) -> None:
        """End the process and remove its temporary files."""
        self._pipe.close()
        shutil.rmtree(self._dir, ignore_errors=True)


# The object type a tree entry's mode stands for (any other mode is a blob).
TREE_TYPES = {"40000": "tree", "160000": "commit"}


class TreeWriter:
    """Writes tree objects through one `git mktree -z --batch` process.

    Entries come from trees and indexes git itself wrote, so their objects exist; `--missing`
    skips mktree's per-entry lookup of each object, which for a directory of a thousand
    files would otherwise cost a thousand object reads per tree written.
    """

    def __init__(self, git: Git) -> None:
        self._pipe = Pipe(git, "mktree", "-z", "--batch", "--missing")

    def write(self, entries: Mapping[bytes, tuple[str, str]]) -> str:
        """The id of the tree holding `entries` (`name -> (mode, object id)`; names without
        a slash). mktree sorts the entries as git orders them in a tree."""
        records = b"".join(
            f"{mode} {TREE_TYPES.get(mode, 'blob')} {object_id(oid)}\t".encode("ascii")
            + name
            + b"\0"
            for name, (mode, oid) in entries.items()
        )
        self._pipe.ask(records + b"\0")
        return object_id(self._pipe.line().decode("ascii"))

    def close(self) -> None:
        """End the process."""
        self._pipe.close()
