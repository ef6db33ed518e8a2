#!/usr/bin/env python3
"""The cost of llama.cpp's RPC backend on loopback, with and without DCA: llama-bench's prefill
and decode tokens/s for one model run on the local CPU, then with every layer on two
ggml-rpc-server processes on 127.0.0.1 (-sm layer, -ts 1,1), as JSON on stdout.

The servers run the same CPU backend with the same thread count as the local run; only one of
them computes at a time (a layer split is sequential), so the difference is the RPC transport
and the graph split, not more compute. The build is the DCA build the tests use (the developer
override), built with -DGGML_RPC=ON:

    PATCHCTL_DCA_SRC=TREE PATCHCTL_DCA_BUILD=BUILD python evals/dca/dca_rpc_bench.py MODEL.gguf \\
        > result.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.evals.dca.builds import env_build
from tests.evals.dca.rpc_servers import RpcServer, rpc_args

THREADS = 2


def head_tree(src: Path) -> str:
    """The tree id of the clean room's HEAD (the series as applied; evals do not import
    patchctl, so one read-only git call here)."""
    out = subprocess.run(
        ["git", "-C", str(src), "rev-parse", "HEAD^{tree}"], capture_output=True, check=True
    )
    return out.stdout.decode().strip()


def bench_args(args: argparse.Namespace) -> list[str]:
    return [
        "-m", str(args.model), "-t", str(THREADS), "-fa", "1",
        "-p", str(args.prompt), "-n", str(args.gen), "-d", str(args.depth),
        "-dca", "0,1", "--dca-chunk-size", str(args.chunk_size),
        "--dca-local-window", str(args.local_window), "-r", str(args.reps), "-o", "json",
    ]  # fmt: skip


def run_bench(cmd: list[str]) -> tuple[list[dict[str, Any]], float]:
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"{shlex.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    rows: list[dict[str, Any]] = json.loads(proc.stdout)
    return rows, time.monotonic() - started


def summary(mode: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        test = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
        out.append(
            {
                "mode": mode,
                "test": test,
                "depth": r["n_depth"],
                "dca": bool(r.get("dca", False)),
                "avg_ts": r["avg_ts"],
                "stddev_ts": r["stddev_ts"],
                "samples_ts": r["samples_ts"],
                "backends": r.get("backends"),
                "n_gpu_layers": r.get("n_gpu_layers"),
            }
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--prompt", type=int, default=256)
    parser.add_argument("--gen", type=int, default=32)
    parser.add_argument("--depth", type=int, default=1024)
    parser.add_argument("--chunk-size", type=int, default=512)
    parser.add_argument("--local-window", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    build = env_build("DCA")
    if build is None:
        print(
            "set PATCHCTL_DCA_SRC and PATCHCTL_DCA_BUILD (a DCA tree built with RPC)",
            file=sys.stderr,
        )
        return 2
    bench = build.bin / "llama-bench"
    server = build.bin / "ggml-rpc-server"
    for exe in (bench, server):
        if not exe.is_file():
            print(
                f"no {exe} (build llama-bench and ggml-rpc-server with -DGGML_RPC=ON)",
                file=sys.stderr,
            )
            return 2
    base = [str(bench), *bench_args(args)]
    local_cmd = [*base, "-ngl", "0"]
    results: list[dict[str, Any]] = []
    local_rows, local_s = run_bench(local_cmd)
    results += summary("local", local_rows)
    with (
        tempfile.TemporaryDirectory(prefix="dca-rpc-bench-") as tmp,
        RpcServer(server, Path(tmp) / "a.log", threads=THREADS) as a,
        RpcServer(server, Path(tmp) / "b.log", threads=THREADS) as b,
    ):
        rpc_cmd = [*base, *rpc_args([a, b], 99)]
        rpc_rows, rpc_s = run_bench(rpc_cmd)
    results += summary("rpc", rpc_rows)
    ratios = {}
    for r in results:
        if r["mode"] != "rpc":
            continue
        key = f"{r['test']}/dca={'on' if r['dca'] else 'off'}"
        local = next(
            x
            for x in results
            if x["mode"] == "local" and (x["test"], x["dca"]) == (r["test"], r["dca"])
        )
        ratios[key] = round(r["avg_ts"] / local["avg_ts"], 3)
    out = {
        "what": "llama-bench tokens/s: the local CPU, and every layer on two ggml-rpc-server "
        "on 127.0.0.1",
        "commands": {
            "local": shlex.join(local_cmd),
            "rpc_servers": f"{server} -H 127.0.0.1 -p PORT -t {THREADS} (two of them)",
            "rpc": shlex.join(rpc_cmd),
            "this_script": "PATCHCTL_DCA_SRC=TREE PATCHCTL_DCA_BUILD=BUILD "
            + shlex.join(["python", "evals/dca/dca_rpc_bench.py", *sys.argv[1:]]),
        },
        "tree": head_tree(build.src),
        "build": str(build.build),
        "model": args.model.name,
        "cpu": platform.processor() or platform.machine(),
        "nproc": os.cpu_count(),
        "loadavg_after": os.getloadavg(),
        "wall_s": {"local": round(local_s, 1), "rpc": round(rpc_s, 1)},
        "rpc_over_local": ratios,
        "rows": results,
    }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
