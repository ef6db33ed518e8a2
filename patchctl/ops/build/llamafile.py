"""The llamafile backend: Mozilla llamafile's cosmocc `make`, plus `llamafile/cuda.sh` for the
ggml-cuda DSO built for exactly the requested archs (`--only cuda`: that DSO alone).

llamafile builds inside its source tree, so the tree id is exported to `<build dir>/src` first
(never the clean room itself). cuda.sh fixes its own -gencode list and runs a fixed nvcc path
(6b46419: /usr/local/cuda/bin/nvcc); an nvcc shim put in its way (CUDA_PATH, PATH, and a copy
of the script with that path replaced) builds the requested archs instead, and the DSO is
checked afterwards (the shim was called; `cuobjdump --list-elf` lists exactly those archs).
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from patchctl.errors import NotFound, ToolchainMissing
from patchctl.ops.build import toolchain
from patchctl.ops.build.config import BuildConfig
from patchctl.ops.build.launcher import cache_env, find_launcher
from patchctl.ops.build.model import BackendOps, BuildPlan, Layout, NvccShim, OutputCheck, Step

SHIM_NVCC = """#!/bin/sh
# Written by patchctl: build for {archs} only. Replaces every -gencode/-arch/-code option the
# calling script passes (llamafile's cuda.sh fixes its own list) with the requested ones, and
# logs each call: patchctl fails a build whose script never came through here.
printf '%s\\n' "$*" >> {log}
skip=0
for arg do
  shift
  if [ "$skip" = 1 ]; then skip=0; continue; fi
  case "$arg" in
    -gencode|--generate-code|-arch|--gpu-architecture|-code|--gpu-code) skip=1; continue ;;
    -gencode=*|--generate-code=*|-arch=*|--gpu-architecture=*|-code=*|--gpu-code=*) continue ;;
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
    make: Path | None  # None: --only cuda
    cosmocc: Path | None
    launcher: Path | None
    nvcc: Path | None

    def settings(self) -> dict[str, object]:
        settings: dict[str, object] = {
            "cosmocc": None if self.cosmocc is None else str(self.cosmocc),
            "cuda": list(self.config.cuda),
            "launcher": self.config.launcher,
        }
        if self.config.only is not None:
            settings["only"] = self.config.only
        return settings

    def layout(self, build_dir: Path) -> Layout:
        source = build_dir / "src"
        env = cache_env(self.config, build_dir)
        steps = []
        if self.make is not None and self.cosmocc is not None:
            steps.append(Step("make", self.make_argv(self.make, self.cosmocc), source, env))
        shim = None
        if self.nvcc is not None:
            shim = nvcc_shim(build_dir, self.nvcc, self.launcher, self.config.cuda)
            shim = script_copy(self.tree, source, shim)
            steps.append(self.cuda_step(source, build_dir, shim, env))
        return Layout(source, tuple(steps), self.config.targets, export_source=True, shim=shim)

    def make_argv(self, make: Path, cosmocc: Path) -> tuple[str, ...]:
        """`make -jN COSMOCC=<dir> [targets]`: the command line overrides config.mk's pinned
        dir, and with it every tool the Makefile derives from it (CC, CXX, AR, ZIPOBJ, MKDEPS).

        No compiler launcher: cosmocc writes a second object, `.aarch64/<name>.o`, beside each
        `-o <name>.o`, which ccache neither caches nor restores on a hit.
        """
        return (str(make), f"-j{self.config.parallel}", f"COSMOCC={cosmocc}", *self.config.targets)

    def cuda_step(
        self, source: Path, build_dir: Path, shim: NvccShim, env: tuple[tuple[str, str], ...]
    ) -> Step:
        """llamafile/cuda.sh (or its copy) with the shim in nvcc's place and HOME inside the
        build dir: cuda.sh writes ~/ggml-cuda.so, and newer scripts keep objects in
        $HOME/.cache/llamafile-cuda-build, skipping any newer than its source, so with the
        real HOME a build of another tree would be reused.
        """
        argv = [str(shim.script_copy or source / "llamafile" / "cuda.sh")]
        if toolchain.cuda_script_accepts(self.tree, "-j*"):
            argv.append(f"-j{self.config.parallel}")
        if toolchain.cuda_script_accepts(self.tree, "--output"):
            argv += ["--output", str(build_dir / "ggml-cuda.so")]
        path = os.pathsep.join([str(shim.nvcc.parent), os.environ.get("PATH", os.defpath)])
        shimmed = (
            ("HOME", str(build_dir / "cuda-home")),
            ("CUDA_PATH", str(shim.cuda_path)),  # scripts that run $CUDA_PATH/bin/nvcc
            ("PATH", path),  # scripts that run `nvcc` from PATH (llamafile's build/cudacc)
            ("TMPDIR", str(build_dir / "cuda-tmp")),  # cuda.sh's `mktemp -d`, never removed
        )
        return Step("cuda", tuple(argv), source, (*shimmed, *env))


