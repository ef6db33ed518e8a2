#!/usr/bin/env python3
"""DCA on / off throughput ratios from llama-bench JSON files (`dca_bench.sh`, or any
`llama-bench ... -dca 0,1 -o json` run), one row per (model, test, depth): plain and DCA t/s (mean
and stddev over the repetitions), the ratio and whether it meets the target.

A run may hold several instances of each arm (`-dca 0,1,1,0`: llama-bench makes a new context per
instance): the ratio is then the mean of the DCA instances' rates over the mean of the plain ones,
and `instance_ratios` pairs the i-th DCA instance with the i-th plain one. Decode rates differ by a
few per cent between contexts of the same process, which the repetitions inside one context do
not sample: one instance per arm understates the spread of a ratio.

usage: throughput_summary.py OUT.json NAME=BENCH.json[:COMMAND] ... [--tree ID] [--gpu TEXT]
                             [--target 0.95]
  NAME labels the model; COMMAND (optional) is the command line that produced the file, kept in
  each row. Prints the rows as a table; exits 1 when a row misses the target or a file lacks the
  DCA on/off pair.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def _test_name(row: dict[str, Any]) -> str:
    return f"pp{row['n_prompt']}" if row["n_prompt"] else f"tg{row['n_gen']}"


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def summarize(name: str, path: Path, command: str | None, target: float) -> list[dict[str, Any]]:
    """The ratio rows of one llama-bench JSON file (ValueError: a cell lacks its on/off pair)."""
    cells: dict[tuple[str, int], dict[bool, list[dict[str, Any]]]] = {}
    for row in json.loads(path.read_text()):
        cell = cells.setdefault((_test_name(row), int(row["n_depth"])), {})
        cell.setdefault(bool(row.get("dca", False)), []).append(row)
    out = []
    for (test, depth), pair in cells.items():
        if set(pair) != {False, True}:
            missing = "on" if True not in pair else "off"
            raise ValueError(f"{path}: {test} at depth {depth} lacks DCA {missing}")
        plain, dca = pair[False], pair[True]
        plain_ts = [float(r["avg_ts"]) for r in plain]
        dca_ts = [float(r["avg_ts"]) for r in dca]
        ratio = _mean(dca_ts) / _mean(plain_ts)
        row_out: dict[str, Any] = {
            "model": name, "file": path.name, "command": command, "test": test, "depth": depth,
            "reps": sum(len(r["samples_ts"]) for r in plain),
            "plain_ts": round(_mean(plain_ts), 1), "plain_sd": round(_pooled_sd(plain), 1),
            "dca_ts": round(_mean(dca_ts), 1), "dca_sd": round(_pooled_sd(dca), 1),
            "ratio": round(ratio, 3), "met": ratio >= target,
        }
        if len(plain) > 1 or len(dca) > 1:
            row_out["instances"] = min(len(plain), len(dca))
            row_out["instance_ratios"] = [round(d / p, 3) for d, p in zip(dca_ts, plain_ts,
                                                                          strict=False)]
        out.append(row_out)
    return out


def _pooled_sd(instances: list[dict[str, Any]]) -> float:
    """The standard deviation of every repetition of every instance of one arm."""
    samples = [float(x) for r in instances for x in r["samples_ts"]]
    if len(instances) == 1 or len(samples) < 2:
        return float(instances[0]["stddev_ts"])
    m = _mean(samples)
    return float((sum((x - m) ** 2 for x in samples) / (len(samples) - 1)) ** 0.5)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("out", type=Path)
    ap.add_argument("benches", nargs="+", metavar="NAME=BENCH.json[:COMMAND]")
    ap.add_argument("--tree", default=None)
    ap.add_argument("--gpu", default=None)
    ap.add_argument("--target", type=float, default=0.95)
    args = ap.parse_args(argv)

    rows: list[dict[str, Any]] = []
    for spec in args.benches:
        name, _, rest = spec.partition("=")
        file, _, command = rest.partition(":")
        try:
            rows += summarize(name, Path(file), command or None, args.target)
        except (OSError, ValueError, KeyError) as e:
            print(f"throughput_summary: {e}", file=sys.stderr)
            return 1
    summary = {"tree": args.tree, "gpu": args.gpu, "target": f">= {args.target}", "rows": rows}
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    for r in rows:
        print(f"{r['model']:<10} {r['file']:<26} {r['test']:<6} {r['depth']:>7} "
              f"{r['plain_ts']:>9.1f} {r['dca_ts']:>9.1f} {r['ratio']:6.3f} "
              f"{'ok' if r['met'] else 'MISSED'}")
    return 0 if all(r["met"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
