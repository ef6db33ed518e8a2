"""The series journal: a command's writes, recorded before the first one, so that the next run
finishes them after a kill at any point.

`series_session` (session.py) runs every write of a command through one `Journal`: patch
files, series.yaml, the generated docs and a clean room's HEAD move. Nothing is written in
place while the command works:

1. **stage**: for each write, the journal file (`<series dir>/.patchctl-journal.json`,
   state `staging`) is rewritten to name the target, its old sha256 (or none) and the staged
   copy, and only then the new bytes go to the staged copy beside the target
   (`.<name>.patchctl-<token>-<n>`, created with O_EXCL, synced);
2. **commit**: when the command has computed and checked everything, the journal is rewritten
   with state `committed`. This is the point of no return;
3. **apply**: each staged copy is renamed over its target (or linked to a target that must not
   exist yet), a file staged for removal (`stage_remove`, split's replaced patch) is unlinked
   while it still holds the bytes it had, refs move with a compare-and-swap, then the journal
   is removed.

A run that finds a journal (it holds the series lock, so its writer is dead) recovers before
it reads anything: a `staging` journal is rolled back (its staged copies removed: nothing of
it was visible yet), a `committed` one is finished (each target that still holds its old
bytes gets the new ones; one that holds the new ones is done). A target that holds neither
was changed by someone else since the kill: the run stops (DirtyTree, exit 8) and says how
to resolve it, keeping the journal and the staged bytes. So series.yaml, patch files and docs
always hold their old or their new bytes, all old or all new once a run has recovered.

The journal file is signed and read as every journal is (room/journal.py, which also holds
the clean room's own journal, `RoomJournal`).
"""

from __future__ import annotations

import errno
import os
import re
import secrets
from collections.abc import Iterable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patchctl import killpoint
from patchctl.errors import DirtyTree, PatchctlError
from patchctl.fsio import (
    create_file,
    locked_dir,
    refuse_overwrite,
    sync_dir,
    sync_file,
    sync_write,
    temp_files,
    write_atomic,
)
from patchctl.gitlayer.git import Git
from patchctl.room.journal import VERSION, Recovered, file_sha256, sha256, signed, verified

JOURNAL = ".patchctl-journal.json"
STAGING, COMMITTED = "staging", "committed"
STAGED_NAME = re.compile(r"\.(?P<name>.+)\.patchctl-[0-9a-f]{12}-[0-9]+")


@dataclass
class FileWrite:
    """A file a command writes: `staged` holds the new bytes until they replace `target`."""

    target: Path
    staged: Path
    old: str | None  # sha256 of the target before, None when it did not exist
    new: str
    create: bool = False  # the target must not exist (import: never overwrite)
    remove: bool = False  # the target goes (split: the patch file it replaced); no staged copy


@dataclass
class RefMove:
    """A ref a command moves in a clean room, from `old` to `new` (then the index follows)."""

    repo: Path
    ref: str
    old: str
    new: str
    reason: str = "patchctl"


Effect = FileWrite | RefMove


