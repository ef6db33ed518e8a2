#!/usr/bin/env python3
"""What -DGGML_RPC=ON adds to a CPU build of llama.cpp, as JSON on stdout: each translation unit
the RPC backend and its server add (ggml/src/ggml-rpc/, tools/rpc/), compiled again from the
build's compile_commands.json without a compiler cache, its CPU seconds (user + sys, which a
loaded machine inflates less than wall time) and wall seconds, beside the CPU seconds of the
whole build's units for scale when --all is given.

    python evals/dca/rpc_build_cost.py BUILD_DIR [--all] > build-cost.json

BUILD_DIR is a cmake build configured with -DGGML_RPC=ON (patchctl build -D GGML_RPC=ON, or the
test trees' builds). Objects go to a temporary directory; the build dir is not touched.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RPC_PARTS = ("/ggml/src/ggml-rpc/", "/tools/rpc/")
LAUNCHERS = ("ccache", "sccache")


def _argv(entry: dict[str, Any], obj: Path) -> list[str]:
    argv = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    if Path(argv[0]).name in LAUNCHERS:
        argv = argv[1:]
    out: list[str] = []
    skip = 0
    for i, arg in enumerate(argv):
        if skip:
            skip -= 1
            continue
        if arg in ("-MF", "-MT", "-MQ"):
            skip = 1
            continue
        if arg in ("-MD", "-MMD"):
            continue
        if arg == "-o" and i + 1 < len(argv):
            out += ["-o", str(obj)]
            skip = 1
            continue
        out.append(arg)
    return out


def compile_unit(entry: dict[str, Any], obj: Path) -> dict[str, Any]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run(
        _argv(entry, obj), cwd=entry["directory"], capture_output=True, text=True, check=False
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"compiling {entry['file']} failed:\n{proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "file": entry["file"],
        "cpu_s": round(cpu, 2),
        "wall_s": round(time.monotonic() - started, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build_dir", type=Path)
    parser.add_argument("--all", action="store_true", help="also compile every other unit")
    args = parser.parse_args()
    db = args.build_dir / "compile_commands.json"
    cache = args.build_dir / "CMakeCache.txt"
    if not db.is_file() or "GGML_RPC:BOOL=ON" not in cache.read_text(errors="replace"):
        print(f"{args.build_dir}: no compile_commands.json or not configured with -DGGML_RPC=ON",
              file=sys.stderr)  # fmt: skip
        return 2
    entries: list[dict[str, Any]] = json.loads(db.read_text())
    rpc = [e for e in entries if any(part in e["file"] for part in RPC_PARTS)]
    rest = [e for e in entries if e not in rpc]
    with tempfile.TemporaryDirectory(prefix="rpc-build-cost-") as tmp:
        obj = Path(tmp) / "unit.o"
        rpc_units = [compile_unit(e, obj) for e in rpc]
        rest_units = [compile_unit(e, obj) for e in rest] if args.all else []
    rpc_cpu = sum(u["cpu_s"] for u in rpc_units)
    out: dict[str, Any] = {
        "what": "CPU seconds of the translation units -DGGML_RPC=ON adds (compiled without cache)",
        "command": shlex.join(["python", "evals/dca/rpc_build_cost.py", *sys.argv[1:]]),
        "build_dir": str(args.build_dir),
        "nproc": os.cpu_count(),
        "loadavg_after": os.getloadavg(),
        "rpc_units": rpc_units,
        "rpc_cpu_s": round(rpc_cpu, 1),
        "rpc_wall_s": round(sum(u["wall_s"] for u in rpc_units), 1),
    }
    if args.all:
        rest_cpu = sum(u["cpu_s"] for u in rest_units)
        out["other_units"] = len(rest_units)
        out["other_cpu_s"] = round(rest_cpu, 1)
        out["rpc_share_of_build_cpu"] = round(rpc_cpu / (rpc_cpu + rest_cpu), 4)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
