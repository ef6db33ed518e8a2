"""Byte-for-byte round-trip verification of a series, in a scratch repository.

For each patch checked (all of them, or the ids asked for):
  chain    the recorded pre_tree is the recorded post_tree of the patch before it (the pinned
           upstream tree for the first), so that checking every patch proves the whole stack;
  forward  `apply --cached` on the pre-tree gives exactly the recorded post_tree;
  reverse  `apply -R --cached` on the post-tree gives exactly the pre-tree;
  reexport capturing pre -> post again reproduces the committed bytes (an imported patch's
           original bytes are kept verbatim, so for it this step is the byte check of forward
           and reverse only);
  markers  each declared marker is absent from the pre-tree and present in the post-tree;
  bases    each base blob the patch's `index` lines name is the file at that path in the
           pre-tree, the series rebuilt from its upstream (series/baseblobs.py): the base a
           three-way merge of the patch (a rebase) starts from. One that is not (an imported
           patch made on other file versions) is a note, as an offset is, not a failure.
Tree ids are compared, so modes, symlinks and binaries count. The scratch repository borrows
objects through `objects/info/alternates` and owns its indexes: the user's clean room (index,
worktree, refs) is never touched. "The walk" below says what `verify ID` proves next to
`verify --all`, and what each costs.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from patchctl.cache import cache_dir
from patchctl.errors import DocsOutOfDate, NotFound, ResolutionInvalid, RoundTripFailed
from patchctl.fsio import write_atomic
from patchctl.gitlayer.git import Git
from patchctl.gitlayer.objects import scratch_repo
from patchctl.gitlayer.trees import TreeStore
from patchctl.progress import Progress, or_null
from patchctl.room.cleanroom import Cleanroom, open_cleanroom
from patchctl.series import baseblobs
from patchctl.series.docs import stale_docs
from patchctl.series.gitapply import Outcome, TreePatcher, drift_summary, patch_sha256
from patchctl.series.markers import (
    MarkerCheck,
    added_by,
    check_markers_batch,
    markers_in_tree,
    touched_paths,
)
from patchctl.series.model import Patch, Series, load_series, read_patch_file
from patchctl.series.patchfile import diff_tree_pairs, render_patch
from patchctl.series.resolutions import check_store
from patchctl.series.stack import Stack, compose, load_stack

STEPS = ("chain", "forward", "reverse", "reexport", "markers", "bases")


@dataclass(frozen=True)
class StepResult:
    """One check of one patch."""

    step: str
    ok: bool
    detail: str = ""
    note: str | None = None  # what passed but needs a look (hunks git placed at an offset)


@dataclass(frozen=True)
class PatchReport:
    """Every check of one patch."""

    id: str
    steps: tuple[StepResult, ...]

    @property
    def ok(self) -> bool:
        """True when every step passed."""
        return all(s.ok for s in self.steps)

    @property
    def notes(self) -> list[tuple[str, str]]:
        """(step, note) for the steps that passed with a note."""
        return [(s.step, s.note) for s in self.steps if s.note]

    def to_json(self) -> dict[str, object]:
        """Plain data for --json."""
        return {
            "id": self.id,
            "ok": self.ok,
            "steps": [
                {"step": s.step, "ok": s.ok, "detail": s.detail, "note": s.note}
                for s in self.steps
            ],
        }


@dataclass(frozen=True)
class VerifyReport:
    """The result of verifying some patches of a series."""

    series: str
    base_tree: str
    patches: tuple[PatchReport, ...] = field(default=())

    @property
    def ok(self) -> bool:
        """True when every patch passed every step."""
        return all(p.ok for p in self.patches)

    def failures(self) -> list[tuple[str, StepResult]]:
        """(patch id, failed step) pairs in stack order."""
        return [(p.id, s) for p in self.patches for s in p.steps if not s.ok]

    def to_json(self) -> dict[str, object]:
        """Plain data for --json."""
        return {
            "ok": self.ok,
            "series": self.series,
            "base_tree": self.base_tree,
            "patches": [p.to_json() for p in self.patches],
        }

    def raise_if_failed(self) -> None:
        """VerifyFailed (exit 12) naming the first failing patch, step and difference."""
        failures = self.failures()
        if not failures:
            return
        pid, step = failures[0]
        more = f" (and {len(failures) - 1} more failed checks)" if len(failures) > 1 else ""
        raise RoundTripFailed(
            f"verify failed: patch {pid}, step {step.step}: {step.detail}{more}",
            report=self,
            hint=_failure_hint(pid, [s for p, s in failures if p == pid]),
        )


CHANGED_BYTES = "imported bytes changed"


def _failure_hint(pid: str, failed: Sequence[StepResult]) -> str:
    """What to do about a patch's failed checks. Damaged bytes (a file that no longer hashes
    to its recorded sha256) are restored, never recorded: a capture or a docs run would make
    them the series' truth."""
    if any(step.detail.startswith(CHANGED_BYTES) for step in failed):
        return (
            f"the file of {pid} is not the one series.yaml records: restore it from version "
            "control (e.g. `git restore` the patch file); capture would record the damage"
        )
    return (
        f"if the file of {pid} changed by accident, restore it from version control (e.g. "
        f"`git restore`); if the clean room holds the change you meant, `patchctl capture {pid}`"
    )


