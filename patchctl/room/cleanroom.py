"""The clean room: a git repository patchctl creates and owns, holding upstream + patches.

Layout (docs/architecture.md): `cleanroom/<series>/` by default; marked by
`.git/patchctl-cleanroom.json`. The base commit is the pristine upstream; each applied patch is
one commit with fixed identity and dates and a `Patchctl-Id: <id>` trailer, so commit ids are
reproducible. patchctl refuses to touch a directory without the marker, and saves unsaved work
(a backup ref plus a patch file) before any reset.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchctl import __version__
from patchctl.errors import DirtyTree, NotFound, PatchctlError
from patchctl.fsio import locked_dir, write_atomic
from patchctl.gitlayer.git import Git
from patchctl.limits import JOURNAL_BYTES, read_bounded
from patchctl.progress import Progress
from patchctl.room.journal import RoomJournal
from patchctl.series.gitapply import ID_TRAILER, SHA_TRAILER
from patchctl.series.model import Series, series_to_dict
from patchctl.series.project import check_inside, project_root
from patchctl.upstream.materialize import Materialized, materialize

REBASE_DIRNAME = "patchctl-rebase"  # a rebase's state, inside the clean room's .git
MARKER = "patchctl-cleanroom.json"
BRANCH = "refs/heads/main"
BASE_REF = "refs/patchctl/base"
BACKUP_REFS = "refs/patchctl/backups/"


@dataclass(frozen=True)
class Backup:
    """Unsaved work saved before a reset: a ref in the clean room and a patch file."""

    ref: str
    commit: str
    patch_file: Path
    paths: tuple[str, ...]


@dataclass(frozen=True)
class Cleanroom:
    """An existing clean room: its path, its git runner and its marker metadata."""

    path: Path
    git: Git
    meta: dict[str, Any]

    @property
    def series_name(self) -> str:
        """The name of the series this clean room was made for."""
        return str(self.meta.get("series_name", self.path.name))

    @property
    def root(self) -> str:
        """The subdirectory of the tree the patches target ('.' for the top)."""
        return str(self.meta.get("root", "."))

    def base_commit(self) -> str:
        """The commit holding the pristine upstream."""
        return self.git.rev_parse(BASE_REF)

    def base_tree(self) -> str:
        """The tree id of the pristine upstream."""
        return str(self.meta["base_tree"])

    def head(self) -> str:
        """The current commit (base or the last applied patch)."""
        return self.git.rev_parse("HEAD")

    def head_tree(self) -> str:
        """The tree of the current commit."""
        return self.git.tree_of("HEAD")

    def stack(self, base: str = BASE_REF) -> list[tuple[str, str, str | None]]:
        """(commit, patch id, patch sha256) for each commit above the base (`base`: another
        one, e.g. a rebase's new base), oldest first."""
        fmt = (
            f"%H%x00%(trailers:key={ID_TRAILER},valueonly,separator=%x2C)"
            f"%x00%(trailers:key={SHA_TRAILER},valueonly,separator=%x2C)%x00"
        )
        fields = self.git.log_records(fmt, f"{base}..HEAD")
        entries = []
        for i in range(0, len(fields) - 3, 4):
            commit, pid, sha = (fields[i + j].strip() for j in range(3))
            entries.append((commit, pid, sha or None))
        return entries

    def applied_patches(self) -> list[str]:
        """The ids of the applied patches, in order (from `Patchctl-Id:` trailers)."""
        return [pid for _commit, pid, _sha in self.stack()]

    def commit_for(self, patch_id: str) -> str | None:
        """The commit that applied `patch_id`, or None when it is not applied."""
        for commit, pid, _sha in self.stack():
            if pid == patch_id:
                return commit
        return None

    def dirty_paths(self) -> list[str]:
        """Paths with unsaved work: modified, staged, deleted or untracked (not ignored)."""
        return self.git.status_paths()

    def is_dirty(self) -> bool:
        """True when there is unsaved work."""
        return bool(self.dirty_paths())

    def backups_dir(self) -> Path:
        """`<cleanroom>.backups/`, next to the clean room."""
        return self.path.with_name(self.path.name + ".backups")

    def save_unsaved_work(self) -> Backup:
        """Commit all unsaved work to `refs/patchctl/backups/<n>` and write `<n>.patch`."""
        paths = tuple(self.dirty_paths())
        tree = self.git.snapshot_worktree()
        number = self._next_backup_number()
        message = f"patchctl backup {number}: {len(paths)} path(s)\n".encode()
        commit = self.git.commit_tree(tree, message, (self.head(),))
        ref = f"{BACKUP_REFS}{number}"
        self.git.update_ref(ref, commit, "patchctl backup")
        patch = self.git.backup_diff(commit)
        target = self.backups_dir() / f"{number}.patch"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(patch)
        return Backup(ref, commit, target, paths)

    def _next_backup_number(self) -> int:
        names = [ref.rsplit("/", 1)[1] for ref in self.git.refs(BACKUP_REFS)]
        numbers = [int(name) for name in names if name.isdigit()]
        files = [int(p.stem) for p in self._backup_files() if p.stem.isdigit()]
        return max([0, *numbers, *files]) + 1

    def _backup_files(self) -> list[Path]:
        folder = self.backups_dir()
        return list(folder.glob("*.patch")) if folder.is_dir() else []

    def discard_saved(self, backup: Backup) -> None:
        """Drop the unsaved work that `backup` holds: tracked files back to HEAD, new files gone.

        Only called right after `save_unsaved_work`; the ref is checked first so nothing that
        is not saved can be discarded.
        """
        if self.git.rev_parse(backup.ref) != backup.commit:
            raise PatchctlError(f"backup {backup.ref} is missing; not discarding anything")
        self.discard_paths(backup.paths)

    def discard_paths(self, paths: tuple[str, ...] | list[str]) -> None:
        """Tracked files back to HEAD; those of `paths` that HEAD does not track removed.

        Only for changes that are saved (`discard_saved`) or that patchctl itself made
        (recovery.py decides which).
        """
        self.git.reset_hard_to_head()
        tracked = self.git.tracked_paths()
        for rel in paths:
            target = self.path / rel
            if os.fsencode(rel) not in tracked and (target.is_symlink() or target.is_file()):
                target.unlink()

    def reset_to(self, commit: str) -> None:
        """Move the branch to `commit`, touching only files that differ (`reset --keep`)."""
        self.git.reset_keep(commit)


# ----------------------------------------------------------------------------- locating


def default_workdir(series_dir: Path) -> Path:
    """`<project>/cleanroom/<series name>`; DirtyTree (exit 8) when a symlink carries it out of
    the project (a `cleanroom` committed as a link): `--workdir` names a clean room elsewhere."""
    root = project_root(series_dir)
    path = root / "cleanroom" / series_dir.resolve().name
    hint = "remove the symlink, or pass --workdir to use a clean room there"
    check_inside(path.resolve(), root, hint=hint)  # a clean room is entered: its link too
    return path


def marker_path(path: Path) -> Path:
    """Where the marker of a clean room at `path` lives."""
    return path / ".git" / MARKER


def is_cleanroom(path: Path) -> bool:
    """True when `path` is a clean room patchctl created."""
    return marker_path(path).is_file()


def rebase_dir(path: Path) -> Path:
    """Where the state of a rebase of the clean room at `path` lives (room/rebasestate.py)."""
    return path / ".git" / REBASE_DIRNAME


def rebase_in_progress(path: Path) -> bool:
    """True when a rebase of the clean room at `path` has started and not finished: then only
    the rebase command may touch the clean room or its series."""
    return (rebase_dir(path) / "journal.json").is_file()


def load_cleanroom(path: Path) -> Cleanroom:
    """Open the clean room at `path` (NotFound when there is none)."""
    if not is_cleanroom(path):
        raise NotFound(f"no clean room at {path}", hint="create it with `patchctl cleanroom apply`")
    try:
        meta = json.loads(read_bounded(marker_path(path), JOURNAL_BYTES, "clean room marker"))
    except (OSError, ValueError) as exc:
        raise PatchctlError(
            f"clean room marker {marker_path(path)} is unreadable: {exc}",
            hint="move the clean room aside and run `patchctl cleanroom apply` again",
        ) from None
    if not isinstance(meta, dict) or "base_tree" not in meta:
        raise PatchctlError(f"clean room marker {marker_path(path)} is incomplete")
    return Cleanroom(path, Git(path), meta)


def open_cleanroom(series_dir: Path, workdir: Path | None = None) -> Cleanroom:
    """The existing clean room of a series (`workdir` overrides the default location)."""
    return load_cleanroom(workdir if workdir is not None else default_workdir(series_dir))


def pin_of(series: Series) -> dict[str, Any]:
    """What identifies a base: upstream pin and root (the marker's `upstream` and `root`)."""
    return {"upstream": series_to_dict(series)["upstream"], "root": series.root}


# Keys that describe an upstream without choosing it: recording them later (a `tree:` added
# by hand, an sdist's informational `commit:`) must not re-create the clean room. The tree is
# compared with the clean room's own base tree instead.
DESCRIPTIVE_KEYS = {
    "pypi-sdist": ("tree", "commit"),
    "archive": ("tree", "commit"),
    "git": ("tree",),
}


def _identity(upstream: Any) -> dict[str, Any]:
    if not isinstance(upstream, dict):
        return {}
    skip = DESCRIPTIVE_KEYS.get(str(upstream.get("kind")), ("tree",))
    return {k: v for k, v in upstream.items() if k not in skip}


def same_pin(room: Cleanroom, series: Series) -> bool:
    """True when the clean room was made from the same upstream pin as `series`: the same
    identifying keys, the same root, and (when the series records one) the same tree."""
    pin = pin_of(series)
    if _identity(room.meta.get("upstream")) != _identity(pin["upstream"]):
        return False
    tree = series.upstream.tree
    return room.root == series.root and (tree is None or tree == room.base_tree())


# ----------------------------------------------------------------------------- creating


def partial_path(workdir: Path) -> Path:
    """Where this process builds a new clean room for `workdir` (a hidden sibling)."""
    return workdir.with_name(f".{workdir.name}.partial-{os.getpid()}")


def create_cleanroom(
    series: Series,
    workdir: Path,
    progress: Progress | None = None,
    journal: RoomJournal | None = None,
) -> Cleanroom:
    """Materialize the upstream into a new clean room at `workdir` (missing or empty).

    Built in a sibling temporary directory and renamed into place, so a failure (checksum,
    unsafe archive, tree mismatch) leaves nothing behind; `journal` records each step, so
    a kill leaves nothing the next run does not clean up (recovery.py).
    """
    if workdir.exists() and (not workdir.is_dir() or any(workdir.iterdir())):
        raise DirtyTree(
            f"{workdir} exists and is not a patchctl clean room; refusing to touch it",
            hint="pass --workdir with a new or empty directory",
        )
    tmp = build_partial(series, workdir, progress, journal)
    try:
        if journal is not None:
            journal.record(stage="swapping")
        if workdir.exists():
            workdir.rmdir()
        os.replace(tmp, workdir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if journal is not None:
        journal.record(stage=None, partial=None)
    return load_cleanroom(workdir)


def build_partial(
    series: Series, workdir: Path, progress: Progress | None, journal: RoomJournal | None
) -> Path:
    """Build a new clean room for `workdir` at `partial_path(workdir)`; that path. A failure
    removes it."""
    workdir.parent.mkdir(parents=True, exist_ok=True)
    tmp = partial_path(workdir)
    shutil.rmtree(tmp, ignore_errors=True)
    if journal is not None:
        journal.record(stage="building", partial=tmp)
    try:
        _build(series, tmp, progress)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp


def _build(series: Series, tmp: Path, progress: Progress | None) -> None:
    git = Git.init(tmp)  # its info/attributes: worktree bytes are blob bytes (git.py)
    result = materialize(series, git, progress)
    _check_root(series, git, result)
    message = f"upstream: {series.upstream.describe()}\n".encode()
    base = git.commit_tree(result.tree, message)
    git.update_ref(BRANCH, base)
    git.set_head(BRANCH)
    git.update_ref(BASE_REF, base)
    meta = {
        "created_by": f"patchctl {__version__}",
        "series": str(series.path.resolve()),
        "series_name": series.name,
        **pin_of(series),
        "base_tree": result.tree,
        "base_commit": base,
        "dropped": list(result.dropped),
    }
    marker_path(tmp).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def _check_root(series: Series, git: Git, result: Materialized) -> None:
    if series.root in (".", ""):
        return
    if git.maybe_rev(f"{result.tree}:{series.root}") is None:
        raise NotFound(
            f"root {series.root!r} is not a directory of the upstream tree",
            hint=f"fix `root:` in {series.path}",
        )


@contextmanager
def locked(workdir: Path) -> Iterator[None]:
    """Hold the lock of the clean room at `workdir`: an flock on its parent directory, so two
    patchctl runs never change one clean room at once (no lock file is left behind)."""
    with locked_dir(workdir.parent):
        yield


def discard_cleanroom(room: Cleanroom) -> None:
    """Remove a clean room patchctl created, only when it holds nothing else: no unsaved work
    and nothing `not_patchctls` names (an ignored model or build someone put there: git status
    does not list them; a branch; a nested repository)."""
    if not is_cleanroom(room.path):
        raise PatchctlError(f"{room.path} is not a patchctl clean room; not removing it")
    if room.is_dirty():
        raise DirtyTree(f"{room.path} has unsaved work; not removing it")
    held = not_patchctls(room)
    if held:
        raise DirtyTree(f"{room.path} holds {'; '.join(held)}; not removing it")
    shutil.rmtree(room.path)


def not_patchctls(room: Cleanroom) -> list[str]:
    """What a clean room holds that patchctl did not make and its backups do not keep:
    ignored files, refs other than its branch, base and backups (a branch, the stash),
    nested repositories. Deleting the clean room would lose them."""
    found = []
    ignored = room.git.ignored_paths()
    if ignored:
        found.append(_listing("ignored file(s)", ignored))
    ours = (BRANCH, BASE_REF)
    refs = [r for r in room.git.refs("refs/") if r not in ours and not r.startswith(BACKUP_REFS)]
    if refs:
        found.append(_listing("ref(s)", refs))
    nested = [p for p in room.dirty_paths() if p.endswith("/")]
    if nested:
        found.append(_listing("nested repositories", nested))
    return found


def _listing(what: str, names: list[str]) -> str:
    return f"{len(names)} {what}: " + ", ".join(names[:3]) + (" ..." if len(names) > 3 else "")


def repin_marker(room: Cleanroom, series: Series, base_commit: str, base_tree: str) -> Cleanroom:
    """Record in the clean room's marker that its base is now `base_commit` (tree `base_tree`)
    of `series`' upstream pin (a completed rebase); the clean room as reloaded."""
    meta = {**room.meta, **pin_of(series), "base_tree": base_tree, "base_commit": base_commit}
    write_atomic(marker_path(room.path), (json.dumps(meta, indent=2) + "\n").encode("utf-8"))
    return load_cleanroom(room.path)
