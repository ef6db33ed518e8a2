"""Build a clean-room tree: cmake (CPU, or CUDA for named archs) or llamafile (cosmocc + cuda.sh).

Every build lives in `<build root>/<tree id>-<config hash>/`: the tree id is the git tree of
the clean room's work tree (dirty work included, through a temporary index), so a build of one
tree is never reused for another (patch-tools-anchors.md §d12). Each run writes full logs and
a JSON manifest (tree, backend, flags, tool versions, artifacts with sha256, the exact commands,
wall time) into that directory. This module and git.py are the only ones that run processes.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from patchctl import __version__, toolchain
from patchctl.cleanroom import default_workdir
from patchctl.errors import BuildFailed, NotFound, PatchctlError, ToolchainMissing
from patchctl.git import Git, temp_index
from patchctl.progress import Progress, or_null
from patchctl.series import series_dir

SCHEMA = 1
MANIFEST = "patchctl-build.json"
BACKENDS = ("auto", "cmake", "llamafile")
LAUNCHERS = ("ccache", "sccache")
DEFAULT_CMAKE_TARGETS = (
    "llama",
    "llama-completion",
    "llama-server",
    "llama-bench",
    "test-backend-ops",
)
# (define, value, why): the cmake backend's fixed configuration; part of the config hash.
CMAKE_DEFINES: tuple[tuple[str, str, str], ...] = (
    ("CMAKE_BUILD_TYPE", "Release", "what users run and benchmark"),
    ("BUILD_SHARED_LIBS", "ON", "tests load libggml/libllama through ctypes"),
    ("LLAMA_CURL", "OFF", "no network client in a reproducible build (older trees)"),
    ("LLAMA_OPENSSL", "OFF", "no TLS dependency on the build host"),
    ("LLAMA_BUILD_TESTS", "ON", "test-backend-ops checks the patched ops"),
    ("LLAMA_BUILD_TOOLS", "ON", "llama-completion, llama-bench"),
    ("LLAMA_BUILD_SERVER", "ON", "llama-server"),
    ("LLAMA_BUILD_EXAMPLES", "OFF", "not needed; halves configure output"),
    ("GGML_CCACHE", "OFF", "caching only through --launcher: never wrapped twice"),
    ("CMAKE_EXPORT_COMPILE_COMMANDS", "ON", "clangd and reviewers can read the flags"),
)
# A compiler's (gcc, clang, nvcc, ld) or CMake's own error line: the reason shown first.
COMPILER_ERROR = re.compile(rb"(\berror:|\berror :|fatal error|undefined reference|CMake Error)")
NINJA_PROGRESS = re.compile(rb"^\[\s*(\d+)/(\d+)\]")  # ninja and llamafile's cuda.sh
MAKE_PERCENT = re.compile(rb"^\[\s*(\d+)%\]")  # CMake's Makefile generator
ERROR_LINE = re.compile(
    rb"(\berror:|\berror :|\bError:|^FAILED:|CMake Error|\*\*\*|fatal error|undefined reference)"
)
SHIM_NVCC = """#!/bin/sh
# Written by patchctl: build for {archs} only. Replaces every -gencode/-arch option the
# calling script passes (llamafile's cuda.sh fixes its own list) with the requested ones.
skip=0
for arg do
  shift
  if [ "$skip" = 1 ]; then skip=0; continue; fi
  case "$arg" in
    -gencode|--generate-code|-arch|--gpu-architecture) skip=1; continue ;;
    -gencode=*|--generate-code=*|-arch=*|--gpu-architecture=*) continue ;;
  esac
  set -- "$@" "$arg"
