"""`patchctl refresh ID | --all`: rewrite drifted patches so they apply exactly again.

What "drifted" means: applied to the tree the patches before it produce (from the pinned
upstream), the patch needs an offset for some hunk, fuzz (reduced context) for some hunk, or
a file mode other than the one it names. Such a patch applies with `git apply` or quilt, but
strict `cleanroom apply` refuses it (exit 10). A patch that applies exactly is left alone,
byte for byte, whatever its format.

How: the patches are replayed (for a series that extends another, from the pristine upstream
with the extended series' patches applied under their root) as tree objects of the clean
room's repository (never its index or work tree; a TreePatcher, so each patch costs the
paths it touches), each exactly, else at an offset, else with fuzz
(series.gitapply.replay_tree); a
drifted patch's diff is regenerated from the trees around it with the pinned diff flags
(series.parts.regenerated), so the refreshed patch turns the same pre-tree into the same
post-tree, exactly, and written in the patch's own dialect (a plain `diff -u`, quilt's
`Index:` sections, a git diff with abbreviated ids: series.parts.in_dialect) unless
`--git-style` asks for git diffs. Like `quilt refresh`, the header (DEP-3, gbp-pq, mail headers,
everything before the diff) and the trailer after the last hunk are kept byte for byte; only
the diff part changes. A patch that does not apply even with fuzz is a conflict (exit 3,
naming the patch, file and hunk): nothing is written, and the patch needs a hand fix or a
`patchctl rebase`.

Every patch refresh looks at gets its pre/post trees recorded (those it turns into each other
now); a refreshed imported patch also gets the sha256 of its new bytes (`imported` stays
true: its header is still its own, and verify keeps checking the file against that sha256).
series.yaml is written before the patch files, so a run killed in between is completed by
running refresh again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from patchctl.errors import PatchctlError
from patchctl.gitlayer.objects import scratch_repo
from patchctl.progress import Progress, or_null
from patchctl.room.cleanroom import Cleanroom, same_pin
from patchctl.series.gitapply import Drift, TreePatcher, is_fuzz, patch_sha256, replay_tree
from patchctl.series.model import Patch, Series, check_patch_size, read_patch_file
from patchctl.series.parts import regenerated, split_patch
from patchctl.series.stack import compose, load_stack
from patchctl.txn.session import series_session


@dataclass(frozen=True)
class RefreshedPatch:
    """What refresh did to one patch."""

    id: str
    file: Path
    refreshed: bool  # False: it applies exactly and was left untouched
    drift: tuple[Drift, ...]  # the hunks that needed an offset, fuzz or another mode
    old_sha256: str
    new_sha256: str
    old_bytes: int
    new_bytes: int
    kept_bytes: int  # header + trailer bytes kept verbatim
    pre_tree: str
    post_tree: str

    @property
    def fuzz(self) -> bool:
        """True when some hunk applied only with fuzz before the refresh."""
        return any(is_fuzz(d) for d in self.drift)


@dataclass(frozen=True)
class RefreshResult:
    """The series after a refresh, what happened per patch, and the files whose bytes changed."""

    series: Series
    patches: tuple[RefreshedPatch, ...]
    changed: tuple[Path, ...] = ()
    dry_run: bool = False

    @property
    def refreshed(self) -> tuple[RefreshedPatch, ...]:
        """The patches whose bytes were (or, with dry_run, would be) rewritten."""
        return tuple(p for p in self.patches if p.refreshed)


def refresh_patches(
    series: Series,
    room: Cleanroom,
    ids: Sequence[str] | None = None,
    progress: Progress | None = None,
    *,
    git_style: bool = False,
) -> tuple[Series, list[tuple[RefreshedPatch, bytes]]]:
    """Replay the series from the clean room's base and regenerate the drifted `ids` (all
    when None), each in its own diff dialect unless `git_style`: the updated series and, per
    target, its report and new bytes. Writes nothing but objects in the clean room's
    repository."""
    targets = set(series.ids() if ids is None else ids)
    for pid in targets:
        series.index(pid)  # NotFound before any work
    last = max(series.index(pid) for pid in targets) if targets else -1
    prog = or_null(progress)
    prog.start("refresh", last + 1)
    results: list[tuple[RefreshedPatch, bytes]] = []
    updated = series
    with TreePatcher(room.git) as patcher, scratch_repo([room.path]) as scratch:
        pre = _start_tree(series, room)
        for patch in series.patches[: last + 1]:
            data = read_patch_file(series.patch_path(patch))
            onto = f" to tree {pre}"
            replayed = replay_tree(patcher, pre, data, series.root, patch.id, onto=onto)
            if patch.id in targets:
                new = data
                if replayed.drift:
                    new = regenerated(
                        scratch, patch, data, pre, replayed.post, series.root, git_style=git_style
                    )
                    check_patch_size(patch, new)
                report = _report(series, patch, data, new, replayed.drift, pre, replayed.post)
                results.append((report, new))
                updated = updated.with_patch(_recorded(patch, report, pre, replayed.post))
            pre = replayed.post
            prog.advance("refresh")
    prog.done("refresh")
    return updated, results


def _start_tree(series: Series, room: Cleanroom) -> str:
    """The tree the series' first own patch applies to: the pristine upstream, with the extended
    series' patches applied under their root when the series extends another."""
    if series.extends is None:
        return room.base_tree()
    composed, why = compose(load_stack(series), room.git, room.base_tree())
    if composed is None:
        base = series.extends.series
        raise PatchctlError(
            f"{series.path}: {why}",
            hint=f"fix the extended series first: patchctl refresh --series {base}",
        )
    return composed


