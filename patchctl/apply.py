"""Strict apply of a series onto a clean room: no fuzz, no offsets, whitespace untouched.

Each patch is first checked with `git apply --check -v`: a conflict stops the run with the
patch, file, hunk and reason (PatchDoesNotApply), a hunk that would land at an offset is drift
(PatchDrift), and a patch whose reverse applies is reported as already applied
(AlreadyApplied). Nothing is written until the check passes, so the tree stays at the last good
patch. Each applied patch becomes one commit with a `Patchctl-Id:` trailer.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from patchctl.cleanroom import (
    BACKUP_REFS,
    ID_TRAILER,
    SHA_TRAILER,
    Backup,
    Cleanroom,
    create_cleanroom,
    default_workdir,
    is_cleanroom,
    load_cleanroom,
    locked,
    same_pin,
)
from patchctl.errors import (
    AlreadyApplied,
    DirtyTree,
    PatchDoesNotApply,
    PatchDrift,
)
from patchctl.progress import Progress, or_null
from patchctl.series import Patch, Series, load_series

# --whitespace=nowarn: apply.whitespace=fix would silently rewrite bytes; nowarn keeps them.
# -p1: patches carry a/ b/ prefixes (capture pins diff.noprefix=false).
# --index: the index and the work tree move together; the tree is then written from the index.
APPLY_FLAGS = ("--index", "--whitespace=nowarn", "-p1")
SUCCEEDED = re.compile(rb"^Hunk #(\d+) succeeded at (\d+)")
OFFSET = re.compile(rb"^Hunk #(\d+) succeeded at (\d+) \(offset (-?\d+) lines?\)\.$")
REDUCED = re.compile(rb"^Context reduced to \((\d+)/(\d+)\) to apply fragment at (\d+)$")
CHECKING = re.compile(rb"^Checking patch (.*)\.\.\.$")
TYPE_WARNING = re.compile(rb"^warning: (.*) has type (\d+), expected (\d+)$")
FAILED_AT = re.compile(rb"^error: patch failed: (.*):(\d+)$")
FILE_ERROR = re.compile(rb"^error: (.*): (.*)$")
HUNK_HEADER = re.compile(rb"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@")


@dataclass(frozen=True)
class AppliedPatch:
    """One patch in the resulting stack."""

    id: str
    commit: str
    tree: str
    reused: bool  # already in the clean room with the same bytes: kept, not re-applied
    ladder: str  # "ok" | "mismatch" | "unrecorded": the tree vs the recorded post_tree


@dataclass(frozen=True)
class ApplyReport:
    """What `cleanroom apply` did."""

    cleanroom: Path
    base_commit: str
    base_tree: str
    head: str
    tree: str
    applied: tuple[AppliedPatch, ...]
    created: bool = False
    backup: Backup | None = None


def patch_sha256(data: bytes) -> str:
    """The sha256 of patch bytes (recorded in each patch commit)."""
    return hashlib.sha256(data).hexdigest()


def _apply_args(series: Series) -> tuple[str, ...]:
    if series.root in (".", ""):
        return APPLY_FLAGS
    return (*APPLY_FLAGS, f"--directory={series.root}")


def commit_message(patch: Patch, sha: str) -> bytes:
    """The message of a patch commit: `<id>: <title>` plus the id and sha256 trailers."""
    title = patch.title or patch.id
    return f"{patch.id}: {title}\n\n{ID_TRAILER}: {patch.id}\n{SHA_TRAILER}: {sha}\n".encode()


# ----------------------------------------------------------------------------- diagnostics


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "backslashreplace")


def hunk_number(data: bytes, file: str, line: int, root: str = ".") -> int | None:
    """The 1-based number of the hunk of `file` whose old range starts at `line`."""
    name = file if root in (".", "") else file.removeprefix(root.rstrip("/") + "/")
    current: str | None = None
    count = 0
    for raw in data.splitlines():
        if raw.startswith(b"diff --git "):
            current, count = None, 0
        elif raw.startswith((b"--- a/", b"+++ b/")) and current is None:
            current = _decode(raw[6:]).rstrip("\t")
        elif raw.startswith(b"@@ ") and (m := HUNK_HEADER.match(raw)):
            count += 1
            if current == name and int(m.group(1)) in (line, line - 1, line + 1):
                return count
    return None


@dataclass(frozen=True)
class Drift:
    """One hunk that would not land where the patch says."""

    file: str
    hunk: int | None
    why: str


def find_drift(stderr: bytes) -> list[Drift]:
    """Offsets, reduced context (fuzz) and mode mismatches reported by `git apply -v`."""
    found: list[Drift] = []
    current, hunk = "", None
    for line in stderr.splitlines():
        if m := CHECKING.match(line):
            current, hunk = _decode(m.group(1)), None
        elif m := SUCCEEDED.match(line):
            hunk = int(m.group(1))
            if m := OFFSET.match(line):
                why = f"hunk would apply at line {int(m.group(2))} (offset {int(m.group(3))} lines)"
                found.append(Drift(current, hunk, why))
        elif m := REDUCED.match(line):
            found.append(Drift(current, hunk, f"would need fuzz ({_decode(m.group(0))})"))
        elif m := TYPE_WARNING.match(line):
            why = f"file mode is {_decode(m.group(2))}, patch expects {_decode(m.group(3))}"
            found.append(Drift(_decode(m.group(1)), None, why))
    return found


def fuzz_drift(room: Cleanroom, data: bytes, args: tuple[str, ...]) -> list[Drift]:
    """For a patch that does not apply: the hunks that would apply with fuzz (less context).

    Only a diagnosis: the check runs with `-C1` and nothing is ever applied with fuzz.
    """
    code, _out, err = room.git.run_full("apply", "--check", "-v", "-C1", *args, stdin=data)
    if code != 0:
        return []
    return [d for d in find_drift(err) if d.why.startswith("would need fuzz")]


def conflict(patch: Patch, data: bytes, stderr: bytes, root: str) -> PatchDoesNotApply:
    """A PatchDoesNotApply naming the file, hunk and reason from `git apply` stderr."""
    file, hunk, why = None, None, "git apply failed"
    errors = [line for line in stderr.splitlines() if line.startswith(b"error: ")]
    for line in errors:
        if m := FAILED_AT.match(line):
            file = _decode(m.group(1))
            hunk = hunk_number(data, file, int(m.group(2)), root)
            why = "context does not match"
            break
    else:
        file, why = _first_error(errors)
    where = f" in {file}" if file else ""
    at = f" hunk #{hunk}" if hunk else ""
    return PatchDoesNotApply(
        f"patch {patch.id} does not apply:{at}{where}: {why}",
        patch=patch.id,
        file=file,
        hunk=hunk,
        why=why,
        stderr=stderr,
        hint="the clean room stays at the last good patch; rebase or fix the patch",
    )


def _first_error(errors: list[bytes]) -> tuple[str | None, str]:
    if not errors:
        return None, "git apply failed without a message"
    first = errors[0]
    if b"No valid patches" in first:
        return None, "the patch file contains no changes"
    if m := FILE_ERROR.match(first):
        return _decode(m.group(1)), _decode(m.group(2))
    return None, _decode(first.removeprefix(b"error: "))


# ----------------------------------------------------------------------------- applying


def _reverse_applies(room: Cleanroom, data: bytes, args: tuple[str, ...]) -> bool:
    code, _out, err = room.git.run_full("apply", "--check", "-v", "-R", *args, stdin=data)
    return code == 0 and not find_drift(err)


def _already_applied(patch: Patch, how: str) -> AlreadyApplied:
    return AlreadyApplied(
        f"patch {patch.id} is already applied to the tree ({how})",
        patch=patch.id,
        why=how,
        hint="remove it from the series or rebase the series onto the new upstream",
    )


def check_patch(room: Cleanroom, series: Series, patch: Patch, data: bytes) -> None:
    """Raise unless `patch` applies exactly (no offset, no fuzz) to the clean room's index."""
    tree = room.head_tree()
    if patch.post_tree and patch.post_tree == tree and patch.pre_tree != tree:
        raise _already_applied(patch, "the tree equals its recorded post_tree")
    args = _apply_args(series)
    code, _out, err = room.git.run_full("apply", "--check", "-v", *args, stdin=data)
    if code != 0:
        if _reverse_applies(room, data, args):
            raise _already_applied(patch, "its reverse applies cleanly")
        fuzz = fuzz_drift(room, data, args)
        if fuzz:
            raise _drift_error(patch, fuzz)
        raise conflict(patch, data, err, series.root)
    drift = find_drift(err)
    if drift:
        if _reverse_applies(room, data, args):
            raise _already_applied(patch, "its reverse applies cleanly")
        raise _drift_error(patch, drift)


