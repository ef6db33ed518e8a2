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

import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from patchctl.apply import find_drift
from patchctl.capture import export_patch
from patchctl.errors import NotFound, VerifyFailed
from patchctl.git import Git
from patchctl.markers import added_by, changed_paths, check_markers, markers_in_tree
from patchctl.progress import Progress, or_null
from patchctl.series import Patch, Series

STEPS = ("chain", "forward", "reverse", "reexport", "markers")
# `git apply` flags: index only (no worktree), never rewrite whitespace, never fuzz context.
APPLY_FLAGS = ("apply", "--cached", "--whitespace=nowarn", "-p1")


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
        raise VerifyFailed(
            f"verify failed: patch {pid}, step {step.step}: {step.detail}{more}",
            hint="recapture the patch in the clean room (patchctl capture ID) or fix its file",
        )


# ----------------------------------------------------------------------------- scratch repo


def objects_dir(source: Path) -> Path:
    """The object directory of a repository given as worktree, git dir or objects dir."""
    for candidate in (source / ".git" / "objects", source / "objects", source):
        if (candidate / "info").is_dir() or (candidate / "pack").is_dir():
            return candidate.resolve()
    raise NotFound(f"{source} is not a git repository", hint="run patchctl cleanroom apply first")


@contextmanager
def scratch_repo(sources: Sequence[Path]) -> Iterator[Git]:
    """A temporary bare repository that reads objects from `sources` (via alternates)."""
    with tempfile.TemporaryDirectory(prefix="patchctl-verify-") as tmp:
        git = Git.init(Path(tmp) / "scratch.git", bare=True)
        alternates = "".join(f"{objects_dir(s)}\n" for s in sources)
        (git.repo / "objects" / "info").mkdir(parents=True, exist_ok=True)
        (git.repo / "objects" / "info" / "alternates").write_text(alternates)
        yield git


class Index:
    """A private index file inside the scratch repository."""

    def __init__(self, git: Git, name: str) -> None:
        self.git = git
        self.env = {"GIT_INDEX_FILE": str(git.repo / f"{name}.index")}

    def read(self, tree: str) -> None:
        """Load `tree` into the index."""
        self.git.run("read-tree", tree, env=self.env)

    def apply(self, data: bytes, *, reverse: bool = False, root: str = ".") -> tuple[bool, bytes]:
        """Apply patch bytes to the index; (ok, git's verbose stderr)."""
        args = [*APPLY_FLAGS, "-v", *(["-R"] if reverse else []), *_directory(root)]
        code, _, err = self.git.run_full(*args, stdin=data, env=self.env)
        if code < 0:
            # git 2.39 can abort on some corrupt patches (apply.c assertion), leaving its
            # lock behind; the index is ours, so drop the lock and report the crash.
            Path(self.env["GIT_INDEX_FILE"] + ".lock").unlink(missing_ok=True)
            err += f"error: git apply crashed (signal {-code})\n".encode()
        return code == 0, err

    def tree(self) -> str:
        """Write the index as a tree and return its id."""
        return self.git.run("write-tree", env=self.env).decode("ascii").strip()


def _directory(root: str) -> list[str]:
    return [] if root in (".", "") else [f"--directory={root.rstrip('/')}"]


def _first_error(err: bytes) -> str:
    lines = err.decode("utf-8", "backslashreplace").strip().splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    return (errors or lines or ["git apply failed"])[0]


def _drift_note(err: bytes) -> str:
    """Hunks git placed at an offset (possible only for imported patches; not a failure)."""
    drift = find_drift(err)
    if not drift:
        return ""
    first = drift[0]
    return f" (note: {len(drift)} hunk(s) at an offset, first in {first.file}: {first.why})"


def has_object(git: Git, oid: str | None) -> bool:
    """True when `oid` names an object the scratch repository can read."""
    if oid is None:
        return False
    code, _, _ = git.run_full("cat-file", "-e", f"{oid}^{{tree}}")
    return code == 0


def first_differing_path(git: Git, expected: str, actual: str) -> str:
    """The first path whose entry differs between two trees (both readable)."""
    if not (has_object(git, expected) and has_object(git, actual)):
        return f"tree {actual} instead of {expected}"
    out = git.run("diff-tree", "-r", "--name-only", "-z", "--no-renames", expected, actual, "--")
    names = [n for n in out.split(b"\0") if n]
    first = os.fsdecode(names[0]) if names else "(none)"
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


@dataclass
class _Walk:
    """Mutable state of the walk up the stack (private to this module)."""

    git: Git
    series: Series
    forward: Index
    backward: Index
    current: str | None
    base: str = ""
    all_markers: tuple[str, ...] = ()
    # marker -> ids of the earlier patches whose added lines contain it
    added: dict[str, list[str]] = field(default_factory=dict)


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
) -> VerifyReport:
    """Verify the patches `ids` (all when None) of `series`; objects come from `sources`.

    The walk starts at upstream.tree, else `base` (the clean room's), else the first pre_tree.
    """
    wanted = set(series.ids() if ids is None else ids)
    for pid in wanted:
        series.index(pid)  # NotFound for an unknown id
    last = max((series.index(p) for p in wanted), default=-1)
    base = base_tree(series, base)
    prog = or_null(progress)
    prog.start("verify", last + 1)
    with scratch_repo(sources) as git:
        if not has_object(git, base):
            raise NotFound(
                f"upstream tree {base} is not in {', '.join(map(str, sources))}",
                hint="materialize the clean room first: patchctl cleanroom apply",
            )
        markers = tuple(dict.fromkeys(m for p in series.patches for m in p.markers))
        walk = _Walk(git, series, Index(git, "forward"), Index(git, "reverse"), base, base, markers)
        walk.forward.read(base)
        reports = []
        for patch in series.patches[: last + 1]:
            report = _check_patch(walk, patch, full=patch.id in wanted)
            if patch.id in wanted:
                reports.append(report)
            prog.advance("verify")
    prog.done("verify")
    return VerifyReport(series.name, base, tuple(reports))


