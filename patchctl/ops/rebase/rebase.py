"""`patchctl rebase --onto UPSTREAM`: move a series to another upstream, one patch at a time.

How (in the series' clean room, under the series and clean-room locks for every run):
1. The new upstream is pinned (pinning.py: sha256, full commit) and materialized; its tree
   becomes a new base commit in the clean room's repository. The old series is replayed on
   the old base (series.gitapply.replay_tree) into one commit per patch, so every patch has an old
   "before" and "after" tree whatever its format.
2. Each patch, in order, onto the new base plus the patches rebased before it: if its bytes
   apply exactly, that is its result; otherwise the three-way merge of its old commit onto
   the new tip (git's ort merge, as a cherry-pick does it: `Git.merge_trees`). Its new bytes
   are regenerated from the trees around it (series.parts.regenerated: an imported patch keeps
   its header and trailer; an imported patch that applies exactly keeps every byte).
3. At the first conflict, or a patch whose changes the new upstream already has, it stops:
   the clean room's work tree gets the merged files with conflict markers (`diff3` style:
   the old base's lines too), HEAD the tree before the patch, and its index that tree as a
   git conflict state (stop.py: unmerged stages for the conflicted files, the patch's new
   files intent-to-add, so `git diff` there shows the patch as it would be); the report
   names the patch, the conflicted files, the patch's hunks that no longer apply (and those
   git placed on its own) and the marker lines. The user edits the
   work tree, then `--continue` captures the result as the patch (header kept), `--skip`
   drops the patch from the series (its file is kept, moved to
   `skipped/<old>-<new>/` in the series directory), `--abort` puts everything back.
4. When every patch is rebased, the series is switched in one go: the new patch bytes,
   series.yaml (new pin with its tree, new pre/post trees, new sha256 of imported patches,
   dropped patches removed), the generated docs, and `rebase-<old>-<new>.range-diff` in the
   series directory (`git range-diff` of the old and the new patch commits), which is also
   printed. The clean room ends on the new base with the rebased patches applied.

Until step 4 nothing in the series directory is written: new bytes are staged under the
clean room's .git (room/rebasestate.py), whose journal records each step atomically (the
patches moved, every half second while they move), so a rebase killed at any point is resumed
by `--continue` (from its last record) or undone by `--abort`.
"""

from __future__ import annotations

import itertools
import re
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from patchctl.errors import (
    DirtyTree,
    GitFailed,
    NotFound,
    NothingToCapture,
    PatchctlError,
    SeriesChanged,
)
from patchctl.gitlayer.git import Git, Merged
from patchctl.gitlayer.index import Index, temp_index
from patchctl.gitlayer.objects import scratch_repo
from patchctl.gitlayer.pipes import BlobWriter, CommitWriter, ObjectReader, TreeDiffer
from patchctl.gitlayer.trees import Entry, Found, TreeStore
from patchctl.ops.rebase import replay as resolutions
from patchctl.ops.rebase import report as rebase_report
from patchctl.ops.rebase import stop as rebase_stop
from patchctl.ops.rebase.premerge import Ahead, Premerger
from patchctl.ops.rebase.upstreamed import MERGED, NEEDED, Upstreamed, detect, history_between
from patchctl.ops.rebase.vanished import PatchApi, missing_api
from patchctl.progress import Progress, or_null
from patchctl.room import rebasestate
from patchctl.room.cleanroom import (
    BASE_REF,
    BRANCH,
    Backup,
    Cleanroom,
    create_cleanroom,
    is_cleanroom,
    load_cleanroom,
    marker_path,
    repin_marker,
    same_pin,
)
from patchctl.room.rebasestate import Done, Journal, Stop
from patchctl.room.snapshot import outside_root, worktree_snapshot
from patchctl.series import baseblobs
from patchctl.series.exactfit import applied as applied_in_memory
from patchctl.series.exactfit import same_hunks
from patchctl.series.gitapply import (
    TreePatcher,
    apply_to_index,
    commit_message,
    failing_hunks,
    patch_sha256,
    replay_tree,
)
from patchctl.series.misfit import misfits
from patchctl.series.model import (
    Patch,
    Series,
    Upstream,
    load_series,
    read_patch_file,
    series_to_dict,
)
from patchctl.series.parts import regenerated
from patchctl.series.patchfile import diff_tree_pairs
from patchctl.txn.session import SeriesSession, series_session
from patchctl.upstream.materialize import materialize, tree_from_cache
from patchctl.upstream.pinning import Where, parse_upstream, pin

REFS = "refs/patchctl/rebase/"
MARKER_COPY = ".cleanroom-marker.json"  # the marker's copy under old/
CONFLICT_START = re.compile(rb"^<<<<<<< ", re.MULTILINE)
# Any conflict-marker line, as git itself detects one: seven `<`, `|`, `=` or `>` at the start
# of a line, then whitespace or the end of the line (a half-resolved diff3 block leaves a
# lone `=======` or `||||||| base` behind).
CONFLICT_LINES = re.compile(rb"^(?:<{7}|\|{7}|={7}|>{7})(?=[ \t\r\n\v\f]|\Z)", re.MULTILINE)


@dataclass(frozen=True)
class RebaseReport:
    """Where a rebase stands after one run: done, stopped (for the user) or aborted."""

    state: str  # "done" | "stopped" | "aborted"
    series: Path
    cleanroom: Path
    old: str  # the old upstream, described
    new: str  # the new upstream, described
    patches: tuple[Done, ...] = ()
    stop: Stop | None = None
    range_diff: Path | None = None
    range_diff_text: str = ""
    changed: tuple[Path, ...] = ()
    backup: Backup | None = None
    skipped: tuple[Path, ...] = ()  # where the files of the patches --skip dropped were kept
    upstreamed: tuple[Upstreamed, ...] = ()  # patches the new upstream has, wholly or partly
    bases: tuple[dict[str, Any], ...] = ()  # named base blobs the old trees do not reproduce
    api: tuple[PatchApi, ...] | None = None  # identifiers the new upstream lacks (vanished.py)

    def to_json(self) -> dict[str, object]:
        """Plain data for --json."""
        stop = self.stop
        return {
            "ok": self.state != "stopped",
            "state": self.state,
            "series": str(self.series),
            "cleanroom": str(self.cleanroom),
            "old": self.old,
            "new": self.new,
            "patches": [
                {
                    "id": d.id,
                    "how": d.how,
                    "commit": d.commit,
                    "tree": d.tree,
                    "sha256": d.sha256,
                    "seconds": d.seconds,
                    "replayed": list(d.replayed),
                    "recorded": list(d.recorded),
                }
                for d in self.patches
            ],
            "stop": None if stop is None else _stop_json(stop),
            "range_diff": None if self.range_diff is None else str(self.range_diff),
            "range_diff_summary": summary_lines(self.range_diff_text),
            "changed": [str(p) for p in self.changed],
            "backup": None if self.backup is None else self.backup.ref,
            "skipped": [str(p) for p in self.skipped],
            "upstreamed": [u.to_json() for u in self.upstreamed],
            "bases_unreproduced": [dict(b) for b in self.bases],
            "report": rebase_report.of_rebase(self).to_json(),  # per patch (report.py)
        }


