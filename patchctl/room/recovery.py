"""Recovery of a clean room after a killed `cleanroom apply` (creation, pin change, apply).

The command writes its intent to the clean room's journal (room/journal.py, RoomJournal,
`<parent>/.<name>.patchctl-journal.json`, in the lock area) before each change:

- `stage`, `partial`, `aside`, `discard`: a new clean room is being built in `partial`
  (`stage: building`) or swapped in with two renames (`stage: swapping`: the old one goes to
  `aside`, which is deleted afterwards only with `discard`: it held nothing of the user's);
- `head`, `reset_to`, `plan`, `root`: the commit the clean room was at (with no unsaved work),
  where `reset --keep` takes it, and the patches about to be applied (id, sha256, file and
  the directory each applies under; `root` for a journal without one);
- `backup`: unsaved work `--force` saved and is about to discard.

`recover_room` runs when the next command takes the clean room's lock. A half-built clean
room is removed; a half-done swap is finished, or the old clean room is put back when the new
one never got there. Git's lock files left by a killed git are removed. Then the work tree:
each changed path holds either what patchctl itself put there (its entry in the journal's
`head`, `reset_to`, the current HEAD, the tree the patch being applied makes, or the saved
backup) or something else. When all of them are patchctl's, they go back to HEAD. When any
is not (a file the kill cut short mid-write, or an edit made after the kill), all unsaved work
is first saved as `--force` saves it (a backup ref and a patch file, named in the note), then
the work tree goes back to HEAD. Either way nothing is lost and the clean room is clean.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from patchctl.errors import PatchctlError
from patchctl.fsio import temp_files
from patchctl.gitlayer.git import Git
from patchctl.gitlayer.index import temp_index
from patchctl.room.cleanroom import Backup, Cleanroom, is_cleanroom, load_cleanroom, partial_path
from patchctl.room.journal import Recovered, file_sha256, room_journal_path, verified
from patchctl.series.gitapply import apply_to_index
from patchctl.series.model import read_patch_file


def recover_room(room: Path) -> Recovered | None:
    """Finish or undo what a killed command left at the clean room `room` (None: nothing).

    Call it holding the clean room's lock, before looking at the clean room.
    """
    path = room_journal_path(room)
    for temp in temp_files(room.parent, path.name):  # a journal write that was killed
        temp.unlink()
    if not path.is_file():
        swept = _remove_partials(room)
        return Recovered("cleanroom apply", "rolled back", (room,), tuple(swept)) if swept else None
    data = _read(room, path)
    notes: list[str] = []
    outcome = _finish_swap(room, data, notes)  # before the sweep: it may need the new room
    notes += _remove_partials(room)
    if is_cleanroom(room):
        locks = Git(room).remove_stale_locks()  # a killed git's; the clean room is ours, locked
        if locks:
            notes.append(f"removed {len(locks)} lock file(s) a killed git left in {room}/.git")
        if data.get("head"):
            _restore_work_tree(load_cleanroom(room), data, notes)
    path.unlink()
    if not notes and not data.get("head") and not data.get("stage"):
        return None  # the clean room was only in use: nothing was left to undo
    return Recovered(str(data.get("op", "cleanroom apply")), outcome, (room,), tuple(notes))


def _remove_partials(room: Path) -> list[str]:
    """Clean rooms a killed run was building (`.<name>.partial-<pid>`): nothing uses them."""
    notes = []
    pattern = partial_path(room).name.rsplit("-", 1)[0] + "-*"
    for partial in sorted(room.parent.glob(pattern)) if room.parent.is_dir() else []:
        shutil.rmtree(partial)
        notes.append(f"removed the partly built clean room {partial}")
    return notes


def _read(room: Path, path: Path) -> dict[str, Any]:
    """The verified journal (room/journal.py: verified), whose paths are the clean room's own
    siblings with patchctl's names: the only directories recovery may move or delete."""
    data = verified(path)
    partial, aside = data.get("partial"), data.get("aside")
    ok = (partial is None or _sibling(room, partial, PARTIAL)) and (
        aside is None or _sibling(room, aside, ASIDE)
    )
    if not ok:
        raise PatchctlError(
            f"{path} names directories that are not {room}'s own; not acting on it",
            hint="move it aside, then check the clean room with `patchctl cleanroom status`",
        )
    return data


PARTIAL = r"\.{name}\.partial-[0-9]+"
ASIDE = r"{name}\.old(?:-[0-9]+)?"


