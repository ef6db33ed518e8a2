"""Benchmark: `patchctl rebase --onto` vs `git rebase --onto` of the same commits.

Usage (from the project root; both sdists come through patchctl's own cache, sha256-checked,
downloaded from PyPI when missing):

    PYTHONPATH=. python benchmarks/rebase_vs_git.py --workdir /tmp/patchctl-rebase-bench \
        --out results/rebase/2026-12-01-vs-git/rebase-78.json

1. Materialize llama.cpp as vendored in llama-cpp-python 0.3.36 (`pypi-sdist` upstream) with
   `patchctl cleanroom apply`.
2. Generate `--patches` patches with a fixed seed on real C/C++/CUDA sources that exist in
   both 0.3.36 and 0.3.35: each inserts marker lines (and sometimes adds a new file) at places
   at least `MARGIN` lines away from anything 0.3.35 changed, so that every patch moves to
   0.3.35 without a conflict (many at an offset, many by a three-way merge: the files differ).
3. Time, in the same run (`--repeat` rounds, setup not timed):
   - `patchctl rebase --onto llama-cpp-python==0.3.35` as a CLI subprocess: it pins and
     materializes 0.3.35 (sdist from the cache), replays the old series, moves each patch,
     regenerates its bytes, switches series.yaml and writes the range-diff;
   - `git rebase --onto <0.3.35 commit> <0.3.36 commit> <branch>` of the same patches (made
     by `git am` in a shared clone, not timed) in a repository that already holds 0.3.35 as
     a commit: git does not have to fetch, unpack or commit the new upstream.
   Both must finish without a conflict and end at the same tree.
   patchctl's modules are compiled to bytecode before the rounds, as an installed package
   is (pip compiles it): under PYTHONDONTWRITEBYTECODE each round would otherwise compile
   its ~85 modules from source again (about 0.1 s of CPU that no installed patchctl spends).

This is a measurement, not a test: it writes JSON with every sample and the medians.
"""

from __future__ import annotations

import argparse
import compileall
import difflib
import hashlib
import json
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from benchmarks.verify_vs_am import _git_version as git_version
from benchmarks.verify_vs_am import timed
from patchctl.gitlayer.git import Git
from patchctl.gitlayer.runner import hermetic_env
from patchctl.ops.capture import capture_patch, new_patch
from patchctl.ops.cleanroom.apply import cleanroom_apply
from patchctl.room.cleanroom import BASE_REF, discard_cleanroom, open_cleanroom
from patchctl.series.docs import write_docs
from patchctl.series.model import Series, load_series, save_series
from patchctl.upstream.pinning import Where, parse_upstream, pin

OLD = ("0.3.36", "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e")
NEW = "0.3.35"
SUBDIR = "vendor/llama.cpp"
SEED = 35
MARGIN = 6
SOURCES = (".c", ".cpp", ".h", ".cu", ".cuh")
DIRS = ("src/", "ggml/src/", "common/", "tools/")


