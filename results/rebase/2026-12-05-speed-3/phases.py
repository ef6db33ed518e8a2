"""Wall and CPU (this process, and its git children) of the phases of one `patchctl rebase
--onto` run in-process: pin + new base, the start, moving the patches (`_advance`) and the
finish, for exported trees of patchctl in alternation (a fresh clean room before each run).

    python results/rebase/2026-12-05-speed-3/phases.py WORK ROUNDS OUT.json NAME=EXPORT...
"""

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from benchmarks.rebase_vs_git import NEW, fresh_copy
work = Path(sys.argv[1]); series_dir = work / "project" / "patches" / "bench"
fresh_copy(work / "saved-series", series_dir)
from patchctl.ops.rebase import rebase as r
phases = {}
def clock():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter(), s.ru_utime + s.ru_stime, c.ru_utime + c.ru_stime
def timed(name, fn):
    def run(*a, **k):
        t0 = clock()
        try:
            return fn(*a, **k)
        finally:
            t1 = clock()
            phases[name] = [round(b - a, 3) for a, b in zip(t0, t1)]
    return run
for name in ("new_base", "_start", "_advance", "_finish"):
    setattr(r, name, timed(name, getattr(r, name)))
t0 = clock()
report = r.rebase(series_dir, f"llama-cpp-python=={NEW}")
phases["total"] = [round(b - a, 3) for a, b in zip(t0, clock())]
print(json.dumps({"tree": report.patches[-1].tree, "phases": phases}))
"""

work, rounds, out = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
sides = dict(arg.split("=", 1) for arg in sys.argv[4:])
names = list(sides)
runs: dict[str, list[dict[str, object]]] = {k: [] for k in names}
for i in range(rounds):
    for name in names[i % len(names):] + names[: i % len(names)]:
        env = dict(os.environ, PYTHONPATH=sides[name])
        done = subprocess.run([sys.executable, "-c", CHILD, str(work), sides[name]],
                              env=env, capture_output=True, text=True, check=True)  # fmt: skip
        result = json.loads(done.stdout.splitlines()[-1])
        result["load1"] = round(os.getloadavg()[0], 2)
        runs[name].append(result)
        print(name, result, flush=True)
assert len({r["tree"] for v in runs.values() for r in v}) == 1
summary = {
    name: {
        phase: {
            "wall_median_s": statistics.median(r["phases"][phase][0] for r in v),
            "self_cpu_median_s": statistics.median(r["phases"][phase][1] for r in v),
            "git_cpu_median_s": statistics.median(r["phases"][phase][2] for r in v),
        }
        for phase in ("new_base", "_start", "_advance", "_finish", "total")
    }
    for name, v in runs.items()
}
out.write_text(json.dumps({"command": " ".join(["python", *sys.argv]), "sides": sides,
                           "summary": summary, "runs": runs}, indent=2) + "\n")  # fmt: skip
print(json.dumps(summary, indent=1))
