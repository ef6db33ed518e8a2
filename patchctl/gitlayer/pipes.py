"""Long-lived git processes spoken to over stdin/stdout, for work that touches many objects
(one process instead of one per object): `Pipe`, and on it `IndexFeed` (`update-index
--stdin`), `ObjectReader` (`cat-file --batch-command`), `TreeWriter` (`hash-object -t tree
--stdin-paths`), `CommitWriter` (`hash-object -t commit --stdin-paths`), `BlobWriter`
(`hash-object --stdin-paths`) and `TreeDiffer` (`diff-tree --stdin` with the canonical diff
flags).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from contextlib import suppress
from pathlib import Path
from typing import Any, Self

from patchctl.errors import GitFailed, PatchctlError
from patchctl.gitlayer.batch import read_record
from patchctl.gitlayer.git import DIFF_TREE_FLAGS, Git, relative_flags
from patchctl.gitlayer.runner import (
    IDENTITY_EMAIL,
    IDENTITY_NAME,
    hermetic_env,
    object_id,
    temp_prefix,
)


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

    def raw_line(self) -> bytes:
        """One line of the answer, its newline kept."""
        assert self._proc.stdout is not None
        raw = self._proc.stdout.readline()
        if not raw.endswith(b"\n"):
            raise self._failure()
        return raw

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


class ObjectReader:
    """Reads objects by id through one `git cat-file --batch-command` process."""

    def __init__(self, git: Git) -> None:
        self._pipe = Pipe(git, "cat-file", "--batch-command")

    def read(self, oid: str) -> tuple[str, bytes] | None:
        """(type, raw bytes) of object `oid`, or None when it is missing."""
        self._pipe.ask(f"contents {object_id(oid)}\n".encode("ascii"))
        found = read_record(self._pipe.line, self._pipe.exactly)
        return None if found is None else (found[0].decode("ascii"), found[1])

    def close(self) -> None:
        """End the process."""
        self._pipe.close()


class _StoredObjects:
    """One `git hash-object -w --stdin-paths` process (arguments `args`) that stores objects
    given as bytes: each is written to a temporary file whose path git is told, and the id
    git answers is returned. Shared by the commit, blob and tree writers.

    `_store_later` does not wait for the answer: the id is computed here (git's hash of
    `<type> <size>\0<bytes>`, the algorithm learnt from git's first answer), the request
    sent, and `settle` reads the answers, each checked against the id given out, before the
    objects are used by anything else. A writer settles on its own before it waits for an
    answer and every PENDING_MAX requests (so neither pipe can fill while the other waits).
    """

    PENDING_MAX = 256

    def __init__(self, git: Git, *args: str) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix=temp_prefix("index")))
        self._pipe = Pipe(git, "hash-object", *args, "-w", "--stdin-paths")
        self._count = 0
        self._hash: Callable[[bytes], Any] | None = None  # learnt from the first answer
        self._pending: list[tuple[str, Path]] = []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, kind: str, data: bytes) -> Path:
        self._count += 1
        path = self._dir / f"{kind}{self._count}"
        path.write_bytes(data)
        if "\n" in str(path):
            raise PatchctlError("a temporary path contains a line break; not using it")
        self._pipe.ask(os.fsencode(path) + b"\n")
        return path

    def _store(self, kind: str, data: bytes) -> str:
        """The id of the object whose bytes are `data` (stored); `kind` names its file."""
        self.settle()
        path = self._send(kind, data)
        oid = object_id(self._pipe.line().decode("ascii"))
        path.unlink()
        if self._hash is None:
            self._hash = hashlib.sha1 if len(oid) == 40 else hashlib.sha256
        return oid

    def _store_later(self, kind: str, otype: bytes, data: bytes) -> str:
        """`_store` without waiting for git's answer (checked at `settle`); `otype` is the
        object's type as git names it."""
        if self._hash is None:
            return self._store(kind, data)
        digest = self._hash(b"%s %d\0" % (otype, len(data)))
        digest.update(data)
        oid = str(digest.hexdigest())
        self._pending.append((oid, self._send(kind, data)))
        if len(self._pending) >= self.PENDING_MAX:
            self.settle()
        return oid

    def settle(self) -> None:
        """Wait until git has stored every object sent with `_store_later`, each under the
        id given out for it (GitFailed otherwise)."""
        pending, self._pending = self._pending, []
        for oid, path in pending:
            got = object_id(self._pipe.line().decode("ascii"))
            path.unlink()
            if got != oid:
                raise GitFailed(list(self._pipe.args), 0, f"stored {got}, expected {oid}".encode())

    def close(self) -> None:
        """End the process and remove its temporary files."""
        self._pipe.close()
        shutil.rmtree(self._dir, ignore_errors=True)


class CommitWriter(_StoredObjects):
    """Writes commit objects through one `git hash-object -t commit -w --stdin-paths` process
    (one process for many commits instead of one `commit-tree` each). A commit is written
    as `commit-tree` writes it under the pinned identity and fixed date, so its id is the
    one `Git.commit_tree` gives for the same tree, parents and message; hash-object checks
    the object's format before it is stored."""

    def __init__(self, git: Git) -> None:
        super().__init__(git, "-t", "commit")

    def commit(self, tree: str, message: bytes, parents: tuple[str, ...] = ()) -> str:
        """The id of the commit of `tree` with `parents` and `message` (stored)."""
        return self._store("c", commit_bytes(tree, message, parents))

    def commit_later(self, tree: str, message: bytes, parents: tuple[str, ...] = ()) -> str:
        """`commit` without waiting for git: the commit exists once `settle` returns."""
        return self._store_later("c", b"commit", commit_bytes(tree, message, parents))


def commit_bytes(tree: str, message: bytes, parents: tuple[str, ...]) -> bytes:
    """The raw commit object `commit-tree` writes under the pinned identity and fixed date."""
    who = f"{IDENTITY_NAME} <{IDENTITY_EMAIL}> 0 +0000"
    head = f"tree {object_id(tree)}\n"
    head += "".join(f"parent {object_id(p)}\n" for p in parents)
    head += f"author {who}\ncommitter {who}\n\n"
    return head.encode("ascii") + message


class BlobWriter(_StoredObjects):
    """Writes blobs through one `git hash-object -w --stdin-paths --no-filters` process (one
    process for many blobs; the bytes are stored as given, no attributes or filters apply)."""

    def __init__(self, git: Git) -> None:
        super().__init__(git, "--no-filters")

    def write(self, data: bytes) -> str:
        """The id of the blob holding `data` (stored)."""
        return self._store("b", data)


class TreeWriter(_StoredObjects):
    """Writes tree objects through one `git hash-object -t tree -w --stdin-paths` process.

    The tree's bytes are made here as git makes them: entries in git's tree order (by name,
    a directory's name compared as if it ended in `/`), each `<mode in octal> <name>\\0<binary
    id>`; so a tree's id is the one `mktree` or `write-tree` gives for the same entries, and
    hash-object checks the format before it stores it. `mktree` would look up the object of
    every entry to check its type, even with `--missing` (a loose-object read per entry: a
    thousand for a large directory, for each tree written); here nothing is read. Entries
    come from trees git wrote and from objects written through these pipes.
    """

    def __init__(self, git: Git) -> None:
        super().__init__(git, "-t", "tree")

    def write(self, entries: Mapping[bytes, tuple[str, str]]) -> str:
        """The id of the tree holding `entries` (`name -> (mode, object id)`; names without
        a slash), stored."""
        return self._store("t", tree_bytes(entries))

    def write_later(self, entries: Mapping[bytes, tuple[str, str]]) -> str:
        """`write` without waiting for git: the tree exists once `settle` returns."""
        return self._store_later("t", b"tree", tree_bytes(entries))



def tree_bytes(entries: Mapping[bytes, tuple[str, str]]) -> bytes:
    """The raw bytes of the tree object holding `entries`, as git writes them (ValueError
    for a name git refuses in a tree: empty, `.`, `..`, or holding a slash or a NUL)."""
    records = []
    for name, (mode, oid) in entries.items():
        if name in (b"", b".", b"..") or b"/" in name or b"\0" in name:
            raise ValueError(f"not a tree entry name: {name!r}")
        number = int(mode, 8)
        key = name + b"/" if number == 0o40000 else name
        records.append((key, b"%o %s\0" % (number, name) + bytes.fromhex(object_id(oid))))
    records.sort()
    return b"".join(record for _key, record in records)


class TreeDiffer:
    """Canonical diffs (DIFF_TREE_FLAGS, under a series root) of one tree pair after another
    through one `git diff-tree --stdin` process: the bytes `Git.canonical_diff` gives for the
    same pair, without a process per diff.

    diff-tree echoes every input line that does not start with an object id, and flushes its
    output when it does, so each pair is followed by an end line of our own: the answer is
    what comes between the pair's echo and that line. The end line starts with `~` and holds a
    random nonce; no line of a diff starts with `~` (content lines start with a space, `+`, `-`
    or `\\`, header lines with a word, binary data with a length letter), so it cannot be
    mistaken for one.
    """

    def __init__(self, git: Git, root: str = ".") -> None:
        self._pipe = Pipe(git, *DIFF_TREE_FLAGS, *relative_flags(root), "--stdin")
        self._end = f"~patchctl-end-{secrets.token_hex(8)}".encode("ascii")

    def __enter__(self) -> TreeDiffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def diff(self, pre: str, post: str) -> bytes:
        """The canonical diff from tree `pre` to tree `post` (b"" when they are equal)."""
        pair = f"{object_id(pre)} {object_id(post)}".encode("ascii")
        self._pipe.ask(pair + b"\n" + self._end + b"\n")
        if self._pipe.line() != pair:
            raise self._pipe_failure(b"diff-tree did not echo the tree pair first")
        lines = []
        while (line := self._pipe.raw_line()) != self._end + b"\n":
            lines.append(line)
        return b"".join(lines)

    def _pipe_failure(self, why: bytes) -> GitFailed:
        return GitFailed(list(self._pipe.args), 0, why)

    def close(self) -> None:
        """End the process."""
        self._pipe.close()
