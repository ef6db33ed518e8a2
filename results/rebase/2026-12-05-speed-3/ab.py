"""Interleaved A/B/... of one `patchctl rebase --onto` (CPU and wall): exported trees of
patchctl (each `git archive`d or copied, bytecode compiled) run in turn on one series made by
benchmarks/rebase_vs_git.py, a fresh clean room before each run (not timed); the order of
the sides rotates every round.

    python results/rebase/2026-12-05-speed-3/ab.py WORK ROUNDS OUT.json NAME=EXPORT...

WORK is a work directory of benchmarks/rebase_vs_git.py (its saved-series and project/).
Every run must end on the same tree (checked).
"""

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks.rebase_vs_git import NEW, fresh_copy  # noqa: E402

work, rounds, out = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
sides = dict(arg.split("=", 1) for arg in sys.argv[4:])
series_dir = work / "project" / "patches" / "bench"
runs: dict[str, list[dict[str, object]]] = {k: [] for k in sides}


def cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


names = list(sides)
trees = set()
for i in range(rounds):
    order = names[i % len(names):] + names[: i % len(names)]
    for name in order:
        fresh_copy(work / "saved-series", series_dir)
        env = dict(os.environ, PYTHONPATH=sides[name])
        cmd = [sys.executable, "-m", "patchctl", "rebase", "--onto", f"llama-cpp-python=={NEW}",
               "--series", str(series_dir), "--json"]  # fmt: skip
        load = os.getloadavg()[0]
        c, t = cpu(), time.perf_counter()
        done = subprocess.run(cmd, cwd=sides[name], env=env, capture_output=True, text=True)
        w, c = time.perf_counter() - t, cpu() - c
        assert done.returncode == 0, done.stderr[-2000:]
        tree = json.loads(done.stdout)["patches"][-1]["tree"]
        trees.add(tree)
        runs[name].append({"round": i, "cpu_s": round(c, 3), "wall_s": round(w, 3),
                           "load1": round(load, 2), "tree": tree})  # fmt: skip
        print(name, runs[name][-1], flush=True)
assert len(trees) == 1, trees
summary = {
    name: {
        "cpu_median_s": statistics.median(float(r["cpu_s"]) for r in v),  # type: ignore[arg-type]
        "cpu_min_s": min(float(r["cpu_s"]) for r in v),  # type: ignore[arg-type]
        "cpu_max_s": max(float(r["cpu_s"]) for r in v),  # type: ignore[arg-type]
        "wall_median_s": statistics.median(float(r["wall_s"]) for r in v),  # type: ignore[arg-type]
        "wall_min_s": min(float(r["wall_s"]) for r in v),  # type: ignore[arg-type]
        "wall_max_s": max(float(r["wall_s"]) for r in v),  # type: ignore[arg-type]
    }
    for name, v in runs.items()
}
out.write_text(json.dumps({"command": " ".join(["python", *sys.argv]), "sides": sides,
                           "final_tree": trees.pop(), "summary": summary, "runs": runs},
                          indent=2) + "\n")  # fmt: skip
print(json.dumps(summary, indent=2))
