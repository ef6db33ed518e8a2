"""Benchmark: `patchctl verify --all` on a generated 78-patch series vs plain `git am`.

Usage (from the project root; the sdist is found in the patchctl cache or given with --sdist):

    python benchmarks/verify_vs_am.py --workdir /tmp/patchctl-bench \
        --out results/verify/2026-11-29-vs-git-am/verify-78.json

1. Materialize the pinned llama.cpp (llama-cpp-python 0.3.36 sdist, vendor/llama.cpp) into a
   clean room with `patchctl cleanroom apply` (archive upstream, tree b2da5358...).
2. Generate 78 patches with a fixed seed: each edits 1-4 C/C++/CUDA sources of the real tree
   (inserted lines carrying a `// patchctl NNNN-bench` marker, changed lines) and sometimes adds
   a new file; each is captured with `patchctl new` + `capture` logic, so the stack advances.
3. Time, interleaved in the same run (`--repeat` rounds): `git am` of the 78 files onto the
   base commit in a shared clone (checkout not timed), and `patchctl verify --all` as a
   subprocess (chain, forward, reverse, re-export, markers for every patch, docs staleness).
   The patchctl cache is private to the run, so round 1 of verify pays the whole-upstream
   marker grep that later rounds find cached.

This is a measurement, not a test: it writes JSON with every sample and the medians.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from patchctl.gitlayer.git import Git
from patchctl.gitlayer.runner import hermetic_env
from patchctl.ops.capture import capture_patch, new_patch
from patchctl.ops.cleanroom.apply import cleanroom_apply
from patchctl.room.cleanroom import open_cleanroom
from patchctl.series.docs import write_docs
from patchctl.series.model import Series, load_series, save_series

PATCHES = 78
SEED = 78
SDIST_SHA = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
TREE = "b2da53584951ec8aa40680229509a6646a637560"
SOURCES = (".c", ".cpp", ".h", ".cu", ".cuh")
DIRS = ("src/", "ggml/src/", "common/", "tools/")


def find_sdist(explicit: Path | None) -> Path:
    """The llama-cpp-python 0.3.36 sdist: --sdist, the patchctl cache, or /tmp/dl."""
    candidates = [explicit] if explicit else []
    cache = Path(os.environ.get("PATCHCTL_CACHE_DIR") or Path.home() / ".cache" / "patchctl")
    candidates += list((cache / "sha256" / SDIST_SHA).glob("*.tar.gz"))
    candidates.append(Path("/tmp/dl/llama_cpp_python-0.3.36.tar.gz"))
    for path in candidates:
        if path is not None and path.is_file():
            return path.resolve()
    sys.exit("llama-cpp-python 0.3.36 sdist not found: pass --sdist")


def write_series(directory: Path, sdist: Path) -> Path:
    """A series.yaml with an archive upstream pointing at the sdist."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "series.yaml").write_text(
        "version: 1\nupstream:\n  kind: archive\n"
        f"  path: {sdist}\n  sha256: {SDIST_SHA}\n  subdir: vendor/llama.cpp\n  tree: {TREE}\n"
        "patches: []\n"
    )
    return directory


def candidates(room: Path) -> list[str]:
    """Source files of the real tree a generated patch may edit (sorted: deterministic)."""
    out = Git(room).run("ls-files", "-z")
    names = [n.decode() for n in out.split(b"\0") if n]
    return sorted(n for n in names if n.startswith(DIRS) and n.endswith(SOURCES))


def edit_file(path: Path, rng: random.Random, pid: str) -> None:
    """Insert marker lines and change one line of a real source file."""
    lines = path.read_bytes().splitlines(keepends=True)
    for _ in range(rng.randint(1, 3)):
        at = rng.randint(0, len(lines))
        lines.insert(at, f"// patchctl {pid}: generated line {rng.randint(0, 10**6)}\n".encode())
    if lines:
        at = rng.randrange(len(lines))
        lines[at] = lines[at].rstrip(b"\r\n") + b" /* changed */\n"
    path.write_bytes(b"".join(lines))


def generate(series_dir: Path, room_path: Path) -> Series:
    """Create and capture PATCHES patches in the clean room (stack advances each time)."""
    rng = random.Random(SEED)
    files = candidates(room_path)
    room = open_cleanroom(series_dir)
    series = load_series(series_dir, check_files=False)
    for n in range(1, PATCHES + 1):
        pid = f"{n:04d}-bench"
        series, _ = new_patch(series, pid, f"generated patch {n}", markers=(f"// patchctl {pid}",))
        for name in rng.sample(files, rng.randint(1, 4)):
            edit_file(room_path / name, rng, pid)
        if rng.random() < 0.2:
            (room_path / "patchctl-bench" / f"{pid}.h").parent.mkdir(exist_ok=True)
            (room_path / "patchctl-bench" / f"{pid}.h").write_text(f"// patchctl {pid}\n")
        series, _ = capture_patch(series, room, pid)
        save_series(series)
    write_docs(series)
    return series


