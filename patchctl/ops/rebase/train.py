"""`patchctl resolutions train --moved MOVED`: learn the resolutions of a move already made
(as git's rerere-train learns from merges already committed), and `patchctl resolutions list`.

Given the series (on upstream A) and the same series already moved to upstream B (MOVED, a
series directory: a copy moved by hand, by another tool or by an earlier rebase), each patch
of the series is merged three-way onto MOVED's tree before the patch of the same id, as
`patchctl rebase --onto B` would merge it; for every conflict block that merge leaves, the
text MOVED has there after the patch becomes a record under the series' `resolutions/`. A
later `rebase` that meets the same block replays it.

Nothing of either clean room is used or touched: both series are replayed from their pinned
upstreams (from the tree cache when it holds them) in a throw-away repository.

A series that extends another (stack.py) is trained on its own patches, each merged where
its clean room applies it: on its upstream with the extended series' patches applied under
`extends.root` (`stack.compose`, as `cleanroom apply` and `verify` build that tree), and the
moved copy likewise on its own upstream and the series it extends (its sibling directory:
the moved copy of the extended series). The extended series' patches are trained in that
series (`--series` its directory), whose records they are.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from patchctl.errors import ConfigError
from patchctl.gitlayer.git import Git
from patchctl.gitlayer.pipes import CommitWriter
from patchctl.gitlayer.runner import temp_prefix
from patchctl.progress import Progress
from patchctl.series import resolutions
from patchctl.series.gitapply import TreePatcher, replay_tree
from patchctl.series.model import Series, load_series, read_patch_file
from patchctl.series.resolutions import Record
from patchctl.series.stack import compose, load_stack
from patchctl.txn.session import series_session
from patchctl.upstream.materialize import materialize, tree_from_cache

MOVED_LABEL = "onto-moved"


@dataclass(frozen=True)
class Trained:
    """What one patch's merge onto the moved series taught."""

    id: str
    blocks: int = 0  # conflict blocks the merge left
    recorded: tuple[str, ...] = ()  # the records (series-relative paths)
    unclear: int = 0  # blocks whose resolution could not be told apart (lines around edited)
    outside: tuple[str, ...] = ()  # files the moved series also changed outside the blocks
    other: tuple[str, ...] = ()  # conflicted paths with no text block (modify/delete, binary)
    missing: bool = False  # the moved series has no patch of this id

    def to_json(self) -> dict[str, object]:
        """Plain data for --json."""
        return {
            "id": self.id,
            "blocks": self.blocks,
            "recorded": list(self.recorded),
            "unclear": self.unclear,
            "outside_edits": list(self.outside),
            "other_conflicts": list(self.other),
            "missing": self.missing,
        }


@dataclass(frozen=True)
class TrainReport:
    """`resolutions train`: per patch what was learned, and the files written."""

    series: Path
    moved: Path
    patches: tuple[Trained, ...]
    written: tuple[Path, ...] = field(default=())
    dry_run: bool = False

    def totals(self) -> dict[str, int]:
        """Blocks met, records, unclear blocks, over the whole series."""
        return {
            "blocks": sum(p.blocks for p in self.patches),
            "recorded": sum(len(p.recorded) for p in self.patches),
            "unclear": sum(p.unclear for p in self.patches),
        }

    def to_json(self) -> dict[str, object]:
        """Plain data for --json."""
        return {
            "ok": True,
            "series": str(self.series),
            "moved": str(self.moved),
            "dry_run": self.dry_run,
            **self.totals(),
            "patches": [p.to_json() for p in self.patches],
            "written": [str(p) for p in self.written],
        }