# ----------------------------------------------------------------------------- scratch repo


def _drift_note(outcome: Outcome) -> str | None:
    """Hunks git placed at an offset (possible only for imported patches; not a failure)."""
    return drift_summary(outcome.drift())


def first_differing_path(git: Git, expected: str, actual: str) -> str:
    """The first path whose entry differs between two trees (both readable)."""
    if not (git.has_tree(expected) and git.has_tree(actual)):
        return f"tree {actual} instead of {expected}"
    names = git.changed_paths(expected, actual)
    first = names[0] if names else "(none)"
    return f"tree {actual} instead of {expected}; first differing path: {first}"


def first_differing_byte(expected: bytes, actual: bytes) -> str:
    """Where two byte strings first differ: offset, line and lengths."""
    limit = min(len(expected), len(actual))
    offset = next((i for i in range(limit) if expected[i] != actual[i]), limit)
    line = expected[:offset].count(b"\n") + 1
    return (
        f"first differing byte at offset {offset} (line {line}); "
        f"file has {len(expected)} bytes, re-export has {len(actual)}"
    )


# ----------------------------------------------------------------------------- the walk
#
# Each patch is checked on tree objects (patchapply.TreePatcher: a patch costs the paths it
# touches, not the size of the tree):
#   round trip  forward on the pre-tree, then reverse on the post-tree (reusing the small
#               index the forward apply left: the reverse names the same paths);
#   checks      re-export (one `diff-tree --stdin` for all patches) and markers (one
#               `cat-file --batch`), in a thread beside the round trips, plus one cached
#               whole-tree grep of the upstream for all markers.
# From recorded trees (the normal case: the clean room holds every recorded tree), each
# checked patch starts from its own recorded pre_tree, and the chain step compares that with
# the tree the patch before it made when that one was checked too (else its recorded
# post_tree; the upstream tree for the first). So
# `verify ID` costs the patches it checks, whatever their place in the stack, and proves
# each one's link to its predecessor's record and its own transform; `verify --all` proves
# every link and transform, which together are the series turning the upstream tree into the
# recorded trees. Without readable recorded trees, the forward applies walk the stack from
# the upstream tree instead (every patch up to the last one checked).


@dataclass(frozen=True)
class _Item:
    """A patch with the trees its reverse step and checks use (private)."""

    patch: Patch
    data: bytes
    pre: str | None
    post: str | None


@dataclass(frozen=True)
class _Trip:
    """The chain, forward and reverse steps of one patch, and its trees (private)."""

    item: _Item
    chain: StepResult
    forward: StepResult
    reverse: StepResult


def base_tree(series: Series, fallback: str | None = None) -> str:
    """The pristine upstream tree the series starts from (pin, clean-room base, first pre)."""
    if series.upstream.tree:
        return series.upstream.tree
    if fallback is not None:
        return fallback
    if series.patches and series.patches[0].pre_tree:
        return series.patches[0].pre_tree
    raise NotFound(
        f"{series.path}: no upstream.tree and no recorded pre_tree to start verifying from",
        hint="run patchctl cleanroom apply (records upstream.tree) or capture the first patch",
    )