def _stop_json(stop: Stop) -> dict[str, object]:
    return {
        "patch": stop.id,
        "reason": stop.reason,
        "files": list(stop.files),
        "hunks": [{"file": f, "hunk": h} for f, h in stop.hunks],
        "markers": [{"file": f, "line": n} for f, n in stop.markers],
        "messages": list(stop.messages),
        "replayed": list(stop.replayed),
    }


def summary_lines(range_diff: str) -> list[str]:
    """The pairing lines of a range-diff (`1:  abc = 1:  def <subject>`), without the diffs."""
    return [line for line in range_diff.splitlines() if re.match(r"^\s*(\d+|-):\s", line)]


# ----------------------------------------------------------------------------- the commands


def rebase(
    series_path: Path,
    onto: str,
    *,
    commit: str | None = None,
    subdir: str | None = None,
    workdir: Path | None = None,
    progress: Progress | None = None,
    drop_merged: bool = False,
    replay: bool = True,
) -> RebaseReport:
    """`patchctl rebase --onto UPSTREAM`: start a rebase and run it until done or stopped
    (`drop_merged`: a patch the new upstream already has is dropped, and reported so;
    `replay`: conflicts with a recorded resolution are resolved by it)."""
    with series_session(series_path, op="rebase --onto") as session:
        path = session.lock_cleanroom(workdir, rebasing=True)
        if rebasestate.in_progress(path):
            raise PatchctlError(
                f"a rebase is already in progress in {path}",
                hint="`patchctl rebase --continue` after resolving, or `patchctl rebase --abort`",
            )
        series = session.series
        if replay:  # a record that does not read is refused before anything is written
            resolutions.check_records(series.dir, series.ids())
        room = _old_cleanroom(series, path, progress)
        where = Where(series_dir=series.dir, cwd=Path.cwd())
        wanted = parse_upstream(onto, where, commit=commit, subdir=subdir, current=series.upstream)
        pinned = pin(wanted, series.dir, progress)
        base, tree, dropped = new_base(room, series, pinned, progress)
        pinned = replace(pinned, tree=tree, key_order=series.upstream.key_order)
        if _identity(pinned) == _identity(series.upstream) and tree == room.base_tree():
            raise PatchctlError(
                f"the series is already on {pinned.describe()} (tree {tree})",
                hint="name another upstream release or commit",
            )
        journal = replace(_start(session, room, pinned, base, dropped), replay=replay)
        journal = _history_evidence(room, session.series, pinned, journal, drop_merged)
        journal = _advance(room, _old_series(room, session), journal, progress)
        return _conclude(session, room, journal, progress)


def rebase_continue(
    series_path: Path, workdir: Path | None = None, progress: Progress | None = None
) -> RebaseReport:
    """`patchctl rebase --continue`: take the user's resolution, or resume a killed run."""
    with series_session(series_path, op="rebase --continue") as session:
        room, journal = _resume(session, workdir)
        _check_untouched(session, journal)
        series = _old_series(room, session)
        if journal.state == "stopping":
            journal = _stop_here(room, journal, _stopped(journal))
        if journal.state == "stopped":
            journal = _take_resolution(room, series, journal)
        if journal.state == "running":
            journal = _advance(room, series, journal, progress)
        return _conclude(session, room, journal, progress)


def rebase_skip(
    series_path: Path, workdir: Path | None = None, progress: Progress | None = None
) -> RebaseReport:
    """`patchctl rebase --skip`: drop the patch the rebase stopped at from the series (what the
    work tree holds is saved as a backup first), and go on."""
    with series_session(series_path, op="rebase --skip") as session:
        room, journal = _resume(session, workdir)
        _check_untouched(session, journal)
        if journal.state not in ("stopping", "stopped"):
            raise PatchctlError("the rebase is not stopped at a patch; nothing to skip")
        stop = _stopped(journal)
        backup = _save_edits(room, journal)
        pre = room.git.tree_of(journal.head)
        _move_worktree(room, pre)
        dropped = Done(stop.id, journal.head, pre, "dropped", "", False)
        journal = rebasestate.moved(
            room.path, journal, "running", done=(*journal.done, dropped), stop=None, worktree=pre
        )
        journal = _advance(room, _old_series(room, session), journal, progress)
        return replace(_conclude(session, room, journal, progress), backup=backup)


def rebase_status(series_path: Path, workdir: Path | None = None) -> RebaseReport:
    """`patchctl rebase --status`: the report of the rebase in progress as it stands (the stop
    again, when it is stopped); nothing is written."""
    with series_session(series_path, op="rebase --status") as session:
        room, journal = _resume(session, workdir, aborting=True)
        state = "stopped" if journal.state in ("stopping", "stopped") else journal.state
        return _report(session, room, journal, state, api=_missing_api(room, journal))


def rebase_abort(series_path: Path, workdir: Path | None = None) -> RebaseReport:
    """`patchctl rebase --abort`: the series and the clean room as they were before the
    rebase (the work tree's content is saved as a backup first when it holds anything)."""
    with series_session(series_path, op="rebase --abort") as session:
        room, journal = _resume(session, workdir, aborting=True)
        journal = rebasestate.moved(room.path, journal, "aborting")
        backup = _save_edits(room, journal)
        changed = _restore_series(session, room) if journal.restore_series else []
        old_meta = rebasestate.old(room.path, MARKER_COPY)
        if old_meta is not None:
            marker_path(room.path).write_bytes(old_meta)
        room.git.update_ref(BRANCH, journal.branch, "patchctl rebase --abort")
        room.git.update_ref(BASE_REF, journal.old_base, "patchctl rebase --abort")
        _move_worktree(room, room.git.tree_of(journal.branch))
        if rebasestate.restore_mtimes(room.path):  # the files' old mtimes: no rebuild
            room.git.refresh_index()
        room.git.set_head(BRANCH)
        _drop_refs(room)
        rebasestate.remove(room.path)
        return RebaseReport(
            "aborted",
            session.series.path,
            room.path,
            _describe(journal.old_upstream),
            _describe(journal.new_upstream),
            changed=tuple(changed),
            backup=backup,
        )


