"""The patched llama-cpp-python the Python tests run: exported, built into a wheel, cached.

1. export: `patchctl export --sdist` of the Python series (patches/llama-cpp-python, which
   extends the llamafile series) through the core API, from its clean room brought to the whole
   stack as `patchctl cleanroom apply` would (trees.dca_room). Cached by the patched tree and
   the exporter's source, so an unchanged series is not re-exported.
2. build: `pip wheel` of that sdist, CPU, with no build isolation (scikit-build-core comes from
   the test extras), the sdist extracted into a STABLE directory and scikit-build-core's
   `build-dir` kept there too, the compilers wrapped in ccache with that directory as
   `CCACHE_BASEDIR`: a rebuild after a series change recompiles only what changed (the
   extraction stamps changed files with the current time, see `_extract`), from the cache.
   `-DLLAVA_BUILD=OFF`: the multimodal library is not under test. `nice`, 2 jobs.
3. cache: the wheel is kept under `<test cache>/wheels/<sdist sha256>-<flags hash>/` with
   `build.json` (the command, its wall time), so a rerun with the same sdist installs it in seconds.
4. install: `pip install --no-deps --target` a temporary directory; the tests run the test
   venv's Python with that directory first on PYTHONPATH (llama-cpp-python's runtime and server
   dependencies are test extras of this project).
"""

from __future__ import annotations

import filecmp
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from support.archives import extract_trusted_tar

from patchctl.fsio import sha256_file
from patchctl.ops.build.cmake import cpu_defines
from patchctl.ops.export import export_sdist
from patchctl.series.model import load_series
from patchctl.series.stack import load_stack

from .trees import Say, dca_room, test_cpu_mode

PROJECT = Path(__file__).resolve().parents[3]
PYTHON_SERIES = PROJECT / "patches" / "llama-cpp-python"
EXPORTER = (
    PROJECT / "patchctl" / "ops" / "export.py",
    PROJECT / "patchctl" / "upstream" / "sdist.py",
)
CMAKE_ARGS = "-DLLAVA_BUILD=OFF"
JOBS = "2"


def test_cache() -> Path:
    """`$PATCHCTL_TEST_CACHE`, else ~/.cache/patchctl-test (resolved before any fake HOME)."""
    default = Path.home() / ".cache" / "patchctl-test"
    return Path(os.environ.get("PATCHCTL_TEST_CACHE") or default)


def python_series() -> Path:
    """The Python series (`$PATCHCTL_PY_SERIES` overrides the directory)."""
    return Path(os.environ.get("PATCHCTL_PY_SERIES", str(PYTHON_SERIES)))


@dataclass(frozen=True)
class Wheel:
    """A built wheel of the exported sdist, and what it was built from."""

    sdist: Path
    sdist_sha256: str
    version: str
    path: Path
    build: dict[str, object]  # build.json: command, seconds, cached


def export(cache: Path, say: Say) -> tuple[Path, str]:
    """The exported sdist, cached by the patched tree and the exporter's source: (path, version)."""
    series = load_series(python_series())
    room = dca_room(series, say)
    top = load_stack(series).entries[-1].patch.post_tree or ""
    digest = hashlib.sha256(top.encode())
    for source in EXPORTER:
        digest.update(source.read_bytes())
    folder = cache / "sdists" / digest.hexdigest()[:16]
    found = sorted(folder.glob("*.tar.gz")) if folder.is_dir() else []
    if found:
        return found[0], found[0].name.split("-", 1)[1].removesuffix(".tar.gz")
    folder.mkdir(parents=True, exist_ok=True)
    say(f"exporting {series.path.parent.name} (tree {top[:12]}) into {folder}")
    result = export_sdist(series.path, folder, room.path)
    return result.path, result.version


def build_command(src: Path, out: Path, build_dir: Path) -> list[str]:
    return [
        sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
        "--disable-pip-version-check", "-w", str(out),
        f"--config-settings=build-dir={build_dir}", str(src),
    ]  # fmt: skip


def cmake_args() -> list[str]:
    """CMAKE_ARGS of the wheel: the test trees' `--cpu` mode (portable unless
    $PATCHCTL_TEST_CPU=native: the wheel runs the same instructions as they do)."""
    return [CMAKE_ARGS, *(f"-D{d}" for d in cpu_defines(test_cpu_mode()))]


