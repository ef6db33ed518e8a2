#!/usr/bin/env python3
"""Start-up time of the patchctl CLI: `--version`, `--help`, one shell-completion answer, and a
subcommand's `--help`, against a reference checkout measured in the same run.

    python benchmarks/startup.py --reference REF [--runs 30] [--out results/startup/2026-12-01/startup.json]

REF is a tree of patchctl sources to compare with (e.g. `git archive main | tar -x -C
/tmp/ref`). Both trees run in this interpreter's environment (`python -c` with the tree first on
sys.path), one run of each in turn, so load on the machine hits both alike. Each sample is the
wall time of a whole process (Python start-up included) and its CPU time (user + system);
`python -c pass` is the floor. The JSON keeps every sample, the command line and the machine's
load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
COMPLETION_ENV = {
    "_PATCHCTL_COMPLETE": "bash_complete",
    "COMP_WORDS": "patchctl build --backend ",
    "COMP_CWORD": "3",
}
# (name, patchctl arguments, extra environment)
CASES: tuple[tuple[str, tuple[str, ...], dict[str, str]], ...] = (
    ("--version", ("--version",), {}),
    ("--help", ("--help",), {}),
    ("completion (bash, build --backend <TAB>)", (), COMPLETION_ENV),
    ("cleanroom --help", ("cleanroom", "--help"), {}),
)


def entry(tree: Path) -> list[str]:
    """argv running the patchctl CLI of `tree` (what the `patchctl` console script does)."""
    code = f"import sys; sys.path.insert(0, {str(tree)!r}); from patchctl.cli.main import main; "
    return [sys.executable, "-c", code + "sys.exit(main())"]


def sample(argv: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(wall s, cpu s, stdout) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, env={**os.environ, **env}, capture_output=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.stdout.decode("utf-8", "replace")


def summary(values: list[float]) -> dict[str, float]:
    return {
        "min": round(min(values), 4),
        "median": round(statistics.median(values), 4),
        "mean": round(statistics.fmean(values), 4),
    }


def measure(trees: dict[str, Path], runs: int) -> dict[str, object]:
    results: dict[str, object] = {}
    floor = [sample([sys.executable, "-c", "pass"], {}) for _ in range(runs)]
    results["python -c pass"] = {
        "wall_s": summary([w for w, _c, _o in floor]),
        "cpu_s": summary([c for _w, c, _o in floor]),
    }
    for name, args, env in CASES:
        samples: dict[str, list[tuple[float, float, str]]] = {label: [] for label in trees}
        for _ in range(runs):
            for label, tree in trees.items():  # interleaved: same load for both
                samples[label].append(sample(entry(tree) + list(args), env))
        results[name] = {
            label: {
                "wall_s": summary([w for w, _c, _o in got]),
                "cpu_s": summary([c for _w, c, _o in got]),
                "answered": bool(got[0][2].strip()),
                "wall_samples": [round(w, 4) for w, _c, _o in got],
            }
            for label, got in samples.items()
        }
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", type=Path, required=True, help="tree to compare with")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here")
    args = parser.parse_args()
    trees = {"reference": args.reference.resolve(), "this tree": HERE}
    load_before = os.getloadavg()
    results = measure(trees, args.runs)
    report = {
        "command": " ".join(["python", "benchmarks/startup.py", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "runs": args.runs,
        "trees": {label: str(tree) for label, tree in trees.items()},
        "results": results,
    }
    text = json.dumps(report, indent=2) + "\n"
    if args.out is not None:
        args.out.write_text(text)
    for name, value in results.items():
        if name == "python -c pass":
            print(f"{name:44s} wall min {value['wall_s']['min']:.3f} s")  # type: ignore[index]
            continue
        for label, stats in value.items():  # type: ignore[attr-defined]
            wall, cpu = stats["wall_s"], stats["cpu_s"]
            print(
                f"{name:44s} {label:10s} wall min {wall['min']:.3f} median {wall['median']:.3f}"
                f"  cpu min {cpu['min']:.3f}  answered={stats['answered']}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