def _report(
    series: Series,
    patch: Patch,
    old: bytes,
    new: bytes,
    drift: tuple[Drift, ...],
    pre: str,
    post: str,
) -> RefreshedPatch:
    parts = split_patch(new)
    return RefreshedPatch(
        id=patch.id,
        file=series.patch_path(patch),
        refreshed=new != old,
        drift=drift,
        old_sha256=patch_sha256(old),
        new_sha256=patch_sha256(new),
        old_bytes=len(old),
        new_bytes=len(new),
        kept_bytes=len(parts.header) + len(parts.trailer),
        pre_tree=pre,
        post_tree=post,
    )


def _recorded(patch: Patch, report: RefreshedPatch, pre: str, post: str) -> Patch:
    """The series entry of a refreshed patch: the trees it turns into each other and, for an
    imported patch whose bytes changed, the sha256 of its new bytes."""
    sha = report.new_sha256 if patch.imported and report.refreshed else patch.sha256
    return replace(patch, pre_tree=pre, post_tree=post, sha256=sha)


def refresh(
    series_path: Path,
    ids: Sequence[str] | None = None,
    workdir: Path | None = None,
    progress: Progress | None = None,
    *,
    dry_run: bool = False,
    git_style: bool = False,
) -> RefreshResult:
    """`patchctl refresh ID... | --all`: regenerate the drifted patches among `ids` (all when
    None), under the series and clean-room locks; `dry_run` reports and writes nothing;
    `git_style` writes their diffs as git diffs whatever dialect they had."""
    with series_session(series_path, op="refresh") as session:
        room = session.cleanroom(workdir)
        if not same_pin(room, session.series):
            raise PatchctlError(
                f"clean room {room.path} was made from another upstream than "
                f"{session.series.upstream.describe()}",
                hint="run `patchctl cleanroom apply` first (it re-creates the clean room)",
            )
        updated, results = refresh_patches(
            session.series, room, ids, progress, git_style=git_style
        )
        reports = tuple(report for report, _data in results)
        if dry_run:
            return RefreshResult(updated, reports, (), dry_run=True)
        # series.yaml first: a run killed before the patch files are written leaves patches
        # that still drift, and the next refresh regenerates the same bytes.
        changed = session.save(updated, docs=False)
        for report, data in results:
            if report.refreshed and session.write_patch(report.file, data):
                changed.append(report.file)
        changed += session.write_docs()
    return RefreshResult(updated, reports, tuple(changed))
