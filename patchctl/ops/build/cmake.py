"""The cmake backend: a llama.cpp tree (or the llama.cpp/ of a llamafile tree), CPU or CUDA.

Configured out of tree in the build dir with a fixed set of defines (below), built with Ninja
when it is installed; outputs land in `<build dir>/bin/`.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path

from patchctl.ops.build import DEFAULT_CMAKE_TARGETS, cpucheck, toolchain
from patchctl.ops.build.config import BuildConfig
from patchctl.ops.build.launcher import cache_env, find_launcher
from patchctl.ops.build.model import BackendOps, BuildPlan, Layout, OutputCheck, Step

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


# --cpu portable on x86-64: upstream's non-native x86 set spelled out (AVX2 and what comes with
# it on every AVX2 CPU since 2013), no AVX-512 and no AMX, so the same instructions run, and the
# same floating-point results come out, on any x86-64 CPU with AVX2.
PORTABLE_X86_DEFINES: tuple[str, ...] = (
    "GGML_NATIVE=OFF",
    "GGML_SSE42=ON",
    "GGML_AVX=ON",
    "GGML_AVX2=ON",
    "GGML_FMA=ON",
    "GGML_F16C=ON",
    "GGML_BMI2=ON",
)
X86_MACHINES = frozenset({"x86_64", "amd64", "i386", "i686"})


def cpu_defines(mode: str, machine: str | None = None) -> tuple[str, ...]:
    """The -D values of `--cpu` (none for native: upstream's default is GGML_NATIVE=ON)."""
    if mode == "native":
        return ()
    machine = (machine or platform.machine()).lower()
    return PORTABLE_X86_DEFINES if machine in X86_MACHINES else ("GGML_NATIVE=OFF",)


def cmake_defines(config: BuildConfig, launcher: Path | None, nvcc: Path | None) -> list[str]:
    """The -D values of the configure step: the fixed ones, CUDA, the launcher, then --define."""
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
    defines += cpu_defines(config.cpu)
    if launcher is not None:
        defines += [f"CMAKE_{lang}_COMPILER_LAUNCHER={launcher}" for lang in langs]
    return defines + list(config.defines)


@dataclass(frozen=True)
class CmakePlanner:
    """The cmake plan of one tree, with cmake, the generator and the defines resolved."""

    tree: Path
    config: BuildConfig
    source: Path
    cmake: Path
    generator: str
    defines: list[str]

    def settings(self) -> dict[str, object]:
        return {
            "generator": self.generator,
            "defines": self.defines,
            "source": str(self.source.relative_to(self.tree)),
        }

    def layout(self, build_dir: Path) -> Layout:
        env = cache_env(self.config, Path(os.path.commonpath([self.tree, build_dir])))
        cmake, bdir = str(self.cmake), str(build_dir)
        configure = (
            cmake,
            *("-S", str(self.source), "-B", bdir, "-G", self.generator),
            *(f"-D{d}" for d in self.defines),
        )
        targets = self.config.targets or DEFAULT_CMAKE_TARGETS
        build = (cmake, "--build", bdir, "--parallel", str(self.config.parallel), "--target")
        steps = (
            Step("configure", configure, build_dir, env),
            Step("build", (*build, *targets), build_dir, env),
        )
        return Layout(self.source, steps, targets)


def planner(tree: Path, config: BuildConfig) -> CmakePlanner:
    """Locate cmake, the generator, the launcher and nvcc for a cmake build of `tree`."""
    source = toolchain.cmake_source_dir(tree)
    assert source is not None
    cmake = toolchain.require_tool(
        "cmake", "install cmake >= 3.14 (apt install cmake, or pip install cmake)"
    )
    generator = "Ninja" if toolchain.which("ninja") is not None else "Unix Makefiles"
    nvcc = toolchain.find_nvcc() if config.cuda else None
    defines = cmake_defines(config, find_launcher(config), nvcc)
    return CmakePlanner(tree, config, source, cmake, generator, defines)


def output_dirs(plan: BuildPlan) -> tuple[Path, Path]:
    """llama.cpp puts executables and libraries in `<build dir>/bin` (else the dir itself)."""
    bin_dir = plan.build_dir / "bin"
    bin_dir = bin_dir if bin_dir.is_dir() else plan.build_dir
    return bin_dir, bin_dir


def artifact_candidates(plan: BuildPlan) -> list[Path]:
    """The files of the bin dir."""
    bin_dir, _ = output_dirs(plan)
    return list(bin_dir.iterdir()) if bin_dir.is_dir() else []


def tools(plan: BuildPlan) -> dict[str, Path]:
    """The compilers CMake chose (CMakeCache.txt) and ninja when it was the generator."""
    found = cmake_compilers(plan.build_dir / "CMakeCache.txt")
    ninja = toolchain.which("ninja")
    if ninja is not None and plan.settings.get("generator") == "Ninja":
        found["ninja"] = ninja
    return found


def cmake_compilers(cache: Path) -> dict[str, Path]:
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


def check(plan: BuildPlan) -> OutputCheck | None:
    """The CPU self-check (cpucheck.py) with the C compiler CMake chose."""
    return cpucheck.check(plan, cmake_compilers(plan.build_dir / "CMakeCache.txt").get("cc"))


BACKEND = BackendOps(planner, output_dirs, artifact_candidates, tools, check=check)
