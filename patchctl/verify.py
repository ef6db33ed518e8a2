"""Byte-for-byte round-trip verification of a series, in a scratch repository.

For each patch, walking the stack from the pinned upstream tree:
  chain    the recorded pre_tree is the tree the patches before it produce;
  forward  `apply --cached` on the pre-tree gives exactly the recorded post_tree;
  reverse  `apply -R --cached` on the post-tree gives exactly the pre-tree;
  reexport capturing pre -> post again reproduces the committed bytes (an imported patch's
           original bytes are kept verbatim, so for it this step is the byte check of forward
           and reverse only);
  markers  each declared marker is absent from the pre-tree and present in the post-tree.
Tree ids are compared, so modes, symlinks and binaries count. The scratch repository borrows
objects through `objects/info/alternates` and owns its indexes: the user's clean room (index,
worktree, refs) is never touched.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from patchctl.cache import cache_dir
from patchctl.cleanroom import Cleanroom, open_cleanroom
from patchctl.docs import stale_docs
from patchctl.errors import DocsOutOfDate, NotFound, RoundTripFailed
from patchctl.fsio import write_atomic
from patchctl.git import Git, Index, scratch_repo
from patchctl.markers import (
    MarkerCheck,
    added_by,
    check_markers_batch,
    markers_in_tree,
    touched_paths,
)
from patchctl.patchapply import Outcome, apply_to_index, drift_summary, patch_sha256
from patchctl.patchfile import diff_tree_pairs, render_patch
from patchctl.progress import Progress, or_null
from patchctl.series import Patch, Series, load_series
from patchctl.stack import Stack, compose, load_stack

STEPS = ("chain", "forward", "reverse", "reexport", "markers")


@dataclass(frozen=True)
class StepResult:
    """One check of one patch."""

    step: str
    ok: bool
    detail: str = ""


@dataclass(frozen=True)
class PatchReport:
    """Every check of one patch."""

    id: str
    steps: tuple[StepResult, ...]

    @property
    def ok(self) -> bool:
        """True when every step passed."""
        return all(s.ok for s in self.steps)

    def to_json(self) -> dict[str, object]:
        """Plain data for --json."""
        return {
            "id": self.id,
            "ok": self.ok,
            "steps": [{"step": s.step, "ok": s.ok, "detail": s.detail} for s in self.steps],
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
            hint="recapture the patch in the clean room (patchctl capture ID) or fix its file",
        )


# ----------------------------------------------------------------------------- scratch repo


def _index(git: Git, name: str) -> Index:
    """An index file of its own inside the scratch repository (one per pass)."""
    return Index(git, git.repo / f"{name}.index")


def _drift_note(outcome: Outcome) -> str:
    """Hunks git placed at an offset (possible only for imported patches; not a failure)."""
    summary = drift_summary(outcome.drift())
    return "" if summary is None else f" (note: {summary})"


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
# Three passes, four git processes per patch plus a few per series (a 78-patch series on
# llama.cpp must verify within 3x `git am`; docs/benchmarks/verify-78.json):
#   forward  one index walks base -> patch 1 -> ... (apply + write-tree per patch);
#   reverse  one index walks back from the top (apply -R + write-tree per patch);
#   checks   re-export (one `diff-tree --stdin` for all patches) and markers (the touched
#            files of every pre/post tree read by one `cat-file --batch`), plus one cached
#            whole-tree grep of the upstream for all markers.
# When every recorded pre/post tree is readable (the normal case: the clean room holds them),
# reverse and checks run on the recorded trees concurrently with the forward pass (each pass
# has its own index file; git's object writes are safe to run in parallel). Otherwise they
# run after it, on the trees the forward pass computed.


@dataclass(frozen=True)
class _Forward:
    """The forward result of one patch (private)."""

    patch: Patch
    data: bytes
    pre: str | None
    post: str | None
    chain: StepResult
    forward: StepResult


@dataclass(frozen=True)
class _Item:
    """A patch with the trees the reverse pass and the checks use (private)."""

    patch: Patch
    data: bytes
    pre: str | None
    post: str | None


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

    The walk starts at `start` when given (a series that extends another: the tree after the
    extended series' patches), else upstream.tree, else `base` (the clean room's), else the
    first pre_tree. Only the series' own patches are walked (verify_stack adds the others).
    """
    wanted = set(series.ids() if ids is None else ids)
    for pid in wanted:
        series.index(pid)  # NotFound for an unknown id
    last = max((series.index(p) for p in wanted), default=-1)
    start = start or base_tree(series, base)
    patches = series.patches[: last + 1]
    datas = [series.patch_path(p).read_bytes() for p in patches]
    prog = or_null(progress)
    prog.start("verify", 3 * len(patches))
    with scratch_repo(sources) as git, ThreadPoolExecutor(max_workers=3) as pool:
        if not git.has_tree(start):
            raise NotFound(
                f"upstream tree {start} is not in {', '.join(map(str, sources))}",
                hint="materialize the clean room first: patchctl cleanroom apply",
            )
        markers = tuple(dict.fromkeys(m for p in series.patches for m in p.markers))
        upstream = pool.submit(upstream_markers, git, start, markers)
        recorded = _all_readable(git, [t for p in patches for t in (p.pre_tree, p.post_tree)])
        later: tuple[Future[dict[str, StepResult]], Future[dict[str, list[StepResult]]]] | None
        later = None
        if recorded:
            items = [
                _Item(p, d, p.pre_tree, p.post_tree) for p, d in zip(patches, datas, strict=True)
            ]
            later = _submit(pool, git, series, items, wanted, prog)
        forward = _forward_pass(git, series, patches, datas, start, prog)
        if later is None:
            items = [_Item(f.patch, f.data, *_trees(git, f)) for f in forward]
            later = _submit(pool, git, series, items, wanted, prog)
        reverse, checks = later[0].result(), later[1].result()
        reports = _assemble(forward, reverse, checks, wanted, markers, upstream.result())
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