def nvcc_shim(
    build_dir: Path, nvcc: Path, launcher: Path | None, archs: tuple[str, ...]
) -> NvccShim:
    """The shim CUDA_PATH under `build_dir` whose bin/nvcc builds exactly `archs`."""
    cuda_path = build_dir / "cuda-shim"
    script = SHIM_NVCC.format(
        archs=",".join(archs),
        log=shlex.quote(str(cuda_path / "calls.log")),
        nvcc=shlex.quote(str(nvcc)),
        launcher="" if launcher is None else shlex.quote(str(launcher)) + " ",
        gencode=shlex.join(toolchain.gencode_flags(archs)),
    )
    return NvccShim(cuda_path, script)


def script_copy(tree: Path, source: Path, shim: NvccShim) -> NvccShim:
    """The shim, plus a copy of cuda.sh to run when the script names nvcc by a fixed path."""
    rewrites = toolchain.cuda_script_nvcc_paths(toolchain.cuda_script(tree))
    if not rewrites:
        return shim
    copy = source / "llamafile" / ".patchctl-cuda.sh"
    return dataclasses.replace(shim, script_copy=copy, rewrites=rewrites)


def planner(tree: Path, config: BuildConfig) -> LlamafilePlanner:
    """Check the layout and locate make and cosmocc (unless --only cuda), the launcher and,
    for --cuda, nvcc and the libcuda.so that cuda.sh links."""
    if not toolchain.is_llamafile_tree(tree):
        raise NotFound(
            f"{tree} is not a llamafile tree (needs Makefile, build/config.mk and llamafile/)",
            hint="use --backend cmake for a llama.cpp tree",
        )
    make = cosmocc = None
    if config.only != "cuda":
        cosmocc = find_cosmocc(tree, config)
        make = toolchain.require_tool(
            "make",
            "install GNU make >= 4 (apt install make, or the bin/make shipped in cosmocc.zip)",
        )
    launcher = find_launcher(config)
    nvcc = toolchain.find_nvcc() if config.cuda else None
    if nvcc is not None:
        script = toolchain.cuda_script(tree)
        if toolchain.cuda_script_links_libcuda(script) and toolchain.find_libcuda(nvcc) is None:
            raise toolchain.libcuda_missing(nvcc, script)
    return LlamafilePlanner(tree, config, make, cosmocc, launcher, nvcc)


def find_cosmocc(tree: Path, config: BuildConfig) -> Path:
    """The toolchain dir; when missing, the error also offers the CUDA-only build."""
    try:
        return toolchain.find_cosmocc(tree, config.cosmocc).root
    except ToolchainMissing as exc:
        raise ToolchainMissing(
            exc.message,
            hint=f"{exc.hint}. To build only ggml-cuda.so (llamafile/cuda.sh, no cosmocc): "
            "--only cuda --cuda sm_XY",
        ) from None


def output_dirs(plan: BuildPlan) -> tuple[Path, Path]:
    """llamafile's executables land in `<source>/o`, the CUDA DSO in the build dir."""
    return plan.source_dir / "o", plan.build_dir


def cuda_dso_paths(plan: BuildPlan) -> tuple[Path, Path]:
    """Where cuda.sh leaves ggml-cuda.so: `--output` in the build dir, else in its $HOME."""
    return plan.build_dir / "ggml-cuda.so", plan.build_dir / "cuda-home" / "ggml-cuda.so"


def artifact_candidates(plan: BuildPlan) -> list[Path]:
    """Everything under `o/` (but the aarch64 half of fat binaries) and the CUDA DSO."""
    bin_dir, _ = output_dirs(plan)
    found = [p for p in bin_dir.rglob("*") if ".aarch64" not in p.parts]
    return [*found, *cuda_dso_paths(plan)]


