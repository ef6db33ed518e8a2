"""Every prefix of a series, built: `patchctl build --upto ID` and `patchctl check-prefixes`.

A series is only bisectable when each of its prefixes builds (and passes a check): a patch
that leaves the tree broken until a later one fixes it hides which change broke what.
`build_upto` brings the clean room to the series up to one patch, exactly as `cleanroom apply
--upto` does (same locks, journal and strictness), then builds it as `patchctl build` does
(the build dir keyed by the tree id, so each prefix has its own and a rerun reuses it).
`check_prefixes` does that for each patch in turn and, with a command, runs it in the clean
room after each build (`PATCHCTL_BUILD_DIR`, `PATCHCTL_BIN_DIR`, `PATCHCTL_PATCH_ID` set; its
output in `<build dir>/logs/check.log`). It stops at the first prefix that does not apply,
build or pass the command, unless told to keep going, and reports each prefix with its
times. The clean room is left at the last prefix checked.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from patchctl.errors import BuildFailed, NotFound, PatchDoesNotApply, PrefixFailed
from patchctl.ops.build.config import BuildConfig
from patchctl.ops.build.model import Step
from patchctl.ops.build.run import BuildOutcome, build_cleanroom, failure_excerpt, run_step
from patchctl.ops.cleanroom.apply import cleanroom_apply
from patchctl.progress import Progress
from patchctl.series.model import load_series
from patchctl.series.stack import load_stack


def build_upto(
    series_path: Path,
    workdir: Path | None,
    upto: str,
    config: BuildConfig,
    build_dir: Path | None = None,
    *,
    progress: Progress | None = None,
) -> BuildOutcome:
    """`patchctl build --upto ID`: apply the series up to ID, then build the clean room."""
    cleanroom_apply(series_path, workdir, upto, progress=progress)
    return build_cleanroom(series_path, workdir, config, build_dir, progress=progress)


@dataclass(frozen=True)
class PrefixResult:
    """How one prefix (the series up to `id`) went."""

    id: str
    ok: bool
    step: str | None = None  # the failing step: apply, build or run
    error: str | None = None
    apply_s: float = 0.0
    build_s: float = 0.0
    run_s: float = 0.0
    tree: str | None = None
    build_dir: Path | None = None
    log: Path | None = None

    def to_json(self) -> dict[str, object]:
        """JSON form for --json."""
        return {
            "id": self.id,
            "ok": self.ok,
            "step": self.step,
            "error": self.error,
            "apply_s": round(self.apply_s, 3),
            "build_s": round(self.build_s, 3),
            "run_s": round(self.run_s, 3),
            "tree": self.tree,
            "build_dir": None if self.build_dir is None else str(self.build_dir),
            "log": None if self.log is None else str(self.log),
        }


@dataclass(frozen=True)
class PrefixReport:
    """Every prefix checked, in order, and the ones not reached."""

    series: str
    results: tuple[PrefixResult, ...]
    skipped: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        """True when every prefix checked passed."""
        return all(r.ok for r in self.results)

    def failed(self) -> tuple[PrefixResult, ...]:
        """The prefixes that failed."""
        return tuple(r for r in self.results if not r.ok)

    def to_json(self) -> dict[str, object]:
        """JSON form for --json."""
        return {
            "series": self.series,
            "ok": self.ok,
            "prefixes": [r.to_json() for r in self.results],
            "not_checked": list(self.skipped),
        }


Report = Callable[[PrefixResult], None]


def check_prefixes(
    series_path: Path,
    workdir: Path | None,
    config: BuildConfig,
    *,
    command: str | None = None,
    keep_going: bool = False,
    start: str | None = None,
    progress: Progress | None = None,
    report: Report | None = None,
) -> PrefixReport:
    """`patchctl check-prefixes`: apply, build (and run `command`) for each prefix of the
    series from `start` (the first patch when None); PrefixFailed (exit 13) naming the first
    failing patch, with the whole report, when one fails. `report` sees each result as it
    comes. Errors that are not about a prefix (unsaved work, a missing tool) stop at once."""
    series = load_series(series_path)
    ids = load_stack(series).ids()
    if not ids:
        raise NotFound(f"{series.path} has no patches", hint="add one with `patchctl new`")
    first = 0 if start is None else load_stack(series).index(start)
    results: list[PrefixResult] = []
    for pid in ids[first:]:
        result = check_prefix(series_path, workdir, config, pid, command, progress)
        results.append(result)
        if report is not None:
            report(result)
        if not result.ok and not keep_going:
            break
    done = PrefixReport(series.name, tuple(results), ids[first + len(results) :])
    if not done.ok:
        bad = done.failed()[0]
        raise PrefixFailed(
            f"the series up to {bad.id} fails at {bad.step}: {bad.error}",
            report=done,
            hint=None if bad.log is None else f"see {bad.log}",
        )
    return done


def check_prefix(
    series_path: Path,
    workdir: Path | None,
    config: BuildConfig,
    pid: str,
    command: str | None,
    progress: Progress | None,
) -> PrefixResult:
    """Apply up to `pid`, build, run `command`: the first step that fails is the result."""
    started = time.monotonic()
    try:
        applied = cleanroom_apply(series_path, workdir, pid, progress=progress)
    except PatchDoesNotApply as exc:
        return PrefixResult(pid, False, "apply", exc.one_line(), time.monotonic() - started)
    apply_s = time.monotonic() - started
    started = time.monotonic()
    try:
        built = build_cleanroom(series_path, workdir, config, progress=progress).result
    except BuildFailed as exc:
        log = getattr(exc, "log", None)
        return PrefixResult(
            pid,
            False,
            step="build",
            error=exc.one_line(),
            apply_s=apply_s,
            build_s=time.monotonic() - started,
            tree=applied.tree,
            log=log if isinstance(log, Path) else None,
        )
    assert built is not None
    build_s = time.monotonic() - started
    done = PrefixResult(
        pid, True, apply_s=apply_s, build_s=build_s, tree=applied.tree, build_dir=built.build_dir
    )
    if command is None:
        return done
    env = (
        ("PATCHCTL_BUILD_DIR", str(built.build_dir)),
        ("PATCHCTL_BIN_DIR", str(built.bin_dir)),
        ("PATCHCTL_PATCH_ID", pid),
    )
    step = Step("check", ("/bin/sh", "-c", command), applied.cleanroom, env)
    ran = run_step(step, built.build_dir / "logs" / "check.log", None)
    if ran.returncode == 0:
        return replace(done, run_s=ran.wall_s, log=ran.log)
    tail = failure_excerpt(ran.log.read_bytes(), errors=0, tail=5).strip().splitlines()
    error = f"`{command}` exited {ran.returncode}" + (f": {tail[-1]}" if tail else "")
    return replace(done, ok=False, step="run", error=error, run_s=ran.wall_s, log=ran.log)