@dataclass
class Journal:
    """The journal of one command's writes (see the module docstring)."""

    path: Path
    op: str
    token: str = field(default_factory=lambda: secrets.token_hex(6))
    effects: list[Effect] = field(default_factory=list)
    staged_count: int = 0
    committed: bool = False

    def staged_bytes(self, target: Path) -> bytes | None:
        """The new bytes staged for `target` (None: nothing staged for it, or its removal)."""
        effect = self.pending().get(target)
        return None if effect is None or effect.remove else effect.staged.read_bytes()

    def pending(self) -> dict[Path, FileWrite]:
        """The staged file writes by target."""
        return {e.target: e for e in self.effects if isinstance(e, FileWrite)}

    def stage_file(self, target: Path, data: bytes, *, create: bool = False) -> None:
        """Stage `data` for `target` (a second stage of one target replaces the first)."""
        earlier = self.pending().get(target)
        if earlier is not None:
            self.effects.remove(earlier)
        self.staged_count += 1
        staged = target.with_name(f".{target.name}.patchctl-{self.token}-{self.staged_count}")
        old = earlier.old if earlier is not None else file_sha256(target)
        if earlier is not None:
            earlier.staged.unlink(missing_ok=True)
        self.effects.append(FileWrite(target, staged, old, sha256(data), create))
        self._save(STAGING)  # the journal names the staged copy before it exists
        killpoint.reached(f"stage {target.name}")
        target.parent.mkdir(parents=True, exist_ok=True)
        sync_write(staged, data)

    def stage_files(self, items: Sequence[tuple[Path, bytes]]) -> None:
        """`stage_file` for many targets with one journal write: the journal names every
        staged copy before any exists, then every copy is written, then each is synced and
        its folder synced once, all before this returns and so before anything can commit.
        (Writing them all before the first sync lets the file system put them on disk in
        one go instead of one journal commit per file; the guarantee is the same: a kill
        before the commit leaves a staging journal, rolled back whatever reached the disk,
        and the commit is written only after every copy is synced.)"""
        planned: list[tuple[Path, bytes]] = []
        for target, data in items:
            earlier = self.pending().get(target)
            if earlier is not None:
                self.effects.remove(earlier)
                earlier.staged.unlink(missing_ok=True)
                # the same target twice in `items`: its first copy is not written at all
                planned = [(path, raw) for path, raw in planned if path != earlier.staged]
            self.staged_count += 1
            staged = target.with_name(f".{target.name}.patchctl-{self.token}-{self.staged_count}")
            old = earlier.old if earlier is not None else file_sha256(target)
            self.effects.append(FileWrite(target, staged, old, sha256(data)))
            planned.append((staged, data))
        if not planned:
            return
        self._save(STAGING)
        folders: dict[Path, None] = {}
        for staged, data in planned:
            killpoint.reached(f"stage {staged.name}")
            create_file(staged, data)
            folders[staged.parent] = None
        for staged, _data in planned:
            sync_file(staged)
        for folder in folders:
            sync_dir(folder)

    def stage_remove(self, target: Path) -> None:
        """Stage removing `target`, an existing file (it goes when the journal commits)."""
        earlier = self.pending().get(target)
        if earlier is not None:
            self.effects.remove(earlier)
            earlier.staged.unlink(missing_ok=True)
        self.staged_count += 1
        staged = target.with_name(f".{target.name}.patchctl-{self.token}-{self.staged_count}")
        old = earlier.old if earlier is not None else file_sha256(target)
        self.effects.append(FileWrite(target, staged, old, "", remove=True))
        self._save(STAGING)
        killpoint.reached(f"stage removal of {target.name}")

    def stage_ref(self, git: Git, ref: str, new: str, reason: str) -> None:
        """Stage moving `ref` of the repository `git` from where it is now to `new`."""
        old = git.rev_parse(ref)
        self.effects = [e for e in self.effects if not _same_ref(e, git.repo, ref)]
        if old != new:
            self.effects.append(RefMove(git.repo, ref, old, new, reason))
        self._save(STAGING)

    def commit(self) -> list[Path]:
        """Make the staged writes real (all of them, even after a kill); the targets."""
        if not self.effects:
            self.path.unlink(missing_ok=True)
            return []
        for effect in self.effects:
            _check_still_old(effect)
        self._save(COMMITTED)
        self.committed = True
        killpoint.reached("journal committed")
        finish(self.effects)
        self.path.unlink()
        return [e.target for e in self.effects if isinstance(e, FileWrite)]

    def abandon(self) -> None:
        """Drop everything staged (nothing of it was visible); once committed, nothing (the
        journal stays for the next run to finish)."""
        if self.committed:
            return
        roll_back(self.effects)
        self.path.unlink(missing_ok=True)

    def _save(self, state: str) -> None:
        data = {
            "version": VERSION,
            "op": self.op,
            "pid": os.getpid(),
            "state": state,
            "effects": [_effect_json(e) for e in self.effects],
        }
        write_atomic(self.path, signed(data), sync=True)


