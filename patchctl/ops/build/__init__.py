"""Build a clean-room tree: cmake (CPU, or CUDA for named archs) or llamafile (cosmocc + cuda.sh).

Every build lives in `<build root>/<tree id>-<config hash>/`: the tree id is the git tree of
the clean room's work tree (uncommitted work included, `Git.snapshot_worktree`), so a build of
one tree is never reused for another. Each run writes full logs and a JSON manifest (tree,
backend, flags, tool versions, artifacts with sha256, the exact commands, wall time) into that
directory. The package and git.py are the only places that run processes.

This module holds only the vocabulary the CLI shares with the core (backends, launchers,
default targets), so that `patchctl --help` does not import the build. The rest:

    config.py     BuildConfig: what to build (validated)
    model.py      Step, NvccShim, BuildPlan, Artifact, StepRun, BuildResult (data only)
    plan.py       the one planning skeleton: tree id, backend choice, keyed build dir
    cmake.py      the cmake backend (llama.cpp): defines, configure + build steps, outputs
    llamafile.py  the llamafile backend: cosmocc make, cuda.sh with an nvcc shim, outputs
    launcher.py   what the backends share: the compiler launcher and its cache environment
    run.py        running a plan: one process group per step, logs, progress, the command
    manifest.py   artifacts, tool versions and the JSON manifest
"""

from __future__ import annotations

from enum import StrEnum


class Backend(StrEnum):
    """How a tree is built (`--backend`); `auto` picks by the tree's layout."""

    auto = "auto"
    cmake = "cmake"
    llamafile = "llamafile"


class Part(StrEnum):
    """llamafile parts that build on their own (`--only`): cuda is ggml-cuda.so through
    llamafile/cuda.sh, with no make and no cosmocc."""

    cuda = "cuda"


class Launcher(StrEnum):
    """Compiler launchers (`--launcher`): shared or distributed build caches."""

    ccache = "ccache"
    sccache = "sccache"


class CpuMode(StrEnum):
    """Which CPU instructions a cmake build may use (`--cpu`): native is what this machine
    has (GGML_NATIVE, upstream's default); portable is x86-64 with AVX2/FMA/F16C/BMI2 and no
    AVX-512 or AMX (elsewhere: the compiler's generic target), the same code on every CPU."""

    native = "native"
    portable = "portable"


BACKENDS: tuple[str, ...] = tuple(b.value for b in Backend)
LAUNCHERS: tuple[str, ...] = tuple(launcher.value for launcher in Launcher)
PARTS: tuple[str, ...] = tuple(part.value for part in Part)
CPU_MODES: tuple[str, ...] = tuple(mode.value for mode in CpuMode)
DEFAULT_CMAKE_TARGETS = (
    "llama",
    "llama-completion",
    "llama-server",
    "llama-bench",
    "test-backend-ops",
)
