"""The `Git` facade: one repository driven through the pinned runner (runner.py), bytes in,
bytes out.

Every call is `git -C <repo> -c <pins...> <args>` in the hermetic environment of runner.py
(docs/architecture.md, "The git layer"). The rest of the git layer: index.py (`Index`,
`temp_index`), objects.py (object sharing, scratch repositories), pipes.py (long-lived
cat-file / hash-object / update-index processes), batch.py (the `cat-file --batch` format),
trees.py.

The vocabulary the features use lives here too: `Index` (an index file patchctl owns:
read-tree, add-all, apply, write-tree, checkout), `temp_index`, `Git.snapshot_worktree` (the
one work-tree snapshot), `Git.status_paths` and `scratch_repo` (a throwaway bare repository
borrowing objects through alternates), and two long-lived processes for work that touches many
objects: `ObjectReader` (`cat-file --batch-command`) and `TreeWriter` (`hash-object -t tree`).
Every method separates options from values: a value
(URL, ref, path, object id) follows `--end-of-options` where the subcommand supports it, or is
checked to be an object id where it does not, and pathspecs follow `--`. So no value from a
series file or the command line can ever be read by git as an option.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from patchctl import killpoint
from patchctl.errors import GitFailed
from patchctl.gitlayer.batch import records
from patchctl.gitlayer.index import temp_index
from patchctl.gitlayer.runner import (
    PINNED_ATTRIBUTES,
    empty_home,
    hermetic_env,
    object_id,
    pinned_flags,
)

# Each flag pins one thing that would otherwise change the patch bytes.
DIFF_TREE_FLAGS: tuple[str, ...] = (
    "diff-tree",
    "-r",  # recurse: one entry per file, never per directory
    "-p",  # a patch, not a raw listing
    "--binary",  # binary files as `GIT binary patch` hunks (git apply can apply them)
    "--full-index",  # full 40-hex blob ids: stable across repos, enables am -3
    "--no-color",  # no escape codes in stored bytes
    "--no-ext-diff",  # diff.external / GIT_EXTERNAL_DIFF never run
    "--no-textconv",  # textconv filters never rewrite content
    "--no-renames",  # rename policy: a rename is a delete plus an add (exact, config-free)
    "--diff-algorithm=myers",  # one fixed algorithm (gbp #1030044)
    "--indent-heuristic",  # git's default, explicit so diff.indentHeuristic cannot flip it
    "-U3",  # context lines are part of the bytes
    "--inter-hunk-context=0",  # hunk merging too (zulip-mobile #5407)
    "-O/dev/null",  # no diff.orderFile: paths in git's own order
    "--ignore-submodules=none",  # gitlinks compared like any entry
    "--src-prefix=a/",  # prefixes fixed whatever diff.noprefix / mnemonicPrefix say
    "--dst-prefix=b/",
)
# The same bytes-exact, config-free diff, for the backup patch of a clean room's unsaved work.
BACKUP_DIFF_FLAGS = ("--binary", "--full-index", "--no-color", "--no-ext-diff", "--no-textconv")

# `git grep` options: fixed strings, each match printed alone (-o; -h drops the file name),
# text files only (-I), and the grep.* settings that would change that output pinned off.
GREP_PINS = (
    "-c",
    "grep.lineNumber=false",
    "-c",
    "grep.column=false",
    "-c",
    "grep.fullName=false",
    "-c",
    "grep.patternType=fixed",
)
GREP_FLAGS = ("grep", "--no-color", "--no-textconv", "-I", "-F", "-o")


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
        nothing: no index, no tree, no file. The caller refuses an oversized binary hunk
        first (patchfmt.binary.oversized): git would inflate it."""
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

    def cat_batch(self, names: Sequence[str]) -> list[tuple[bytes, bytes] | None]:
        """(type, bytes) of each object `names` names (ids or `<tree>:<path>`; no newline),
        in order, from one `cat-file --batch` (None: missing). The stored bytes, never
        filtered or converted (no attributes are involved)."""
        query = "".join(f"{name}\n" for name in names).encode("utf-8", "surrogateescape")
        return records(self.run("cat-file", "--batch", stdin=query), len(names))

    def cat_blobs(self, oids: Sequence[str]) -> list[bytes]:
        """The bytes of blobs `oids` (full ids), in order, from one `cat-file --batch`."""
        blobs = []
        for oid, found in zip(oids, self.cat_batch([object_id(o) for o in oids]), strict=True):
            if found is None or found[0] != b"blob":
                raise GitFailed(["git", "cat-file", "--batch"], 0, b"not a blob: " + oid.encode())
            blobs.append(found[1])
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

    def entries_at(self, tree: str, paths: Sequence[str]) -> dict[str, tuple[str, str]]:
        """The entries of `paths` (files, exact paths) in `tree`: path -> (mode, object id);
        a path the tree does not hold is left out. One `ls-tree` process."""
        if not paths:
            return {}
        out = self.run("ls-tree", "-r", "-z", "--full-tree", object_id(tree), "--", *paths)
        wanted, found = set(paths), {}
        for record in out.split(b"\0"):
            if not record:
                continue
            meta, _tab, raw = record.partition(b"\t")
            mode, _kind, oid = meta.decode("ascii").split(" ")
            name = os.fsdecode(raw)
            if name in wanted:
                found[name] = (mode, oid)
        return found

    def set_unmerged(self, entries: Mapping[str, Sequence[tuple[int, str, str]]]) -> None:
        """Make each path of `entries` an unmerged index entry, as a conflicted merge leaves
        it: its stage-0 entry removed, then its (stage, mode, object id) entries written
        (stage 1 the base, 2 ours, 3 theirs). `git update-index -z --index-info`."""
        records = []
        for path, stages in entries.items():
            name = os.fsencode(path)
            records.append(b"0 " + b"0" * 40 + b"\t" + name)  # mode 0: drop the entry
            for stage, mode, oid in stages:
                if stage not in (1, 2, 3) or not mode.isdigit():
                    raise ValueError(f"not a merge stage entry: {stage} {mode}")
                records.append(f"{mode} {object_id(oid)} {stage}\t".encode("ascii") + name)
        if records:
            self.run("update-index", "-z", "--index-info", stdin=b"\0".join(records) + b"\0")

    def intent_to_add(self, paths: Sequence[str]) -> None:
        """Record `paths` (untracked files) as intent-to-add in the index (`add -N`), so that
        `git diff` shows them as new files; their content is not staged."""
        if paths:
            self.run("add", "--intent-to-add", "-f", "--", *(f":(literal){p}" for p in paths))

    def unmerged_paths(self) -> list[str]:
        """The paths that have unmerged (stage 1-3) entries in the index, each once."""
        out = self.run("ls-files", "-u", "-z")
        names = (os.fsdecode(r.partition(b"\t")[2]) for r in out.split(b"\0") if r)
        return list(dict.fromkeys(names))

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

    def canonical_diff(
        self, pre: str, post: str, root: str = ".", paths: Sequence[str] = ()
    ) -> bytes:
        """The canonical diff bytes (DIFF_TREE_FLAGS) from tree `pre` to tree `post`, under
        `root` when it is not ".", and only of the tree paths `paths`, taken literally."""
        env = {"GIT_LITERAL_PATHSPECS": "1"} if paths else None
        flags = (*DIFF_TREE_FLAGS, *relative_flags(root))
        args = (*flags, "--end-of-options", pre, post, "--", *paths)
        return self.run(*args, env=env)

    def canonical_diffs(self, pairs: Sequence[tuple[str, str]], root: str = ".") -> bytes:
        """The output of one `diff-tree --stdin` over (pre, post) tree id pairs: each pair's
        input line echoed, then its canonical diff (patchfile.diff_tree_pairs splits it)."""
        query = "".join(f"{a} {b}\n" for a, b in pairs).encode("ascii")
        return self.run(*DIFF_TREE_FLAGS, *relative_flags(root), "--stdin", stdin=query)

    def backup_diff(self, commit: str) -> bytes:
        """The diff from HEAD to `commit` (a backup of unsaved work), bytes-exact."""
        return self.run("diff", *BACKUP_DIFF_FLAGS, "--end-of-options", "HEAD", commit, "--")

    def grep_fixed(
        self, tree: str, strings: Sequence[str], paths: Sequence[str] | None = None
    ) -> list[bytes]:
        """Every match of the fixed `strings` in the text files of `tree` (or of the literal
        `paths` in it), one per line as `git grep -o -h` prints it."""
        patterns: list[str] = []
        for string in strings:
            patterns += ["-e", string]
        # :(literal) so that paths with glob characters mean themselves.
        specs = [] if paths is None else [f":(literal){p}" for p in paths]
        # grep has no --end-of-options: the tree must be an object id (patterns follow -e).
        args = (*GREP_PINS, *GREP_FLAGS, "-h", *patterns, object_id(tree), "--", *specs)
        return self.run(*args, ok=(0, 1)).splitlines()

    def object_type(self, oid: str) -> str:
        """The type of the object `oid` names (blob, tree, commit, tag)."""
        return self.text("cat-file", "-t", "--end-of-options", oid)

    def all_trees(self, revs: Sequence[str]) -> bool:
        """True when every one of `revs` names a tree (or a commit of one) this repository
        can read, in one `cat-file --batch-check`."""
        query = "".join(f"{rev}^{{tree}}\n" for rev in revs).encode("utf-8", "surrogateescape")
        out = self.run("cat-file", "--batch-check", stdin=query)
        return b" missing" not in out and out.count(b" tree ") == len(revs)

    def fetch(self, source: str, *refspecs: str) -> None:
        """Fetch `refspecs` (object ids or `+src:dst`) from the repository or URL `source`."""
        self.run("fetch", "--quiet", "--no-tags", "--end-of-options", source, *refspecs)

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
        ignore rules trusted, room/snapshot.py) also every untracked file that the tree's own ignore
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


def relative_flags(root: str) -> tuple[str, ...]:
    """`--relative=<root>/` for a series root other than the tree's top."""
    return () if root in (".", "") else (f"--relative={root.rstrip('/')}/",)