def write_series(directory: Path) -> Path:
    """A series.yaml pinning the 0.3.36 sdist."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "series.yaml").write_text(
        "version: 1\nupstream:\n  kind: pypi-sdist\n  package: llama-cpp-python\n"
        f"  version: {OLD[0]}\n  sha256: {OLD[1]}\n  subdir: {SUBDIR}\npatches: []\n"
    )
    return directory


def new_files(series_dir: Path) -> dict[str, bytes]:
    """The 0.3.35 sources under DIRS, read from its sdist (fetched through patchctl's cache)."""
    where = Where(series_dir=series_dir, cwd=Path.cwd())
    pinned = pin(parse_upstream(f"llama-cpp-python=={NEW}", where, subdir=SUBDIR), series_dir)
    assert pinned.sha256 is not None
    cache = Path(os.environ.get("PATCHCTL_CACHE_DIR") or Path.home() / ".cache" / "patchctl")
    sdist = next((cache / "sha256" / pinned.sha256).glob("*.tar.gz"))
    files: dict[str, bytes] = {}
    with tarfile.open(sdist) as tar:
        for member in tar:
            parts = member.name.split("/", 1)
            if len(parts) < 2 or not parts[1].startswith(SUBDIR + "/") or not member.isfile():
                continue
            rel = parts[1][len(SUBDIR) + 1 :]
            if rel.startswith(DIRS) and rel.endswith(SOURCES):
                data = tar.extractfile(member)
                assert data is not None
                files[rel] = data.read()
    return files


def safe_lines(current: list[bytes], new: list[bytes]) -> list[int]:
    """Insertion points of `current` at least MARGIN lines inside a stretch equal in `new`."""
    matcher = difflib.SequenceMatcher(None, current, new, autojunk=False)
    points: list[int] = []
    for block in matcher.get_matching_blocks():
        points.extend(range(block.a + MARGIN, block.a + block.size - MARGIN + 1))
    return points


def edit_file(path: Path, theirs: bytes, rng: random.Random, pid: str) -> int:
    """Insert 1-2 marker lines where 0.3.35 has the same lines around; 1 if edited, else 0."""
    lines = path.read_bytes().splitlines(keepends=True)
    points = safe_lines(lines, theirs.splitlines(keepends=True))
    if not points:
        return 0
    for at in sorted(rng.sample(points, min(len(points), rng.randint(1, 2))), reverse=True):
        lines[at:at] = [f"// patchctl {pid}: line {rng.randint(0, 10**6)}\n".encode()]
    path.write_bytes(b"".join(lines))
    return 1


def generate(series_dir: Path, room_path: Path, count: int, theirs: dict[str, bytes]) -> Series:
    """Create and capture `count` patches in the clean room (the stack advances each time)."""
    rng = random.Random(SEED)
    tracked = Git(room_path).run("ls-files", "-z").split(b"\0")
    files = sorted(n.decode() for n in tracked if n and n.decode() in theirs)
    room = open_cleanroom(series_dir)
    series = load_series(series_dir, check_files=False)
    for n in range(1, count + 1):
        pid = f"{n:04d}-bench"
        series, _ = new_patch(series, pid, f"generated patch {n}", markers=(f"// patchctl {pid}",))
        wanted, edited = rng.randint(1, 4), 0
        while edited < wanted:  # a file with no place far from 0.3.35's changes is passed over
            name = rng.choice(files)
            edited += edit_file(room_path / name, theirs[name], rng, pid)
        if rng.random() < 0.2:
            (room_path / "patchctl-bench").mkdir(exist_ok=True)
            (room_path / "patchctl-bench" / f"{pid}.h").write_text(f"// patchctl {pid}\n")
        series, _ = capture_patch(series, room, pid)
        save_series(series)
    write_docs(series)
    return series


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, env=hermetic_env(repo))


def git_side(room: Path, work: Path, base: str, files: list[Path]) -> tuple[Path, str]:
    """A shared clone of the clean room with the patches as commits (`git am`) on `base`."""
    repo = work / "git"
    shutil.rmtree(repo, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(room), str(repo)],
                   check=True, env=hermetic_env(work))  # fmt: skip
    git(repo, "checkout", "-q", "-f", "-B", "series", base)
    git(repo, "am", "-q", "--keep-cr", *map(str, files))
    return repo, Git(repo).rev_parse("HEAD")


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_git_rebase(repo: Path, tip: str, old_base: str, new_base: str) -> tuple[float, float]:
    """Reset the branch to the generated tip (not timed), then time `git rebase --onto`:
    (wall seconds, CPU seconds of git and its children)."""
    git(repo, "checkout", "-q", "-f", "-B", "series", tip)
    cpu = children_cpu()
    wall = timed(["git", "-C", str(repo), "rebase", "-q", "--onto", new_base, old_base, "series"],
                 hermetic_env(repo))  # fmt: skip
    return wall, children_cpu() - cpu


