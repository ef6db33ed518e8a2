"""Per-prefix times and checks of the every-prefix run, from what it left on disk.

`patchctl check-prefixes --json` prints its report only when the run ends; this run was stopped
before its last prefixes (see README.md), so the times come from the build directories instead:
configure.log is written when a prefix's build starts (after its apply), build.log when the build
ends, check.log when the --run command ends; checks.jsonl holds what prefix_checks.sh ran.
Usage: python3 summarize.py BUILDS_DIR SERIES_YAML > prefixes.json
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import yaml


def stamp(path: Path) -> float | None:
    return path.stat().st_mtime if path.exists() else None


def iso(t: float | None) -> str | None:
    return None if t is None else datetime.fromtimestamp(t, timezone.utc).strftime("%H:%M:%S")


def main() -> None:
    builds, series = Path(sys.argv[1]), Path(sys.argv[2])
    here = Path(__file__).resolve().parent
    checks = {}
    jsonl = here / "checks.jsonl"
    if jsonl.exists():
        for line in jsonl.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            checks[rec["id"]] = rec
    out = []
    for patch in yaml.safe_load(series.read_text(encoding="utf-8"))["patches"]:
        pid, tree = patch["id"], patch["post_tree"]
        dirs = sorted(builds.glob(f"{tree}-*"))
        row: dict[str, object] = {"id": pid, "tree": tree}
        if not dirs:
            row["state"] = "not reached"
            out.append(row)
            continue
        logs = dirs[0] / "logs"
        start, built, ran = stamp(logs / "configure.log"), stamp(logs / "build.log"), stamp(logs / "check.log")
        steps = (logs / "build.log").read_text(encoding="utf-8").count("] Building ") if built else 0
        row.update(
            build_started=iso(start),
            build_ended=iso(built) if ran else None,
            build_s=round(built - start) if start and built and ran else None,
            compiled=steps,
            run_ended=iso(ran),
            run_s=round(ran - built) if built and ran else None,
        )
        rec = checks.get(pid)
        row["state"] = ("passed" if rec["ok"] else "failed") if rec else "stopped during build or checks"
        if rec:
            row["checks"] = rec["checks"]
        out.append(row)
    json.dump(out, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
