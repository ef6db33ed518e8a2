"""Journal files, and the clean room's journal.

Every journal patchctl writes (the series journal of txn/journal.py, the clean room's
`RoomJournal` below, a rebase's state in room/rebasestate.py) is JSON signed with this user's
key (`<cache>/journal.key`): a journal that arrived from elsewhere, committed beside a series
in a shared repository, is never acted on, whatever paths it names. It is read within
PATCHCTL_MAX_JOURNAL_BYTES before anything else. `Recovered` and `tell` are what a run found of
an interrupted one and how the user hears of it.

`RoomJournal` is the clean room's journal: what `cleanroom apply` is about to do to a clean
room (a new clean room is a whole directory and `git apply` writes the work tree, so it cannot
be staged like the series' files), which room/recovery.py finishes or undoes.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patchctl import killpoint
from patchctl.cache import cache_dir
from patchctl.errors import DirtyTree, PatchctlError
from patchctl.fsio import write_atomic
from patchctl.limits import JOURNAL_BYTES, read_bounded
from patchctl.progress import notice

VERSION = 1

# ----------------------------------------------------------------------------- signing

KEY_FILE = "journal.key"
JOURNAL_FIX = "a patchctl run was killed and left it: move it aside and check the files"


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
class Recovered:
    """What a run found of an interrupted command, and what it did with it."""

    op: str
    outcome: str  # "rolled back" | "finished"
    paths: tuple[Path, ...] = ()
    notes: tuple[str, ...] = ()


# ----------------------------------------------------------------------------- the clean room's


def room_journal_path(room: Path) -> Path:
    """The journal of the clean room at `room`: beside it, in its lock area."""
    return room.with_name(f".{room.name}.patchctl-journal.json")


@dataclass
class RoomJournal:
    """The intent of one command's changes to one clean room (patchctl/room/recovery.py reads it).

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