# ----------------------------------------------------------------------------- starting


def _old_cleanroom(series: Series, path: Path, progress: Progress | None) -> Cleanroom:
    """The clean room on the series' current pin (made if missing), with no unsaved work."""
    if not is_cleanroom(path):
        return create_cleanroom(series, path, progress)
    room = load_cleanroom(path)
    if not same_pin(room, series):
        raise PatchctlError(
            f"clean room {path} was made from another upstream than {series.upstream.describe()}",
            hint="run `patchctl cleanroom apply` first",
        )
    if room.dirty_paths() or any(not pid for _c, pid, _s in room.stack()):
        raise DirtyTree(
            f"{path} has unsaved work; a rebase needs a clean clean room",
            hint="capture it with `patchctl capture`, or `patchctl cleanroom apply --force`",
        )
    return room


def new_base(
    room: Cleanroom, series: Series, upstream: Upstream, progress: Progress | None
) -> tuple[str, str, tuple[str, ...]]:
    """Materialize `upstream` next to the clean room and bring its tree in as a commit:
    (base commit, tree, names dropped on extraction). An archive or sdist already in the tree
    cache is fetched from there as objects, without writing its files anywhere."""
    message = f"upstream: {upstream.describe()}\n".encode()
    cached = tree_from_cache(upstream, room.git)
    if cached is not None:
        _check_root(room, series, upstream, cached.tree)
        return room.git.commit_tree(cached.tree, message), cached.tree, cached.dropped
    scratch = room.path / ".git" / "patchctl-rebase-base"
    shutil.rmtree(scratch, ignore_errors=True)  # a killed run's leftover
    try:
        git = Git.init(scratch)
        result = materialize(series.with_upstream(upstream), git, progress)
        base = git.commit_tree(result.tree, message)
        room.git.fetch(str(scratch), base)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    _check_root(room, series, upstream, result.tree)
    return base, result.tree, result.dropped


def _check_root(room: Cleanroom, series: Series, upstream: Upstream, tree: str) -> None:
    if series.root not in (".", "") and room.git.maybe_rev(f"{tree}:{series.root}") is None:
        raise NotFound(
            f"root {series.root!r} is not a directory of {upstream.describe()}",
            hint="the new upstream lays its tree out differently: rebase onto another subdir",
        )


def _identity(upstream: Upstream) -> dict[str, Any]:
    data = series_to_dict(Series(Path("x"), upstream))["upstream"]
    return {k: v for k, v in data.items() if k not in ("tree", "commit") or upstream.kind == "git"}


def _start(
    session: SeriesSession,
    room: Cleanroom,
    new: Upstream,
    base: str,
    dropped: tuple[str, ...],
) -> Journal:
    """The old patch commits, the old files kept aside, and the journal in state running."""
    series = session.series
    old_commits = _old_commits(room, series)
    for patch in series.patches:
        rebasestate.keep_old(room.path, patch.file, read_patch_file(series.patch_path(patch)))
    rebasestate.keep_old(room.path, series.path.name, session.seen)
    rebasestate.keep_old(room.path, MARKER_COPY, marker_path(room.path).read_bytes())
    rebasestate.keep_mtimes(room.path, room.git.tracked_paths())
    room.git.update_ref(f"{REFS}old", old_commits[-1] if old_commits else room.base_commit())
    room.git.update_ref(f"{REFS}onto", base)
    journal = Journal(
        state="running",
        series=str(series.path),
        series_sha256=patch_sha256(session.seen),
        files_sha256={
            p.file: patch_sha256(read_patch_file(series.patch_path(p))) for p in series.patches
        },
        old_upstream=_upstream_json(series.upstream),
        new_upstream=_upstream_json(new),
        old_base=room.base_commit(),
        new_base=base,
        old_commits=tuple(old_commits),
        branch=room.git.rev_parse(BRANCH),
        ids=series.ids(),
        labels=(label(series.upstream), label(new)),
        worktree=room.git.snapshot_worktree(),
        dropped=dropped,
        bases=_unreproduced_bases(room, series, old_commits),
    )
    return rebasestate.save(room.path, journal)


def _unreproduced_bases(
    room: Cleanroom, series: Series, old_commits: list[str]
) -> tuple[dict[str, Any], ...]:
    """The base blobs the patches' index lines name that the old series, rebuilt on the old
    upstream, does not hold (series/baseblobs.py). Each patch's three-way merge starts from
    that rebuilt tree, so it has its base whatever the new upstream holds; a blob listed here
    means the patch was made on other file versions, and its merge starts from the version
    it was applied to instead (reported, not refused; `verify` notes such a patch). The
    entries before each patch come from one `diff-tree --stdin` of the old trees."""
    trees = room.git.trees_of([room.base_commit(), *old_commits])
    changes = room.git.raw_changes(list(itertools.pairwise(trees)))
    found: list[dict[str, Any]] = []
    with TreeStore(room.git) as store:
        for patch, pre, changed in zip(series.patches, trees, changes, strict=False):
            data = read_patch_file(series.patch_path(patch))
            checked = baseblobs.check(store, pre, data, series.root, known=changed)
            for miss in checked.unreproduced:
                entry = {"patch": patch.id, "path": miss.path, "named": miss.named}
                found.append({**entry, "rebuilt": miss.rebuilt})
    return tuple(found)


def _old_commits(room: Cleanroom, series: Series) -> list[str]:
    """One commit per patch on the old base, as `cleanroom apply` would make them (a drifted
    patch replayed at its offset or with fuzz, as it applies elsewhere). The clean room's own
    stack is those commits when it holds the series' patches in order, each commit naming
    its patch file's sha256 and giving the post tree series.yaml records: then it is used
    as it is, and nothing is replayed."""
    digests = [patch_sha256(read_patch_file(series.patch_path(p))) for p in series.patches]
    reused = _stack_commits(room, series, digests)
    if reused is not None:
        return reused
    commits: list[str] = []
    parent, tree = room.base_commit(), room.base_tree()
    hint = "the series does not apply to its own upstream: fix it before rebasing"
    with TreePatcher(room.git) as patcher, CommitWriter(room.git) as writer:
        for patch, sha in zip(series.patches, digests, strict=True):
            data = read_patch_file(series.patch_path(patch))
            tree = replay_tree(patcher, tree, data, series.root, patch.id, hint=hint).post
            parent = writer.commit(tree, commit_message(patch, sha), (parent,))
            commits.append(parent)
    return commits