def _drift_error(patch: Patch, drift: list[Drift]) -> PatchDrift:
    first = drift[0]
    at = f" hunk #{first.hunk}" if first.hunk else ""
    more = f" (+{len(drift) - 1} more)" if len(drift) > 1 else ""
    return PatchDrift(
        f"patch {patch.id} drifted:{at} in {first.file}: {first.why}{more}",
        patch=patch.id,
        file=first.file,
        hunk=first.hunk,
        why=first.why,
        hint="the base differs from the one the patch was made on; refresh the patch",
    )


def apply_patch(room: Cleanroom, series: Series, patch: Patch) -> AppliedPatch:
    """Check, apply and commit one patch on top of HEAD."""
    data = series.patch_path(patch).read_bytes()
    check_patch(room, series, patch, data)
    room.git.run("apply", *_apply_args(series), stdin=data)
    tree = room.git.write_tree()
    commit = room.git.commit_tree(tree, commit_message(patch, patch_sha256(data)), (room.head(),))
    room.git.update_ref("HEAD", commit, f"patchctl apply {patch.id}")
    return AppliedPatch(patch.id, commit, tree, False, _ladder(patch, tree))


def _ladder(patch: Patch, tree: str) -> str:
    if patch.post_tree is None:
        return "unrecorded"
    return "ok" if patch.post_tree == tree else "mismatch"


