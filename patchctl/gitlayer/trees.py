"""Tree objects read, searched and edited in memory, one directory at a time.

A kernel-sized tree has tens of thousands of entries, and a patch changes a handful of them.
Loading the whole tree into an index for every patch (read-tree, then write-tree) costs a
full index read, hash and write per patch; editing the tree object directly costs only the
directories on the changed paths. `TreeStore` reads trees through one `cat-file
--batch-command` process, writes them through one `hash-object -t tree` process, and keeps the
directories it has read in a bounded cache (memory does not grow with the number of
patches). The trees it writes are the trees `git write-tree` would write for the same
entries: pipes.tree_bytes orders entries as git does, and a directory left empty is dropped.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from patchctl.errors import GitFailed
from patchctl.gitlayer.git import Git
from patchctl.gitlayer.pipes import ObjectReader, TreeWriter

TREE_MODE = "40000"
# Directories kept parsed in memory: enough for the paths a long series keeps touching
# (include/, drivers/...), a fixed bound so that memory stays flat in the number of patches.
CACHE_TREES = 4096

Entry = tuple[str, str]  # (mode, object id): one tree or index entry
Changes = Mapping[bytes, Entry | None]  # path -> new entry, or None to remove it


@dataclass(frozen=True)
class Found:
    """What a tree holds at a path: the entry there, and the non-directory entry met on the
    way (a file or symlink standing where the path needs a directory), if any."""

    entry: Entry | None
    blocker: tuple[bytes, Entry] | None = None


@dataclass
class TreeStore:
    """Tree objects of one repository, read and written through two long-lived processes."""

    git: Git
    _reader: ObjectReader | None = None
    _writer: TreeWriter | None = None
    _cache: OrderedDict[str, dict[bytes, Entry]] = field(default_factory=OrderedDict)

    def __enter__(self) -> TreeStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the processes (the store can be used again: they restart on demand)."""
        for pipe in (self._reader, self._writer):
            if pipe is not None:
                pipe.close()
        self._reader = self._writer = None

    # ------------------------------------------------------------------------- reading

    def entries(self, tree: str) -> dict[bytes, Entry]:
        """The entries of tree object `tree` (`name -> (mode, id)`); do not modify the result."""
        cached = self._cache.get(tree)
        if cached is not None:
            self._cache.move_to_end(tree)
            return cached
        if self._reader is None:
            self._reader = ObjectReader(self.git)
        found = self._reader.read(tree)
        if found is None or found[0] != "tree":
            raise GitFailed(["git", "cat-file", "tree", tree], 128, b"error: not a tree\n")
        parsed = parse_tree(found[1], len(tree) // 2)
        self._cache[tree] = parsed
        if len(self._cache) > CACHE_TREES:
            self._cache.popitem(last=False)
        return parsed

    def find(self, tree: str, path: bytes) -> Found:
        """The entry at `path` in `tree`, and the file or symlink blocking the way, if any."""
        current = tree
        parts = path.split(b"/")
        for depth, name in enumerate(parts):
            entry = self.entries(current).get(name)
            if entry is None:
                return Found(None)
            if depth == len(parts) - 1:
                return Found(entry)
            if entry[0] != TREE_MODE:
                return Found(None, (b"/".join(parts[: depth + 1]), entry))
            current = entry[1]
        return Found(None)

    def walk(self, tree: str, prefix: bytes = b"") -> Iterator[tuple[bytes, Entry]]:
        """Every non-directory entry under `tree`, as (path below `prefix`, entry)."""
        for name, entry in self.entries(tree).items():
            path = prefix + name
            if entry[0] == TREE_MODE:
                yield from self.walk(entry[1], path + b"/")
            else:
                yield path, entry

    # ------------------------------------------------------------------------- writing

    def edit(self, tree: str, changes: Changes) -> str:
        """The id of `tree` with `changes` made: each path (of a file, symlink or gitlink, as
        in an index) set to its entry or removed.

        Directories that end up empty are dropped, as an index would drop them. A file and
        a directory may trade places in one edit (the file removed and paths below it set,
        or a file set where removed paths were), as in an index.
        """
        if not changes:
            return tree
        result = self._edit(tree, dict(changes))
        result = result if result is not None else self._write({})
        self._settle()
        return result

    def build(self, entries: Mapping[bytes, Entry]) -> str:
        """The id of the tree that holds exactly `entries` (paths of files, symlinks or
        gitlinks; the empty tree for none)."""
        result = self._edit(None, dict(entries)) if entries else None
        result = result if result is not None else self._write({})
        self._settle()
        return result

    def _edit(self, tree: str | None, changes: dict[bytes, Entry | None]) -> str | None:
        entries = dict(self.entries(tree)) if tree is not None else {}
        below: dict[bytes, dict[bytes, Entry | None]] = {}
        for path, new in changes.items():
            head, slash, rest = path.partition(b"/")
            if slash:
                below.setdefault(head, {})[rest] = new
            elif new is None:
                entries.pop(head, None)
            else:
                entries[head] = new
        for head, inner in below.items():
            current = entries.get(head)
            if current is not None and current[0] != TREE_MODE:
                if all(v is None for v in inner.values()):
                    continue  # the directory was replaced by a file: its removals are moot
                raise ValueError(f"edit puts {head!r}/... under a file; remove the file first")
            sub = self._edit(current[1] if current is not None else None, inner)
            if sub is None:
                entries.pop(head, None)
            else:
                entries[head] = (TREE_MODE, sub)
        if not entries:
            return None
        if tree is not None and entries == self.entries(tree):
            return tree
        return self._write(entries)

    def _write(self, entries: dict[bytes, Entry]) -> str:
        """The id of the tree of `entries`, sent to git without waiting (the directories of
        one edit go in one round trip): `_settle` before the edit returns."""
        if self._writer is None:
            self._writer = TreeWriter(self.git)
        oid = self._writer.write_later(entries)
        self._cache[oid] = entries
        if len(self._cache) > CACHE_TREES:
            self._cache.popitem(last=False)
        return oid

    def _settle(self) -> None:
        if self._writer is not None:
            self._writer.settle()


def parse_tree(raw: bytes, hash_size: int) -> dict[bytes, Entry]:
    """The entries of a raw tree object (`<mode> <name>\\0<binary id>` records)."""
    entries: dict[bytes, Entry] = {}
    pos = 0
    while pos < len(raw):
        space = raw.index(b" ", pos)
        nul = raw.index(b"\0", space)
        mode = raw[pos:space].decode("ascii")
        entries[raw[space + 1 : nul]] = (mode, raw[nul + 1 : nul + 1 + hash_size].hex())
        pos = nul + 1 + hash_size
    return entries