def _stack_commits(room: Cleanroom, series: Series, digests: list[str]) -> list[str] | None:
    """The clean room's patch commits when they are exactly the series' patches (ids and
    sha256 in order, each tree the post tree series.yaml records); None otherwise."""
    stack = room.stack()
    ids = [pid for _c, pid, _s in stack]
    if ids != list(series.ids()) or [s for _c, _p, s in stack] != digests:
        return None
    commits = [c for c, _p, _s in stack]
    trees = room.git.trees_of(commits) if commits else []
    if any(p.post_tree != t for p, t in zip(series.patches, trees, strict=True)):
        return None
    return commits


def _upstream_json(upstream: Upstream) -> dict[str, Any]:
    return dict(series_to_dict(Series(Path("x"), upstream))["upstream"])


def label(upstream: Upstream) -> str:
    """A short file-name-safe name of an upstream: the version, or the commit or sha256 start."""
    if upstream.kind == "pypi-sdist":
        raw = str(upstream.version)
    elif upstream.kind == "git":
        raw = (upstream.commit or "")[:12]
    else:
        raw = (upstream.sha256 or "")[:12]
    return re.sub(r"[^A-Za-z0-9._-]+", "-", raw).strip("-.") or upstream.kind


def _describe(data: dict[str, Any]) -> str:
    return Upstream(**data).describe()


# ----------------------------------------------------------------------------- resuming


def _resume(
    session: SeriesSession, workdir: Path | None, *, aborting: bool = False
) -> tuple[Cleanroom, Journal]:
    path = session.lock_cleanroom(workdir, rebasing=True)
    journal = rebasestate.load(path)
    if journal.series != str(session.series.path):
        raise PatchctlError(
            f"the rebase in {path} belongs to {journal.series}, not {session.series.path}",
            hint=f"pass --series {journal.series}",
        )
    if journal.state == "aborting" and not aborting:
        raise PatchctlError("an --abort was interrupted", hint="run `patchctl rebase --abort`")
    return load_cleanroom(path), journal


def _check_untouched(session: SeriesSession, journal: Journal) -> None:
    """SeriesChanged when series.yaml or a patch file changed since the rebase started: the
    rebase works from the files as they were, and would overwrite the edit. (Once it is
    finishing, the files are its own to write.)"""
    if journal.restore_series:
        return
    changed = [session.path.name] if patch_sha256(session.seen) != journal.series_sha256 else []
    for name, digest in journal.files_sha256.items():
        path = session.series.dir / name
        if not path.is_file() or patch_sha256(read_patch_file(path)) != digest:
            changed.append(name)
    if changed:
        raise SeriesChanged(
            f"{', '.join(changed)} changed since the rebase started (in {session.series.dir})",
            hint="put the files back as they were, or `patchctl rebase --abort` and start again",
        )


def _old_series(room: Cleanroom, session: SeriesSession) -> Series:
    """The series as it was when the rebase started (from the copies kept under old/), with
    its real path: what the rebase works from, whatever state the series directory is in."""
    copy = rebasestate.directory(room.path) / "old" / session.path.name
    raw = copy.read_bytes()
    if raw == session.seen:
        return session.series  # the series file is still as the rebase found it
    key = (str(copy), raw)
    if key not in _OLD_SERIES:
        _OLD_SERIES.clear()  # one entry: the rebase of this run
        _OLD_SERIES[key] = load_series(copy, check_files=False)
    return replace(_OLD_SERIES[key], path=session.path)


# The old series parsed once per run (keyed by the copy's path and bytes): a run reads it
# when it starts moving patches and again when it finishes.
_OLD_SERIES: dict[tuple[str, bytes], Series] = {}


def _save_edits(room: Cleanroom, journal: Journal) -> Backup | None:
    """Back up the work tree when it holds anything but what patchctl last put there (the
    user's edits of a conflict), before it is reset."""
    if room.git.snapshot_worktree() == journal.worktree:
        return None
    return room.save_unsaved_work()


def _stopped(journal: Journal) -> Stop:
    if journal.stop is None:
        raise PatchctlError("the rebase journal has no stop recorded")
    return journal.stop


# ----------------------------------------------------------------------------- the patches


def _advance(
    room: Cleanroom, series: Series, journal: Journal, progress: Progress | None
) -> Journal:
    """Rebase the remaining patches until all are done or one stops (state stopped)."""
    report = or_null(progress)
    report.start("rebase", len(journal.ids))
    report.advance("rebase", len(journal.done))
    with (
        scratch_repo([room.path]) as scratch,
        temp_index(room.git) as index,
        CommitWriter(room.git) as writer,
        TreeStore(room.git) as store,
        closing(ObjectReader(room.git)) as reader,
        TreeDiffer(scratch, series.root) as differ,
        BlobWriter(room.git) as blobs,
    ):
        step = _Step(scratch, index, writer, store, reader, differ)
        step.blobs = blobs
        step.premerger = Premerger(room.git, store, writer)
        step.prepare(journal, series.root)
        saved = time.perf_counter()
        while (pid := journal.current) is not None:
            started = time.perf_counter()
            if journal.drop_merged and _known_merged(journal, pid):
                outcome: Done | Stop = _upstreamed_done(journal, pid)
            else:
                outcome = _rebase_one(room, step, series, series.patch(pid), journal)
            if isinstance(outcome, Stop):
                journal = _stop_evidence(room, step, series, journal, outcome)
                if journal.drop_merged and _known_merged(journal, pid):
                    outcome = _upstreamed_done(journal, pid)
            if isinstance(outcome, Stop):
                report.done("rebase")
                _keep_head(room, journal)
                spent = round(time.perf_counter() - started, 3)
                return _stop_here(room, journal, replace(outcome, seconds=spent))
            outcome = replace(outcome, seconds=round(time.perf_counter() - started, 3))
            journal = replace(journal, done=(*journal.done, outcome))
            if time.perf_counter() - saved >= SAVE_EVERY:  # else saved by the next step
                journal, saved = rebasestate.save(room.path, journal), time.perf_counter()
            report.advance("rebase")
    _keep_head(room, journal)
    report.done("rebase")
    return journal


DROPS = ("dropped", "upstreamed")  # the hows of patches that leave the series
# Seconds between two saves of the journal while patches move. The state after the loop
# (stopping, finishing) is always saved; a run killed in between resumes from the last save
# and moves the patches after it again, to the same commits (fixed identity and dates) and
# the same staged bytes: progress is lost, never a state.
SAVE_EVERY = 0.5


def upstreamed_of(journal: Journal) -> list[Upstreamed]:
    """The patches found merged or partly merged upstream so far, in series order."""
    found = {u["patch"]: u for u in journal.upstreamed}
    return [
        Upstreamed(pid, u["state"], tuple(u["evidence"]), tuple(u["left"]))
        for pid in journal.ids
        if (u := found.get(pid)) is not None
    ]