done
exec {launcher}{nvcc} {gencode} "$@"
"""


@dataclass(frozen=True)
class BuildConfig:
    """What to build: backend, CUDA archs, targets, parallelism, compiler launcher."""

    backend: str = "auto"
    cuda: tuple[str, ...] = ()  # ("sm_86", "sm_90"); empty: CPU only
    targets: tuple[str, ...] = ()  # empty: the backend's defaults
    jobs: int | None = None  # None: all CPUs
    launcher: str | None = None  # "ccache" | "sccache"
    cosmocc: Path | None = None  # llamafile: explicit toolchain dir
    defines: tuple[str, ...] = ()  # cmake: extra KEY=VALUE

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise PatchctlError(f"unknown backend {self.backend!r}; use one of {BACKENDS}")
        if self.launcher is not None and self.launcher not in LAUNCHERS:
            raise PatchctlError(f"unknown launcher {self.launcher!r}; use one of {LAUNCHERS}")
        if self.jobs is not None and self.jobs < 1:
            raise PatchctlError(f"--jobs must be at least 1, not {self.jobs}")
        for arch in self.cuda:
            if not toolchain.CUDA_ARCH.fullmatch(arch):
                toolchain.parse_cuda_archs(arch)  # raises with the usual message and hint
                raise PatchctlError(f"one CUDA architecture per item, not {arch!r}")
        for define in self.defines:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(:[A-Z]+)?=.*", define):
                raise PatchctlError(f"invalid cmake define {define!r}; write KEY=VALUE")

    @property
    def parallel(self) -> int:
        """The number of parallel jobs actually used."""
        return self.jobs if self.jobs is not None else len(os.sched_getaffinity(0))


@dataclass(frozen=True)
class Step:
    """One command of a build: argv run in `cwd` with `env` added to the environment."""

    name: str
    argv: tuple[str, ...]
    cwd: Path
    env: tuple[tuple[str, str], ...] = ()

    def shell(self) -> str:
        """The step as one copy-pasteable shell line."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env)
        prefix = f"cd {shlex.quote(str(self.cwd))} && " + (f"env {env} " if env else "")
        return prefix + shlex.join(self.argv)

    def to_json(self) -> dict[str, object]:
        """JSON form for the manifest."""
        return {
            "step": self.name,
            "argv": list(self.argv),
            "cwd": str(self.cwd),
            "env": dict(self.env),
        }


@dataclass(frozen=True)
class NvccShim:
    """A CUDA_PATH whose bin/nvcc forces the requested archs (llamafile's cuda.sh)."""

    cuda_path: Path
    script: str


@dataclass(frozen=True)
class BuildPlan:
    """Everything a build will do, computed before anything runs (`--dry-run` prints it)."""

    tree: Path
    tree_id: str
    dirty: bool
    backend: str
    config: BuildConfig
    settings: dict[str, object]
    config_hash: str
    build_dir: Path
    source_dir: Path
    steps: tuple[Step, ...]
    export_source: bool = False  # llamafile: source_dir is an export of tree_id
    shim: NvccShim | None = None

    def commands(self) -> list[str]:
        """The exact commands, as shell lines, with the preparation steps as comments."""
        lines = [
            f"# tree {self.tree_id} ({'dirty' if self.dirty else 'clean'}) of {self.tree}",
            f"# backend {self.backend}, build dir {self.build_dir}",
        ]
        if self.export_source:
            lines.append(
                f"# export tree {self.tree_id} to {self.source_dir} "
                "(git read-tree + checkout-index into a temporary index)"
            )
        if self.shim is not None:
            lines.append(f"# write {self.shim.cuda_path / 'bin' / 'nvcc'}:")
            lines += ["#   " + line for line in self.shim.script.splitlines()]
        return lines + [step.shell() for step in self.steps]

    def to_json(self) -> dict[str, object]:
        """JSON form (`--dry-run --json` and the manifest)."""
        return {
            "tree": str(self.tree),
            "tree_id": self.tree_id,
            "dirty": self.dirty,
            "backend": self.backend,
            "settings": self.settings,
            "config_hash": self.config_hash,
            "build_dir": str(self.build_dir),
            "source_dir": str(self.source_dir),
            "targets": list(self.targets),
            "jobs": self.config.parallel,
            "commands": [s.to_json() for s in self.steps],
        }

    @property
    def targets(self) -> tuple[str, ...]:
        """The targets built (the defaults when none were asked for)."""
        if self.config.targets or self.backend != "cmake":
            return self.config.targets
        return DEFAULT_CMAKE_TARGETS


@dataclass(frozen=True)
class Artifact:
    """A built file: path relative to the build dir, its sha256 and size."""

    path: str
    sha256: str
    size: int


@dataclass(frozen=True)
class StepRun:
    """How one step went."""

    step: Step
    returncode: int
    wall_s: float
    log: Path