def _check_patch(walk: _Walk, patch: Patch, *, full: bool) -> PatchReport:
    data = walk.series.patch_path(patch).read_bytes()
    pre = walk.current
    steps = [_chain(walk, patch, pre)]
    post, forward = _forward(walk, patch, data, pre)
    steps.append(forward)
    walk.current = post
    if full:
        steps += _after_forward(walk, patch, data, pre, post)
    _note_added(walk, patch, data)
    return PatchReport(patch.id, tuple(steps))


def _after_forward(
    walk: _Walk, patch: Patch, data: bytes, pre: str | None, post: str | None
) -> list[StepResult]:
    pre = pre if pre is not None else _readable(walk.git, patch.pre_tree)
    post = post if post is not None else _readable(walk.git, patch.post_tree)
    if pre is None or post is None:
        why = "no readable pre/post tree (earlier step failed)"
        return [StepResult(s, False, why) for s in ("reverse", "reexport", "markers")]
    return [
        _reverse(walk, data, pre, post),
        _reexport(walk, patch, data, pre, post),
        _markers(walk, patch, pre, post),
    ]


def _readable(git: Git, oid: str | None) -> str | None:
    return oid if has_object(git, oid) else None


def _chain(walk: _Walk, patch: Patch, pre: str | None) -> StepResult:
    if patch.pre_tree is None or patch.post_tree is None:
        return StepResult("chain", False, "no pre_tree/post_tree recorded: capture or import it")
    if pre is None:
        return StepResult("chain", False, "an earlier patch failed: no tree to start from")
    if patch.pre_tree != pre:
        return StepResult("chain", False, first_differing_path(walk.git, patch.pre_tree, pre))
    return StepResult("chain", True, pre)


def _forward(
    walk: _Walk, patch: Patch, data: bytes, pre: str | None
) -> tuple[str | None, StepResult]:
    if pre is None:
        return _resume(walk, patch), StepResult("forward", False, "no tree to apply to")
    applied, err = walk.forward.apply(data, root=walk.series.root)
    if not applied:
        why = _first_error(err)
        return _resume(walk, patch), StepResult("forward", False, f"does not apply: {why}")
    post = walk.forward.tree()
    if patch.post_tree is not None and post != patch.post_tree:
        detail = first_differing_path(walk.git, patch.post_tree, post)
        return post, StepResult("forward", False, detail)
    return post, StepResult("forward", True, post + _drift_note(err))


def _resume(walk: _Walk, patch: Patch) -> str | None:
    """After a failed forward step, continue from the recorded post-tree if readable."""
    post = _readable(walk.git, patch.post_tree)
    if post is not None:
        walk.forward.read(post)
    return post


def _reverse(walk: _Walk, data: bytes, pre: str, post: str) -> StepResult:
    walk.backward.read(post)
    applied, err = walk.backward.apply(data, reverse=True, root=walk.series.root)
    if not applied:
        return StepResult("reverse", False, f"does not reverse-apply: {_first_error(err)}")
    back = walk.backward.tree()
    if back != pre:
        return StepResult("reverse", False, first_differing_path(walk.git, pre, back))
    return StepResult("reverse", True, back)


def _reexport(walk: _Walk, patch: Patch, data: bytes, pre: str, post: str) -> StepResult:
    if patch.imported:
        return StepResult("reexport", True, "imported: original bytes kept verbatim")
    again = export_patch(walk.git, patch, pre, post, walk.series.root)
    if again != data:
        return StepResult("reexport", False, first_differing_byte(data, again))
    return StepResult("reexport", True, f"{len(data)} bytes identical")


def _markers(walk: _Walk, patch: Patch, pre: str, post: str) -> StepResult:
    if not patch.markers:
        return StepResult("markers", True, "no markers declared")
    paths = changed_paths(walk.git, pre, post)
    checks = check_markers(walk.git, pre, post, patch.markers, paths)
    problems = [
        f"{c.marker!r} {'already in pre-tree' if c.in_pre else 'missing from post-tree'}"
        for c in checks
        if not c.ok
    ]
    problems += [f"{m!r} already in the upstream tree" for m in _in_base(walk, patch.markers)]
    problems += [
        f"{m!r} also added by earlier patch {pid}"
        for m in patch.markers
        for pid in walk.added.get(m, ())
    ]
    if problems:
        return StepResult("markers", False, "; ".join(problems))
    return StepResult("markers", True, f"{len(patch.markers)} marker(s) ok")


def _in_base(walk: _Walk, markers: Sequence[str]) -> list[str]:
    found = markers_in_tree(walk.git, walk.base, markers)
    return [m for m in markers if m in found]


def _note_added(walk: _Walk, patch: Patch, data: bytes) -> None:
    """Remember which series markers this patch adds (for the later patches' checks)."""
    for marker in added_by(data, walk.all_markers):
        walk.added.setdefault(marker, []).append(patch.id)