def train(
    series_path: Path, moved_path: Path, *, dry_run: bool = False, progress: Progress | None = None
) -> TrainReport:
    """Record, under the series' `resolutions/`, how the series moved to `moved_path`
    resolves each conflict block a rebase onto its upstream meets (`dry_run`: nothing
    written)."""
    moved = load_series(moved_path)
    with series_session(series_path, op="resolutions train") as session:
        series = session.series
        for one in (series, moved):
            load_stack(one)  # the extended series found and checked before any work
        with tempfile.TemporaryDirectory(prefix=temp_prefix("scratch")) as tmp:
            git = Git.init(Path(tmp) / "train.git", bare=True)
            old = _trees(git, series, Path(tmp), progress)
            new = _trees(git, moved, Path(tmp), progress)
            learned = _learn(git, series, moved, old, new)
        records = [r for _t, rs in learned for r in rs]
        report = TrainReport(series.path, moved.path, tuple(t for t, _r in learned), (), dry_run)
        if dry_run:
            return report
        written = session.write_patches([(series.dir / r.relpath(), r.dump()) for r in records])
        return TrainReport(series.path, moved.path, report.patches, tuple(written), dry_run)


def _trees(git: Git, series: Series, tmp: Path, progress: Progress | None) -> list[str]:
    """The tree the series' own patches start from (its upstream, with the patches of the
    series it extends applied under their root) and its tree after each patch, in `git`."""
    tree = _upstream_tree(git, series, tmp, progress)
    if series.extends is not None:
        composed, why = compose(load_stack(series), git, tree)
        if composed is None:
            raise ConfigError(
                f"{series.path}: {why}",
                hint="verify the extended series on this series' upstream first"
                " (`patchctl verify --all` of both)",
            )
        tree = composed
    trees = [tree]
    hint = f"{series.path}: the series does not apply to its own upstream; fix it first"
    with TreePatcher(git) as patcher:
        for patch in series.patches:
            data = read_patch_file(series.patch_path(patch))
            tree = replay_tree(patcher, tree, data, series.root, patch.id, hint=hint).post
            trees.append(tree)
    return trees


def _upstream_tree(git: Git, series: Series, tmp: Path, progress: Progress | None) -> str:
    cached = tree_from_cache(series.upstream, git)
    if cached is not None:
        return cached.tree
    scratch = tmp / f"upstream-{len(list(tmp.iterdir()))}"
    try:
        other = Git.init(scratch)
        result = materialize(series, other, progress)
        with CommitWriter(other) as writer:
            commit = writer.commit(result.tree, b"upstream\n", ())
        git.fetch(str(scratch), commit)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return result.tree


def _learn(
    git: Git, series: Series, moved: Series, old: list[str], new: list[str]
) -> list[tuple[Trained, list[Record]]]:
    where = {pid: i for i, pid in enumerate(moved.ids())}
    found: list[tuple[Trained, list[Record]]] = []
    for i, patch in enumerate(series.patches):
        j = where.get(patch.id)
        if j is None:
            found.append((Trained(patch.id, missing=True), []))
            continue
        merged = git.merge_trees(old[i], new[j], old[i + 1], (MOVED_LABEL, patch.id))
        blocks = unclear = 0
        records: list[Record] = []
        outside: list[str] = []
        other: list[str] = []
        for path in merged.conflicts:
            text, done = (git.maybe_rev(f"{t}:{path}") for t in (merged.tree, new[j + 1]))
            if text is None or done is None:
                other.append(path)
                continue
            conflicted = git.cat_file("blob", text)
            count = len(resolutions.blocks(resolutions.lines_of(conflicted)))
            if not count:
                other.append(path)
                continue
            learned = resolutions.learn(patch.id, path, conflicted, git.cat_file("blob", done))
            blocks += count
            unclear += learned.unclear
            records += learned.records
            if learned.outside_edits:
                outside.append(path)
        names = tuple(r.relpath() for r in records)
        found.append(
            (Trained(patch.id, blocks, names, unclear, tuple(outside), tuple(other)), records)
        )
    return found


def list_records(series_path: Path, patch_id: str | None = None) -> list[tuple[Path, Record]]:
    """`patchctl resolutions list`: every record of the series (or of one patch), in order;
    ResolutionInvalid naming the first file that does not read."""
    series = load_series(series_path)
    ids = series.ids() if patch_id is None else (series.patch(patch_id).id,)
    root = resolutions.store_dir(series.dir)
    return [
        (root / pid / r.name, r)
        for pid in ids
        for r in resolutions.load_patch_records(series.dir, pid)
    ]
