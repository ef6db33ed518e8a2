"""Capture: a clean-room work tree -> deterministic patch bytes, committed as the patch.

The work tree is read with `Git.snapshot_trusting` (a copy of the index, so the clean room's
own index is never touched); `add -A` picks up modified, new, deleted, mode-changed and
symlinked files, and new files that only a `.gitignore` the upstream does not have hides
are added too (`worktree_snapshot`, room/snapshot.py): such a rule never leaves work out. The
bytes come from patchfile.py (the canonical diff and header), so the same trees and metadata
always give the same bytes, which `verify`'s re-export relies on.
An imported patch keeps its own header and trailer (series/parts.py): only its diff is
replaced, and its recorded sha256 follows the new bytes.

The patches above the one captured record trees (`pre_tree`, `post_tree`) that start from the
captured patch's old result, so a capture that changes that result leaves them stale (`verify`
fails their chain). `capture` re-records them itself where that is certain (`rerecord_later`):
each later patch of the series, in order, applied exactly (no offset, no fuzz) to the tree
the one before now leaves, gets the trees it turns into each other. Its file keeps every
byte but, for a file the capture also changed, its `index <blob>..<blob>` lines, which name
the blobs of those trees (as `pre_tree`/`post_tree` do; verify's re-export needs them right),
and only when the diff made from the new trees differs from the file in nothing else. At
the first later patch that does not apply exactly, or whose diff would change beyond its
index lines (an offset, fuzz or a hand fix: a byte change, which is `refresh`'s or the
user's call), it and every patch after it keep their old trees and are reported stale, with
the command that re-records (and, where they drift, regenerates) them. An entry `new` made
and nobody captured is `uncaptured`: it has nothing recorded. Sibling
series that extend this one were recorded on the tree this series leaves: they are named
with the commands that re-record their own patches (capture cannot lock or write them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from patchctl import allowlists
from patchctl.errors import (
    ConfigError,
    DirtyTree,
    NothingToCapture,
    PatchChanged,
    PatchctlError,
)
from patchctl.fsio import check_writable, refuse_overwrite, write_if_changed
from patchctl.gitlayer.git import Git
from patchctl.gitlayer.objects import scratch_repo
from patchctl.room.cleanroom import Cleanroom
from patchctl.room.snapshot import outside_root, worktree_snapshot
from patchctl.series.docs import render_docs
from patchctl.series.gitapply import RESTORE_HINT, TreePatcher, commit_message, patch_sha256
from patchctl.series.model import Patch, Series, check_patch_size, check_savable, read_patch_file
from patchctl.series.parts import split_patch, with_diff
from patchctl.series.patchfile import export_patch
from patchctl.series.stack import extending, load_stack
from patchctl.txn.session import series_session


@dataclass(frozen=True)
class Captured:
    """What a capture produced: the patch bytes and the trees around them."""

    patch: Patch
    data: bytes
    pre_tree: str
    post_tree: str
    written: bool


def capture_trees(git: Git, patch: Patch, pre: str, post: str, root: str = ".") -> bytes:
    """The patch bytes for `pre` -> `post`; NothingToCapture when the trees are equal."""
    if pre == post:
        raise NothingToCapture(
            f"{patch.id}: the working tree has no changes since the commit before it",
            hint="edit files in the clean room, then run capture again",
        )
    outside = paths_outside_root(git, pre, post, root)
    if outside:
        raise PatchctlError(
            f"{patch.id}: changes outside the series root {root!r} cannot be in the patch: "
            + ", ".join(outside[:5])
            + (" ..." if len(outside) > 5 else ""),
            hint="revert them in the clean room (they would be lost), then capture again",
        )
    with scratch_repo([git.repo]) as scratch:
        return export_patch(scratch, patch, pre, post, root)


def paths_outside_root(git: Git, pre: str, post: str, root: str) -> list[str]:
    """Changed paths that lie outside `root` (always none for root '.')."""
    if root in (".", ""):
        return []
    return outside_root(git.changed_paths(pre, post), root)


# ----------------------------------------------------------------------------- the steps


def new_patch(
    series: Series,
    patch_id: str,
    title: str,
    *,
    upstream_status: str = "Pending",
    origin: str = "patchctl",
    markers: tuple[str, ...] = (),
) -> tuple[Series, Patch]:
    """`patchctl new`: a series entry for `patch_id` at the top of the stack (not saved).

    Every value is checked by the rules series.yaml is loaded with, and the entry's file must
    not exist yet (a capture would overwrite it; DirtyTree, exit 8). The id must be unique
    across the stack (an extended series' ids are taken too).
    """
    if patch_id in load_stack(series).ids():
        raise ConfigError(f"patch {patch_id!r} already exists", path=series.path, key="id")
    problem = allowlists.patch_id_problem(patch_id)
    if problem is not None:
        raise ConfigError(
            f"{allowlists.shown(patch_id)} {problem}",
            path=series.path,
            key="id",
            hint="e.g. 0079-fix",
        )
    _check_text(series, "title", title.strip(), allowlists.text_problem, required=True)
    _check_text(series, "upstream_status", upstream_status, allowlists.text_problem)
    _check_text(series, "origin", origin, allowlists.text_problem)
    for marker in markers:
        _check_text(series, "markers", marker, allowlists.marker_problem)
    entry = Patch(
        id=patch_id,
        file=f"{patch_id}.patch",
        title=title.strip(),
        upstream_status=upstream_status,
        origin=origin,
        markers=markers,
    )
    target = series.patch_path(entry)
    if target.exists() or target.is_symlink():
        raise refuse_overwrite(target)
    updated = series.with_patch(entry)
    check_savable(updated)
    return updated, entry


def _check_text(
    series: Series,
    key: str,
    text: str,
    rule: Callable[[str], str | None],
    *,
    required: bool = False,
) -> None:
    problem = "is empty" if required and not text else rule(text)
    if problem is not None:
        raise ConfigError(
            f"{allowlists.shown(text)} {problem}",
            path=series.path,
            key=key,
            hint="give one line of plain text (no control characters)",
        )


def stack_position(room: Cleanroom, series: Series, patch_id: str) -> tuple[str, bool]:
    """(parent commit of the patch's commit, whether the patch is already committed).

    Capture needs exactly the patches before `patch_id` applied, plus optionally `patch_id`
    itself on top (a re-capture); anything else would mix other patches' changes in.
    """
    ordered = load_stack(series)
    before = list(ordered.ids()[: ordered.index(patch_id)])
    stack = room.stack()
    applied = [pid for _commit, pid, _sha in stack]
    if applied == before:
        return room.head(), False
    if applied == [*before, patch_id]:
        return (stack[-2][0] if len(stack) > 1 else room.base_commit()), True
    raise DirtyTree(
        f"clean room {room.path} has [{', '.join(applied) or 'nothing'}] applied; capturing "
        f"{patch_id} needs exactly the patches before it (and at most {patch_id} itself)",
        hint=f"patchctl cleanroom apply --upto {before[-1]}" if before else "apply nothing first",
    )


MoveRef = Callable[[Git, str, str, str], None]  # (git, ref, new commit, reason)


def move_head(git: Git, ref: str, new: str, reason: str) -> None:
    """Move `ref` at once; the index follows (stat data kept where blobs match), the work
    tree is untouched. A session stages the move instead (SeriesSession.move_ref)."""
    git.update_ref(ref, new, reason)
    git.read_tree("HEAD", reset=True)
    git.refresh_index()


def commit_capture(
    room: Cleanroom, patch: Patch, data: bytes, parent: str, move: MoveRef = move_head
) -> str:
    """Commit the captured tree as the patch's commit (same message as `cleanroom apply`)
    and move HEAD to it through `move`."""
    assert patch.post_tree is not None
    message = commit_message(patch, patch_sha256(data))
    commit = room.git.commit_tree(patch.post_tree, message, (parent,))
    move(room.git, "HEAD", commit, f"patchctl capture {patch.id}")
    return commit


def capture_patch(
    series: Series,
    room: Cleanroom,
    patch_id: str,
    write: Callable[[Path, bytes], bool] = write_if_changed,
    move: MoveRef = move_head,
    *,
    accept_changed: bool = False,
) -> tuple[Series, Captured]:
    """Write the patch file (through `write`), commit it in the clean room (HEAD moves
    through `move`), record its trees.

    Everything the capture and the save after it produce is checked before the first write:
    the updated series loads back, the docs render from the new bytes, every target is
    writable. A failure there leaves patch, series.yaml and clean room as they were.
    A patch whose recorded sha256 its file or its clean-room commit no longer matches is
    refused unless `accept_changed` (check_unchanged).
    Only the series' own patches are captured here; one of an extended series is refused
    (stack.own_entry): it records trees of its own upstream and is captured in its own series.
    """
    patch = load_stack(series).own_entry(patch_id).patch
    parent, recapture = stack_position(room, series, patch_id)
    path = series.patch_path(patch)
    if not accept_changed:
        check_unchanged(room, patch, path, recapture)
    pre = room.git.tree_of(parent)
    post = worktree_snapshot(room.git, room.base_tree())
    data = capture_trees(room.git, patch, pre, post, series.root)
    if patch.imported and path.is_file():  # its own header and trailer stay (series/parts.py)
        data = with_diff(read_patch_file(path), split_patch(data).diff)
    check_patch_size(patch, data)
    sha = patch_sha256(data) if patch.imported else patch.sha256
    recorded = replace(patch, pre_tree=pre, post_tree=post, sha256=sha)
    updated = series.with_patch(recorded)
    check_savable(updated)
    docs = render_docs(updated, {patch.id: data})
    check_writable([path, series.path, *docs])
    written = write(path, data)
    commit_capture(room, recorded, data, parent, move)
    return updated, Captured(recorded, data, pre, post, written)


def check_unchanged(room: Cleanroom, patch: Patch, path: Path, recapture: bool) -> None:
    """PatchChanged (exit 12) when series.yaml records a sha256 for the patch (an imported
    patch) and either its file or the bytes its clean-room commit was applied from (the
    commit's `Patchctl-Patch-Sha256` trailer) hash to another: capturing would record
    damaged bytes (a changed header byte is kept, a changed diff line is in the room) as
    the patch's new truth. `--accept-changed` takes them on purpose."""
    if patch.sha256 is None:
        return
    found = []
    if recapture:
        applied = room.stack()[-1][2]
        if applied != patch.sha256:
            found.append(f"its clean-room commit was applied from bytes with sha256 {applied}")
    if path.is_file():
        actual = patch_sha256(read_patch_file(path))
        if actual != patch.sha256:
            found.append(f"{path.name} has sha256 {actual}")
    if found:
        raise PatchChanged(
            f"patch {patch.id}: {'; '.join(found)}, but series.yaml records {patch.sha256}; "
            "capturing would record the changed bytes as the patch",
            hint=RESTORE_HINT.format(file=path.name, id=patch.id).split("; ")[0]
            + ", then `patchctl cleanroom apply`; if the change is meant, "
            f"`patchctl capture {patch.id} --accept-changed`",
        )


# ----------------------------------------------------------------------------- the commands


def add_patch(
    series_path: Path,
    patch_id: str,
    title: str,
    *,
    upstream_status: str = "Pending",
    origin: str = "patchctl",
    markers: tuple[str, ...] = (),
) -> tuple[Series, Patch]:
    """`patchctl new`: add the entry to series.yaml (under the series lock); no patch file yet."""
    with series_session(series_path, check_files=False, op="new") as session:
        updated, entry = new_patch(
            session.series,
            patch_id,
            title,
            upstream_status=upstream_status,
            origin=origin,
            markers=markers,
        )
        session.save(updated, docs=False)  # the docs list patch files, which do not exist yet
    return updated, entry


@dataclass(frozen=True)
class Later:
    """A patch above the captured one, after the capture: its recorded trees `current` (they
    already start from the tree the capture left), `re-recorded` (it applies exactly there:
    its new trees recorded, its file untouched) or `stale` (left as they were: `why`)."""

    id: str
    state: str  # "current" | "re-recorded" | "stale" | "uncaptured" (a `new` entry, no file)
    pre_tree: str | None
    post_tree: str | None
    why: str = ""
    index_lines: bool = False  # re-recorded: its `index` lines rewritten to the new blobs

    def to_json(self) -> dict[str, object]:
        """Plain data for --json."""
        return {
            "id": self.id,
            "state": self.state,
            "pre_tree": self.pre_tree,
            "post_tree": self.post_tree,
            "why": self.why,
            "index_lines_rewritten": self.index_lines,
        }


@dataclass(frozen=True)
class Extending:
    """A sibling series that extends the captured one: its own patches were recorded on the
    tree this series leaves, which the capture changed; the commands that re-record them."""

    series: Path
    commands: tuple[str, ...]


def rerecord_later(
    series: Series, room: Cleanroom, patch_id: str, post: str
) -> tuple[Series, tuple[Later, ...], tuple[tuple[Path, bytes], ...]]:
    """The series with the trees of the own patches after `patch_id` re-recorded from `post`
    (the captured patch's new result) where each applies exactly, in order; what happened to
    each; and the patch files whose `index` lines must follow (path, new bytes). Writes
    nothing but objects in the clean room's repository."""
    patches = series.patches[series.index(patch_id) + 1 :]
    found: list[Later] = []
    writes: list[tuple[Path, bytes]] = []
    updated = series
    tree: str | None = post
    with TreePatcher(room.git) as patcher, scratch_repo([room.git.repo]) as scratch:
        for patch in patches:
            if not series.patch_path(patch).is_file() and patch.post_tree is None:
                # an entry `patchctl new` made, never captured: nothing recorded to go stale
                found.append(Later(patch.id, "uncaptured", None, None, "not captured yet"))
                continue
            if tree is None:
                why = "a patch before it is stale"
                found.append(Later(patch.id, "stale", patch.pre_tree, patch.post_tree, why))
                continue
            if patch.pre_tree == tree and patch.post_tree is not None:
                found.append(Later(patch.id, "current", patch.pre_tree, patch.post_tree))
                tree = patch.post_tree
                continue
            path = series.patch_path(patch)
            why, new = _exact(patcher, series, patch, tree)
            data = read_patch_file(path) if new is not None else b""
            again = data
            if new is not None and not patch.imported:
                again = export_patch(scratch, patch, tree, new, series.root)
                if again != data and not _index_lines_only(data, again):
                    why, new = _reexport_differs(data, again), None
            if new is None:
                found.append(Later(patch.id, "stale", patch.pre_tree, patch.post_tree, why))
                tree = None
                continue
            if again != data:
                writes.append((path, again))
            updated = updated.with_patch(replace(patch, pre_tree=tree, post_tree=new))
            found.append(Later(patch.id, "re-recorded", tree, new, index_lines=again != data))
            tree = new
    return updated, tuple(found), tuple(writes)


def _index_lines_only(old: bytes, new: bytes) -> bool:
    """True when `old` and `new` differ only in `index <blob>..<blob>` lines (which name the
    blobs the trees around the patch hold, as its recorded trees do)."""
    a, b = old.split(b"\n"), new.split(b"\n")
    return len(a) == len(b) and all(
        x == y or (x.startswith(b"index ") and y.startswith(b"index "))
        for x, y in zip(a, b, strict=True)
    )


def _reexport_differs(old: bytes, new: bytes) -> str:
    a, b = old.split(b"\n"), new.split(b"\n")
    line = (
        next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        + 1
    )
    return (
        f"it applies exactly, but its diff made from the new trees differs from its file at"
        f" line {line} (more than its index lines): its bytes are refresh's or your call"
    )


def _exact(patcher: TreePatcher, series: Series, patch: Patch, tree: str) -> tuple[str, str | None]:
    """('', the tree `patch` makes of `tree`) when its file applies there exactly; (why not,
    None) otherwise (a missing file, a failed apply, a hunk at an offset or with fuzz)."""
    path = series.patch_path(patch)
    if not path.is_file():
        return f"its file {path.name} is missing", None
    result = patcher.apply(tree, read_patch_file(path), series.root)
    if not result.outcome.ok or result.tree is None:
        return f"it does not apply there: {result.outcome.first_error()}", None
    drift = result.outcome.drift()
    if drift:
        first = drift[0]
        return f"it applies there only with drift ({first.file}: {first.why})", None
    return "", result.tree


def extending_series(series: Series, changed: bool) -> tuple[Extending, ...]:
    """The sibling series that extend `series`, when the capture `changed` the patch's result
    (so the tree this series leaves changes too, now or once its stale patches are
    refreshed): each with the commands that re-record its own patches."""
    if not changed:
        return ()
    found = []
    for other in extending(series):
        if not other.patches:
            continue
        first = other.patches[0].id
        where = f"--series {other.dir}"
        apply = f"patchctl cleanroom apply {where} --upto {first}"
        found.append(Extending(other.dir, (apply, f"patchctl capture {first} {where}")))
    return tuple(found)


def refresh_command(series: Series, later: tuple[Later, ...], workdir: Path | None) -> str | None:
    """The command that re-records (and where they drift, regenerates) the stale patches;
    None when none is stale. For a series that extends another, refresh replays from the
    pristine upstream with the extended series' patches applied, as apply does."""
    stale = [p.id for p in later if p.state == "stale"]
    if not stale:
        return None
    where = f" --workdir {workdir}" if workdir is not None else ""
    return f"patchctl refresh {' '.join(stale)} --series {series.dir}{where}"


def stale_hint(series: Series, later: tuple[Later, ...], workdir: Path | None) -> str | None:
    """What re-records the stale patches, in words and commands (None when none is stale)."""
    stale = [p.id for p in later if p.state == "stale"]
    if not stale:
        return None
    command = refresh_command(series, later, workdir)
    if command is not None:
        return (
            f"{command} (a drifted patch is regenerated; one that conflicts exits 3:"
            " `patchctl cleanroom apply --upto` the patch before it, apply it by hand, and"
            " `patchctl capture` it)"
        )
    where = f" --series {series.dir}" + (f" --workdir {workdir}" if workdir is not None else "")
    before = series.patches[series.index(stale[0]) - 1].id
    return (
        f"patchctl cleanroom apply --upto {before}{where}; apply {stale[0]}'s file there by hand"
        f" (`git apply` takes an offset); patchctl capture {stale[0]}{where} (which re-records"
        " the ones after it)"
    )


@dataclass(frozen=True)
class CaptureResult:
    """What `patchctl capture` did: the patch file, the capture, the files whose bytes changed,
    the patches above it (their trees re-recorded or left stale) and the series extending it."""

    file: Path
    captured: Captured
    changed: tuple[Path, ...]
    later: tuple[Later, ...] = ()
    extending: tuple[Extending, ...] = ()
    refresh: str | None = None  # the command that re-records the stale ones, if any
    hint: str | None = None  # what re-records the stale ones, in words (None: none is stale)


def capture(
    series_path: Path, patch_id: str, workdir: Path | None = None, *, accept_changed: bool = False
) -> CaptureResult:
    """`patchctl capture ID`: the clean room's edits become patch ID (series and room locked);
    `accept_changed`: take a patch whose bytes differ from its recorded sha256 on purpose."""
    with series_session(series_path, check_files=False, op="capture") as session:
        room = session.cleanroom(workdir)
        before = session.series
        updated, captured = capture_patch(
            before,
            room,
            patch_id,
            session.write_patch,
            session.move_ref,
            accept_changed=accept_changed,
        )
        updated, later, writes = rerecord_later(updated, room, patch_id, captured.post_tree)
        check_writable([path for path, _data in writes])
        written = session.write_patches(list(writes))
        changed = written + session.save(updated)
    moved = before.patch(patch_id).post_tree != captured.post_tree
    return CaptureResult(
        updated.patch_path(captured.patch),
        captured,
        tuple(changed),
        later,
        extending_series(updated, moved),
        refresh_command(updated, later, workdir),
        stale_hint(updated, later, workdir),
    )
