"""Find the tools a build needs and say exactly what is missing and how to provide it.

Nothing here runs a process (the build package is the only place besides git.py that does): tools
are located with `shutil.which` and the file system, layouts are read from the tree.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from patchctl.errors import NotFound, PatchctlError, ToolchainMissing

# sm_XY, sm_XYZ, with the arch-specific (a) or family (f) suffix nvcc 12.8+ knows (sm_90a).
CUDA_ARCH = re.compile(r"sm_([1-9][0-9]{1,2})([af]?)")
# `COSMOCC = .cosmocc/4.0.2` in llamafile's build/config.mk.
CONFIG_MK_COSMOCC = re.compile(rb"^COSMOCC\s*:?=\s*(\S+)\s*$", re.MULTILINE)
# `build/download-cosmocc.sh $@ 4.0.2 85b8c3...` in the same file.
CONFIG_MK_DOWNLOAD = re.compile(rb"download-cosmocc\.sh\s+\S+\s+(\S+)\s+([0-9a-f]{64})")
COSMOCC_URL = "https://cosmo.zip/pub/cosmocc/cosmocc-{version}.zip"
# `NAME = value` assignments of build/config.mk (`=`, `:=`, `?=`).
CONFIG_MK_ASSIGN = re.compile(rb"^([A-Za-z_][A-Za-z0-9_]*)\s*[:?]?=[ \t]*(.*?)\s*$", re.MULTILINE)
# The make variables that name a tool the build runs (llamafile: CC, CXX, AR, ZIPOBJ, MKDEPS).
COSMOCC_TOOL_VARS = ("CC", "CXX", "AR", "LD", "ZIPOBJ", "MKDEPS", "OBJCOPY", "STRIP")
# An absolute nvcc path a build script runs (llamafile cuda.sh: /usr/local/cuda/bin/nvcc).
ABSOLUTE_NVCC = re.compile(rb"(?<![\w$}./-])(/[A-Za-z0-9_./+-]*/bin/nvcc)(?![\w.+-])")
# `-lcuda` on a build script's nvcc line: the link needs the driver's libcuda.so (or its stub).
LINKS_LIBCUDA = re.compile(rb"(?<![\w-])-lcuda(?![\w.+-])")
# A line of `cuobjdump --list-elf`: `ELF file    1: ggml-cuda.1.sm_86.cubin`.
ELF_ARCH = re.compile(r"\.(sm_[0-9]+[af]?)\.cubin\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Cosmocc:
    """A cosmocc toolchain directory and where it was found."""

    root: Path
    source: str  # "--cosmocc", "$COSMOCC" or "tree"


def parse_cuda_archs(spec: str) -> tuple[str, ...]:
    """`"sm_86,sm_90"` -> `("sm_86", "sm_90")`, validated, order kept, duplicates dropped."""
    archs: list[str] = []
    for item in (part.strip() for part in spec.split(",")):
        if not CUDA_ARCH.fullmatch(item):
            raise PatchctlError(
                f"invalid CUDA architecture {item!r} in --cuda {spec!r}",
                hint="write sm_XY, comma-separated: --cuda sm_86 (RTX 30xx), "
                "--cuda sm_86,sm_90 (plus H100/H200), sm_89 (RTX 40xx), sm_120 (RTX 50xx)",
            )
        if item not in archs:
            archs.append(item)
    return tuple(archs)


def cmake_cuda_architectures(archs: tuple[str, ...]) -> str:
    """`("sm_86", "sm_90a")` -> `"86;90a"` (the CMAKE_CUDA_ARCHITECTURES list)."""
    return ";".join(arch.removeprefix("sm_") for arch in archs)


def gencode_flags(archs: tuple[str, ...]) -> tuple[str, ...]:
    """nvcc flags building real SASS for each arch: `-gencode arch=compute_86,code=sm_86`."""
    flags: list[str] = []
    for arch in archs:
        number = arch.removeprefix("sm_")
        flags += ["-gencode", f"arch=compute_{number},code=sm_{number}"]
    return tuple(flags)


def which(name: str, env: Mapping[str, str] | None = None) -> Path | None:
    """The absolute path of `name` on PATH (of `env` when given), or None."""
    path = (env if env is not None else os.environ).get("PATH")
    found = shutil.which(name, path=path)
    return None if found is None else Path(found)


def require_tool(name: str, how: str, env: Mapping[str, str] | None = None) -> Path:
    """The path of `name`, or ToolchainMissing saying what is missing and `how` to get it."""
    found = which(name, env)
    if found is None:
        raise ToolchainMissing(f"`{name}` not found on PATH", hint=how)
    return found


DEFAULT_NVCC = Path("/usr/local/cuda/bin/nvcc")


def find_nvcc(env: Mapping[str, str] | None = None, fallback: Path | None = None) -> Path:
    """nvcc from $CUDACXX, $CUDA_PATH/bin, PATH or /usr/local/cuda/bin (first that exists)."""
    env = os.environ if env is None else env
    candidates: list[Path] = []
    if env.get("CUDACXX"):
        candidates.append(Path(env["CUDACXX"]))
    if env.get("CUDA_PATH"):
        candidates.append(Path(env["CUDA_PATH"]) / "bin" / "nvcc")
    on_path = which("nvcc", env)
    if on_path is not None:
        candidates.append(on_path)
    candidates.append(DEFAULT_NVCC if fallback is None else fallback)
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate.absolute()
    raise ToolchainMissing(
        "nvcc (the CUDA compiler) not found: looked at $CUDACXX, $CUDA_PATH/bin/nvcc, "
        "PATH and /usr/local/cuda/bin/nvcc",
        hint="install the CUDA toolkit (12.x or 13.x) and put nvcc on PATH or set "
        "CUDA_PATH=/usr/local/cuda-13.0; a build host needs no GPU",
    )


def detect_backend(tree: Path) -> str:
    """`llamafile` for a llamafile tree (its layout), `cmake` for a CMake project."""
    if is_llamafile_tree(tree):
        return "llamafile"
    if cmake_source_dir(tree, missing_ok=True) is not None:
        return "cmake"
    raise NotFound(
        f"{tree} is neither a llamafile tree (llamafile/ + build/config.mk + Makefile) "
        "nor a CMake project (CMakeLists.txt)",
        hint="point --workdir at a clean room made by `patchctl cleanroom apply`",
    )


def is_llamafile_tree(tree: Path) -> bool:
    """True for Mozilla llamafile's layout: Makefile, build/config.mk and llamafile/."""
    return (
        (tree / "Makefile").is_file()
        and (tree / "build" / "config.mk").is_file()
        and (tree / "llamafile").is_dir()
    )