def _sibling(room: Path, value: object, pattern: str) -> bool:
    path = Path(str(value))
    shape = pattern.format(name=re.escape(room.name))
    return path.parent == room.parent and re.fullmatch(shape, path.name) is not None


# ----------------------------------------------------------------------------- building, swapping


def _finish_swap(room: Path, data: dict[str, Any], notes: list[str]) -> str:
    """Finish a swap that was under way, or put the old clean room back; the outcome."""
    partial = Path(data["partial"]) if data.get("partial") else None
    aside = Path(data["aside"]) if data.get("aside") else None
    swapping = data.get("stage") == "swapping"
    if swapping and partial is not None and partial.is_dir():
        if room.exists() and aside is not None and not aside.exists():
            room.rename(aside)  # the old clean room steps aside ...
        if not room.exists():
            partial.rename(room)  # ... and the complete new one takes its place
    if partial is not None and partial.exists():
        shutil.rmtree(partial)
        notes.append(f"removed the partly built clean room {partial}")
    if aside is not None and aside.exists():
        if not room.exists():
            aside.rename(room)  # the new one never got there: the old one comes back
            notes.append(f"put the old clean room back at {room}")
            return "rolled back"
        if data.get("discard"):
            shutil.rmtree(aside)  # it held nothing of the user's (checked before the swap)
        else:
            notes.append(f"the old clean room is kept at {aside}")
    return "finished" if swapping and room.exists() else "rolled back"


# ----------------------------------------------------------------------------- the work tree


def _restore_work_tree(room: Cleanroom, data: dict[str, Any], notes: list[str]) -> None:
    raw = data.get("backup")
    backup = _backup(raw) if isinstance(raw, dict) else None
    dirty = [p for p in room.dirty_paths() if not p.endswith("/")]  # "x/": a nested repository
    if not dirty:
        return
    snapshot = room.git.tree_entries(room.git.snapshot_worktree())
    known = [room.git.tree_entries(tree) for tree in _known_trees(room, data, backup)]
    foreign = [p for p in dirty if not any(k.get(p) == snapshot.get(p) for k in known)]
    if foreign:
        saved = room.save_unsaved_work()
        room.discard_saved(saved)
        shown = ", ".join(foreign[:3]) + (" ..." if len(foreign) > 3 else "")
        notes.append(
            f"{len(foreign)} path(s) held something patchctl did not write ({shown}): all "
            f"unsaved work was saved to {saved.ref} and {saved.patch_file}, then reset"
        )
        return
    room.discard_paths(dirty)
    notes.append(f"undid {len(dirty)} path(s) the interrupted {data.get('op', 'run')} changed")


def _backup(raw: dict[str, Any]) -> Backup:
    return Backup(str(raw["ref"]), str(raw["commit"]), Path(raw["patch_file"]), tuple(raw["paths"]))


def _known_trees(room: Cleanroom, data: dict[str, Any], backup: Backup | None) -> list[str]:
    """The trees patchctl may have put in the work tree: the journal's head, where it was
    resetting to, HEAD, the saved unsaved work, and what the patch being applied makes."""
    revs = [str(data["head"]), str(data.get("reset_to") or data["head"]), "HEAD"]
    if backup is not None and room.git.maybe_rev(backup.ref) == backup.commit:
        revs.append(backup.commit)
    trees = {room.git.tree_of(rev) for rev in revs if room.git.maybe_rev(rev) is not None}
    inflight = _inflight(room, data)
    if inflight is not None:
        trees.add(inflight)
    return sorted(trees)


def _inflight(room: Cleanroom, data: dict[str, Any]) -> str | None:
    """The tree the next patch of the journal's plan makes from HEAD (None when it cannot be
    known: nothing left to apply, the stack is not a prefix of the plan, the file changed)."""
    default_root = str(data.get("root", "."))
    plan = [
        (str(e[0]), str(e[1]), str(e[2]), str(e[3]) if len(e) > 3 else default_root)
        for e in data.get("plan", [])
    ]
    stack = [(pid, sha) for _commit, pid, sha in room.stack()]
    if len(stack) >= len(plan) or [(p, s) for p, s, _f, _r in plan[: len(stack)]] != stack:
        return None
    _pid, sha, file, root = plan[len(stack)]
    patch = Path(file)
    if file_sha256(patch) != sha:
        return None
    with temp_index(room.git) as index:
        index.read_tree(room.head_tree())
        if not apply_to_index(index, read_patch_file(patch), root).ok:
            return None
        return index.write_tree()
