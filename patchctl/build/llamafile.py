"""The llamafile backend: Mozilla llamafile's cosmocc `make`, plus `llamafile/cuda.sh` for the
ggml-cuda DSO built for exactly the requested archs.

llamafile builds inside its source tree, so the tree id is exported to `<build dir>/src` first
(never the clean room itself). cuda.sh fixes its own -gencode list; an nvcc shim in front of
the real nvcc replaces it with the requested archs.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from patchctl import toolchain
from patchctl.build.config import BuildConfig
from patchctl.build.launcher import cache_env, find_launcher
from patchctl.build.model import BackendOps, BuildPlan, Layout, NvccShim, Step
from patchctl.errors import NotFound

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
class LlamafilePlanner:
    """The llamafile plan of one tree, with make, cosmocc, the launcher and nvcc resolved."""

    tree: Path
    config: BuildConfig
    make: Path
    cosmocc: Path
    launcher: Path | None
    nvcc: Path | None

    def settings(self) -> dict[str, object]:
        return {
            "cosmocc": str(self.cosmocc),
            "cuda": list(self.config.cuda),
            "launcher": self.config.launcher,
        }

    def layout(self, build_dir: Path) -> Layout:
        source = build_dir / "src"
        env = cache_env(self.config, build_dir)
        steps = [Step("make", self.make_argv(), source, env)]
        shim = None
        if self.config.cuda:
            assert self.nvcc is not None
            shim = nvcc_shim(build_dir, self.nvcc, self.launcher, self.config.cuda)
            steps.append(self.cuda_step(source, build_dir, shim, env))
        return Layout(source, tuple(steps), self.config.targets, export_source=True, shim=shim)

    def make_argv(self) -> tuple[str, ...]:
        """`make -jN COSMOCC=...` (the launcher wraps cosmocc/cosmoc++), then the targets."""
        cosmocc = self.cosmocc
        argv = [str(self.make), f"-j{self.config.parallel}", f"COSMOCC={cosmocc}"]
        if self.launcher is not None:
            argv += [
                f"CC={self.launcher} {cosmocc / 'bin' / 'cosmocc'}",
                f"CXX={self.launcher} {cosmocc / 'bin' / 'cosmoc++'}",
            ]
        return (*argv, *self.config.targets)

    def cuda_step(
        self, source: Path, build_dir: Path, shim: NvccShim, env: tuple[tuple[str, str], ...]
    ) -> Step:
        """llamafile/cuda.sh with the shim as CUDA_PATH and HOME inside the build dir.

        cuda.sh keeps objects in $HOME/.cache/llamafile-cuda-build and skips any object newer
        than its source: with the real HOME, a build of another tree would be reused.
        """
        argv = [str(source / "llamafile" / "cuda.sh")]
        if toolchain.cuda_script_accepts(self.tree, "-j*"):
            argv.append(f"-j{self.config.parallel}")
        if toolchain.cuda_script_accepts(self.tree, "--output"):
            argv += ["--output", str(build_dir / "ggml-cuda.so")]
        home = (("HOME", str(build_dir / "cuda-home")), ("CUDA_PATH", str(shim.cuda_path)))
        return Step("cuda", tuple(argv), source, (*home, *env))


def nvcc_shim(
    build_dir: Path, nvcc: Path, launcher: Path | None, archs: tuple[str, ...]
) -> NvccShim:
    """The shim CUDA_PATH under `build_dir` whose bin/nvcc builds exactly `archs`."""
    script = SHIM_NVCC.format(
        archs=",".join(archs),
        nvcc=shlex.quote(str(nvcc)),
        launcher="" if launcher is None else shlex.quote(str(launcher)) + " ",
        gencode=shlex.join(toolchain.gencode_flags(archs)),
    )
    return NvccShim(build_dir / "cuda-shim", script)


def planner(tree: Path, config: BuildConfig) -> LlamafilePlanner:
    """Check the layout and locate make, cosmocc, the launcher and (for --cuda) nvcc."""
    if not toolchain.is_llamafile_tree(tree):
        raise NotFound(
            f"{tree} is not a llamafile tree (needs Makefile, build/config.mk and llamafile/)",
            hint="use --backend cmake for a llama.cpp tree",
        )
    make = toolchain.require_tool(
        "make", "install GNU make >= 4 (apt install make, or the bin/make shipped in cosmocc.zip)"
    )
    cosmocc = toolchain.find_cosmocc(tree, config.cosmocc)
    launcher = find_launcher(config)
    nvcc = toolchain.find_nvcc() if config.cuda else None
    if config.cuda:
        toolchain.cuda_script(tree)
    return LlamafilePlanner(tree, config, make, cosmocc.root, launcher, nvcc)


def output_dirs(plan: BuildPlan) -> tuple[Path, Path]:
    """llamafile's executables land in `<source>/o`, the CUDA DSO in the build dir."""
    return plan.source_dir / "o", plan.build_dir


def artifact_candidates(plan: BuildPlan) -> list[Path]:
    """Everything under `o/` (but the aarch64 half of fat binaries) and the CUDA DSO."""
    bin_dir, _ = output_dirs(plan)
    found = [p for p in bin_dir.rglob("*") if ".aarch64" not in p.parts]
    return [*found, plan.build_dir / "ggml-cuda.so", plan.build_dir / "cuda-home" / "ggml-cuda.so"]


def tools(plan: BuildPlan) -> dict[str, Path]:
    """cosmocc (make and the launcher are recorded from the steps)."""
    return {"cosmocc": Path(str(plan.settings["cosmocc"])) / "bin" / "cosmocc"}


BACKEND = BackendOps(planner, output_dirs, artifact_candidates, tools)