def _known_merged(journal: Journal, pid: str) -> bool:
    return any(u["patch"] == pid and u["state"] == MERGED for u in journal.upstreamed)


def _upstreamed_done(journal: Journal, pid: str) -> Done:
    """A patch --drop-merged drops: the tip stays where it is."""
    return Done(pid, journal.head, _head_tree(journal), "upstreamed", "", False)


def _with_evidence(journal: Journal, found: list[Upstreamed]) -> Journal:
    """The journal with `found` recorded (merged or partly merged ones; a later finding for
    a patch replaces an earlier one)."""
    keep = {u["patch"]: u for u in journal.upstreamed}
    for result in found:
        if result.state == NEEDED:
            continue
        entry = result.to_json()
        earlier = keep.get(result.id)
        if earlier is not None:  # evidence found earlier (patch-id, trailers) stays
            evidence = list(dict.fromkeys([*earlier["evidence"], *result.evidence]))
            merged = MERGED in (earlier["state"], result.state)
            entry = {
                **entry,
                "state": MERGED if merged else result.state,
                "evidence": evidence,
                "left": [] if merged else list(result.left),
            }
        keep[result.id] = entry
    return replace(journal, upstreamed=tuple(keep.values()))


def _history_evidence(
    room: Cleanroom, series: Series, new: Upstream, journal: Journal, drop_merged: bool
) -> Journal:
    """As the rebase starts: the patches whose patch-id or header trailers match an upstream
    commit between the two pins (git upstreams; no patch is applied for it)."""
    journal = replace(journal, drop_merged=drop_merged)
    commits = history_between(series, new)
    if commits:
        patches = [(pid, _old_bytes(room, series.patch(pid))) for pid in journal.ids]
        with temp_index(room.git) as index:
            found = detect(
                index, patches, journal_tree(journal), series.root, commits, reverse=False
            )
        journal = _with_evidence(journal, found)
    return rebasestate.save(room.path, journal)


def _stop_evidence(
    room: Cleanroom, step: _Step, series: Series, journal: Journal, stop: Stop
) -> Journal:
    """At a conflict or an empty patch: whether the new upstream has the patch, wholly or
    partly (its file sections reverse-applied to the new upstream tree), recorded."""
    patch = series.patch(stop.id)
    found = detect(step.index, [(patch.id, _old_bytes(room, patch))], journal_tree(journal),
                   series.root)  # fmt: skip
    step.held = journal_tree(journal)  # detect left the new upstream's tree in the index
    return rebasestate.save(room.path, _with_evidence(journal, found))


def _keep_head(room: Cleanroom, journal: Journal) -> None:
    """`refs/patchctl/rebase/head` at the rebased tip: its commits stay reachable (a `git gc`
    run by hand while the rebase is stopped keeps them). Moved when the run ends or stops,
    not after each patch: the journal (saved every SAVE_EVERY seconds and at every change of
    state) is what a resumed run reads."""
    if journal.done:
        room.git.update_ref(f"{REFS}head", journal.head)


class _Step:
    """What moving one patch after another reuses: a scratch repository for the diffs, an
    index that holds `held` (the tree last put in it: the next patch's tree before it is
    usually that one, and only the paths that differ are rewritten), one commit writer."""

    def __init__(
        self,
        scratch: Git,
        index: Index,
        writer: CommitWriter,
        store: TreeStore,
        reader: ObjectReader,
        differ: TreeDiffer,
    ) -> None:
        self.scratch, self.index, self.writer, self.store = scratch, index, writer, store
        self.reader, self.differ = reader, differ  # differ: the new diffs, one process
        self.blobs: BlobWriter | None = None  # the blobs of patches applied in memory
        self.premerger: Premerger | None = None  # the merges of the patches ahead, together
        self.held: str | None = None
        self.old_trees: list[str] = []  # the old base's tree, then each old patch commit's
        self.old_diffs: dict[str, bytes] = {}  # patch id -> its diff on the old base
        self.old_changes: dict[str, dict[bytes, tuple[Entry | None, Entry | None]]] = {}

    def prepare(self, journal: Journal, root: str) -> None:
        """The old trees of every patch and the diffs of those still to move (two processes
        for the whole series)."""
        self.old_trees = self.scratch.trees_of([journal.old_base, *journal.old_commits])
        todo = range(len(journal.done), len(journal.ids))
        pairs = [(self.old_trees[i], self.old_trees[i + 1]) for i in todo]
        diffs = diff_tree_pairs(self.scratch, pairs, root)
        self.old_diffs = {journal.ids[i]: d for i, d in zip(todo, diffs, strict=True)}
        changes = self.scratch.raw_changes(pairs)
        self.old_changes = {journal.ids[i]: c for i, c in zip(todo, changes, strict=True)}

    def hold(self, tree: str) -> None:
        """Make the index hold `tree`."""
        if self.held is None:
            self.index.read_tree(tree)
        else:
            self.index.move(self.held, tree)
        self.held = tree


def _head_tree(journal: Journal) -> str:
    """The tree of the rebased tip (the new upstream's before the first patch)."""
    return journal.done[-1].tree if journal.done else journal_tree(journal)


def _rebase_one(
    room: Cleanroom, step: _Step, series: Series, patch: Patch, journal: Journal
) -> Done | Stop:
    """One patch onto the current tip: its Done, or the Stop that needs the user."""
    data = _old_bytes(room, patch)
    pre = _head_tree(journal)
    replayed: tuple[str, ...] = ()
    same = _untouched(step, journal, patch, data, pre)
    if same is not None:
        return _record(room, journal, patch, data, data, same, "unchanged", step.writer)
    exact = quick = None
    if not misfits(step.store, step.reader, data, pre, series.root):  # else: merge at once
        quick = _in_memory(step, data, pre, series.root)
        if quick is None:
            step.hold(pre)
            exact = apply_to_index(step.index, data, series.root)
            applied = step.index.write_tree() if exact.ok else pre  # (maybe at an offset)
            step.held = applied
    if quick is not None:
        post, how = quick[0], "applied"
    elif exact is not None and exact.ok and not exact.drift():
        post, how = applied, "applied"
    else:
        merged = _premerged(step, journal, patch, pre) or _merge(
            room, step.writer, journal, patch, pre
        )
        if not merged.clean:
            step.hold(pre)
            labelled = _merge_labelled(room, journal, patch, pre)
            again = resolutions.replay_conflict(
                room.git, step.store, series.dir, patch.id, labelled, journal.replay
            )
            refused = _refused_replay(room, series, patch, pre, again)
            if not again.whole or refused:
                merged = labelled if refused else again.merged
                stop = _conflict(room, step.index, series, patch, data, pre, merged)
                notes = stop.messages + again.notes + refused
                return replace(stop, replayed=again.used, messages=notes)
            post, how, replayed = again.merged.tree, "replayed", again.used
        else:
            post, how = merged.tree, "merged"
    if post == pre:
        return Stop(patch.id, "empty", pre)
    if how == "applied" and patch.imported:
        new = data  # applies exactly: every byte kept
    else:
        diff = quick[1] if quick is not None else step.differ.diff(pre, post)
        new = regenerated(step.scratch, patch, data, pre, post, series.root, diff=diff)
    if new == data:
        how = "unchanged"
    done = _record(room, journal, patch, data, new, post, how, step.writer)
    return replace(done, replayed=replayed)