def reusable_prefix(
    room: Cleanroom, series: Series, targets: tuple[Patch, ...]
) -> list[AppliedPatch]:
    """The applied commits that already match the first target patches byte for byte."""
    kept: list[AppliedPatch] = []
    for (commit, pid, sha), patch in zip(room.stack(), targets, strict=False):
        path = series.patch_path(patch)
        if pid != patch.id or not path.is_file() or sha != patch_sha256(path.read_bytes()):
            break
        tree = room.git.tree_of(commit)
        kept.append(AppliedPatch(patch.id, commit, tree, True, _ladder(patch, tree)))
    return kept


def apply_series(
    series: Series,
    cleanroom: Cleanroom,
    upto: str | None = None,
    progress: Progress | None = None,
) -> ApplyReport:
    """Bring a clean (no unsaved work) clean room to base + the series up to `upto`.

    Commits that already match a prefix of the series are kept (their files are untouched,
    so incremental builds stay incremental); the rest is reset with `reset --keep` and applied.
    """
    if cleanroom.is_dirty():
        raise DirtyTree(f"{cleanroom.path} has unsaved work", hint="pass --force to back it up")
    targets = series.upto(upto)
    kept = reusable_prefix(cleanroom, series, targets)
    cleanroom.reset_to(kept[-1].commit if kept else cleanroom.base_commit())
    cleanroom.git.refresh_index()
    report = or_null(progress)
    report.start("apply", len(targets))
    report.advance("apply", len(kept))
    applied = list(kept)
    for patch in targets[len(kept) :]:
        applied.append(apply_patch(cleanroom, series, patch))
        report.advance("apply")
    report.done("apply")
    return _report(cleanroom, tuple(applied))


def _report(room: Cleanroom, applied: tuple[AppliedPatch, ...]) -> ApplyReport:
    return ApplyReport(
        cleanroom=room.path,
        base_commit=room.base_commit(),
        base_tree=room.base_tree(),
        head=room.head(),
        tree=room.head_tree(),
        applied=applied,
    )


# ----------------------------------------------------------------------------- the command


def _unsaved_commits(room: Cleanroom) -> bool:
    return any(not pid for _c, pid, _s in room.stack())


def _protect(room: Cleanroom, force: bool) -> Backup | None:
    """Refuse on unsaved work unless `force`; with `force`, save it first."""
    dirty = room.dirty_paths()
    foreign = _unsaved_commits(room)
    if not dirty and not foreign:
        return None
    if not force:
        what = "commits not made by patchctl"
        if dirty:
            what = f"{len(dirty)} changed path(s): " + ", ".join(dirty[:3])
            what += " ..." if len(dirty) > 3 else ""
        raise DirtyTree(
            f"{room.path} has unsaved work ({what}); not touching it",
            hint="capture it with `patchctl capture`, or pass --force to back it up and reset",
        )
    backup = room.save_unsaved_work()
    room.discard_saved(backup)
    return backup


def cleanroom_apply(
    series_dir: Path,
    workdir: Path | None = None,
    upto: str | None = None,
    force: bool = False,
    progress: Progress | None = None,
) -> ApplyReport:
    """`patchctl cleanroom apply`: create or update the clean room and apply the series."""
    series = load_series(series_dir)
    if upto is not None:
        series.index(upto)  # NotFound before anything is touched
    path = workdir if workdir is not None else default_workdir(series.dir)
    with locked(path):
        return _apply_locked(series, path, upto, force, progress)


def _apply_locked(
    series: Series, path: Path, upto: str | None, force: bool, progress: Progress | None
) -> ApplyReport:
    created = False
    backup: Backup | None = None
    if is_cleanroom(path):
        room = load_cleanroom(path)
        backup = _protect(room, force)
        if not same_pin(room, series):
            room = _repin(room, series, progress)
            created = True
    else:
        room = create_cleanroom(series, path, progress)
        created = True
    result = apply_series(series, room, upto, progress)
    return replace(result, created=created, backup=backup)


def _repin(room: Cleanroom, series: Series, progress: Progress | None) -> Cleanroom:
    """Replace a clean room made from another upstream pin (its unsaved work is saved).

    The old clean room is moved aside first and restored if the new one cannot be made.
    """
    old = room.path.with_name(f".{room.path.name}.old-{os.getpid()}")
    room.path.rename(old)
    try:
        new = create_cleanroom(series, room.path, progress)
    except BaseException:
        old.rename(room.path)
        raise
    # Backups live on in the new clean room (their objects are fetched along).
    new.git.fetch(str(old), f"+{BACKUP_REFS}*:{BACKUP_REFS}*")
    shutil.rmtree(old)
    return new