def _same_ref(effect: Effect, repo: Path, ref: str) -> bool:
    return isinstance(effect, RefMove) and effect.repo == repo and effect.ref == ref


def _check_still_old(effect: Effect) -> None:
    """Before the commit point: the target still holds what the command read."""
    if isinstance(effect, FileWrite) and file_sha256(effect.target) != effect.old:
        raise DirtyTree(
            f"{effect.target} changed on disk while patchctl was working; nothing was written",
            hint="check the file, then run the command again",
        )


# ----------------------------------------------------------------------------- finish and undo


def finish(effects: Iterable[Effect], notes: list[str] | None = None) -> None:
    """Apply committed effects in order; each one that is already done is skipped."""
    for effect in effects:
        if isinstance(effect, FileWrite):
            _finish_file(effect)
        else:
            _finish_ref(effect, notes)


def _finish_file(effect: FileWrite) -> None:
    if effect.remove:
        _finish_removal(effect)
        return
    now = file_sha256(effect.target)
    if now == effect.new:
        effect.staged.unlink(missing_ok=True)
        return
    if now != effect.old or file_sha256(effect.staged) != effect.new:
        raise _conflict(effect, now)
    killpoint.reached(f"write {effect.target.name}")
    if effect.create:
        _link_new(effect)
    else:
        os.replace(effect.staged, effect.target)


def _finish_removal(effect: FileWrite) -> None:
    """Remove the target if it still holds its old bytes (gone already: done)."""
    now = file_sha256(effect.target)
    if now is None:
        return
    if now != effect.old:
        raise DirtyTree(
            f"an interrupted patchctl run was to remove {effect.target}, which changed since "
            "the run was killed; not removing it",
            hint=f"remove it or keep it by hand, then delete the journal "
            f"{effect.target.parent / JOURNAL}",
        )
    killpoint.reached(f"remove {effect.target.name}")
    effect.target.unlink()


def _link_new(effect: FileWrite) -> None:
    """Give the staged copy the target's name, never replacing an entry that appeared."""
    try:
        os.link(effect.staged, effect.target)  # fails rather than replace an entry
    except FileExistsError:
        raise refuse_overwrite(effect.target) from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        if effect.target.exists() or effect.target.is_symlink():  # no hard links here
            raise refuse_overwrite(effect.target) from None
        os.replace(effect.staged, effect.target)  # under the series lock: nobody else writes
        return
    effect.staged.unlink()


def _conflict(effect: FileWrite, now: str | None) -> DirtyTree:
    what = "is gone" if now is None else "holds neither its old nor its new bytes"
    if file_sha256(effect.staged) != effect.new:
        what += ", and the staged new bytes are missing"
    return DirtyTree(
        f"an interrupted patchctl run was to write {effect.target}, which {what} now "
        "(changed since the run was killed); not overwriting it",
        hint=f"its new bytes are in {effect.staged}: keep the file you want at "
        f"{effect.target}, then delete {effect.staged} and the journal "
        f"{effect.staged.parent / JOURNAL} (or the journal in the series directory)",
    )


def _finish_ref(effect: RefMove, notes: list[str] | None) -> None:
    git = Git(effect.repo)
    now = git.maybe_rev(effect.ref)
    if now == effect.old:
        killpoint.reached(f"move {effect.ref}")
        git.update_ref(effect.ref, effect.new, effect.reason, old=effect.old)
    elif now != effect.new:
        if notes is not None:
            notes.append(f"{effect.repo}: {effect.ref} moved since the kill; left where it is")
        return
    git.read_tree("HEAD", reset=True)  # the index follows the commit; the work tree is untouched
    git.refresh_index()


