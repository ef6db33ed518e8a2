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

`RoomJournal` (at the end) is the clean room's journal: what `cleanroom apply` is about to do
to a clean room, which recovery.py finishes or undoes.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import re
import secrets
from collections.abc import Iterable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patchctl import killpoint
from patchctl.cache import cache_dir
from patchctl.errors import DirtyTree, PatchctlError
from patchctl.fsio import (
    locked_dir,
    refuse_overwrite,
    sync_dir,
    sync_write,
    temp_files,
    write_atomic,
)
from patchctl.git import Git
from patchctl.limits import JOURNAL_BYTES, read_bounded
from patchctl.progress import notice

JOURNAL = ".patchctl-journal.json"
VERSION = 1
STAGING, COMMITTED = "staging", "committed"


# ----------------------------------------------------------------------------- signing

KEY_FILE = "journal.key"
JOURNAL_FIX = "a patchctl run was killed and left it: move it aside and check the files"
STAGED_NAME = re.compile(r"\.(?P<name>.+)\.patchctl-[0-9a-f]{12}-[0-9]+")


def journal_key() -> bytes:
    """This user's journal key (`<cache>/journal.key`, 32 random bytes, mode 0600; made on
    first use). A journal is signed with it: one that arrived from elsewhere (committed to a
    shared repository next to a series) is never acted on, whatever paths it names."""
    path = cache_dir() / KEY_FILE
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{KEY_FILE}.tmp{os.getpid()}-{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(secrets.token_bytes(32))
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(tmp, path)  # a concurrent first run's key wins; never replaced
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    key = path.read_bytes()
    if len(key) != 32:
        raise PatchctlError(
            f"{path} is not a patchctl journal key (32 bytes)",
            hint="delete it (a new one is made), after finishing any interrupted run by hand",
        )
    return key


def signed(data: dict[str, Any]) -> bytes:
    """`data` as journal bytes, with its signature (`mac`)."""
    body = json.dumps(data, sort_keys=True, default=os.fsdecode)
    mac = hmac.new(journal_key(), body.encode("utf-8"), hashlib.sha256).hexdigest()
    return (json.dumps({**json.loads(body), "mac": mac}, indent=1, sort_keys=True) + "\n").encode()


def verified(path: Path) -> dict[str, Any]:
    """The journal at `path` if it parses and its signature is this user's (else an error
    naming it: DirtyTree, exit 8, for a journal patchctl did not write here)."""
    raw = read_journal_bytes(path, JOURNAL_FIX)
    try:
        data = json.loads(raw)
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise ValueError("unknown version")
    except ValueError as exc:
        raise PatchctlError(
            f"{path} is not a journal patchctl can read ({exc})",
            hint=JOURNAL_FIX,
        ) from None
    mac = data.pop("mac", None)
    body = json.dumps(data, sort_keys=True).encode("utf-8")
    want = hmac.new(journal_key(), body, hashlib.sha256).hexdigest()
    if not isinstance(mac, str) or not hmac.compare_digest(mac, want):
        raise DirtyTree(
            f"{path} was not written by patchctl for this user (its signature does not match "
            f"{cache_dir() / KEY_FILE}); not acting on it",
            hint="if it came with a repository, delete it; if patchctl was killed under "
            "another cache directory, check the files it names by hand, then delete it",
        )
    return data


def read_journal_bytes(path: Path, fix: str) -> bytes:
    """A journal's bytes (series, clean room or rebase), within PATCHCTL_MAX_JOURNAL_BYTES: one
    in a series directory may have come with a repository, and is read before anything else.
    A journal over the limit is ConfigError (exit 5) naming it, `fix` and the variable."""
    return read_bounded(path, JOURNAL_BYTES, "journal", fix=fix)


def command(op: str) -> str:
    """How a note names the command a journal records: `patchctl OP`, or "patchctl command"
    for a journal that names none (an older patchctl wrote "patchctl" there)."""
    op = op.removeprefix("patchctl").strip()
    return f"`patchctl {op}`" if op else "patchctl command"


def tell(found: Recovered) -> None:
    """Tell the user what a run found of an interrupted one and what it did (progress.notice:
    the CLI prints it on stderr, so stdout stays the command's own output, JSON included)."""
    paths = ", ".join(os.fsdecode(p) for p in found.paths[:3])
    notice(
        f"note: an interrupted {command(found.op)} was {found.outcome}"
        + (f" ({paths})" if paths else "")
    )
    for note in found.notes:
        notice(f"note: {note}")


def file_sha256(path: Path) -> str | None:
    """The sha256 of what `path` holds (a symlink: of its target string), None when absent."""
    try:
        if path.is_symlink():
            return hashlib.sha256(b"symlink:" + os.fsencode(os.readlink(path))).hexdigest()
        with path.open("rb") as stream:  # streamed: a file of any size costs no memory
            return hashlib.file_digest(stream, "sha256").hexdigest()
    except FileNotFoundError:
        return None


def sha256(data: bytes) -> str:
    """The sha256 of `data` (hex)."""
    return hashlib.sha256(data).hexdigest()


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
class Recovered:
    """What a run found of an interrupted command, and what it did with it."""

    op: str
    outcome: str  # "rolled back" | "finished"
    paths: tuple[Path, ...] = ()
    notes: tuple[str, ...] = ()


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
        staged copy before any exists, then each copy is written and synced (its folder
        synced once at the end, before anything can commit)."""
        planned: list[tuple[Path, bytes]] = []
        for target, data in items:
            earlier = self.pending().get(target)
            if earlier is not None:
                self.effects.remove(earlier)
                earlier.staged.unlink(missing_ok=True)
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
            staged.parent.mkdir(parents=True, exist_ok=True)
            sync_write(staged, data, sync_dir=False)
            folders[staged.parent] = None
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


# ----------------------------------------------------------------------------- the clean room's


def room_journal_path(room: Path) -> Path:
    """The journal of the clean room at `room`: beside it, in its lock area."""
    return room.with_name(f".{room.name}.patchctl-journal.json")


@dataclass
class RoomJournal:
    """The intent of one command's changes to one clean room (patchctl/recovery.py reads it).

    A clean room cannot be staged like the series' files (`git apply` writes the work tree,
    a new clean room is a whole directory), so this journal records what is about to happen,
    before it happens, and the next run that takes the clean room's lock finishes or undoes it.
    """

    room: Path
    op: str
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        """The journal file."""
        return room_journal_path(self.room)

    def record(self, **fields: Any) -> None:
        """Set fields (None removes one) and write the journal, before the change they name."""
        self.fields.update(fields)
        self.fields = {k: v for k, v in self.fields.items() if v is not None}
        data = {"version": VERSION, "op": self.op, "pid": os.getpid(), **self.fields}
        write_atomic(self.path, signed(data), sync=True)
        killpoint.reached(f"room journal {'/'.join(sorted(fields))}")

    def end(self) -> None:
        """The change is complete (or was refused before it began): remove the journal."""
        self.path.unlink(missing_ok=True)
