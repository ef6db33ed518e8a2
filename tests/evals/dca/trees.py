"""The llama.cpp trees the DCA tests run against, produced through patchctl's own core API.

Two trees, each a patchctl clean room built with the cmake backend (CPU):

- the DCA tree: the series with ALL its patches applied, in the series' default clean room
  (`cleanroom/<series>`), created or brought there as `patchctl cleanroom apply` would. When
  that room holds unsaved work (edits, new files, commits patchctl did not make), comes from
  another upstream pin or is not patchctl's, it is left alone and the test-owned sibling
  `cleanroom/<series>-test` is used instead;
- the upstream tree: the same pin with NO patch applied, in `cleanroom/<series>-upstream`
  (the series with its patch list emptied, so apply stops at the base commit).

The upstream sdist comes through patchctl's cache (`$PATCHCTL_CACHE_DIR`, else XDG), builds live
in `<clean room>.builds/<tree id>-<config hash>/` (`patchctl build`'s layout), so a rerun reuses
them and ninja has nothing to do; `ccache` is the compiler launcher when it is on PATH. Two
rooms with the same tree id (a series without patches) share one build.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from patchctl.errors import DirtyTree
from patchctl.ops.build import CPU_MODES
from patchctl.ops.build.config import BuildConfig
from patchctl.ops.build.model import BuildResult
from patchctl.ops.build.plan import worktree_id
from patchctl.ops.build.run import build_tree, builds_root
from patchctl.ops.cleanroom.apply import apply_series, reusable_prefix
from patchctl.room.cleanroom import (
    Cleanroom,
    create_cleanroom,
    default_workdir,
    discard_cleanroom,
    is_cleanroom,
    load_cleanroom,
    locked,
    same_pin,
)
from patchctl.series.model import Series
from patchctl.series.stack import load_stack

TARGETS = (
    "ggml",
    "llama",
    "llama-common",
    "llama-bench",
    "llama-server",
    "llama-completion",
    "ggml-rpc-server",
)
"""What the DCA tests link or run: libggml{,-base,-cpu}.so (probes), libllama and libllama-common
(tests/evals/dca/native/dca_logits.cpp, dca_state.cpp), llama-bench (test_dca_bench.py, its output
columns), llama-server (test_dca_server.py) and llama-completion (test_python_wheel.py: the
Python bindings' greedy text against it) and ggml-rpc-server (test_dca_rpc.py: a model split over
rpc-server processes on loopback). test-backend-ops and the other tools are not needed."""

RPC_TARGETS = ("ggml", "ggml-rpc-server")
"""What the RPC refusal tests need of the unpatched upstream: its ggml libraries (libggml-rpc: the
RPC client) and its RPC server."""

DEFINES = ("GGML_RPC=ON",)
"""The test trees are built with the RPC backend, so a ggml op added to the tree without updating
ggml-rpc (its op-count assert and protocol version) fails the build of every test run."""

TEST_SUFFIX = "-test"
UPSTREAM_SUFFIX = "-upstream"

Say = Callable[[str], None]


@dataclass(frozen=True)
class Tree:
    """A built clean room: its source tree and the cmake build of it."""

    room: Path
    tree_id: str
    build: BuildResult


# ----------------------------------------------------------------------------- clean rooms


def _unsaved(room: Cleanroom) -> str | None:
    """Why `room` holds work patchctl did not make (None when it holds none)."""
    dirty = room.dirty_paths()
    if dirty:
        return f"{len(dirty)} changed path(s): " + ", ".join(dirty[:3])
    if any(not pid for _commit, pid, _sha in room.stack()):
        return "commits not made by patchctl"
    return None


def at_target(room: Cleanroom, series: Series) -> bool:
    """True when `room` is exactly `series` fully applied, with no unsaved work."""
    if not same_pin(room, series) or _unsaved(room) is not None:
        return False
    stack = room.stack()
    targets = load_stack(series).entries
    kept = reusable_prefix(room, targets)
    return len(kept) == len(targets) == len(stack)


def bring_to(series: Series, path: Path, say: Say) -> Cleanroom:
    """Create or update the clean room at `path` to `series` fully applied.

    Never discards work: a room with unsaved work or foreign commits is refused (DirtyTree).
    """
    with locked(path):
        room: Cleanroom | None = load_cleanroom(path) if is_cleanroom(path) else None
        if room is not None:
            why = _unsaved(room)
            if why is not None:
                raise DirtyTree(
                    f"{path} has unsaved work ({why}); the DCA tests do not touch it",
                    hint="capture or remove that work, or set PATCHCTL_<KIND>_SRC and _BUILD",
                )
            if not same_pin(room, series):
                say(f"{path}: made from another upstream pin; recreating it")
                for cache in path.rglob("__pycache__"):  # the tests' own bytecode (gguf-py)
                    shutil.rmtree(cache)
                discard_cleanroom(room)  # refuses any other ignored file
                room = None
        if room is None:
            say(f"materializing {series.upstream.describe()} into {path}")
            room = create_cleanroom(series, path, TerminalProgress(say))
        if not at_target(room, series):
            say(f"{path}: applying {len(load_stack(series).entries)} patch(es) of {series.path}")
        apply_series(series, room)
        return room


def dca_room(series: Series, say: Say) -> Cleanroom:
    """The series fully applied: its default clean room unless that holds unsaved work (or
    comes from another pin, or is not patchctl's), then the test-owned `<name>-test`."""
    default = default_workdir(series.dir)
    if not default.exists():
        return bring_to(series, default, say)
    if is_cleanroom(default):
        room = load_cleanroom(default)
        if at_target(room, series):
            return room
        why = _unsaved(room)
        if why is None and same_pin(room, series):
            say(f"{default}: applying the whole series (as `patchctl cleanroom apply` would)")
            return bring_to(series, default, say)
        reason = f"holds unsaved work ({why})" if why else "comes from another upstream pin"
    else:
        reason = "is not a patchctl clean room"
    fallback = default.with_name(default.name + TEST_SUFFIX)
    say(f"{default} {reason}: left alone, using {fallback}")
    return bring_to(series, fallback, say)


def upstream_room(series: Series, say: Say) -> Cleanroom:
    """The pristine upstream of `series` (no patch applied), in `<name>-upstream`."""
    default = default_workdir(series.dir)
    path = default.with_name(default.name + UPSTREAM_SUFFIX)
    return bring_to(series.with_patches(()), path, say)


# ----------------------------------------------------------------------------- builds


CPU_ENV = "PATCHCTL_TEST_CPU"
"""`portable` (default) or `native`: the `--cpu` mode of the test trees' builds."""


def test_cpu_mode() -> str:
    """The test trees' `--cpu` mode: portable unless $PATCHCTL_TEST_CPU says native.

    Portable is the default so that the numerics the DCA tests compare are the same on every
    x86-64 machine CI may get (no AVX-512 or AMX path chosen by the build host's CPU), and no
    host-specific instruction path can crash a test; `native` checks the same equivalences
    with this machine's own instructions."""
    mode = os.environ.get(CPU_ENV, "portable")
    if mode not in CPU_MODES:
        raise ValueError(f"${CPU_ENV}={mode!r}: use one of {', '.join(CPU_MODES)}")
    return mode


def build_config(targets: tuple[str, ...] = TARGETS) -> BuildConfig:
    """cmake, CPU ($PATCHCTL_TEST_CPU, portable by default), all CPUs, ccache when installed."""
    launcher = "ccache" if shutil.which("ccache") is not None else None
    return BuildConfig(
        backend="cmake", targets=targets, launcher=launcher, cpu=test_cpu_mode(), defines=DEFINES
    )


@dataclass
class TreeBuilder:
    """Builds clean rooms once per tree id within a session (a rerun reuses the build dir)."""

    say: Say
    config: BuildConfig = field(default_factory=build_config)
    built: dict[str, Tree] = field(default_factory=dict)

    def build(self, room: Cleanroom, label: str) -> Tree:
        """Build `room` (BuildFailed with the compiler's error tail when it fails)."""
        tree_id, _dirty = worktree_id(room.path)
        if tree_id in self.built:
            self.say(f"{label}: tree {tree_id[:12]} already built this session")
            return self.built[tree_id]
        cfg = self.config
        self.say(
            f"{label}: building tree {tree_id[:12]} of {room.path} "
            f"(cmake, targets {' '.join(cfg.targets)}, -j{cfg.parallel}, "
            f"launcher {cfg.launcher or 'none'}); a first build without ccache takes 10-20 min "
            "on 2 cores, a rerun reuses the build dir"
        )
        started = time.monotonic()
        result = build_tree(room.path, cfg, builds_root(room.path), TerminalProgress(self.say))
        self.say(f"{label}: built in {time.monotonic() - started:.1f} s -> {result.build_dir}")
        tree = Tree(room.path, tree_id, result)
        self.built[tree_id] = tree
        return tree


@dataclass
class TerminalProgress:
    """patchctl Progress events as occasional plain lines: start and done of each task, and
    every 10 % of a build (every 30 s at most between lines of any task)."""

    say: Say
    every_s: float = 30.0
    tenths: tuple[str, ...] = ("build", "cuda")
    state: dict[str, tuple[int | None, int, int, float]] = field(default_factory=dict)

    def start(self, task: str, total: int | None) -> None:
        self.state[task] = (total, 0, 0, time.monotonic())
        self.say(f"  {task}: 0/{total}" if total else f"  {task} ...")

    def advance(self, task: str, n: int = 1) -> None:
        total, done, shown, last = self.state.get(task, (None, 0, 0, time.monotonic()))
        done += n
        now = time.monotonic()
        step = max(1, (total or 0) // 10) if task in self.tenths else None
        if (total and step and done - shown >= step) or now - last >= self.every_s:
            self.say(f"  {task}: {done}/{total}" if total else f"  {task}: {done}")
            shown, last = done, now
        self.state[task] = (total, done, shown, last)

    def done(self, task: str) -> None:
        total, done, _shown, _last = self.state.pop(task, (None, 0, 0, 0.0))
        self.say(f"  {task}: done" + (f" ({done}/{total})" if total else ""))