def roll_back(effects: Iterable[Effect]) -> None:
    """Remove the staged copies of effects that were never committed."""
    for effect in effects:
        if isinstance(effect, FileWrite):
            effect.staged.unlink(missing_ok=True)


# ----------------------------------------------------------------------------- the file


def _effect_json(effect: Effect) -> dict[str, Any]:
    if isinstance(effect, FileWrite):
        return {
            "kind": "file",
            "target": os.fsdecode(effect.target),
            "staged": os.fsdecode(effect.staged),
            "old": effect.old,
            "new": effect.new,
            "create": effect.create,
            "remove": effect.remove,
        }
    return {
        "kind": "ref",
        "repo": os.fsdecode(effect.repo),
        "ref": effect.ref,
        "old": effect.old,
        "new": effect.new,
        "reason": effect.reason,
    }


def _effect_from(raw: Any) -> Effect:
    if raw.get("kind") == "file":
        return FileWrite(
            Path(raw["target"]),
            Path(raw["staged"]),
            raw["old"],
            str(raw["new"]),
            bool(raw["create"]),
            bool(raw.get("remove", False)),
        )
    if raw.get("kind") == "ref":
        return RefMove(
            Path(raw["repo"]), str(raw["ref"]), str(raw["old"]), str(raw["new"]), raw["reason"]
        )
    raise ValueError(f"unknown effect {raw.get('kind')!r}")


def read_journal(path: Path) -> tuple[str, str, list[Effect]]:
    """(op, state, effects) of the (verified) journal at `path`."""
    raw = verified(path)
    try:
        if raw.get("state") not in (STAGING, COMMITTED):
            raise ValueError("unknown state")
        effects = [_effect_from(e) for e in raw["effects"]]
        for effect in effects:
            _check_effect(effect)
        return str(raw["op"]), str(raw["state"]), effects
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PatchctlError(
            f"{path} is not a journal patchctl can read ({exc})",
            hint="a patchctl run was killed and left it; move it aside and check the series",
        ) from None


def _check_effect(effect: Effect) -> None:
    """The shapes patchctl writes, and only those: a staged copy is a sibling of its target
    with patchctl's name; a ref move is a clean room's HEAD (ValueError otherwise)."""
    if isinstance(effect, FileWrite):
        found = STAGED_NAME.fullmatch(effect.staged.name)
        if effect.staged.parent != effect.target.parent or not found:
            raise ValueError(f"{effect.staged} is not a staged copy of {effect.target}")
        if found["name"] != effect.target.name:
            raise ValueError(f"{effect.staged} is not a staged copy of {effect.target}")
    elif effect.ref != "HEAD" or not (effect.repo / ".git" / "patchctl-cleanroom.json").is_file():
        raise ValueError(f"{effect.repo}: {effect.ref} is not a clean room's HEAD")


def recover(directory: Path) -> Recovered | None:
    """Finish or roll back the command whose journal is in `directory` (None: there is none).

    Call it holding the directory's lock, before reading anything the journal names.
    """
    path = directory / JOURNAL
    for temp in temp_files(directory, JOURNAL):  # a journal write that was killed
        temp.unlink(missing_ok=True)
    if not path.is_file():
        return None
    op, state, effects = read_journal(path)
    if state == STAGING:
        roll_back(effects)
        path.unlink()
        return Recovered(op, "rolled back")
    notes: list[str] = []
    with ExitStack() as locks:
        repos = sorted({e.repo for e in effects if isinstance(e, RefMove)})
        for folder in sorted({repo.parent for repo in repos}):
            if folder.resolve() != directory.resolve():  # that one is held by the caller
                locks.enter_context(locked_dir(folder))  # the clean room's lock
        for repo in repos:
            Git(repo).remove_stale_locks()  # a git killed with the run held them
        finish(effects, notes)
    path.unlink()
    targets = tuple(e.target for e in effects if isinstance(e, FileWrite))
    return Recovered(op, "finished", targets, tuple(notes))