def _refused_replay(
    room: Cleanroom, series: Series, patch: Patch, pre: str, again: resolutions.Again
) -> tuple[str, ...]:
    """Why a wholly replayed merge is not taken (it is checked as a hand resolution is); ()
    when it is taken or was not whole."""
    if not again.whole:
        return ()
    try:
        _check_resolution(room, series, patch, pre, again.merged.tree)
    except PatchctlError as exc:
        return (f"the recorded resolutions were not taken: {exc}",)
    return ()


def _in_memory(step: _Step, data: bytes, pre: str, root: str) -> tuple[str, bytes] | None:
    """(tree, its canonical diff from `pre`) of the patch applied exactly without an index
    (series/exactfit.py), when the diff proves it is what `git apply` writes; else None."""
    if step.blobs is None:
        return None
    post = applied_in_memory(step.store, step.reader, step.blobs, data, pre, root)
    if post is None or post == pre:
        return None
    diff = step.differ.diff(pre, post)
    return (post, diff) if same_hunks(data, diff) else None


def _old_bytes(room: Cleanroom, patch: Patch) -> bytes:
    data = rebasestate.old(room.path, patch.file)
    if data is None:
        raise NotFound(f"the rebase kept no copy of {patch.file}; run `patchctl rebase --abort`")
    return data


def _untouched(step: _Step, journal: Journal, patch: Patch, data: bytes, pre: str) -> str | None:
    """The tree after the patch, without applying it, when nothing it touches changed: every
    path it sets or removes is the same in `pre` as in its old tree before it (the entry, or
    the file in the way of it), and its bytes are exactly the diff of its old trees (so they
    apply to those paths exactly, at their line numbers, and the new bytes are the old).
    The result is the old change set on `pre`: the tree `git apply` writes. None otherwise."""
    diff, changes = step.old_diffs.get(patch.id), step.old_changes.get(patch.id)
    if not diff or not changes:
        return None
    i = journal.ids.index(patch.id)
    old_pre, old_post = step.old_trees[i], step.old_trees[i + 1]
    if regenerated(step.scratch, patch, data, old_pre, old_post, diff=diff) != data:
        return None
    for path, (before, _after) in changes.items():
        now = step.store.find(pre, path)
        if before is not None and now != Found(before):
            return None
        if before is None and now != step.store.find(old_pre, path):
            return None
    post = step.store.edit(pre, {path: after for path, (_b, after) in changes.items()})
    return post if post != pre else None


def _merge(
    room: Cleanroom, writer: CommitWriter, journal: Journal, patch: Patch, pre: str
) -> Merged:
    """The patch's old commit merged onto `pre` (a cherry-pick, from its old parent): two
    processes, a commit of `pre` on the old parent and the merge of the two commits. The
    merge base is the old parent's tree, the series rebuilt on the old upstream: it holds the
    base blobs the patch's index lines name (checked as the rebase starts), so the merge
    never needs the new upstream to have them."""
    i = journal.ids.index(patch.id)
    old_parent = journal.old_commits[i - 1] if i else journal.old_base
    ours = writer.commit(pre, b"patchctl merge side\n", (old_parent,))
    return room.git.merge_commits(ours, journal.old_commits[i])


def _premerged(step: _Step, journal: Journal, patch: Patch, pre: str) -> Merged | None:
    """`_merge`'s clean result made with the merges of the patches ahead in one process
    (premerge.py: the same tree, from a merge of the patch's own paths); None when the patch
    is merged alone."""
    if step.premerger is None or patch.id not in step.old_changes:
        return None
    i = journal.ids.index(patch.id)
    ahead = [
        Ahead(pid, step.old_trees[k], step.old_changes[pid])
        for k, pid in enumerate(journal.ids[i + 1 :], start=i + 1)
        if pid in step.old_changes
    ]
    this = Ahead(patch.id, step.old_trees[i], step.old_changes[patch.id])
    return step.premerger.merged(pre, this, ahead)


def _merge_labelled(room: Cleanroom, journal: Journal, patch: Patch, pre: str) -> Merged:
    """`_merge` again with the sides named in the conflict markers (`onto-<new>` and the
    patch id), for the files a conflict hands to the user."""
    i = journal.ids.index(patch.id)
    old_post = room.git.tree_of(journal.old_commits[i])
    old_pre = room.git.tree_of(journal.old_commits[i - 1] if i else journal.old_base)
    return room.git.merge_trees(old_pre, pre, old_post, (f"onto-{journal.labels[1]}", patch.id))


def _record(
    room: Cleanroom,
    journal: Journal,
    patch: Patch,
    old: bytes,
    new: bytes,
    tree: str,
    how: str,
    writer: CommitWriter | None = None,
) -> Done:
    """Stage the new bytes and commit the patch on the new tip."""
    staged = new != old
    if staged:
        rebasestate.stage(room.path, patch.file, new)
    sha = patch_sha256(new)
    message = commit_message(patch, sha)
    if writer is not None:
        commit = writer.commit(tree, message, (journal.head,))
    else:
        commit = room.git.commit_tree(tree, message, (journal.head,))
    return Done(patch.id, commit, tree, how, sha, staged)


def _conflict(
    room: Cleanroom,
    index: Index,
    series: Series,
    patch: Patch,
    data: bytes,
    pre: str,
    merged: Merged,
) -> Stop:
    """The report of a conflict: files, the patch's hunks that no longer apply, marker lines."""
    index.read_tree(pre)
    hunks = failing_hunks(index, data, series.root)
    markers = []
    for path in merged.conflicts:
        blob = room.git.maybe_rev(f"{merged.tree}:{path}")
        if blob is None:
            continue
        text = room.git.cat_file("blob", blob)
        markers += [
            (path, text.count(b"\n", 0, m.start()) + 1) for m in CONFLICT_START.finditer(text)
        ]
    return Stop(
        patch.id, "conflict", merged.tree, merged.conflicts, hunks, tuple(markers), merged.messages
    )


