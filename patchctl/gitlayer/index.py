"""Index files patchctl owns (never a repository's own): the staging area of one job.

A seeded temporary index (`temp_index`) is a `copy2` of the seed, so its mtime, which git's
racy-clean check compares file mtimes with, is kept.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from patchctl.gitlayer.runner import temp_prefix

if TYPE_CHECKING:
    from patchctl.gitlayer.git import Git

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
        usable, and the crash is reported in the returned stderr. The caller refuses an
        oversized binary hunk first (series.gitapply.apply_bytes): git would inflate it.
        """
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