def _submit(
    pool: ThreadPoolExecutor,
    git: Git,
    series: Series,
    items: list[_Item],
    wanted: set[str],
    prog: Progress,
) -> tuple[Future[dict[str, StepResult]], Future[dict[str, list[StepResult]]]]:
    chosen = [i for i in items if i.patch.id in wanted]
    return (
        pool.submit(_reverse_pass, git, series, chosen, prog),
        pool.submit(_check_pass, git, series, chosen, prog),
    )


def _all_readable(git: Git, oids: Sequence[str | None]) -> bool:
    """True when every oid is set and names a tree the scratch repository can read."""
    if not oids or any(o is None for o in oids):
        return False
    query = "".join(f"{o}^{{tree}}\n" for o in oids).encode("ascii")
    out = git.run("cat-file", "--batch-check", stdin=query)
    return b" missing" not in out and out.count(b" tree ") == len(oids)


def _forward_pass(
    git: Git,
    series: Series,
    patches: Sequence[Patch],
    datas: Sequence[bytes],
    start: str,
    prog: Progress,
) -> list[_Forward]:
    index = _index(git, "forward")
    index.read_tree(start)
    current: str | None = start
    results = []
    for patch, data in zip(patches, datas, strict=True):
        chain = _chain(git, patch, current)
        post, forward = _forward(git, index, series, patch, data, current)
        results.append(_Forward(patch, data, current, post, chain, forward))
        current = post
        prog.advance("verify")
    return results


def _chain(git: Git, patch: Patch, pre: str | None) -> StepResult:
    if patch.pre_tree is None or patch.post_tree is None:
        return StepResult("chain", False, "no pre_tree/post_tree recorded: capture or import it")
    if pre is None:
        return StepResult("chain", False, "an earlier patch failed: no tree to start from")
    if patch.pre_tree != pre:
        return StepResult("chain", False, first_differing_path(git, patch.pre_tree, pre))
    return StepResult("chain", True, pre)


def _forward(
    git: Git, index: Index, series: Series, patch: Patch, data: bytes, pre: str | None
) -> tuple[str | None, StepResult]:
    if pre is None:
        return _resume(git, index, patch), StepResult("forward", False, "no tree to apply to")
    outcome = apply_to_index(index, data, series.root)
    if not outcome.ok:
        why = f"does not apply: {outcome.first_error()}"
        return _resume(git, index, patch), StepResult("forward", False, why)
    post = index.write_tree()
    if patch.post_tree is not None and post != patch.post_tree:
        return post, StepResult("forward", False, first_differing_path(git, patch.post_tree, post))
    return post, StepResult("forward", True, post + _drift_note(outcome))