def verify_series(
    series: Series,
    sources: Sequence[Path],
    ids: Sequence[str] | None = None,
    progress: Progress | None = None,
    base: str | None = None,
    *,
    start: str | None = None,
) -> VerifyReport:
    """Verify the patches `ids` (all when None) of `series`; objects come from `sources`.

    The chain starts at `start` when given (a series that extends another: the tree after the
    extended series' patches), else upstream.tree, else `base` (the clean room's), else the
    first pre_tree. Only the series' own patches are checked (verify_stack adds the others).
    """
    wanted = set(series.ids() if ids is None else ids)
    positions = sorted({series.index(pid) for pid in wanted})  # NotFound for an unknown id
    start = start or base_tree(series, base)
    markers = tuple(dict.fromkeys(m for p in series.patches for m in p.markers))
    prog = or_null(progress)
    prog.start("verify", 2 * len(positions))
    with (
        scratch_repo(sources) as git,
        ThreadPoolExecutor(max_workers=2) as pool,
        TreePatcher(git) as patcher,
    ):
        if not git.has_tree(start):
            raise NotFound(
                f"upstream tree {start} is not in {', '.join(map(str, sources))}",
                hint="materialize the clean room first: patchctl cleanroom apply",
            )
        upstream = pool.submit(upstream_markers, git, start, markers)
        if _recorded(git, series, positions):
            items = [_item(series, series.patches[i]) for i in positions]
            checks = pool.submit(_check_pass, git, series, items, prog)
            trips: list[_Trip] = []
            computed: dict[int, str | None] = {-1: start}
            for item, i in zip(items, positions, strict=True):
                link = computed.get(i - 1) or _link(series, i, start)
                trip, computed[i] = _from_record(git, patcher, series, item, link)
                trips.append(trip)
                prog.advance("verify")
        else:
            trips = _walk(git, patcher, series, positions, start, prog)
            checks = pool.submit(_check_pass, git, series, [t.item for t in trips], prog)
        earlier = _earlier(series, positions, trips) if markers else []
        reports = _assemble(trips, checks.result(), earlier, markers, upstream.result())
    prog.done("verify")
    return VerifyReport(series.name, start, tuple(reports))


def verify_stack(
    stack: Stack,
    sources: Sequence[Path],
    ids: Sequence[str] | None = None,
    progress: Progress | None = None,
    base: str | None = None,
) -> VerifyReport:
    """Verify the patches `ids` (all when None) of a series' stack (stack.py).

    A series that extends another: the extended series' patches are verified as that series
    (their recorded trees are of its upstream, the subtree at `extends.root`), and the own
    patches from the tree this series' upstream becomes with the extended series applied.
    """
    if stack.base is None:
        return verify_series(stack.series, sources, ids, progress, base)
    wanted = stack.ids() if ids is None else tuple(dict.fromkeys(ids))
    entries = [stack.entry(pid) for pid in wanted]  # NotFound for an unknown id
    inherited = [e.id for e in entries if e.inherited]
    own = [e.id for e in entries if not e.inherited]
    start = base_tree(stack.series, base)
    reports: list[PatchReport] = []
    if inherited:
        reports += verify_series(stack.base, sources, inherited, progress).patches
    if own:
        reports += _verify_own(stack, sources, own, progress, start)
    return VerifyReport(stack.series.name, start, tuple(reports))


def _verify_own(
    stack: Stack, sources: Sequence[Path], own: list[str], progress: Progress | None, start: str
) -> tuple[PatchReport, ...]:
    """The own patches of an extending series, walked from the composed tree (stack.compose),
    which is written into a scratch repository that the walk then reads as one more source."""
    with scratch_repo(sources) as git:
        if not git.has_tree(start):
            raise NotFound(
                f"upstream tree {start} is not in {', '.join(map(str, sources))}",
                hint="materialize the clean room first: patchctl cleanroom apply",
            )
        composed, why = compose(stack, git, start)
        if composed is None:
            return tuple(
                PatchReport(p, tuple(StepResult(s, False, why) for s in STEPS)) for p in own
            )
        report = verify_series(stack.series, [*sources, git.repo], own, progress, start=composed)
        return report.patches


