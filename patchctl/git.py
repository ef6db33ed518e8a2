"""The only module that runs git: bytes in, bytes out, pinned flags, hermetic environment.

Every call is `git -C <repo> -c <pins...> <args>` with an environment that ignores the user's
and the system's git configuration, so user settings such as `diff.noprefix`,
`apply.whitespace=fix` or `core.autocrlf=true` can never change the bytes patchctl reads or
writes (docs/architecture.md, "The git layer").

The vocabulary the features use lives here too: `Index` (an index file patchctl owns:
read-tree, add-all, apply, write-tree, checkout), `temp_index`, `Git.snapshot_worktree` (the
one work-tree snapshot), `Git.status_paths` and `scratch_repo` (a throwaway bare repository
borrowing objects through alternates). Every method separates options from values: a value
(URL, ref, path, object id) follows `--end-of-options` where the subcommand supports it, or is
checked to be an object id where it does not, and pathspecs follow `--`. So no value from a
series file or the command line can ever be read by git as an option.
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
from functools import cache
from pathlib import Path

from patchctl.errors import GitFailed, NotFound

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
        return git

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

    # ------------------------------------------------------------------------- objects and refs

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

    def add_all(self) -> None:
        """Stage everything, including files a .gitignore would hide (`add -A -f`)."""
        self.run("add", "-A", "-f", "--", ".")

    def commit_tree(self, tree: str, message: bytes, parents: tuple[str, ...] = ()) -> str:
        """Create a commit object with fixed identity and dates; return its id."""
        args = ["commit-tree"]
        for parent in parents:
            args += ["-p", parent]
        return self.run(*args, "--end-of-options", tree, stdin=message).decode("utf-8").strip()

    def update_ref(self, ref: str, new: str, reason: str = "patchctl") -> None:
        """Point `ref` (HEAD or a name under refs/) at `new`."""
        if ref != "HEAD" and not ref.startswith("refs/"):
            raise ValueError(f"not a ref patchctl writes: {ref!r}")
        self.run("update-ref", "-m", reason, "--end-of-options", ref, new)

    def set_head(self, branch: str) -> None:
        """Make HEAD the symbolic ref `branch` (e.g. refs/heads/main)."""
        self.run("symbolic-ref", "--end-of-options", "HEAD", branch)

    def refs(self, prefix: str) -> list[str]:
        """The full names of the refs under `prefix` (e.g. refs/patchctl/backups/)."""
        return self.text("for-each-ref", "--format=%(refname)", "--end-of-options", prefix).split()

    def log_records(self, fmt: str, revisions: str) -> list[str]:
        """`git log --reverse -z --format=<fmt> <revisions>`, split at NUL (oldest first)."""
        raw = self.run(
            "log", "--reverse", "-z", f"--format={fmt}", "--end-of-options", revisions, "--"
        )
        return raw.decode("utf-8").split("\0")

    def changed_paths(self, pre: str, post: str) -> list[str]:
        """The paths whose entry differs between trees `pre` and `post` (no rename pairing)."""
        flags = ("-r", "--name-only", "-z", "--no-renames")
        out = self.run("diff-tree", *flags, "--end-of-options", pre, post, "--")
        return [os.fsdecode(name) for name in out.split(b"\0") if name]

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

    def apply(self, data: bytes, flags: Sequence[str]) -> tuple[int, bytes]:
        """`git apply --index <flags>` of patch bytes on stdin: (exit status, stderr).

        The index and the work tree move together; `--check` in `flags` writes nothing.
        """
        code, _out, err = self.run_full("apply", "--index", *flags, stdin=data)
        return code, err

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
        seed = self.index_path()
        with temp_index(self, seed if seed.is_file() else None) as index:
            if not seed.is_file() and self.maybe_rev("HEAD") is not None:
                index.read_tree("HEAD")
            index.add_all()
            return index.write_tree()


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

    def apply(self, data: bytes, flags: Sequence[str]) -> tuple[int, bytes]:
        """`git apply --cached <flags>` of patch bytes on stdin: (exit status, stderr).

        The status is negative when git died of a signal (git 2.39 aborts on some corrupt
        patches, apply.c assertion): the index lock it leaves is removed, so the index stays
        usable, and the crash is reported in the returned stderr.
        """
        code, _out, err = self.git.run_full("apply", "--cached", *flags, stdin=data, env=self.env)
        if code < 0:
            self.path.with_name(self.path.name + ".lock").unlink(missing_ok=True)
            err += f"error: git apply crashed (signal {-code})\n".encode()
        return code, err

    def write_tree(self) -> str:
        """Write the index as a tree object and return its id."""
        return self.run("write-tree").decode("ascii").strip()

    def checkout(self, prefix: Path) -> None:
        """Write every entry of the index as files under directory `prefix`."""
        self.run("checkout-index", "-a", "-f", f"--prefix={prefix}/")


@contextmanager
def temp_index(git: Git, seed: Path | None = None) -> Iterator[Index]:
    """A throwaway index for `git` (a `copy2` of `seed` when given), removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="patchctl-index-") as tmp:
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


@contextmanager
def scratch_repo(sources: Sequence[Path]) -> Iterator[Git]:
    """A temporary bare repository that reads objects from `sources` (via alternates).

    Bare and empty, it reads no .gitattributes: diffs made here (capture and verify's
    re-export alike) never depend on a work tree's `diff=`/`-diff`/`binary` attributes.
    Its own index files (`Index(git, git.repo / "<name>.index")`) die with it.
    """
    with tempfile.TemporaryDirectory(prefix="patchctl-scratch-") as tmp:
        git = Git.init(Path(tmp) / "scratch.git", bare=True)
        # A throwaway repository: nothing in it needs to survive a crash, so no fsync.
        with (git.repo / "config").open("a", encoding="utf-8") as config:
            # index v4 (prefix-compressed paths) makes each apply/write-tree read less.
            config.write("[core]\n\tfsync = none\n[index]\n\tversion = 4\n")
        alternates = "".join(f"{objects_dir(s)}\n" for s in sources)
        (git.repo / "objects" / "info").mkdir(parents=True, exist_ok=True)
        (git.repo / "objects" / "info" / "alternates").write_text(alternates)
        yield git