def _stop_here(room: Cleanroom, journal: Journal, stop: Stop) -> Journal:
    """Hand the work tree to the user: the merged files (markers included) in the work tree,
    the tree before the patch in the index and as HEAD (detached; the branch stays)."""
    journal = rebasestate.moved(room.path, journal, "stopping", stop=rebase_stop.stamped(stop))
    _move_worktree(room, stop.merged)
    room.git.read_tree(room.git.tree_of(journal.head), reset=True)
    rebase_stop.conflict_state(room.git, journal, stop)  # unmerged entries, new files -N
    room.git.detach_head(journal.head)
    return rebasestate.moved(room.path, journal, "stopped", worktree=stop.merged)


def _move_worktree(room: Cleanroom, tree: str) -> None:
    """Make the work tree and index hold `tree`, whatever the index said before: the index is
    first set to what the work tree holds, and its stat data refreshed, so every file that
    differs is rewritten and no other (unchanged files keep their mtimes, as `reset --keep`
    keeps them in `cleanroom apply`: incremental builds stay incremental)."""
    held = room.git.snapshot_worktree()
    try:
        indexed = room.git.write_tree()
    except GitFailed:  # an index with unmerged entries
        indexed = None
    if indexed == held:  # the index already says what the work tree holds
        room.git.switch_tree(held, tree)  # only the files that differ are written
        room.git.refresh_index()
        return
    room.git.read_tree(held, reset=True)
    room.git.refresh_index()
    room.git.read_tree(tree, reset=True, update=True)
    room.git.refresh_index()


def _take_resolution(room: Cleanroom, series: Series, journal: Journal) -> Journal:
    """`--continue` on a stopped rebase: the work tree becomes the patch (its header kept)."""
    stop = _stopped(journal)
    patch = series.patch(stop.id)
    pre = room.git.tree_of(journal.head)
    post = worktree_snapshot(room.git, room.git.tree_of(journal.new_base))
    _check_resolution(room, series, patch, pre, post)
    learned = resolutions.record_resolution(room.git, room.path, stop, pre, post)
    data = _old_bytes(room, patch)
    with scratch_repo([room.path]) as scratch:
        new = regenerated(scratch, patch, data, pre, post, series.root)
    done = rebase_stop.resolved(_record(room, journal, patch, data, new, post, "resolved"), stop)
    recorded = tuple(r.relpath() for one in learned for r in one.records)
    done = replace(done, replayed=stop.replayed, recorded=recorded)
    room.git.update_ref(f"{REFS}head", done.commit)
    room.git.read_tree(post, reset=True)
    room.git.refresh_index()
    return rebasestate.moved(
        room.path, journal, "running", done=(*journal.done, done), stop=None, worktree=post
    )


def _check_resolution(room: Cleanroom, series: Series, patch: Patch, pre: str, post: str) -> None:
    if post == pre:
        raise NothingToCapture(
            f"{patch.id}: the work tree has no changes over the new base",
            hint="`patchctl rebase --skip` drops the patch from the series; or edit and continue",
        )
    changed = room.git.changed_paths(pre, post)
    outside = outside_root(changed, series.root)
    if outside:
        raise PatchctlError(
            f"{patch.id}: changes outside the series root {series.root!r}: "
            + ", ".join(outside[:5]),
            hint="revert them in the clean room, then `patchctl rebase --continue`",
        )
    left = [
        (path, lines) for path in changed if (lines := _markers_added(room.git, pre, post, path))
    ]
    if left:
        raise rebase_stop.left_error(room.git, patch.id, post, left)


def _markers_added(git: Git, pre: str, post: str, path: str) -> tuple[int, ...]:
    """The lines of the conflict markers in `path` at `post` beyond those it had at `pre`
    (every kind git writes: `<<<<<<<`, `|||||||`, `=======`, `>>>>>>>`)."""
    blob = git.maybe_rev(f"{post}:{path}")
    if blob is None:
        return ()
    after = git.cat_file("blob", blob)
    found = list(CONFLICT_LINES.finditer(after))
    before = git.maybe_rev(f"{pre}:{path}")
    had = len(CONFLICT_LINES.findall(git.cat_file("blob", before))) if before else 0
    return tuple(after.count(b"\n", 0, m.start()) + 1 for m in found[had:])


# ----------------------------------------------------------------------------- finishing


def _conclude(
    session: SeriesSession, room: Cleanroom, journal: Journal, progress: Progress | None
) -> RebaseReport:
    """A stopped rebase's report (raised as RebaseStopped by the CLI), or the finish."""
    if journal.state == "stopped":
        return _report(session, room, journal, "stopped")
    return _finish(session, room, journal, progress)


def _report(
    session: SeriesSession, room: Cleanroom, journal: Journal, state: str, **extra: Any
) -> RebaseReport:
    return RebaseReport(
        state,
        session.series.path,
        room.path,
        _describe(journal.old_upstream),
        _describe(journal.new_upstream),
        patches=journal.done,
        stop=journal.stop,
        upstreamed=tuple(upstreamed_of(journal)),
        bases=journal.bases,
        **extra,
    )


def _finish(
    session: SeriesSession, room: Cleanroom, journal: Journal, progress: Progress | None
) -> RebaseReport:
    """Switch the series and the clean room to the rebased patches (each step idempotent)."""
    journal = rebasestate.moved(room.path, journal, "finishing", restore_series=True)
    old = _old_series(room, session)
    new = _new_series(old, journal)
    report = or_null(progress)
    report.start("finish", None)
    # The work tree moves to the rebased tree while the range-diff, the API check and the
    # series files are made: the move touches only the room's index and work tree, the others
    # only objects and the series directory, and each step stays idempotent (a run killed
    # here is finished again by --continue from the same journal, the move then a no-op).
    with ThreadPoolExecutor(max_workers=1) as pool:
        moving = pool.submit(_move_worktree, room, room.git.tree_of(journal.head))
        text = _range_diff(room, old, journal)
        api = _missing_api(room, journal)
        changed = _write_series(session, room, old, new, journal, text, api)
        moving.result()
    room.git.update_ref(BRANCH, journal.head, "patchctl rebase")
    room.git.update_ref(BASE_REF, journal.new_base, "patchctl rebase")
    room = repin_marker(room, new, journal.new_base, room.git.tree_of(journal.new_base))
    room.git.set_head(BRANCH)
    _drop_refs(room)
    rebasestate.remove(room.path)
    report.done("finish")
    path = new.dir / range_diff_name(journal)
    skipped = [d.id for d in journal.done if d.how in DROPS]
    return _report(
        session,
        room,
        journal,
        "done",
        range_diff=path,
        range_diff_text=text.decode("utf-8", "replace"),
        changed=tuple(changed),
        skipped=tuple(skipped_path(old, journal, old.patch(pid).file) for pid in skipped),
        api=api,
    )


