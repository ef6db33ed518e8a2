"""The three-way merges of many patches in one `git merge-tree` process.

A rebase merges each patch that does not apply exactly as a cherry-pick does: its old commit
onto the new tip, from its old parent (`Git.merge_commits`, one process per patch, every one
walking the whole of two upstream trees that differ in thousands of files). git 2.39 has no
`merge-tree --stdin`, so here the merges of the patches ahead are made at once, on small
trees: for each patch only the paths it changes, as its old parent, the current tip and its
old commit hold them, all patches side by side in one merge, each path under a name of its
own in one flat tree per side (one tree object per side, one directory for git to walk).

That small merge gives each path the entry the full merge gives it, when the full merge has
nothing to do outside the patch's own paths (`reduce`):
- the patch only modifies regular files and adds new ones (no removal, no symlink or
  submodule), so its side of the merge has nothing that git could take for a rename;
- every file it modifies is a regular file at the same path in the tip (the new upstream did
  not remove or rename it: no rename of it is looked for on the tip's side);
- every file it adds is absent from the tip, no file of the tip stands where a directory of
  it goes, and each of its directories that the old parent has is a directory of the tip
  too (the new upstream did not remove the directory: git's directory-rename detection,
  which moves a new file after its directory, finds nothing to move it by).
Then every other path of the full merge is the tip's (the patch left it as its parent had
it), every path of the patch is merged from the same three entries (file content merges are
per file and nothing is removed on any side, so no rename is looked for; the clean room's
pinned attributes are the same for every path and name), and the full
merge's tree is the tip with those entries set: the bytes the single merge writes.

A result is used only while it still holds: when the patch's turn comes, `reduce` is asked
again of the tip the patch really lands on and must find the same entries (a patch in
between may have changed one of its files); a merge with a conflict in a patch's paths is
not used at all (that patch is merged alone, as before, so a conflict is reported exactly
as it was). Nothing here is kept across runs: a killed rebase merges again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from patchctl.gitlayer.git import Git, Merged
from patchctl.gitlayer.pipes import CommitWriter
from patchctl.gitlayer.trees import TREE_MODE, Entry, Found, TreeStore

REGULAR = ("100644", "100755")
Change = tuple[Entry | None, Entry | None]  # (entry before the patch, entry after it)


@dataclass(frozen=True)
class Ahead:
    """A patch still to move: its id, its old parent's tree (the merge base) and its changes
    from there to its old commit's tree (path -> (before, after))."""

    id: str
    base: str
    changes: Mapping[bytes, Change]


@dataclass(frozen=True)
class Premerged:
    """A patch merged onto a tip: what the tip held at each of its paths, and the merged
    entry of each path."""

    ours: dict[bytes, Found]
    entries: dict[bytes, Entry]


