"""The stack of a series: the patches a clean room of it holds, in order.

A series without `extends:` has its own patches as its stack. A series with
`extends: {series: NAME, root: DIR}` stacks the patches of the sibling series `NAME` first,
each applied under `DIR` (joined with that series' own `root:`), and then its own patches.
That is how one series covers a whole package while another covers a tree vendored inside
it: `patches/llama-cpp-python` (the whole llama-cpp-python sdist) extends
`patches/llamafile` (its `vendor/llama.cpp`), so 0078's C++ has one source of truth, the
llamafile series, and the bindings patch sits on top of it.

Rules (docs/architecture.md, "Series that extend another"):
- the extended series is a sibling directory (same parent, also after resolving symlinks),
  itself extends nothing, and records `upstream.tree`;
- this series' upstream tree holds exactly that tree at `DIR` (checked wherever a clean-room
  tree is at hand: ChecksumMismatch, exit 6);
- patch ids are unique across the stack;
- the extended series' patches keep their own recorded trees (`pre_tree`/`post_tree` of the
  subtree at `DIR`) and are captured in that series' clean room, never through this one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from patchctl.errors import ChecksumMismatch, ConfigError, NotFound, PatchctlError
from patchctl.gitlayer.git import Git
from patchctl.gitlayer.index import temp_index
from patchctl.series.gitapply import apply_to_index
from patchctl.series.model import SERIES_FILE, Patch, Series, folded, load_series, read_patch_file


def join_root(prefix: str, root: str) -> str:
    """`prefix/root` as a normalised relative directory ('.' for the top)."""
    parts = [p for p in (prefix, root) if p not in (".", "")]
    return "/".join(p.rstrip("/") for p in parts) or "."


@dataclass(frozen=True)
class Entry:
    """One patch of a stack: the patch, its file and where it applies in the clean-room tree."""

    patch: Patch
    file: Path
    root: str  # the directory of the clean-room tree the patch applies under (--directory)
    prefix: str  # where the owning series' upstream tree lies in the clean-room tree
    series: Series  # the series the patch belongs to
    # True for a patch of the extended series (also when `extends.root` is "." and both
    # series pin the same tree: the prefix alone cannot tell)
    inherited: bool = False

    @property
    def id(self) -> str:
        """The patch id."""
        return self.patch.id

    def local_tree(self, git: Git, tree: str) -> str | None:
        """`tree` (a clean-room tree) as the owning series records trees: the subtree at
        `prefix` for an inherited patch, `tree` itself for an own one (None: no such dir)."""
        return tree if not self.inherited or self.prefix == "." else git.subtree(tree, self.prefix)


@dataclass(frozen=True)
class Stack:
    """A series' patches after those of the series it extends (if any)."""

    series: Series
    base: Series | None
    entries: tuple[Entry, ...]

    def ids(self) -> tuple[str, ...]:
        """Every patch id of the stack, in order."""
        return tuple(e.id for e in self.entries)

    def index(self, patch_id: str) -> int:
        """The position of `patch_id` in the stack (NotFound if absent)."""
        for i, entry in enumerate(self.entries):
            if entry.id == patch_id:
                return i
        raise NotFound(
            f"no patch with id {patch_id!r} in {self.series.path}"
            + (f" or in the series it extends ({self.base.path})" if self.base else ""),
            hint=f"known ids: {', '.join(self.ids()) or '(none)'}",
        )

    def entry(self, patch_id: str) -> Entry:
        """The entry of `patch_id` (NotFound if absent)."""
        return self.entries[self.index(patch_id)]

    def upto(self, patch_id: str | None) -> tuple[Entry, ...]:
        """The entries up to and including `patch_id` (all when None)."""
        if patch_id is None:
            return self.entries
        return self.entries[: self.index(patch_id) + 1]

    def inherited(self) -> tuple[Entry, ...]:
        """The entries of the extended series."""
        return tuple(e for e in self.entries if e.inherited)

    def own_entry(self, patch_id: str) -> Entry:
        """The entry of one of the series' own patches; an inherited id is refused with the
        command that captures or edits it in its own series."""
        entry = self.entry(patch_id)
        if entry.inherited:
            raise NotFound(
                f"{patch_id} belongs to the extended series {entry.series.name}, "
                f"not to {self.series.name}",
                hint=f"work on it in its own series: --series {entry.series.dir}",
            )
        return entry