def _range_diff(room: Cleanroom, old: Series, journal: Journal) -> bytes:
    """`git range-diff` of the old and the new patch commits, each made again with the message
    `<id>: <title>` alone (the sha256 trailer would mark every rewritten patch as changed)."""

    with CommitWriter(room.git) as writer:

        def chain(base: str, trees: list[tuple[str, str]]) -> str:
            tip = base
            for pid, tree in trees:
                title = old.patch(pid).title or pid
                tip = writer.commit_later(tree, f"{pid}: {title}\n".encode(), (tip,))
            return tip

        old_trees = room.git.trees_of(list(journal.old_commits)) if journal.old_commits else []
        before = list(zip(journal.ids, old_trees, strict=True))
        after = [(d.id, d.tree) for d in journal.done if d.how not in DROPS]
        old_tip = chain(journal.old_base, before)
        new_tip = chain(journal.new_base, after)
        writer.settle()  # every commit written (and its id checked) before range-diff reads
    return room.git.range_diff((journal.old_base, old_tip), (journal.new_base, new_tip))


def _missing_api(room: Cleanroom, journal: Journal) -> tuple[PatchApi, ...] | None:
    """The identifiers each moved patch's added lines use that the old upstream has and the
    new one lacks (vanished.py); at a stop, the stopped patch too, outside its conflict
    blocks. None when git cannot answer (the report then says the check did not run: a list
    to read never keeps a rebase from finishing)."""
    git = room.git
    pre = git.tree_of(journal.new_base)
    patches = []
    for done in journal.done:
        if done.how in DROPS:
            continue
        patches.append((done.id, pre, done.tree))
        pre = done.tree
    stop = journal.stop
    outside = ""
    if stop is not None and stop.reason == "conflict" and stop.id not in {p[0] for p in patches}:
        patches.append((stop.id, pre, stop.merged))
        outside = stop.id
    try:
        return missing_api(git, git.tree_of(journal.old_base), git.tree_of(journal.new_base),
                           patches, outside)  # fmt: skip
    except GitFailed:
        return None


def range_diff_name(journal: Journal) -> str:
    """`rebase-<old>-<new>.range-diff`, saved in the series directory."""
    return f"rebase-{journal.labels[0]}-{journal.labels[1]}.range-diff"


def _new_series(old: Series, journal: Journal) -> Series:
    """The series on the new upstream: new pin, new trees, new sha256 of imported patches,
    dropped patches gone."""
    upstream = replace(Upstream(**journal.new_upstream), key_order=old.upstream.key_order)
    patches = []
    pre = journal_tree(journal)
    for done in journal.done:
        if done.how in DROPS:
            continue
        entry = old.patch(done.id)
        sha = done.sha256 if entry.imported else entry.sha256
        patches.append(replace(entry, pre_tree=pre, post_tree=done.tree, sha256=sha))
        pre = done.tree
    return replace(old.with_upstream(upstream), patches=tuple(patches))


def journal_tree(journal: Journal) -> str:
    """The new upstream's tree (recorded in the pinned upstream)."""
    return str(journal.new_upstream["tree"])


def _write_series(
    session: SeriesSession,
    room: Cleanroom,
    old: Series,
    new: Series,
    journal: Journal,
    range_diff: bytes,
    api: tuple[PatchApi, ...] | None = None,
) -> list[Path]:
    """The new patch bytes, the range-diff, series.yaml and the docs; the paths written."""
    changed: list[Path] = []
    writes: list[tuple[Path, bytes]] = []
    for done in journal.done:
        entry = old.patch(done.id)
        path = old.patch_path(entry)
        if done.how in DROPS:
            changed += _keep_skipped(session, room, old, journal, entry.file)
            kept = skipped_path(old, journal, resolutions.DIRECTORY)
            changed += resolutions.move_records(session, old.dir, done.id, kept)
        elif done.staged:
            writes.append((path, rebasestate.staged(room.path, entry.file)))
    writes.append((old.dir / range_diff_name(journal), range_diff))
    writes += rebase_report.finish_files(
        old.dir, range_diff_name(journal), journal, range_diff, api
    )
    writes += resolutions.staged_writes(room.path, old.dir)
    changed += session.write_patches(writes)  # one journal write for all of them
    return changed + session.save(new)


SKIPPED = "skipped"


def skipped_path(series: Series, journal: Journal, file: str) -> Path:
    """Where a rebase keeps the file of a patch `--skip` dropped: `skipped/<old>-<new>/` in
    the series directory (one folder per rebase: a later one never overwrites it)."""
    return series.dir / SKIPPED / f"{journal.labels[0]}-{journal.labels[1]}" / file


def _keep_skipped(
    session: SeriesSession, room: Cleanroom, old: Series, journal: Journal, file: str
) -> list[Path]:
    """Move a skipped patch's file out of the series into `skipped_path` (its bytes as the
    rebase began, kept under the clean room's .git, so a finish killed after the move is
    completed alike): never deleted."""
    path = old.dir / file
    data = rebasestate.old(room.path, file)
    if data is None and path.is_file():
        data = read_patch_file(path)
    changed: list[Path] = []
    if data is not None:
        kept = skipped_path(old, journal, file)
        if session.write_patch(kept, data):
            changed.append(kept)
    session.check_unchanged()
    if path.is_file():
        path.unlink()
        changed.append(path)
    return changed


def _restore_series(session: SeriesSession, room: Cleanroom) -> list[Path]:
    """--abort of a rebase that had begun writing the series: every series file as it was
    when the rebase started (series.yaml byte for byte), the range-diff gone, docs again."""
    old = _old_series(room, session)
    changed: list[Path] = []
    for patch in old.patches:
        data = rebasestate.old(room.path, patch.file)
        if data is not None and session.write_patch(old.patch_path(patch), data):
            changed.append(old.patch_path(patch))
    for stale in old.dir.glob("rebase-*.range-diff"):
        if stale.name == range_diff_name(rebasestate.load(room.path)):
            changed += rebase_report.remove_files(old.dir, stale.name)
            stale.unlink()
            changed.append(stale)
    copy = rebasestate.old(room.path, session.path.name)
    if copy is not None and session.write_patch(session.path, copy):
        changed.append(session.path)
    session.seen, session.series = session.path.read_bytes(), load_series(session.path)
    return changed + session.write_docs()


def _drop_refs(room: Cleanroom) -> None:
    for ref in room.git.refs(REFS):
        room.git.delete_ref(ref)