def upstream_markers(git: Git, tree: str, markers: tuple[str, ...]) -> frozenset[str]:
    """The markers found anywhere in the upstream tree, cached by (tree, markers).

    A whole-tree grep of llama.cpp takes 0.6-2 s; a tree id names its content exactly, so
    the answer is stored under `<patchctl cache>/markers/` and reused.
    """
    if not markers:
        return frozenset()
    key = hashlib.sha256("\0".join((tree, *markers)).encode("utf-8")).hexdigest()
    path = cache_dir() / "markers" / f"{key}.json"
    try:
        return frozenset(json.loads(path.read_text(encoding="utf-8"))["found"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    found = markers_in_tree(git, tree, markers)
    with suppress(OSError):
        write_atomic(path, json.dumps({"tree": tree, "found": sorted(found)}).encode("utf-8"))
    return found


def _item(series: Series, patch: Patch) -> _Item:
    return _Item(patch, read_patch_file(series.patch_path(patch)), patch.pre_tree, patch.post_tree)


def _link(series: Series, position: int, start: str) -> str | None:
    """What the chain step compares a patch's pre_tree with when the patch before it was not
    checked (or did not apply): that patch's recorded post_tree."""
    return start if position == 0 else series.patches[position - 1].post_tree


def _recorded(git: Git, series: Series, positions: Sequence[int]) -> bool:
    """True when every checked patch has readable recorded trees and a recorded link."""
    patches = [series.patches[i] for i in positions]
    links = [series.patches[i - 1].post_tree for i in positions if i > 0]
    if any(link is None for link in links):
        return False
    return _all_readable(git, [t for p in patches for t in (p.pre_tree, p.post_tree)])


def _all_readable(git: Git, oids: Sequence[str | None]) -> bool:
    """True when every oid is set and names a tree the scratch repository can read."""
    if not oids or any(o is None for o in oids):
        return False
    return git.all_trees([o for o in oids if o is not None])


def _from_record(
    git: Git, patcher: TreePatcher, series: Series, item: _Item, link: str | None
) -> tuple[_Trip, str | None]:
    """One patch checked from its recorded trees (both readable); and the tree it made."""
    assert item.pre is not None and item.post is not None
    chain = _chain(git, item.patch, link)
    post, forward = _forward(git, patcher, series, item, item.pre)
    reverse = _reverse(git, patcher, series, item, back_from=post)
    return _Trip(item, chain, forward, reverse), post


def _walk(
    git: Git,
    patcher: TreePatcher,
    series: Series,
    positions: Sequence[int],
    start: str,
    prog: Progress,
) -> list[_Trip]:
    """The stack walked from `start` up to the last checked patch (recorded trees missing)."""
    wanted = set(positions)
    current: str | None = start
    trips = []
    for i, patch in enumerate(series.patches[: max(positions, default=-1) + 1]):
        item = _item(series, patch)
        chain = _chain(git, patch, current)
        post, forward = None, StepResult("forward", False, "no tree to apply to")
        if current is not None:
            post, forward = _forward(git, patcher, series, item, current)
        if post is None:
            post = _readable(git, patch.post_tree)  # resume from the record when it can be read
        if i in wanted:
            found = _Item(patch, item.data, current or _readable(git, patch.pre_tree), post)
            reverse = _reverse(git, patcher, series, found, back_from=post)
            trips.append(_Trip(found, chain, forward, reverse))
            prog.advance("verify")
        current = post
    return trips


def _chain(git: Git, patch: Patch, pre: str | None) -> StepResult:
    if patch.pre_tree is None or patch.post_tree is None:
        return StepResult("chain", False, "no pre_tree/post_tree recorded: capture or import it")
    if pre is None:
        return StepResult("chain", False, "an earlier patch failed: no tree to start from")
    if patch.pre_tree != pre:
        return StepResult("chain", False, first_differing_path(git, patch.pre_tree, pre))
    return StepResult("chain", True, pre)


def _forward(
    git: Git, patcher: TreePatcher, series: Series, item: _Item, pre: str
) -> tuple[str | None, StepResult]:
    """Apply on `pre`: the resulting tree (None when it does not apply) and the step."""
    result = patcher.apply(pre, item.data, series.root)
    if not result.outcome.ok or result.tree is None:
        why = f"does not apply: {result.outcome.first_error()}"
        return None, StepResult("forward", False, why)
    post, expected = result.tree, item.patch.post_tree
    if expected is not None and post != expected:
        return post, StepResult("forward", False, first_differing_path(git, expected, post))
    note = _drift_note(result.outcome)
    detail = post if note is None else f"{post} (note: {note})"
    return post, StepResult("forward", True, detail, note)


def _reverse(
    git: Git, patcher: TreePatcher, series: Series, item: _Item, back_from: str | None
) -> StepResult:
    """Reverse-apply on the post-tree (the record when readable, else `back_from`)."""
    post = item.post if item.post is not None else back_from
    if item.pre is None or post is None:
        return StepResult("reverse", False, "no readable pre/post tree")
    result = patcher.apply(post, item.data, series.root, reverse=True)
    if not result.outcome.ok or result.tree is None:
        why = f"does not reverse-apply: {result.outcome.first_error()}"
        return StepResult("reverse", False, why)
    if result.tree != item.pre:
        return StepResult("reverse", False, first_differing_path(git, item.pre, result.tree))
    return StepResult("reverse", True, result.tree)


def _readable(git: Git, oid: str | None) -> str | None:
    return oid if git.has_tree(oid) else None


def _earlier(series: Series, positions: Sequence[int], trips: Sequence[_Trip]) -> list[_Item]:
    """Every patch up to the last checked one, for the markers an earlier patch adds."""
    have = {t.item.patch.id: t.item for t in trips}
    patches = series.patches[: max(positions, default=-1) + 1]
    return [have.get(p.id) or _item(series, p) for p in patches]


def _check_pass(
    git: Git, series: Series, items: Sequence[_Item], prog: Progress
) -> dict[str, list[StepResult]]:
    """Re-export and markers for every item: one diff-tree and one cat-file for all."""
    ready = [i for i in items if i.pre is not None and i.post is not None]
    exported = [i for i in ready if not i.patch.imported]
    pairs = [(str(i.pre), str(i.post)) for i in exported]
    exported_diffs = diff_tree_pairs(git, pairs, series.root)
    diffs = dict(zip([i.patch.id for i in exported], exported_diffs, strict=True))
    marked = [i for i in ready if i.patch.markers]
    jobs = [(str(i.pre), str(i.post), i.patch.markers, touched_paths(i.data)) for i in marked]
    checks = dict(zip([i.patch.id for i in marked], check_markers_batch(git, jobs), strict=True))
    results = {}
    with TreeStore(git) as store:
        for item in items:
            pid = item.patch.id
            if item in ready:
                results[pid] = [
                    _reexport(item, diffs.get(pid)),
                    _markers(item, checks.get(pid, ())),
                    _bases(store, series, item),
                ]
            else:
                why = "no readable pre/post tree (earlier step failed)"
                results[pid] = [StepResult(s, False, why) for s in ("reexport", "markers", "bases")]
            prog.advance("verify")
    return results


def _bases(store: TreeStore, series: Series, item: _Item) -> StepResult:
    """The base blobs the patch's index lines name, reproduced by the tree before it (the
    series rebuilt from its upstream): what a three-way merge of the patch starts from. One
    that is not (an imported patch made on other file versions, as offsets are) is noted,
    not failed: the rebase then merges from the version the patch was applied to."""
    found = baseblobs.check(store, str(item.pre), item.data, series.root)
    if not found.named:
        return StepResult("bases", True, "no index lines: the base is the rebuilt tree")
    detail = f"{found.named - len(found.unreproduced)} of {found.named} base blob(s) reproduced"
    notes = []
    if found.unreproduced:
        shown = "; ".join(u.describe() for u in found.unreproduced[:3])
        more = len(found.unreproduced) - 3
        notes.append(f"not reproduced: {shown}" + (f" (and {more} more)" if more > 0 else ""))
    if found.abbreviated:
        notes.append(f"{found.abbreviated} abbreviated id(s) checked by prefix only")
    note = "; ".join(notes) if notes else None
    return StepResult("bases", True, detail if note is None else f"{detail} (note: {note})", note)


def _reexport(item: _Item, diff: bytes | None) -> StepResult:
    if item.patch.imported or diff is None:
        return _kept_bytes(item)
    again = render_patch(item.patch, diff)
    if again != item.data:
        return StepResult("reexport", False, first_differing_byte(item.data, again))
    return StepResult("reexport", True, f"{len(item.data)} bytes identical")


def _kept_bytes(item: _Item) -> StepResult:
    """An imported patch re-exports as its own bytes: they must still be the recorded ones."""
    recorded = item.patch.sha256
    if recorded is None:
        return StepResult("reexport", True, "imported: original bytes kept verbatim")
    actual = patch_sha256(item.data)
    if actual != recorded:
        return StepResult(
            "reexport", False, f"{CHANGED_BYTES}: sha256 {actual} != recorded {recorded}"
        )
    return StepResult("reexport", True, "imported: original bytes kept verbatim (sha256 matches)")


def _markers(item: _Item, checks: Sequence[MarkerCheck]) -> StepResult:
    """Markers in the files the patch touches: absent before, present after."""
    if not item.patch.markers:
        return StepResult("markers", True, "no markers declared")
    problems = [
        f"{c.marker!r} {'already in pre-tree' if c.in_pre else 'missing from post-tree'}"
        for c in checks
        if not c.ok
    ]
    if problems:
        return StepResult("markers", False, "; ".join(problems))
    return StepResult("markers", True, f"{len(item.patch.markers)} marker(s) ok")


def _assemble(
    trips: Sequence[_Trip],
    checks: dict[str, list[StepResult]],
    earlier: Sequence[_Item],
    markers: tuple[str, ...],
    upstream: frozenset[str],
) -> list[PatchReport]:
    """Per-patch reports; markers also fail when upstream or an earlier patch has them."""
    added: dict[str, dict[str, list[str]]] = {}  # checked id -> marker -> earlier patches
    running: dict[str, list[str]] = {}
    for item in earlier:
        added[item.patch.id] = {m: list(ids) for m, ids in running.items()}
        for m in added_by(item.data, markers):
            running.setdefault(m, []).append(item.patch.id)
    reports = []
    for trip in trips:
        patch = trip.item.patch
        reexport, marker, bases = checks[patch.id]
        extra = [f"{m!r} already in the upstream tree" for m in patch.markers if m in upstream]
        extra += [
            f"{m!r} also added by earlier patch {pid}"
            for m in patch.markers
            for pid in added.get(patch.id, {}).get(m, ())
        ]
        if extra:
            detail = "; ".join(([marker.detail] if not marker.ok else []) + extra)
            marker = StepResult("markers", False, detail)
        steps = (trip.chain, trip.forward, trip.reverse, reexport, marker, bases)
        reports.append(PatchReport(patch.id, steps))
    return reports


# ----------------------------------------------------------------------------- the command


@dataclass(frozen=True)
class VerifyOutcome:
    """What `patchctl verify` found: the round-trip report and the stale generated docs."""

    report: VerifyReport
    stale_docs: tuple[Path, ...]
    resolutions: tuple[str, ...] = ()  # the problems of the recorded resolutions, one a line

    def raise_if_failed(self) -> None:
        """VerifyFailed (exit 12) for a failed check or a bad recorded resolution, else
        StaleDocs (exit 16) for stale docs; each carries the whole report, so `--json` prints
        one document."""
        self.report.raise_if_failed()
        if self.resolutions:
            more = f" (and {len(self.resolutions) - 1} more)" if len(self.resolutions) > 1 else ""
            error = ResolutionInvalid(
                f"recorded resolution: {self.resolutions[0]}{more}",
                hint="each line names the file and its fix; `patchctl resolutions list` shows"
                " the records",
            )
            raise error.attach("report", self)
        if self.stale_docs:
            raise DocsOutOfDate(list(self.stale_docs), {"report": self.report.to_json()})

    def to_json(self) -> dict[str, object]:
        """Plain data for --json."""
        return {
            **self.report.to_json(),
            "stale_docs": [str(p) for p in self.stale_docs],
            "resolutions": list(self.resolutions),
        }


def verify(
    series_path: Path,
    ids: Sequence[str] | None = None,
    workdir: Path | None = None,
    objects: Sequence[Path] = (),
    progress: Progress | None = None,
) -> VerifyOutcome:
    """`patchctl verify`: the patches `ids` (all when None), objects from the clean room (it
    may be missing when `objects` are given) and `objects`; the docs checked alongside."""
    series = load_series(series_path)
    stack = load_stack(series)
    room = _cleanroom(series, workdir, required=not objects)
    sources = [*([] if room is None else [room.path]), *objects]
    base = None if room is None else room.base_tree()
    with ThreadPoolExecutor(max_workers=1) as pool:
        docs = pool.submit(stale_docs, series)  # pure Python: overlaps the git processes
        report = verify_stack(stack, sources, ids, progress, base)
        stale = docs.result()
    return VerifyOutcome(report, tuple(stale), tuple(store_problems(series)))


def store_problems(series: Series) -> list[str]:
    """The problems of the series' recorded resolutions (series/resolutions.py): each must
    read, hash, and belong to a patch of the series and a path that patch changes."""
    touched = {}
    for patch in series.patches:
        paths = touched_paths(read_patch_file(series.patch_path(patch)))
        touched[patch.id] = [posixpath.normpath(posixpath.join(series.root, p)) for p in paths]
    return check_store(series.dir, touched)


def _cleanroom(series: Series, workdir: Path | None, *, required: bool) -> Cleanroom | None:
    try:
        return open_cleanroom(series.dir, workdir)
    except NotFound:
        if required:
            raise
        return None