def cmake_source_dir(tree: Path, *, missing_ok: bool = False) -> Path | None:
    """The CMake source dir: the tree itself, or the llama.cpp/ nested in a llamafile tree."""
    for candidate in (tree, tree / "llama.cpp"):
        if (candidate / "CMakeLists.txt").is_file():
            return candidate
    if missing_ok:
        return None
    raise NotFound(
        f"no CMakeLists.txt in {tree} (nor in {tree / 'llama.cpp'})",
        hint="the cmake backend builds a llama.cpp tree; try --backend llamafile",
    )


def pinned_cosmocc(tree: Path) -> tuple[str | None, str | None, str | None]:
    """(COSMOCC dir, version, sha256) as pinned by the tree's build/config.mk."""
    config = tree / "build" / "config.mk"
    text = config.read_bytes() if config.is_file() else b""
    match = CONFIG_MK_COSMOCC.search(text)
    rel = match.group(1).decode("utf-8", "replace") if match else None
    version = rel.rsplit("/", 1)[-1] if rel else None
    sha = None
    for found in CONFIG_MK_DOWNLOAD.finditer(text):
        if found.group(1).decode("ascii", "replace") == version:
            sha = found.group(2).decode("ascii")
    return rel, version, sha


def cosmocc_tools(tree: Path) -> tuple[str, ...]:
    """The tools under `$(COSMOCC)/bin/` the tree's make runs: cosmocc, cosmoc++ and those
    build/config.mk names (llamafile 0.9: ar.ape, zipobj, mkdeps)."""
    config = tree / "build" / "config.mk"
    text = config.read_bytes() if config.is_file() else b""
    assigned = {
        m[1].decode(): m[2].decode("utf-8", "replace") for m in CONFIG_MK_ASSIGN.finditer(text)
    }
    names = ["cosmocc", "cosmoc++"]
    for var in COSMOCC_TOOL_VARS:
        value = _expand(assigned.get(var, ""), assigned)
        if value.startswith("$(COSMOCC)/bin/") and " " not in value:
            name = value.removeprefix("$(COSMOCC)/bin/")
            if name and "/" not in name and name not in names:
                names.append(name)
    return tuple(names)


def _expand(value: str, assigned: Mapping[str, str], depth: int = 8) -> str:
    """Expand `$(VAR)` references from `assigned`, leaving COSMOCC (the dir) as it is."""
    for _ in range(depth):
        expanded = re.sub(
            r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
            lambda m: m[0] if m[1] == "COSMOCC" else assigned.get(m[1], m[0]),
            value,
        )
        if expanded == value:
            break
        value = expanded
    return value


def cosmocc_missing_parts(
    root: Path, tools: tuple[str, ...] = ("cosmocc", "cosmoc++")
) -> list[str]:
    """The tools of `tools` (see cosmocc_tools) that `root/bin` lacks or cannot execute."""
    return [f"bin/{name}" for name in tools if not os.access(root / "bin" / name, os.X_OK)]