@dataclass
class Premerger:
    """Merges of the patches ahead, made together and kept until each patch's turn."""

    git: Git
    store: TreeStore
    writer: CommitWriter
    results: dict[str, Premerged] = field(default_factory=dict)
    processes: int = 0  # merge-tree runs made (for tests)

    def reduce(self, tip: str, patch: Ahead) -> dict[bytes, Found] | None:
        """What `tip` holds at each path of `patch` when the full merge of the patch onto
        `tip` is the merge of those paths alone (see the module's docstring); else None."""
        if not patch.changes:
            return None
        ours: dict[bytes, Found] = {}
        for path, (before, after) in patch.changes.items():
            if after is None or after[0] not in REGULAR:
                return None
            if before is not None and before[0] not in REGULAR:
                return None
            now = self.store.find(tip, path)
            if before is not None:
                kept = now.entry is not None and now.entry[0] in REGULAR
            else:
                free = now.entry is None and now.blocker is None
                kept = free and self._directories_kept(patch.base, tip, path)
            if not kept:
                return None
            ours[path] = now
        return ours

    def _directories_kept(self, base: str, tip: str, path: bytes) -> bool:
        """Every directory above `path` that `base` has is a directory of `tip`."""
        parts = path.split(b"/")
        for depth in range(1, len(parts)):
            above = b"/".join(parts[:depth])
            had = self.store.find(base, above).entry
            if had is None:
                return True  # nor has it anything deeper
            if had[0] != TREE_MODE:
                return False
            now = self.store.find(tip, above).entry
            if now is None or now[0] != TREE_MODE:
                return False
        return True

    def merged(self, tip: str, patch: Ahead, ahead: Sequence[Ahead]) -> Merged | None:
        """The merge of `patch` onto `tip` (a clean one; None when it must be merged alone:
        it does not reduce, or its paths conflict). A result made earlier is used when the
        patch still reduces to the same entries on `tip`; otherwise the patches `ahead`
        (those after it, in order) are merged with it again in one process."""
        ours = self.reduce(tip, patch)
        if ours is None:
            return None
        kept = self.results.pop(patch.id, None)
        if kept is None or kept.ours != ours:
            self._merge_ahead(tip, patch, ours, ahead)
            kept = self.results.pop(patch.id, None)
            if kept is None:
                return None
        return Merged(self.store.edit(tip, kept.entries), (), ())

    def _merge_ahead(
        self, tip: str, first: Ahead, ours: dict[bytes, Found], ahead: Sequence[Ahead]
    ) -> None:
        """Merge `first` and the patches `ahead` whose paths no patch before them (from
        `first` on) touches, on `tip`, in one merge-tree; keep the clean results. A patch
        ahead with a result kept from an earlier merge is not merged again (the result is
        checked when its turn comes, like any other)."""
        members = [(first, ours)]
        touched, above = set(first.changes), _directories(first.changes)
        for patch in ahead:
            paths = set(patch.changes)
            dirs = _directories(paths)
            free = not paths & touched and not paths & above and not dirs & touched
            if free and patch.id not in self.results:  # (one merged before is kept)
                found = self.reduce(tip, patch)
                if found is not None:
                    members.append((patch, found))
            touched |= paths
            above |= dirs
        # One flat tree per side: each path of each member under a name of its own (a
        # number), so that each side is one tree object and the merge walks one directory.
        base: dict[bytes, Entry] = {}
        mine: dict[bytes, Entry] = {}
        theirs: dict[bytes, Entry] = {}
        names: list[tuple[int, bytes]] = []  # name (its position here) -> (member, path)
        for n, (patch, found) in enumerate(members):
            for path, (before, after) in patch.changes.items():
                name = b"%d" % len(names)
                names.append((n, path))
                entry = found[path].entry
                if before is not None and entry is not None:
                    base[name], mine[name] = before, entry
                if after is not None:  # always (reduce)
                    theirs[name] = after
        root = self.writer.commit(self.store.build(base), b"patchctl merge base\n")
        sides = [
            self.writer.commit(self.store.build(tree), b"patchctl merge side\n", (root,))
            for tree in (mine, theirs)
        ]
        self.processes += 1
        result = self.git.merge_commits(*sides)
        if any(not name.isdigit() or int(name) >= len(names) for name in result.conflicts):
            return  # a conflict at no path given: nothing here is trusted
        conflicted = {int(name) for name in result.conflicts}
        merged = self.store.entries(result.tree)
        entries: list[dict[bytes, Entry]] = [{} for _m in members]
        for number, (n, path) in enumerate(names):
            got = merged.get(b"%d" % number)
            if got is not None and got[0] in REGULAR and number not in conflicted:
                entries[n][path] = got
        for (patch, found), merged_entries in zip(members, entries, strict=True):
            if len(merged_entries) == len(patch.changes):  # else merged alone, where a
                self.results[patch.id] = Premerged(found, merged_entries)  # conflict is shown


def _directories(paths: Iterable[bytes]) -> set[bytes]:
    """The directories above each of `paths`."""
    found: set[bytes] = set()
    for path in paths:
        parts = path.split(b"/")
        found.update(b"/".join(parts[:depth]) for depth in range(1, len(parts)))
    return found
