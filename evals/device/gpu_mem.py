#!/usr/bin/env python3
"""Device memory of DCA off vs on, per process: llama-completion at a given context size.

usage: gpu_mem.py OUT.json --bin DIR --model GGUF [--ctx 131072,1048576] [--kv f16] [--n 16]
                  [--extra "LLAMA.CPP FLAGS"]

For each context size and DCA off / on, one `llama-completion -m GGUF -ngl 99 -fa on -c CTX -n N
-no-cnv -p Hello --dca off|on -v` process (it allocates the KV cache and reserves the compute
buffers for the full context, then decodes N tokens). While it runs, nvidia-smi is polled every
0.1 s for the process's own used memory (--query-compute-apps) and the device's used memory; the
peaks are kept, with the device's used memory before the process (so that device peak - baseline
is the process's footprint where the driver does not report per-process numbers, as in some
containers). The llama.cpp memory breakdown lines (model + context + compute = self) are kept too,
and are the footprint when nvidia-smi gives no usable number (each row names its source).
Rows: extra MiB and % of DCA on vs off per context size; exit 1 when one exceeds 5%.
--extra appends flags to every run (e.g. an --override-kv that gives a random-weight model the
training length of the real one, so that DCA picks the real model's chunks).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

LIMIT_PCT = 5.0


def smi(query: list[str]) -> list[list[str]]:
    res = subprocess.run(["nvidia-smi", *query, "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=10)
    lines = [line for line in res.stdout.splitlines() if line.strip()]
    return [[c.strip() for c in line.split(",")] for line in lines]


def device_used_mib() -> float | None:
    rows = smi(["--query-gpu=memory.used"])
    try:
        return float(rows[0][0])
    except (IndexError, ValueError):
        return None


def process_used_mib(pid: int) -> float | None:
    for row in smi(["--query-compute-apps=pid,used_memory"]):
        try:
            if int(row[0]) == pid:
                return float(row[1])
        except (IndexError, ValueError):
            continue
    return None


def measure(cmd: list[str]) -> dict[str, Any]:
    baseline = device_used_mib()
    t0 = time.time()
    # the log goes to a file: read from a pipe only at the end, a verbose run fills the pipe and
    # blocks in write() forever (the process then never ends)
    with tempfile.TemporaryFile(mode="w+", errors="replace") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        peaks = poll_peaks(proc)
        sink.seek(0)
        log = sink.read()
    return summarize(cmd, proc.returncode, t0, baseline, peaks, log)


def poll_peaks(proc: subprocess.Popen[Any]) -> tuple[float | None, float | None]:
    """Peak per-process and device used memory while `proc` runs, nvidia-smi every 0.1 s."""
    peak_proc: float | None = None
    peak_dev: float | None = None
    while proc.poll() is None:
        p, d = process_used_mib(proc.pid), device_used_mib()
        peak_proc = p if p is not None and (peak_proc is None or p > peak_proc) else peak_proc
        peak_dev = d if d is not None and (peak_dev is None or d > peak_dev) else peak_dev
        time.sleep(0.1)
    return peak_proc, peak_dev


def summarize(cmd: list[str], rc: int, t0: float, baseline: float | None,
              peaks: tuple[float | None, float | None], log: str) -> dict[str, Any]:
    peak_proc, peak_dev = peaks
    keep = [ln for ln in log.splitlines()
            if re.search(r"buffer size|memory breakdown|CUDA0 \(|Host  |error|failed", ln)]
    self_mib = None
    for ln in keep:  # | - CUDA0 (H200) | total = free + (self = model + context + compute) + unacc.
        m = re.search(r"CUDA0 \(.*?\(\s*(\d+)\s*=", ln)
        if m:
            self_mib = float(m.group(1))
    return {"command": cmd, "rc": rc, "wall_s": round(time.time() - t0, 1),
            "baseline_device_mib": baseline, "peak_process_mib": peak_proc,
            "peak_device_mib": peak_dev,
            "peak_device_minus_baseline_mib": (peak_dev - baseline
                                               if peak_dev is not None and baseline is not None
                                               else None),
            "llama_self_mib": self_mib, "log": keep}


def footprint(run: dict[str, Any]) -> tuple[float | None, str]:
    """The process's device memory and where it comes from: the driver's per-process peak, else the
    device's peak over its baseline, else (no usable driver number) llama.cpp's own self total."""
    if run["peak_process_mib"]:
        return float(run["peak_process_mib"]), "nvidia-smi per process"
    if run["peak_device_minus_baseline_mib"] and run["peak_device_minus_baseline_mib"] > 0:
        return float(run["peak_device_minus_baseline_mib"]), "nvidia-smi device - baseline"
    if run["llama_self_mib"] is not None:
        return float(run["llama_self_mib"]), "llama.cpp memory breakdown (self)"
    return None, "none"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--bin", type=Path, required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--ctx", default="131072,1048576")
    ap.add_argument("--kv", default="f16")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--extra", default="", help="flags appended to every llama-completion run")
    args = ap.parse_args(argv)

    runs, rows = [], []
    for ctx in (int(c) for c in args.ctx.split(",")):
        pair = {}
        for dca in ("off", "on"):
            cmd = [str(args.bin / "llama-completion"), "-m", args.model, "-ngl", "99", "-fa", "on",
                   "-c", str(ctx), "-n", str(args.n), "-no-cnv", "-p", "Hello", "--dca", dca,
                   "-ctk", args.kv, "-ctv", args.kv, "-v", *shlex.split(args.extra)]
            run = measure(cmd)
            run.update({"ctx": ctx, "dca": dca})
            runs.append(run)
            pair[dca] = run
            print(f"ctx {ctx:>8} dca {dca:<3} rc={run['rc']} process {run['peak_process_mib']} "
                  f"device-baseline {run['peak_device_minus_baseline_mib']} "
                  f"llama self {run['llama_self_mib']} MiB ({run['wall_s']} s)", flush=True)
        (off, src_off), (on, src_on) = footprint(pair["off"]), footprint(pair["on"])
        ok_runs = pair["off"]["rc"] == 0 and pair["on"]["rc"] == 0
        extra_pct = 100.0 * (on - off) / off if off and on is not None else None
        rows.append({"ctx": ctx, "off_mib": off, "on_mib": on,
                     "extra_mib": on - off if off is not None and on is not None else None,
                     "extra_pct": round(extra_pct, 2) if extra_pct is not None else None,
                     "source": src_off if src_off == src_on else f"{src_off} / {src_on}",
                     "self_off_mib": pair["off"]["llama_self_mib"],
                     "self_on_mib": pair["on"]["llama_self_mib"],
                     "met": ok_runs and extra_pct is not None and extra_pct <= LIMIT_PCT})
        print(f"ctx {ctx}: DCA on - off = {rows[-1]['extra_mib']} MiB "
              f"({rows[-1]['extra_pct']}%), limit {LIMIT_PCT}%", flush=True)
    args.out.write_text(json.dumps({"what": "device memory per process, DCA off vs on",
                                    "model": args.model, "kv": args.kv, "extra": args.extra,
                                    "limit_pct": LIMIT_PCT,
                                    "rows": rows, "runs": runs}, indent=1) + "\n")
    return 0 if all(r["met"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
