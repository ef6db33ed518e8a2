"""CPU and wall of taking a cached upstream tree (`tree_from_cache`) into a fresh repository,
with the remembered sound files (this branch) and with every file hashed (as before), in
alternation: the part of `rebase --onto` that the object-file records change.

    PYTHONPATH=. python results/rebase/2026-12-05-speed-3/cache_take.py ROUNDS OUT.json

The upstream is llama-cpp-python 0.3.35's vendored llama.cpp, which the tree cache must hold
(benchmarks/rebase_vs_git.py puts it there).
"""

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from patchctl.gitlayer import objects  # noqa: E402
from patchctl.gitlayer.git import Git  # noqa: E402
from patchctl.upstream.materialize import tree_from_cache  # noqa: E402
from patchctl.upstream.pinning import Where, parse_upstream, pin  # noqa: E402

rounds, out = int(sys.argv[1]), Path(sys.argv[2])
series_dir = Path(tempfile.mkdtemp())
where = Where(series_dir=series_dir, cwd=Path.cwd())
up = pin(parse_upstream("llama-cpp-python==0.3.35", where, subdir="vendor/llama.cpp"), series_dir)
real = objects.unsound_objects


def forgetful(git: Git, oids, chunk=256, *, known=None):  # type: ignore[no-untyped-def]
    return real(git, oids, chunk)


runs: dict[str, list[dict[str, float]]] = {"remembered": [], "hashed": []}
for i in range(rounds):
    for name in ("remembered", "hashed") if i % 2 == 0 else ("hashed", "remembered"):
        objects.unsound_objects = real if name == "remembered" else forgetful  # type: ignore[assignment]
        import patchctl.upstream.materialize as m

        m.unsound_objects = objects.unsound_objects  # type: ignore[attr-defined]
        with tempfile.TemporaryDirectory() as tmp:
            repo = Git.init(Path(tmp) / "r")
            c, t = time.process_time(), time.perf_counter()
            got = tree_from_cache(up, repo)
            wall, cpu = time.perf_counter() - t, time.process_time() - c
            assert got is not None
        runs[name].append({"cpu_s": round(cpu, 3), "wall_s": round(wall, 3),
                           "load1": round(os.getloadavg()[0], 2)})  # fmt: skip
        print(name, runs[name][-1], flush=True)
summary = {
    k: {"cpu_median_s": statistics.median(r["cpu_s"] for r in v),
        "wall_median_s": statistics.median(r["wall_s"] for r in v),
        "cpu_range_s": [min(r["cpu_s"] for r in v), max(r["cpu_s"] for r in v)],
        "wall_range_s": [min(r["wall_s"] for r in v), max(r["wall_s"] for r in v)]}
    for k, v in runs.items()
}  # fmt: skip
out.write_text(json.dumps({"command": " ".join(["python", *sys.argv]), "summary": summary,
                           "runs": runs}, indent=2) + "\n")  # fmt: skip
print(json.dumps(summary, indent=2))
