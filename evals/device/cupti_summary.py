#!/usr/bin/env python3
"""Summarize a cupti_prof.c trace: where the GPU time of the last steps of a run goes.

usage: cupti_summary.py TRACE.csv [--last N] [--json OUT.json]

A step is one graph evaluation (a ubatch, or one decoded token): it starts with the host-to-device
input copies (tokens, positions, masks) that follow GPU work, and ends with the last kernel / copy
before the next step. For the last N steps it prints the median of: host gap before the step (graph
build + set_input on the host), the step's span on the GPU, the summed kernel time, the kernel
count, and the bytes / time of the input copies; then the kernels of the last step by name.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

HTOD = "copykind1"


@dataclass
class Event:
    kind: str  # k kernel, m memcpy, s memset
    start: int
    end: int
    nbytes: int
    name: str


@dataclass
class Step:
    events: list[Event] = field(default_factory=list)

    @property
    def start(self) -> int:
        return self.events[0].start

    @property
    def end(self) -> int:
        return max(e.end for e in self.events)

    def kernels(self) -> list[Event]:
        return [e for e in self.events if e.kind == "k"]

    def htod(self) -> list[Event]:
        return [e for e in self.events if e.kind == "m" and e.name == HTOD]


def read_trace(path: Path) -> list[Event]:
    events = []
    for line in path.read_text(errors="replace").splitlines():
        parts = line.split(",", 4)
        if len(parts) == 5 and parts[0] in ("k", "m", "s"):
            events.append(Event(parts[0], int(parts[1]), int(parts[2]), int(parts[3]), parts[4]))
    events.sort(key=lambda e: e.start)
    return events


def split_steps(events: list[Event]) -> list[Step]:
    steps: list[Step] = []
    cur = Step()
    prev_kind = None
    for e in events:
        is_htod = e.kind == "m" and e.name == HTOD
        if is_htod and prev_kind not in (None, "htod") and cur.events:
            steps.append(cur)
            cur = Step()
        cur.events.append(e)
        prev_kind = "htod" if is_htod else e.kind
    if cur.events:
        steps.append(cur)
    return steps


def short_name(name: str) -> str:
    name = re.sub(r"^void ", "", name)
    return name[:110]


def summarize(steps: list[Step], last: int) -> dict:
    tail = steps[-last:]
    rows = []
    for i, st in enumerate(tail):
        idx = len(steps) - len(tail) + i
        prev_end = steps[idx - 1].end if idx > 0 else st.start
        ks = st.kernels()
        hd = st.htod()
        rows.append(
            {
                "host_gap_us": (st.start - prev_end) / 1e3,
                "span_us": (st.end - st.start) / 1e3,
                "kernel_us": sum(k.end - k.start for k in ks) / 1e3,
                "n_kernels": len(ks),
                "htod_bytes": sum(m.nbytes for m in hd),
                "htod_us": sum(m.end - m.start for m in hd) / 1e3,
            }
        )
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]} if rows else {}
    by_name: dict[str, list[float]] = defaultdict(list)
    for k in tail[-1].kernels() if tail else []:
        by_name[short_name(k.name)].append((k.end - k.start) / 1e3)
    top = sorted(((sum(v), len(v), n) for n, v in by_name.items()), reverse=True)
    return {
        "n_steps": len(steps),
        "last": len(tail),
        "median": med,
        "steps": rows,
        "last_step_kernels": [{"us": round(t, 1), "count": c, "name": n} for t, c, n in top],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", type=Path)
    ap.add_argument("--last", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    summary = summarize(split_steps(read_trace(args.trace)), args.last)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"steps {summary['n_steps']}, median of the last {summary['last']}:")
    for k, v in summary["median"].items():
        print(f"  {k:12s} {v:12.1f}")
    print("kernels of the last step (us, count, name):")
    for row in summary["last_step_kernels"][:25]:
        print(f"  {row['us']:10.1f} {row['count']:5d}  {row['name']}")


if __name__ == "__main__":
    main()
