"""The long kill test: SIGKILL patchctl commands at seeded random points, many times.

    .venv/bin/python scripts/kill_test.py --trials 500 --seed 13 \
        --out results/kill-test/<date>/kill-test-<commit>-seed13.json

Each trial restores a scenario's world, kills the command (at its Nth write or git call, or
after a random delay), runs the next command and checks the invariants (tests/support/kill.py
says which). The JSON keeps the command line, the counts per scenario and every failure.
Exit status 1 when any trial found a violation or lost data.
"""

from __future__ import annotations

import argparse
import platform
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support.kill import SCENARIOS, Prepared, Trial, World, dump, prepare, summary, trial


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=500, help="kills in all (default 500)")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated")
    parser.add_argument("--out", type=Path, help="write the JSON result here")
    args = parser.parse_args(argv)
    names = [n for n in args.scenarios.split(",") if n]
    rng = random.Random(args.seed)
    base = Path(tempfile.mkdtemp(prefix="patchctl-killtest-"))
    started = time.monotonic()
    trials: list[Trial] = []
    prepared: dict[str, Prepared] = {}
    try:
        for name in names:
            world = World(base / name / "world")
            prepared[name] = prepare(SCENARIOS[name], world, base / name / "template")
        for number in range(args.trials):
            prep = prepared[names[number % len(names)]]
            mode = "hook" if number % 4 else "delay"  # three in four at a counted point
            done = trial(prep, rng, mode)
            trials.append(done)
            flag = "" if not (done.violations or done.lost) else f"  {done.violations}"
            print(f"{number + 1}/{args.trials} {done.scenario} {mode} {done.at}{flag}", flush=True)
            if args.out is not None and (number + 1) % 25 == 0:  # a stopped run keeps its part
                _write(args, argv, trials, prepared, started, complete=False)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    result = _write(args, argv, trials, prepared, started, complete=True)
    print({k: result[k] for k in ("trials", "killed", "violations", "lost", "saved", "seconds")})
    return 1 if result["violations"] or result["lost"] else 0


def _write(
    args: argparse.Namespace,
    argv: list[str] | None,
    trials: list[Trial],
    prepared: dict[str, Prepared],
    started: float,
    *,
    complete: bool,
) -> dict[str, object]:
    result = summary(trials)
    result["complete"] = complete
    result["points"] = {name: p.points for name, p in prepared.items()}
    result["command"] = " ".join(
        ["python", "scripts/kill_test.py", *(argv if argv is not None else sys.argv[1:])]
    )
    result["seconds"] = round(time.monotonic() - started, 1)
    result["machine"] = f"{platform.system()} {platform.machine()}, {platform.python_version()}"
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        dump(args.out, result)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
