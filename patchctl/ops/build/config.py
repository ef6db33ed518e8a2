"""What to build: backend, CUDA archs, targets, parallelism, compiler launcher (validated)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from patchctl import allowlists
from patchctl.errors import PatchctlError
from patchctl.ops.build import BACKENDS, CPU_MODES, LAUNCHERS, PARTS, toolchain


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
    only: str | None = None  # llamafile: build just this part ("cuda": ggml-cuda.so)
    cpu: str = "native"  # cmake: "native" (this CPU's instructions) | "portable" (x86-64 AVX2)

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise PatchctlError(f"unknown backend {self.backend!r}; use one of {BACKENDS}")
        if self.launcher is not None and self.launcher not in LAUNCHERS:
            raise PatchctlError(f"unknown launcher {self.launcher!r}; use one of {LAUNCHERS}")
        if self.jobs is not None and self.jobs < 1:
            raise PatchctlError(f"--jobs must be at least 1, not {self.jobs}")
        if self.cpu not in CPU_MODES:
            raise PatchctlError(f"unknown CPU mode {self.cpu!r}; use one of {CPU_MODES}")
        if self.only is not None and self.only not in PARTS:
            raise PatchctlError(f"unknown part {self.only!r} for --only; use one of {PARTS}")
        if self.only == "cuda" and not self.cuda:
            raise PatchctlError(
                "--only cuda builds ggml-cuda.so for the archs given with --cuda",
                hint="add --cuda sm_XY, e.g. --only cuda --cuda sm_86",
            )
        for arch in self.cuda:
            if not toolchain.CUDA_ARCH.fullmatch(arch):
                toolchain.parse_cuda_archs(arch)  # raises with the usual message and hint
                raise PatchctlError(f"one CUDA architecture per item, not {arch!r}")
        for target in self.targets:
            problem = allowlists.build_target_problem(target)
            if problem is not None:
                raise PatchctlError(
                    f"--target {allowlists.shown(target)} {problem}",
                    hint="name a cmake or make target, e.g. -t llama-cli",
                )
        for define in self.defines:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(:[A-Z]+)?=.*", define):
                raise PatchctlError(f"invalid cmake define {define!r}; write KEY=VALUE")

    @property
    def parallel(self) -> int:
        """The number of parallel jobs actually used."""
        return self.jobs if self.jobs is not None else len(os.sched_getaffinity(0))