def timed(cmd: list[str], env: dict[str, str] | None = None) -> float:
    """Wall seconds of a command that must succeed."""
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def am_repo(room: Path, work: Path, base: str) -> Path:
    """A shared clone of the clean room checked out at the base commit (not timed)."""
    target = work / "am"
    shutil.rmtree(target, ignore_errors=True)
    env = hermetic_env(work)
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(room), str(target)],
                   check=True, env=env)  # fmt: skip
    subprocess.run(["git", "-C", str(target), "checkout", "-q", "-f", "--detach", base],
                   check=True, env=env)  # fmt: skip
    return target


def run_am(repo: Path, base: str, files: list[Path]) -> float:
    """Reset to base (not timed), then time `git am` of every patch file."""
    env = hermetic_env(repo)
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "-f", "--detach", base],
                   check=True, env=env)  # fmt: skip
    return timed(["git", "-C", str(repo), "am", "-q", "--keep-cr", *map(str, files)], env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/patchctl-bench"))
    parser.add_argument("--sdist", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("results/verify/2026-11-29-vs-git-am/verify-78.json"))
    args = parser.parse_args()
    work = args.workdir.resolve()
    shutil.rmtree(work, ignore_errors=True)
    sdist = find_sdist(args.sdist)
    # A private patchctl cache: the first verify round starts cold (no cached marker grep).
    os.environ["PATCHCTL_CACHE_DIR"] = str(work / "cache")
    series_dir = write_series(work / "project" / "patches" / "bench", sdist)
    t0 = time.perf_counter()
    report = cleanroom_apply(series_dir)
    materialize_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    series = generate(series_dir, report.cleanroom)
    generate_s = time.perf_counter() - t0
    files = [series.patch_path(p) for p in series.patches]
    repo = am_repo(report.cleanroom, work, report.base_commit)
    verify_cmd = [sys.executable, "-m", "patchctl", "verify", "--all", "--series", str(series_dir)]
    am_s, verify_s = [], []
    for _ in range(args.repeat):
        am_s.append(run_am(repo, report.base_commit, files))
        verify_s.append(timed(verify_cmd))
    am_tree = Git(repo).tree_of("HEAD")
    result: dict[str, object] = {
        "benchmark": "patchctl verify --all vs git am, generated series over real llama.cpp",
        "command": " ".join(["python", "benchmarks/verify_vs_am.py", *sys.argv[1:]]),
        "verify_command": "patchctl verify --all --series <workdir>/project/patches/bench",
        "am_command": "git am -q --keep-cr <78 patch files>  (on the base commit, shared clone)",
        "patches": len(files),
        "patch_bytes": sum(p.stat().st_size for p in files),
        "patch_sha256": hashlib.sha256(b"".join(p.read_bytes() for p in files)).hexdigest(),
        "files_changed": len({f for p in files for f in _files(p)}),
        "upstream_tree": TREE,
        "final_tree_verify": series.patches[-1].post_tree,
        "final_tree_git_am": am_tree,
        "trees_agree": am_tree == series.patches[-1].post_tree,
        "git_am_s": [round(x, 3) for x in am_s],
        "verify_s": [round(x, 3) for x in verify_s],
        "git_am_median_s": round(statistics.median(am_s), 3),
        "verify_median_s": round(statistics.median(verify_s), 3),
        "verify_first_round_cold_cache_s": round(verify_s[0], 3),
        "ratio_verify_over_am": round(statistics.median(verify_s) / statistics.median(am_s), 2),
        "target": "verify <= 3x git am and < 60 s",
        "materialize_s": round(materialize_s, 1),
        "generate_and_capture_s": round(generate_s, 1),
        "machine": {
            "cpus": os.cpu_count(),
            "loadavg_after": os.getloadavg(),
            "python": platform.python_version(),
            "git": _git_version(),
        },
    }
    ratio = statistics.median(verify_s) / statistics.median(am_s)
    result["meets_target"] = ratio <= 3.0 and statistics.median(verify_s) < 60.0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


def _files(patch: Path) -> list[bytes]:
    lines = patch.read_bytes().splitlines()
    return [line[11:] for line in lines if line.startswith(b"diff --git ")]


def _git_version() -> str:
    return subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip()


if __name__ == "__main__":
    main()
