#!/usr/bin/env python3
"""What a model needs on a smaller card, from device-memory runs of a random-weight stand-in.

usage: mem_project.py GPU_MEM.json... --weights-bytes N [--card-gib 24] [--out FILE.json]

gpu_mem.py keeps, per run, llama.cpp's memory breakdown of the device: self = model + context +
compute (MiB) and what the driver shows beyond it (the CUDA context: `unaccounted`). The stand-in's
weights are not the real model's (random Q8_0 layers, f32 embeddings), but its context (KV cache and
recurrent state) and compute buffers are the real shapes'. The projection puts the real weights in
their place: weights + context + compute + unaccounted, against the card's memory (GiB = 2^30 bytes).
Counting every weight byte on the card is the conservative side: llama.cpp keeps the token
embeddings in host memory.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

MIB = 2**20
# | - CUDA0 (H200) | total = free + (self = model + context + compute) + unaccounted |
_BREAKDOWN = re.compile(
    r"CUDA0 \(.*?\|\s*(\d+)\s*=\s*(\d+)\s*\+\s*\(\s*(\d+)\s*=\s*(\d+)\s*\+\s*(\d+)\s*\+\s*(\d+)\s*\)"
    r"\s*\+\s*(-?\d+)"
)


def breakdown(run: dict[str, Any]) -> dict[str, int] | None:
    """The last breakdown line of a run with the model loaded (unaccounted >= 0), in MiB."""
    found = None
    for line in run.get("log", []):
        m = _BREAKDOWN.search(line)
        if m and int(m.group(7)) >= 0:
            total, free, self_, model, context, compute, unacc = map(int, m.groups())
            found = {"total": total, "free": free, "self": self_, "model": model,
                     "context": context, "compute": compute, "unaccounted": unacc}
    return found


def project(doc: dict[str, Any], weights_mib: float, card_mib: float) -> list[dict[str, Any]]:
    rows = []
    for run in doc["runs"]:
        b = breakdown(run)
        if b is None or run.get("rc") != 0:
            rows.append({"ctx": run["ctx"], "dca": run["dca"], "kv": doc["kv"], "error":
                         f"no breakdown (rc {run.get('rc')})"})
            continue
        need = weights_mib + b["context"] + b["compute"] + b["unaccounted"]
        rows.append({"ctx": run["ctx"], "dca": run["dca"], "kv": doc["kv"], **b,
                     "projected_mib": round(need), "left_mib": round(card_mib - need),
                     "fits": need <= card_mib})
    return rows


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", type=Path, nargs="+")
    ap.add_argument("--weights-bytes", type=int, required=True)
    ap.add_argument("--card-gib", type=float, default=24.0)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    weights_mib, card_mib = args.weights_bytes / MIB, args.card_gib * 1024
    rows: list[dict[str, Any]] = []
    for path in args.runs:
        rows += project(json.loads(path.read_text()), weights_mib, card_mib)
    print(f"weights {weights_mib:.0f} MiB, card {card_mib:.0f} MiB")
    print("kv    ctx      dca context compute unacc projected left  fits")
    for r in rows:
        if "error" in r:
            print(f"{r['kv']:<5} {r['ctx']:>8} {r['dca']:<3} {r['error']}")
            continue
        print(f"{r['kv']:<5} {r['ctx']:>8} {r['dca']:<3} {r['context']:>7} {r['compute']:>7} "
              f"{r['unaccounted']:>5} {r['projected_mib']:>9} {r['left_mib']:>5} {r['fits']}")
    if args.out:
        args.out.write_text(json.dumps({"weights_bytes": args.weights_bytes,
                                        "card_gib": args.card_gib,
                                        "inputs": [p.name for p in args.runs],
                                        "rows": rows}, indent=1) + "\n")
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