def build_env(work: Path) -> dict[str, str]:
    """CPU build through ccache (when installed), 2 jobs; CMAKE_ARGS as a user would set it."""
    env = dict(os.environ)
    args = cmake_args()
    if shutil.which("ccache") is not None:
        args += ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
        env.update({"CCACHE_BASEDIR": str(work), "CCACHE_NOHASHDIR": "1"})
    env.update({"CMAKE_ARGS": " ".join(args), "CMAKE_BUILD_PARALLEL_LEVEL": JOBS})
    return env


def _extract(sdist: Path, target: Path) -> Path:
    """The sdist extracted into `target` (replacing it): its top directory.

    Every member of an exported sdist has the same fixed mtime (reproducible bytes), but ninja
    and cmake decide what to rebuild by mtime: a changed source or CMakeLists.txt stamped with
    that old time would be taken as up to date and the wheel linked from stale objects. So a
    file whose bytes equal the previous extraction's keeps that file's mtime, and any other file
    gets the current time: exactly what changed since the last build is rebuilt.
    """
    fresh = target.with_name(target.name + ".new")
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir(parents=True)
    with tarfile.open(sdist) as tar:
        extract_trusted_tar(tar, fresh)
    (top,) = list(fresh.iterdir())
    now = time.time()
    for path in top.rglob("*"):
        if path.is_symlink() or not path.is_file():
            continue
        before = target / top.name / path.relative_to(top)
        same = before.is_file() and filecmp.cmp(before, path, shallow=False)
        stamp = before.stat().st_mtime if same else now
        os.utime(path, (stamp, stamp))
    shutil.rmtree(target, ignore_errors=True)
    fresh.rename(target)
    return target / top.name


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def build(sdist: Path, cache: Path, say: Say) -> tuple[Path, dict[str, object]]:
    """The wheel of `sdist` from the cache, else built (see the module docstring)."""
    sha = sha256_file(sdist)
    flags = hashlib.sha256(" ".join(cmake_args()).encode()).hexdigest()[:12]
    folder = cache / "wheels" / f"{sha}-{flags}"  # one wheel per sdist and build flags
    record = folder / "build.json"
    wheels = sorted(folder.glob("*.whl")) if folder.is_dir() else []
    if wheels and record.is_file():
        return wheels[0], {**json.loads(record.read_text()), "cached": True}
    work = cache / "wheel-build"
    src = _extract(sdist, work / "src")
    out = work / "out"
    shutil.rmtree(out, ignore_errors=True)
    cmd = build_command(src, out, work / "build")
    say(f"building the wheel of {sdist.name} (CPU, -j{JOBS}, ccache; a cold build takes ~15 min)")
    started = time.monotonic()
    cpu_before = _children_cpu()
    proc = subprocess.run(
        ["nice", "-n", "10", *cmd], env=build_env(work), capture_output=True, text=True, check=False
    )
    seconds = round(time.monotonic() - started, 1)
    cpu = round(_children_cpu() - cpu_before, 1)
    (work / "build.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        log = work / "build.log"
        raise RuntimeError(f"pip wheel failed ({proc.returncode}); {log}:\n{proc.stderr[-4000:]}")
    (built,) = list(out.glob("*.whl"))
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(built, folder / built.name)
    info: dict[str, object] = {
        "sdist": sdist.name,
        "sdist_sha256": sha,
        "command": " ".join(cmd),
        "cmake_args": build_env(work)["CMAKE_ARGS"],
        "seconds": seconds,
        "cpu_seconds": cpu,  # user + sys of the build's processes: wall time on an idle machine
        "load_average": os.getloadavg()[0],  # is about cpu_seconds / jobs; a shared one is slower
    }
    record.write_text(json.dumps(info, indent=2) + "\n")
    say(f"built {built.name} in {seconds} s")
    return folder / built.name, {**info, "cached": False}


def wheel(say: Say) -> Wheel:
    """The exported sdist and its wheel (both cached)."""
    cache = test_cache()
    sdist, version = export(cache, say)
    path, info = build(sdist, cache, say)
    return Wheel(sdist, sha256_file(sdist), version, path, info)


def install(built: Wheel, target: Path) -> Path:
    """`pip install --no-deps --target target` of the wheel; the directory to put on PYTHONPATH."""
    cmd = [
        sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
        "--disable-pip-version-check", "--target", str(target), str(built.path),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-4000:]}")
    return target