@dataclass(frozen=True)
class BuildResult:
    """A finished build: where its outputs are and what was recorded."""

    plan: BuildPlan
    build_dir: Path
    bin_dir: Path
    lib_dir: Path
    artifacts: tuple[Artifact, ...]
    manifest_path: Path
    wall_s: float
    runs: tuple[StepRun, ...] = field(default=())

    def artifact(self, name: str) -> Path:
        """The absolute path of the artifact whose file name is `name`."""
        for art in self.artifacts:
            if Path(art.path).name == name:
                return self.build_dir / art.path
        raise NotFound(f"no artifact named {name!r} in {self.build_dir}")


class BuildStepFailed(BuildFailed):
    """A build step exited non-zero; carries the log path and the relevant excerpt."""

    def __init__(
        self,
        message: str,
        *,
        step: str,
        returncode: int,
        log: Path,
        excerpt: str,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.step = step
        self.returncode = returncode
        self.log = log
        self.excerpt = excerpt

    def details(self) -> dict[str, object]:
        return {
            "step": self.step,
            "returncode": self.returncode,
            "log": str(self.log),
            "excerpt": self.excerpt,
        }


# --- the tree id -----------------------------------------------------------------------


def worktree_id(tree: Path) -> tuple[str, bool]:
    """(tree id of the work tree, dirty?): dirty means the snapshot differs from HEAD's tree.

    The id always comes from `Git.snapshot_worktree` (racy-git safe, the index untouched),
    never from a status check that could call a same-second edit clean.
    """
    git = Git(tree)
    if not git.is_repo():
        raise NotFound(
            f"{tree} is not a git work tree",
            hint="build a clean room made by `patchctl cleanroom apply`",
        )
    snapshot = git.snapshot_worktree()
    return snapshot, snapshot != git.maybe_rev("HEAD^{tree}")


# --- planning --------------------------------------------------------------------------


def plan_build(
    tree: Path, config: BuildConfig, build_root: Path, build_dir: Path | None = None
) -> BuildPlan:
    """Resolve backend and toolchain and compute every command; runs nothing but git."""
    tree = tree.absolute()
    tree_id, dirty = worktree_id(tree)
    backend = toolchain.detect_backend(tree) if config.backend == "auto" else config.backend
    if backend == "cmake":
        return _plan_cmake(tree, tree_id, dirty, config, build_root, build_dir)
    return _plan_llamafile(tree, tree_id, dirty, config, build_root, build_dir)


def config_hash(settings: Mapping[str, object]) -> str:
    """The first 12 hex digits of the sha256 of the canonical JSON of `settings`."""
    blob = json.dumps(settings, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def _keyed_dir(
    build_root: Path, tree_id: str, settings: Mapping[str, object], build_dir: Path | None
) -> tuple[str, Path]:
    digest = config_hash(settings)
    chosen = build_dir if build_dir is not None else build_root / f"{tree_id}-{digest}"
    return digest, chosen.absolute()


def _launcher(config: BuildConfig) -> Path | None:
    if config.launcher is None:
        return None
    return toolchain.require_tool(
        config.launcher,
        f"install {config.launcher} (apt install {config.launcher}) or drop --launcher",
    )


def _cache_env(config: BuildConfig, base: Path) -> tuple[tuple[str, str], ...]:
    """ccache: paths under `base` hashed relative, so caches are shared across clean rooms."""
    if config.launcher != "ccache":
        return ()
    return (("CCACHE_BASEDIR", str(base)), ("CCACHE_NOHASHDIR", "1"))


def _cmake_defines(config: BuildConfig, launcher: Path | None, nvcc: Path | None) -> list[str]:
    defines = [f"{key}={value}" for key, value, _why in CMAKE_DEFINES]
    langs = ["C", "CXX"]
    if config.cuda:
        assert nvcc is not None
        defines += [
            "GGML_CUDA=ON",
            f"CMAKE_CUDA_ARCHITECTURES={toolchain.cmake_cuda_architectures(config.cuda)}",
            f"CMAKE_CUDA_COMPILER={nvcc}",
        ]
        langs.append("CUDA")
    else:
        defines.append("GGML_CUDA=OFF")
    if launcher is not None:
        defines += [f"CMAKE_{lang}_COMPILER_LAUNCHER={launcher}" for lang in langs]
    return defines + list(config.defines)


def _plan_cmake(
    tree: Path,
    tree_id: str,
    dirty: bool,
    config: BuildConfig,
    build_root: Path,
    build_dir: Path | None,
) -> BuildPlan:
    source = toolchain.cmake_source_dir(tree)
    assert source is not None
    cmake = toolchain.require_tool(
        "cmake", "install cmake >= 3.14 (apt install cmake, or pip install cmake)"
    )
    ninja = toolchain.which("ninja")
    generator = "Ninja" if ninja is not None else "Unix Makefiles"
    launcher = _launcher(config)
    nvcc = toolchain.find_nvcc() if config.cuda else None
    defines = _cmake_defines(config, launcher, nvcc)
    settings: dict[str, object] = {
        "schema": SCHEMA,
        "backend": "cmake",
        "generator": generator,
        "defines": defines,
        "source": str(source.relative_to(tree)),
    }
    digest, bdir = _keyed_dir(build_root, tree_id, settings, build_dir)
    env = _cache_env(config, Path(os.path.commonpath([tree, bdir])))
    configure = (
        str(cmake),
        "-S",
        str(source),
        "-B",
        str(bdir),
        "-G",
        generator,
        *(f"-D{d}" for d in defines),
    )
    targets = config.targets or DEFAULT_CMAKE_TARGETS
    build = (
        str(cmake),
        "--build",
        str(bdir),
        "--parallel",
        str(config.parallel),
        "--target",
        *targets,
    )
    steps = (Step("configure", configure, bdir, env), Step("build", build, bdir, env))
    return BuildPlan(tree, tree_id, dirty, "cmake", config, settings, digest, bdir, source, steps)


def _plan_llamafile(
    tree: Path,
    tree_id: str,
    dirty: bool,
    config: BuildConfig,
    build_root: Path,
    build_dir: Path | None,
) -> BuildPlan:
    if not toolchain.is_llamafile_tree(tree):
        raise NotFound(
            f"{tree} is not a llamafile tree (needs Makefile, build/config.mk and llamafile/)",
            hint="use --backend cmake for a llama.cpp tree",
        )
    make = toolchain.require_tool(
        "make", "install GNU make >= 4 (apt install make, or the bin/make shipped in cosmocc.zip)"
    )
    cosmocc = toolchain.find_cosmocc(tree, config.cosmocc)
    launcher = _launcher(config)
    nvcc = toolchain.find_nvcc() if config.cuda else None
    if config.cuda:
        toolchain.cuda_script(tree)
    settings: dict[str, object] = {
        "schema": SCHEMA,
        "backend": "llamafile",
        "cosmocc": str(cosmocc.root),
        "cuda": list(config.cuda),
        "launcher": config.launcher,
    }
    digest, bdir = _keyed_dir(build_root, tree_id, settings, build_dir)
    source = bdir / "src"
    env = _cache_env(config, bdir)
    steps = [Step("make", _make_argv(make, cosmocc.root, launcher, config), source, env)]
    shim = None
    if config.cuda:
        assert nvcc is not None
        shim = _nvcc_shim(bdir, nvcc, launcher, config.cuda)
        steps.append(_cuda_step(tree, source, bdir, shim, config, env))
    return BuildPlan(
        tree,
        tree_id,
        dirty,
        "llamafile",
        config,
        settings,
        digest,
        bdir,
        source,
        tuple(steps),
        export_source=True,
        shim=shim,
    )


def _make_argv(
    make: Path, cosmocc: Path, launcher: Path | None, config: BuildConfig
) -> tuple[str, ...]:
    argv = [str(make), f"-j{config.parallel}", f"COSMOCC={cosmocc}"]
    if launcher is not None:
        argv += [
            f"CC={launcher} {cosmocc / 'bin' / 'cosmocc'}",
            f"CXX={launcher} {cosmocc / 'bin' / 'cosmoc++'}",
        ]
    return (*argv, *config.targets)


def _nvcc_shim(bdir: Path, nvcc: Path, launcher: Path | None, archs: tuple[str, ...]) -> NvccShim:
    script = SHIM_NVCC.format(
        archs=",".join(archs),
        nvcc=shlex.quote(str(nvcc)),
        launcher="" if launcher is None else shlex.quote(str(launcher)) + " ",
        gencode=shlex.join(toolchain.gencode_flags(archs)),
    )
    return NvccShim(bdir / "cuda-shim", script)


def _cuda_step(
    tree: Path,
    source: Path,
    bdir: Path,
    shim: NvccShim,
    config: BuildConfig,
    cache_env: tuple[tuple[str, str], ...],
) -> Step:
    """llamafile/cuda.sh with the shim as CUDA_PATH and HOME inside the build dir.

    cuda.sh keeps objects in $HOME/.cache/llamafile-cuda-build and skips any object newer
    than its source: with the real HOME, a build of another tree would be reused.
    """
    argv = [str(source / "llamafile" / "cuda.sh")]
    if toolchain.cuda_script_accepts(tree, "-j*"):
        argv.append(f"-j{config.parallel}")
    if toolchain.cuda_script_accepts(tree, "--output"):
        argv += ["--output", str(bdir / "ggml-cuda.so")]
    env = (("HOME", str(bdir / "cuda-home")), ("CUDA_PATH", str(shim.cuda_path)), *cache_env)
    return Step("cuda", tuple(argv), source, env)


# --- running ---------------------------------------------------------------------------


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
    """Run a plan's steps (logs in `<build dir>/logs/`), then write the manifest."""
    plan.build_dir.mkdir(parents=True, exist_ok=True)
    with _locked(plan.build_dir):
        started = time.monotonic()
        _prepare(plan)
        runs: list[StepRun] = []
        for step in plan.steps:
            run = _run_step(step, plan.build_dir / "logs" / f"{step.name}.log", progress)
            runs.append(run)
            if run.returncode != 0:
                _write_manifest(plan, runs, "failed", time.monotonic() - started)
                raise _step_failure(plan, run)
        _check_tree_unchanged(plan, runs, started)
        return _finish(plan, tuple(runs), time.monotonic() - started)


@contextmanager
def _locked(build_dir: Path) -> Iterator[None]:
    """One build at a time per build dir (two runs would corrupt each other's objects)."""
    with (build_dir / ".patchctl-build.lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _prepare(plan: BuildPlan) -> None:
    if plan.export_source:
        _export_tree(plan)
    if plan.shim is not None:
        nvcc = plan.shim.cuda_path / "bin" / "nvcc"
        nvcc.parent.mkdir(parents=True, exist_ok=True)
        nvcc.write_text(plan.shim.script)
        nvcc.chmod(0o755)
        (plan.build_dir / "cuda-home").mkdir(exist_ok=True)


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


def _run_step(step: Step, log: Path, progress: Progress | None) -> StepRun:
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
    if plan.export_source:
        return
    now, _dirty = worktree_id(plan.tree)
    if now != plan.tree_id:
        _write_manifest(plan, runs, "tree-changed", time.monotonic() - started)
        raise BuildFailed(
            f"{plan.tree} changed during the build (tree {plan.tree_id[:12]} -> {now[:12]}); "
            "the outputs match neither tree",
            hint="rerun `patchctl build` when edits are done",
        )


def _finish(plan: BuildPlan, runs: tuple[StepRun, ...], wall: float) -> BuildResult:
    bin_dir, lib_dir = output_dirs(plan)
    artifacts = collect_artifacts(plan)
    if not artifacts:
        _write_manifest(plan, list(runs), "no-artifacts", wall)
        raise BuildFailed(
            f"the build of {plan.tree_id[:12]} succeeded but produced no artifacts in {bin_dir}",
            hint=f"check --target and the logs in {plan.build_dir / 'logs'}",
        )
    manifest = _write_manifest(plan, list(runs), "ok", wall, artifacts)
    return BuildResult(plan, plan.build_dir, bin_dir, lib_dir, artifacts, manifest, wall, runs)


def output_dirs(plan: BuildPlan) -> tuple[Path, Path]:
    """(bin dir, lib dir): llama.cpp puts both in build/bin; llamafile in src/o and the dir."""
    if plan.backend == "llamafile":
        return plan.source_dir / "o", plan.build_dir
    bin_dir = plan.build_dir / "bin"
    bin_dir = bin_dir if bin_dir.is_dir() else plan.build_dir
    return bin_dir, bin_dir


def _is_artifact(path: Path) -> bool:
    if path.is_symlink() or not path.is_file():
        return False
    name = path.name
    if ".so" in name or path.suffix in (".a", ".dylib", ".dll"):
        return path.suffix != ".o"
    return os.access(path, os.X_OK) and path.suffix not in (".o", ".sh", ".py", ".cmake")


def collect_artifacts(plan: BuildPlan) -> tuple[Artifact, ...]:
    """Every built executable and library, with sha256, sorted by path."""
    bin_dir, _ = output_dirs(plan)
    if plan.backend == "llamafile":
        found = [p for p in bin_dir.rglob("*") if ".aarch64" not in p.parts]
        found += [plan.build_dir / "ggml-cuda.so", plan.build_dir / "cuda-home" / "ggml-cuda.so"]
    else:
        found = list(bin_dir.iterdir()) if bin_dir.is_dir() else []
    arts = [_artifact(plan.build_dir, p) for p in found if _is_artifact(p)]
    return tuple(sorted(arts, key=lambda a: a.path))


def _artifact(root: Path, path: Path) -> Artifact:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return Artifact(str(path.relative_to(root)), digest.hexdigest(), path.stat().st_size)


# --- the manifest ----------------------------------------------------------------------


def _write_manifest(
    plan: BuildPlan,
    runs: list[StepRun],
    status: str,
    wall: float,
    artifacts: tuple[Artifact, ...] = (),
) -> Path:
    """Write `<build dir>/patchctl-build.json` atomically and return its path."""
    data = {
        "schema": SCHEMA,
        "status": status,
        "patchctl": __version__,
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        **plan.to_json(),
        "wall_s": round(wall, 3),
        "runs": [
            {
                "step": r.step.name,
                "returncode": r.returncode,
                "wall_s": round(r.wall_s, 3),
                "log": str(r.log),
            }
            for r in runs
        ],
        "tools": tool_versions(plan),
        "artifacts": [{"path": a.path, "sha256": a.sha256, "size": a.size} for a in artifacts],
    }
    path = plan.build_dir / MANIFEST
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)
    return path


def read_manifest(build_dir: Path) -> dict[str, object]:
    """The manifest of a build dir (NotFound when there is none)."""
    path = build_dir / MANIFEST
    if not path.is_file():
        raise NotFound(f"no build manifest at {path}")
    data = json.loads(path.read_text())
    assert isinstance(data, dict)
    return data


def tool_versions(plan: BuildPlan) -> dict[str, str]:
    """Versions of the tools this plan used: build tools, compilers, nvcc, launcher."""
    tools: dict[str, Path] = {}
    for step in plan.steps:
        tools.setdefault(Path(step.argv[0]).name, Path(step.argv[0]))
    tools.pop("cuda.sh", None)
    if plan.backend == "cmake":
        tools.update(_cmake_compilers(plan.build_dir / "CMakeCache.txt"))
        ninja = toolchain.which("ninja")
        if ninja is not None and plan.settings.get("generator") == "Ninja":
            tools["ninja"] = ninja
    else:
        tools["cosmocc"] = Path(str(plan.settings["cosmocc"])) / "bin" / "cosmocc"
    if plan.config.cuda:
        tools["nvcc"] = toolchain.find_nvcc()
    if plan.config.launcher:
        launcher = toolchain.which(plan.config.launcher)
        if launcher is not None:
            tools[plan.config.launcher] = launcher
    return {name: version_of(path) for name, path in sorted(tools.items())}


def _cmake_compilers(cache: Path) -> dict[str, Path]:
    """The C, C++ and CUDA compilers CMake chose, read from CMakeCache.txt."""
    found: dict[str, Path] = {}
    names = {"CMAKE_C_COMPILER": "cc", "CMAKE_CXX_COMPILER": "c++", "CMAKE_CUDA_COMPILER": "nvcc"}
    text = cache.read_text(errors="replace") if cache.is_file() else ""
    for line in text.splitlines():
        key, _, value = line.partition("=")
        name = names.get(key.split(":", 1)[0])
        if name is not None and value:
            found[name] = Path(value)
    return found


def version_of(tool: Path) -> str:
    """The tool's own version line (`--version`), or why there is none."""
    try:
        proc = subprocess.run(
            [str(tool), "--version"],
            capture_output=True,
            timeout=60,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable ({exc})"
    lines = [ln.strip() for ln in proc.stdout.decode("utf-8", "replace").splitlines() if ln.strip()]
    release = [ln for ln in lines if "release" in ln]  # nvcc: "Cuda compilation tools, ..."
    return (release or lines or [f"no version output (exit {proc.returncode})"])[0]


# --- the command -----------------------------------------------------------------------


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