def _resume(git: Git, index: Index, patch: Patch) -> str | None:
    """After a failed forward step, continue from the recorded post-tree if readable."""
    post = _readable(git, patch.post_tree)
    if post is not None:
        index.read_tree(post)
    return post


def _readable(git: Git, oid: str | None) -> str | None:
    return oid if git.has_tree(oid) else None


def _trees(git: Git, result: _Forward) -> tuple[str | None, str | None]:
    """The actual pre/post trees of a patch, else its recorded ones when readable."""
    pre = result.pre if result.pre is not None else _readable(git, result.patch.pre_tree)
    post = result.post if result.post is not None else _readable(git, result.patch.post_tree)
    return pre, post


def _reverse_pass(
    git: Git, series: Series, items: Sequence[_Item], prog: Progress
) -> dict[str, StepResult]:
    index = _index(git, "reverse")
    state: str | None = None  # the tree the reverse index holds
    steps = {}
    for item in reversed(items):
        if item.pre is None or item.post is None:
            steps[item.patch.id] = StepResult("reverse", False, "no readable pre/post tree")
            continue
        if state != item.post:
            index.read_tree(item.post)
        steps[item.patch.id], state = _reverse(git, index, series, item.data, item.pre)
        prog.advance("verify")
    return steps


def _reverse(
    git: Git, index: Index, series: Series, data: bytes, pre: str
) -> tuple[StepResult, str | None]:
    outcome = apply_to_index(index, data, series.root, reverse=True)
    if not outcome.ok:
        why = f"does not reverse-apply: {outcome.first_error()}"
        return StepResult("reverse", False, why), None
    back = index.write_tree()
    if back != pre:
        return StepResult("reverse", False, first_differing_path(git, pre, back)), back
    return StepResult("reverse", True, back), back


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
    for item in items:
        pid = item.patch.id
        if item in ready:
            results[pid] = [_reexport(item, diffs.get(pid)), _markers(item, checks.get(pid, ()))]
        else:
            why = "no readable pre/post tree (earlier step failed)"
            results[pid] = [StepResult(s, False, why) for s in ("reexport", "markers")]
        prog.advance("verify")
    return results


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
            "reexport", False, f"imported bytes changed: sha256 {actual} != recorded {recorded}"
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
    forward: Sequence[_Forward],
    reverse: dict[str, StepResult],
    checks: dict[str, list[StepResult]],
    wanted: set[str],
    markers: tuple[str, ...],
    upstream: frozenset[str],
) -> list[PatchReport]:
    """Per-patch reports; markers also fail when upstream or an earlier patch has them."""
    added: dict[str, list[str]] = {}
    reports = []
    for result in forward:
        patch = result.patch
        if patch.id in wanted:
            reexport, marker = checks[patch.id]
            extra = [f"{m!r} already in the upstream tree" for m in patch.markers if m in upstream]
            extra += [
                f"{m!r} also added by earlier patch {pid}"
                for m in patch.markers
                for pid in added.get(m, ())
            ]
            if extra:
                detail = "; ".join(([marker.detail] if not marker.ok else []) + extra)
                marker = StepResult("markers", False, detail)
            steps = (result.chain, result.forward, reverse[patch.id], reexport, marker)
            reports.append(PatchReport(patch.id, steps))
        for m in added_by(result.data, markers):
            added.setdefault(m, []).append(patch.id)
    return reports


# ----------------------------------------------------------------------------- the command


@dataclass(frozen=True)
class VerifyOutcome:
    """What `patchctl verify` found: the round-trip report and the stale generated docs."""

    report: VerifyReport
    stale_docs: tuple[Path, ...]

    def raise_if_failed(self) -> None:
        """VerifyFailed (exit 12) for a failed check, else StaleDocs (exit 16) for stale docs;
        both carry the whole report, so `--json` prints one document."""
        self.report.raise_if_failed()
        if self.stale_docs:
            raise DocsOutOfDate(list(self.stale_docs), {"report": self.report.to_json()})

    def to_json(self) -> dict[str, object]:
        """Plain data for --json."""
        return {**self.report.to_json(), "stale_docs": [str(p) for p in self.stale_docs]}


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
    return VerifyOutcome(report, tuple(stale))


def _cleanroom(series: Series, workdir: Path | None, *, required: bool) -> Cleanroom | None:
    try:
        return open_cleanroom(series.dir, workdir)
    except NotFound:
        if required:
            raise
        return None
