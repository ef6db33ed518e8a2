"""Interleaved A/B of one `patchctl rebase --onto` (CPU and wall): two exported trees of patchctl
(e.g. main and a branch, each `git archive`d, bytecode compiled) alternated on one series made
by benchmarks/rebase_vs_git.py, a fresh clean room before each run (not timed).

    python results/rebase/2026-12-05-speed-1.5/ab.py WORK PAIRS MAIN_EXPORT BRANCH_EXPORT

WORK is a work directory of benchmarks/rebase_vs_git.py (its saved-series and project/). The
run recorded in ab-cpu.txt used /work/rooms-speed2/export-{main,branch}.
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

work, n = Path(sys.argv[1]), int(sys.argv[2])
sides = {"main": sys.argv[3], "branch": sys.argv[4]}
series_dir = work / "project" / "patches" / "bench"
res: dict[str, list[tuple[float, float, str]]] = {k: [] for k in sides}


def cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


for i in range(n):
    for name, root in sides.items() if i % 2 == 0 else reversed(list(sides.items())):
        fresh_copy(work / "saved-series", series_dir)
        env = dict(os.environ, PYTHONPATH=root)
        cmd = [sys.executable, "-m", "patchctl", "rebase", "--onto", f"llama-cpp-python=={NEW}",
               "--series", str(series_dir), "--json"]  # fmt: skip
        c, t = cpu(), time.perf_counter()
        done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
        w, c = time.perf_counter() - t, cpu() - c
        assert done.returncode == 0, done.stderr[-2000:]
        tree = json.loads(done.stdout)["patches"][-1]["tree"]
        res[name].append((round(c, 3), round(w, 3), tree[:8]))
        print(name, res[name][-1], os.getloadavg()[0], flush=True)
for name, v in res.items():
    print(name, "cpu median", statistics.median(x[0] for x in v),
          "wall median", statistics.median(x[1] for x in v))  # fmt: skip