def find_cosmocc(
    tree: Path, explicit: Path | None, env: Mapping[str, str] | None = None
) -> Cosmocc:
    """The cosmocc toolchain from --cosmocc, $COSMOCC or the tree's pinned `.cosmocc/<v>`."""
    env = os.environ if env is None else env
    rel, version, sha = pinned_cosmocc(tree)
    tools = cosmocc_tools(tree)
    tried: list[str] = []
    candidates: list[tuple[Path | None, str]] = [
        (explicit, "--cosmocc"),
        (Path(env["COSMOCC"]) if env.get("COSMOCC") else None, "$COSMOCC"),
        (tree / rel if rel else None, "tree"),
    ]
    for root, source in candidates:
        if root is None:
            tried.append(f"{source}: not set" if source != "tree" else "tree: no pin")
            continue
        missing = cosmocc_missing_parts(root, tools)
        if not missing:
            return Cosmocc(root.absolute(), source)
        tried.append(f"{source}: {root} lacks {', '.join(missing)}")
        if source == "--cosmocc":  # an explicit choice that is broken is an error, not a hint
            break
    pin = f" {rel}" if rel else ""
    raise ToolchainMissing(
        f"cosmocc toolchain{pin} not found (" + "; ".join(tried) + ")",
        hint=cosmocc_hint(version, sha),
    )


def cosmocc_hint(version: str | None, sha: str | None) -> str:
    """How to provide cosmocc: the pinned version, its URL and sha256 when the tree says."""
    ver = version or "<version from build/config.mk>"
    text = f"download {COSMOCC_URL.format(version=ver)}"
    if sha:
        text += f" (sha256 {sha})"
    return (
        text + ", unzip it and pass --cosmocc DIR or set COSMOCC=DIR; or run `make cosmocc` "
        "in the tree (downloads into .cosmocc/, needs network)"
    )


def cuda_script(tree: Path) -> Path:
    """llamafile's `llamafile/cuda.sh`, which builds the ggml-cuda DSO with nvcc."""
    script = tree / "llamafile" / "cuda.sh"
    if not script.is_file():
        raise NotFound(
            f"{script} not found: this llamafile tree has no CUDA build script",
            hint="build without --cuda, or use a llamafile tree that has llamafile/cuda.sh",
        )
    return script


def cuda_script_accepts(tree: Path, option: str) -> bool:
    """True when cuda.sh (or the build-functions.sh it sources) parses `option`."""
    texts = [
        path.read_bytes()
        for path in (tree / "llamafile" / "cuda.sh", tree / "llamafile" / "build-functions.sh")
        if path.is_file()
    ]
    return any(option.encode() in text for text in texts)


def cuda_script_nvcc_paths(script: Path) -> tuple[str, ...]:
    """The absolute `.../bin/nvcc` paths a build script runs directly, in order, once each.

    llamafile's cuda.sh runs `/usr/local/cuda/bin/nvcc` (not `$CUDA_PATH/bin/nvcc`, not
    PATH): only a copy of the script with these paths replaced reaches patchctl's arch shim.
    """
    found: list[str] = []
    for match in ABSOLUTE_NVCC.finditer(script.read_bytes()):
        path = match[1].decode()
        if path not in found:
            found.append(path)
    return tuple(found)


def cuda_script_links_libcuda(script: Path) -> bool:
    """True when the script's nvcc line links the CUDA driver (`-lcuda`)."""
    return LINKS_LIBCUDA.search(script.read_bytes()) is not None


def find_libcuda(nvcc: Path, env: Mapping[str, str] | None = None) -> Path | None:
    """A `libcuda.so` the linker would find for `nvcc ... -lcuda`: $LIBRARY_PATH, the
    toolkit's `lib64/stubs` (nvcc.profile adds it), its lib dirs, then the system's."""
    env = os.environ if env is None else env
    root = nvcc.resolve().parent.parent
    dirs = [Path(d) for d in env.get("LIBRARY_PATH", "").split(":") if d]
    for sub in ("lib64/stubs", "lib/stubs", "targets/*/lib/stubs", "lib64", "lib", "targets/*/lib"):
        dirs += sorted(root.glob(sub))
    for system in ("/usr/lib/*-linux-gnu", "/lib/*-linux-gnu", "/usr/lib64", "/usr/lib", "/lib64"):
        dirs += sorted(Path("/").glob(system.lstrip("/")))
    for directory in dirs:
        if (directory / "libcuda.so").exists():
            return directory / "libcuda.so"
    return None


def libcuda_missing(nvcc: Path, script: Path) -> ToolchainMissing:
    """The error for a script that links `-lcuda` on a host without libcuda.so."""
    return ToolchainMissing(
        f"{script.name} links the CUDA driver (-lcuda) but no libcuda.so was found "
        f"($LIBRARY_PATH, {nvcc.resolve().parent.parent}/lib64/stubs, the system lib dirs)",
        hint="install the CUDA toolkit's driver stub (lib64/stubs/libcuda.so, e.g. the "
        "cuda-driver-dev package) or a driver, or point LIBRARY_PATH at a dir holding "
        "libcuda.so; a build host needs no GPU",
    )


def find_cuobjdump(nvcc: Path, env: Mapping[str, str] | None = None) -> Path | None:
    """cuobjdump beside nvcc (a full toolkit) or on PATH; None when neither has it."""
    for candidate in (nvcc.parent / "cuobjdump", nvcc.resolve().parent / "cuobjdump"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return which("cuobjdump", env)


def elf_archs(listing: str) -> tuple[str, ...]:
    """The SASS archs in `cuobjdump --list-elf` output, sorted, once each."""
    return tuple(sorted(set(ELF_ARCH.findall(listing))))