def tools(plan: BuildPlan) -> dict[str, Path]:
    """cosmocc and cuobjdump when used (make and the launcher are recorded from the steps)."""
    found: dict[str, Path] = {}
    if plan.settings.get("cosmocc"):
        found["cosmocc"] = Path(str(plan.settings["cosmocc"])) / "bin" / "cosmocc"
    if plan.layout.shim is not None:
        cuobjdump = toolchain.find_cuobjdump(toolchain.find_nvcc())
        if cuobjdump is not None:
            found["cuobjdump"] = cuobjdump
    return found


def prepare(plan: BuildPlan) -> None:
    """The shim nvcc, an empty call log, the script copy, cuda.sh's HOME and TMPDIR; a DSO
    of an earlier run is removed, so the check afterwards sees this run's."""
    shim = plan.layout.shim
    if shim is None:
        return
    shim.nvcc.parent.mkdir(parents=True, exist_ok=True)
    shim.nvcc.write_text(shim.script)
    shim.nvcc.chmod(0o755)
    shim.log.unlink(missing_ok=True)
    if shim.script_copy is not None:
        data = (shim.script_copy.parent / "cuda.sh").read_bytes()
        for path in shim.rewrites:
            data = data.replace(path.encode(), str(shim.nvcc).encode())
        shim.script_copy.write_bytes(data)
        shim.script_copy.chmod(0o755)
    for directory in ("cuda-home", "cuda-tmp"):
        (plan.build_dir / directory).mkdir(exist_ok=True)
    for stale in cuda_dso_paths(plan):
        stale.unlink(missing_ok=True)


def check(plan: BuildPlan) -> OutputCheck | None:
    """Every nvcc call went through the arch shim, and ggml-cuda.so holds SASS for exactly
    the requested archs (`cuobjdump --list-elf`, when the toolkit has cuobjdump)."""
    shim = plan.layout.shim
    if shim is None:
        return None
    calls = shim.log.read_text().splitlines() if shim.log.is_file() else []
    dso = next((path for path in cuda_dso_paths(plan) if path.is_file()), None)
    record: dict[str, object] = {"nvcc_calls": len(calls), "dso": None, "elf_archs": None}
    hint = f"see {plan.build_dir / 'logs'} and {shim.log}"
    if not calls:
        problem = (
            "llamafile/cuda.sh ran no nvcc through patchctl's arch shim: the archs of its "
            "output are not the requested ones"
        )
        return OutputCheck({"cuda_check": record}, problem, "wrong-archs", hint)
    if dso is None:
        problem = "llamafile/cuda.sh succeeded but wrote no ggml-cuda.so"
        return OutputCheck({"cuda_check": record}, problem, "no-artifacts", hint)
    record["dso"] = str(dso.relative_to(plan.build_dir))
    listing = list_elf(plan, dso)
    if listing is None:
        return OutputCheck({"cuda_check": record})
    found = toolchain.elf_archs(listing)
    record["elf_archs"] = list(found)
    if set(found) != set(plan.config.cuda):
        problem = (
            f"{dso.name} holds SASS for {', '.join(found) or 'no arch'}, "
            f"not exactly {', '.join(plan.config.cuda)}"
        )
        return OutputCheck({"cuda_check": record}, problem, "wrong-archs", hint)
    return OutputCheck({"cuda_check": record})


def list_elf(plan: BuildPlan, dso: Path) -> str | None:
    """`cuobjdump --list-elf <dso>`, kept in logs/cuobjdump.log; None without cuobjdump."""
    cuobjdump = toolchain.find_cuobjdump(toolchain.find_nvcc())
    if cuobjdump is None:
        return None
    argv = [str(cuobjdump), "--list-elf", str(dso)]
    proc = subprocess.run(
        argv, capture_output=True, timeout=300, check=False, stdin=subprocess.DEVNULL
    )
    text = proc.stdout.decode("utf-8", "replace") + proc.stderr.decode("utf-8", "replace")
    log = plan.build_dir / "logs" / "cuobjdump.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"$ {shlex.join(argv)}\n{text}")
    return text


BACKEND = BackendOps(planner, output_dirs, artifact_candidates, tools, prepare, check)