def fresh_copy(saved: Path, series_dir: Path) -> None:
    """The generated series back in place, with a clean room on 0.3.36 (not timed)."""
    discard_cleanroom(open_cleanroom(series_dir))
    shutil.rmtree(series_dir)
    shutil.copytree(saved, series_dir)
    cleanroom_apply(series_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/patchctl-rebase-bench"))
    parser.add_argument("--patches", type=int, default=78)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("results/rebase/2026-12-01-vs-git/rebase-78.json"))
    args = parser.parse_args()
    work = args.workdir.resolve()
    shutil.rmtree(work, ignore_errors=True)
    series_dir = write_series(work / "project" / "patches" / "bench")
    t0 = time.perf_counter()
    report = cleanroom_apply(series_dir)
    materialize_s = time.perf_counter() - t0
    theirs = new_files(series_dir)
    t0 = time.perf_counter()
    series = generate(series_dir, report.cleanroom, args.patches, theirs)
    generate_s = time.perf_counter() - t0
    files = [series.patch_path(p) for p in series.patches]
    patch_bytes = b"".join(p.read_bytes() for p in files)
    saved = work / "saved-series"
    shutil.copytree(series_dir, saved)
    repo, tip = git_side(report.cleanroom, work, report.base_commit, files)
    cmd = [sys.executable, "-m", "patchctl", "rebase", "--onto", f"llama-cpp-python=={NEW}",
           "--series", str(series_dir), "--json"]  # fmt: skip
    rebase_s: list[float] = []
    git_s: list[float] = []
    rebase_cpu: list[float] = []
    git_cpu: list[float] = []
    hows: dict[str, int] = {}
    final_tree = git_tree = ""
    compileall.compile_dir(Path(__file__).resolve().parents[1] / "patchctl", quiet=1)
    load_before = os.getloadavg()
    for round_no in range(args.repeat):
        if round_no:
            fresh_copy(saved, series_dir)
        cpu, start = children_cpu(), time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True)
        rebase_s.append(time.perf_counter() - start)
        rebase_cpu.append(children_cpu() - cpu)
        if done.returncode != 0:
            sys.exit(f"patchctl rebase exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        result = json.loads(done.stdout)
        hows = {}
        for entry in result["patches"]:
            hows[entry["how"]] = hows.get(entry["how"], 0) + 1
        final_tree = result["patches"][-1]["tree"]
        room = Git(report.cleanroom)
        new_base = room.rev_parse(BASE_REF)
        git(repo, "fetch", "-q", str(report.cleanroom), f"{new_base}:refs/bench/new-base")
        wall, cpu = run_git_rebase(repo, tip, report.base_commit, new_base)
        git_s.append(wall)
        git_cpu.append(cpu)
        git_tree = Git(repo).tree_of("HEAD")
    out: dict[str, object] = {
        "benchmark": "patchctl rebase --onto vs git rebase --onto, generated series, llama.cpp",
        "command": " ".join(["python", "benchmarks/rebase_vs_git.py", *sys.argv[1:]]),
        "rebase_command": f"patchctl rebase --onto llama-cpp-python=={NEW} --series <bench> --json",
        "git_command": "git rebase -q --onto <0.3.35 commit> <0.3.36 commit> series",
        "from": f"llama-cpp-python=={OLD[0]} [{SUBDIR}]",
        "onto": f"llama-cpp-python=={NEW} [{SUBDIR}]",
        "patches": len(files),
        "patch_bytes": len(patch_bytes),
        "patch_sha256": hashlib.sha256(patch_bytes).hexdigest(),
        "how_patchctl_moved_them": hows,
        "final_tree_patchctl": final_tree,
        "final_tree_git": git_tree,
        "trees_agree": final_tree == git_tree,
        "patchctl_rebase_s": [round(x, 3) for x in rebase_s],
        "git_rebase_s": [round(x, 3) for x in git_s],
        "patchctl_rebase_median_s": round(statistics.median(rebase_s), 3),
        "git_rebase_median_s": round(statistics.median(git_s), 3),
        "ratio_patchctl_over_git": round(statistics.median(rebase_s) / statistics.median(git_s), 2),
        "ratio_per_round": [round(a / b, 2) for a, b in zip(rebase_s, git_s, strict=True)],
        "patchctl_rebase_cpu_s": [round(x, 3) for x in rebase_cpu],
        "git_rebase_cpu_s": [round(x, 3) for x in git_cpu],
        "cpu_ratio_patchctl_over_git": round(
            statistics.median(rebase_cpu) / statistics.median(git_cpu), 2
        ),
        "loadavg_before_rounds": load_before,
        "bytecode": "patchctl's modules compiled before the rounds (compileall)",
        "materialize_old_s": round(materialize_s, 1),
        "generate_and_capture_s": round(generate_s, 1),
        "machine": {
            "cpus": os.cpu_count(),
            "loadavg_after": os.getloadavg(),
            "python": platform.python_version(),
            "git": git_version(),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