def base_dir(series: Series) -> Path:
    """The directory of the series `series` extends (ConfigError when it has no `extends`)."""
    if series.extends is None:
        raise ConfigError("the series extends no other series", path=series.path, key="extends")
    return series.dir.absolute().parent / series.extends.series


def _load_base(series: Series) -> Series:
    assert series.extends is not None
    directory = base_dir(series)
    if not (directory / SERIES_FILE).is_file():
        raise NotFound(
            f"{series.path}: extends.series: no series {series.extends.series!r} next to it "
            f"({directory.resolve() / SERIES_FILE} does not exist)",
            hint="name a series directory in the same folder as this one",
        )
    if directory.resolve().parent != series.dir.resolve().parent:
        raise ConfigError(
            f"{series.extends.series!r} resolves outside {series.dir.resolve().parent}",
            path=series.path,
            key="extends.series",
            hint="extend a series that really lives next to this one (not a symlink out)",
        )
    base = load_series(directory)
    if base.extends is not None:
        raise ConfigError(
            f"{base.name} extends {base.extends.series} itself; one level is supported",
            path=series.path,
            key="extends.series",
            hint="extend a series that extends nothing",
        )
    if base.upstream.tree is None:
        raise ConfigError(
            f"the extended series {base.name} records no upstream.tree",
            path=base.path,
            key="upstream.tree",
            hint=f"record the upstream tree id of {base.path} (`patchctl cleanroom status`)",
        )
    return base


def load_stack(series: Series) -> Stack:
    """The stack of `series` (loads and checks the series it extends)."""
    own = tuple(Entry(p, series.patch_path(p), series.root, ".", series) for p in series.patches)
    if series.extends is None:
        return Stack(series, None, own)
    base = _load_base(series)
    root = join_root(series.extends.root, base.root)
    inherited = tuple(
        Entry(p, base.patch_path(p), root, series.extends.root, base, inherited=True)
        for p in base.patches
    )
    taken = {folded(e.id) for e in inherited}
    for i, patch in enumerate(series.patches):
        if folded(patch.id) in taken:
            raise ConfigError(
                f"duplicate id {patch.id!r}: the extended series {base.name} has it too",
                path=series.path,
                key=f"patches[{i}].id",
                hint="give every patch of the stack a unique id",
            )
    return Stack(series, base, inherited + own)


def check_base_tree(stack: Stack, git: Git, upstream_tree: str) -> None:
    """ChecksumMismatch unless `upstream_tree` (this series' pristine upstream) holds the
    extended series' upstream tree at `extends.root` (nothing to check without `extends`)."""
    if stack.base is None or stack.series.extends is None:
        return
    where = stack.series.extends.root
    found = upstream_tree if where == "." else git.subtree(upstream_tree, where)
    wanted = stack.base.upstream.tree
    if found != wanted:
        what = f"tree {found}" if found else "no such directory"
        raise ChecksumMismatch(
            f"{stack.series.upstream.describe()} holds {what} at {where!r}, but the extended "
            f"series {stack.base.name} pins upstream tree {wanted}",
            hint=f"pin the same upstream in both, or fix extends.root in {stack.series.path}",
        )


def compose(stack: Stack, git: Git, start: str) -> tuple[str | None, str]:
    """The tree `start` (this series' pristine upstream, readable in `git`) becomes with the
    extended series' patches applied under their root: (tree, "") or (None, why not).
    `start` itself for a series that extends nothing."""
    check_base_tree(stack, git, start)
    with temp_index(git) as index:
        index.read_tree(start)
        for entry in stack.inherited():
            outcome = apply_to_index(index, read_patch_file(entry.file), entry.root)
            if not outcome.ok:
                why = f"the extended series' patch {entry.id} does not apply here: "
                return None, why + outcome.first_error()
        return index.write_tree(), ""


def extending(series: Series) -> list[Series]:
    """The sibling series that extend `series` (a sibling that does not load is skipped:
    it is broken already, and its own commands say why)."""
    found = []
    for directory in sorted(series.dir.parent.iterdir()):
        if directory == series.dir or not (directory / SERIES_FILE).is_file():
            continue
        try:
            other = load_series(directory, check_files=False)
        except (PatchctlError, OSError):
            continue
        if other.extends is not None and other.extends.series == series.dir.name:
            found.append(other)
    return found
