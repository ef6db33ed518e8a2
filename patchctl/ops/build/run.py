"""Running a build plan: one process group per step, full logs, progress from the build's own
[n/N] counters, the first compiler errors on failure, and the command's entry point."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from patchctl.errors import BuildFailed, BuildStepFailed, NotFound, ToolchainMissing
from patchctl.gitlayer.git import Git
from patchctl.gitlayer.index import temp_index
from patchctl.ops.build.config import BuildConfig
from patchctl.ops.build.manifest import collect_artifacts, output_dirs, write_manifest
from patchctl.ops.build.model import BuildPlan, BuildResult, OutputCheck, Step, StepRun
from patchctl.ops.build.plan import backend_ops, plan_build, worktree_id
from patchctl.progress import Progress, notice, or_null
from patchctl.room.cleanroom import default_workdir
from patchctl.series.model import series_dir

# A compiler's (gcc, clang, nvcc, ld) or CMake's own error line: the reason shown first.
COMPILER_ERROR = re.compile(rb"(\berror:|\berror :|fatal error|undefined reference|CMake Error)")
NINJA_PROGRESS = re.compile(rb"^\[\s*(\d+)/(\d+)\]")  # ninja and llamafile's cuda.sh
MAKE_PERCENT = re.compile(rb"^\[\s*(\d+)%\]")  # CMake's Makefile generator
ERROR_LINE = re.compile(
    rb"(\berror:|\berror :|\bError:|^FAILED:|CMake Error|\*\*\*|fatal error|undefined reference)"
)


def build_tree(
    tree: Path,
    config: BuildConfig,
    build_root: Path,
    progress: Progress | None = None,
    build_dir: Path | None = None,
) -> BuildResult:
    """Build `tree` in its keyed build dir under `build_root`; raise BuildFailed on failure."""
    return execute_plan(plan_build(tree, config, build_root, build_dir), progress)


def execute_plan(plan: BuildPlan, progress: Progress | None = None) -> BuildResult:
    """Run a plan's steps (logs in `<build dir>/logs/`), then write the manifest. When the
    backend's check of the outputs names defines that avoid a failure (the CPU self-check's
    fallback), the build is planned again with them, said in a note, and run once more."""
    while True:
        outcome = _execute_once(plan, progress)
        if isinstance(outcome, BuildResult):
            return outcome
        notice(
            f"note: {outcome.problem}; building again with "
            + " ".join(f"-D{d}" for d in outcome.fallback)
        )
        plan = _replanned(plan, outcome.fallback)


def _replanned(plan: BuildPlan, fallback: tuple[str, ...]) -> BuildPlan:
    """`plan` with `fallback` added to its defines: a keyed build dir gets its new key, an
    explicit one (--build-dir) is reconfigured in place."""
    config = replace(plan.config, defines=(*plan.config.defines, *fallback))
    keyed = plan.build_dir.name == f"{plan.tree_id}-{plan.config_hash}"
    root = plan.build_dir.parent
    return plan_build(plan.tree, config, root, None if keyed else plan.build_dir)


def _execute_once(plan: BuildPlan, progress: Progress | None) -> BuildResult | OutputCheck:
    plan.build_dir.mkdir(parents=True, exist_ok=True)
    with _locked(plan.build_dir):
        started = time.monotonic()
        _prepare(plan)
        runs: list[StepRun] = []
        for step in plan.steps:
            run = run_step(step, plan.build_dir / "logs" / f"{step.name}.log", progress)
            runs.append(run)
            if run.returncode != 0:
                write_manifest(plan, runs, "failed", time.monotonic() - started)
                raise _step_failure(plan, run)
        _check_tree_unchanged(plan, runs, started)
        checks = _check_outputs(plan, runs, started)
        if isinstance(checks, OutputCheck):
            return checks
        return _finish(plan, tuple(runs), time.monotonic() - started, checks)


@contextmanager
def _locked(build_dir: Path) -> Iterator[None]:
    """One build at a time per build dir (two runs would corrupt each other's objects)."""
    with (build_dir / ".patchctl-build.lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _prepare(plan: BuildPlan) -> None:
    if plan.layout.export_source:
        _export_tree(plan)
    backend_ops(plan).prepare(plan)


def _export_tree(plan: BuildPlan) -> None:
    """Check out tree_id into source_dir once (llamafile builds in its source tree)."""
    stamp = plan.source_dir / ".patchctl-tree"
    if stamp.is_file() and stamp.read_text().strip() == plan.tree_id:
        return
    if plan.source_dir.exists():  # a partial export from an interrupted run: ours to redo
        shutil.rmtree(plan.source_dir)
    plan.source_dir.mkdir(parents=True)
    with temp_index(Git(plan.tree)) as index:
        index.read_tree(plan.tree_id)
        index.checkout(plan.source_dir)
    stamp.write_text(plan.tree_id + "\n")


def run_step(step: Step, log: Path, progress: Progress | None) -> StepRun:
    """Run one step, teeing its output to `log` and its [n/N] counters to `progress`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **dict(step.env)}
    counter = _Counter(step.name, or_null(progress))
    started = time.monotonic()
    with log.open("wb", buffering=0) as sink:  # unbuffered: `tail -f` follows the build
        sink.write(f"$ {step.shell()}\n".encode())
        try:
            proc = subprocess.Popen(
                step.argv,
                cwd=step.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stopped as a whole below
            )
        except FileNotFoundError as exc:
            raise ToolchainMissing(f"cannot run {step.argv[0]}: {exc.strerror}") from exc
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                sink.write(line)
                counter.feed(line)
            code = proc.wait()
        finally:
            if proc.poll() is None:  # interrupted: never leave a compiler running
                _stop_group(proc)
    counter.finish()
    return StepRun(step, code, time.monotonic() - started, log)


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the step's whole process group (cmake -> ninja -> compilers), then reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@dataclass
class _Counter:
    """Turns `[n/N]` (ninja, cuda.sh) and `[ p%]` (make) lines into progress events."""

    task: str
    progress: Progress
    seen: int = 0
    started: bool = False

    def feed(self, line: bytes) -> None:
        match = NINJA_PROGRESS.match(line)
        done, total = (int(match[1]), int(match[2])) if match else (None, None)
        percent = MAKE_PERCENT.match(line)
        if percent:
            done, total = int(percent[1]), 100
        if done is None or total is None:
            return
        if not self.started:
            self.progress.start(self.task, total)
            self.started = True
        if done > self.seen:
            self.progress.advance(self.task, done - self.seen)
            self.seen = done

    def finish(self) -> None:
        if not self.started:  # no counters (configure, make, a no-op ninja): still report
            self.progress.start(self.task, None)
        self.progress.done(self.task)


def failure_excerpt(log: bytes, *, errors: int = 12, context: int = 2, tail: int = 30) -> str:
    """The first compiler `error:` lines (each with `context` lines after) and the log tail."""
    lines = log.splitlines()
    picked: list[bytes] = []
    count = 0
    for i, line in enumerate(lines):
        if count < errors and ERROR_LINE.search(line):
            picked += lines[i : i + 1 + context]
            count += 1
    parts = []
    if picked:
        parts.append("first errors:\n" + b"\n".join(picked).decode("utf-8", "replace"))
    parts.append(
        f"last {min(tail, len(lines))} lines of the log:\n"
        + b"\n".join(lines[-tail:]).decode("utf-8", "replace")
    )
    return "\n".join(parts)


def _step_failure(plan: BuildPlan, run: StepRun) -> BuildStepFailed:
    data = run.log.read_bytes()
    excerpt = failure_excerpt(data)
    lines = data.splitlines()
    compiler = [ln for ln in lines if COMPILER_ERROR.search(ln)]
    first = (compiler or [ln for ln in lines if ERROR_LINE.search(ln)] or [b""])[0]
    reason = first.decode("utf-8", "replace").strip() or "see the log"
    return BuildStepFailed(
        f"build step `{run.step.name}` failed with exit code {run.returncode} "
        f"(tree {plan.tree_id[:12]}, {plan.backend}): {reason}",
        step=run.step.name,
        returncode=run.returncode,
        log=run.log,
        excerpt=excerpt,
        hint=f"full log: {run.log}",
    )


def _check_tree_unchanged(plan: BuildPlan, runs: list[StepRun], started: float) -> None:
    """cmake builds the live clean room: an edit during the build makes the result unkeyed."""
    if plan.layout.export_source:
        return
    now, _dirty = worktree_id(plan.tree)
    if now != plan.tree_id:
        write_manifest(plan, runs, "tree-changed", time.monotonic() - started)
        raise BuildFailed(
            f"{plan.tree} changed during the build (tree {plan.tree_id[:12]} -> {now[:12]}); "
            "the outputs match neither tree",
            hint="rerun `patchctl build` when edits are done",
        )


def _check_outputs(
    plan: BuildPlan, runs: list[StepRun], started: float
) -> Mapping[str, object] | OutputCheck | None:
    """The backend's check of its outputs (llamafile: the CUDA archs; cmake: the CPU
    self-check); its record goes into the manifest, and a problem fails the build unless the
    check names a fallback (returned: the caller builds again with it)."""
    check = backend_ops(plan).check(plan)
    if check is None:
        return None
    if check.problem is not None:
        wall = time.monotonic() - started
        write_manifest(plan, runs, check.status, wall, checks=check.record)
        if check.fallback:
            return check
        raise BuildFailed(check.problem, hint=check.hint)
    return check.record


def _finish(
    plan: BuildPlan,
    runs: tuple[StepRun, ...],
    wall: float,
    checks: Mapping[str, object] | None = None,
) -> BuildResult:
    bin_dir, lib_dir = output_dirs(plan)
    artifacts = collect_artifacts(plan)
    if not artifacts:
        write_manifest(plan, list(runs), "no-artifacts", wall, checks=checks)
        raise BuildFailed(
            f"the build of {plan.tree_id[:12]} succeeded but produced no artifacts in {bin_dir}",
            hint=f"check --target and the logs in {plan.build_dir / 'logs'}",
        )
    manifest = write_manifest(plan, list(runs), "ok", wall, artifacts, checks)
    return BuildResult(plan, plan.build_dir, bin_dir, lib_dir, artifacts, manifest, wall, runs)


# --- the command ---------------------------------------------------------------------


@dataclass(frozen=True)
class BuildOutcome:
    """What `patchctl build` did: the plan, and the result unless it was a dry run."""

    plan: BuildPlan
    result: BuildResult | None


def builds_root(tree: Path) -> Path:
    """`<clean room>.builds/` beside the clean room (docs/architecture.md)."""
    return tree.parent / f"{tree.name}.builds"


def cleanroom_path(series_path: Path, workdir: Path | None) -> Path:
    """The clean room to build: --workdir, else cleanroom/<series name>; it must exist."""
    tree = workdir if workdir is not None else default_workdir(series_dir(series_path))
    if not tree.is_dir():
        raise NotFound(
            f"no clean room at {tree}",
            hint=f"create it with `patchctl cleanroom apply --series {series_path}`"
            + ("" if workdir is None else f" --workdir {workdir}"),
        )
    return tree.absolute()


def build_cleanroom(
    series_path: Path,
    workdir: Path | None,
    config: BuildConfig,
    build_dir: Path | None = None,
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> BuildOutcome:
    """`patchctl build`: plan the build of the series' clean room, then run it (unless
    `dry_run`); read-only for the clean room, one build at a time per build dir."""
    tree = cleanroom_path(series_path, workdir)
    plan = plan_build(tree, config, builds_root(tree), build_dir)
    return BuildOutcome(plan, None if dry_run else execute_plan(plan, progress))
