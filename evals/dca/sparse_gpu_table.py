#!/usr/bin/env python3
"""Sparse prefill on a GPU: the speed table from evals/device/sparse_speed.sh's JSON lines.

Each line is one llama-bench prefill of ``n`` tokens (no decode) in one of four arms: ``dca-dense``,
``dca-sparse``, ``plain-dense``, ``plain-sparse``, with its command, exit status, wall time and
llama-bench's mean prefill time (``avg_ns``; a run stopped at its cap has rc 124 and no time: its
wall time is a lower bound).

    sparse_gpu_table.py FILE.jsonl [FILE.jsonl ...] [--json OUT.json] [--plot OUT.png]

prints, per model (the ``cell`` of each line), a markdown table (prefill seconds per arm and the
dense / sparse speed-ups with the same DCA setting) and the targets the sparse prefill is held to:
a 1M-token prefill of the 0.5B model in at most 60 s and at least 4x faster than dense DCA, at
least 1.5x at 128k, and no slowdown below the sparse threshold (sparse / dense time <= 1.05 at
32k, where the default threshold keeps every ubatch dense), and GPU memory within 5 % of dense
(the peak ``gpu_mem_peak_mib`` minus the card's reading before the run, ``gpu_mem_idle_mib``, where
a line has both). ``--json`` writes the same as data; ``--plot`` draws the dense / sparse
speed-up against the prompt length, one line per model and mode (needs matplotlib, the
``longctx`` extra).
Exit 0 whatever the targets say (they are reported, not enforced); 2 on unreadable input.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ARMS = ("dca-dense", "dca-sparse", "plain-dense", "plain-sparse")
TARGET_1M_S = 60.0
TARGET_1M_SPEEDUP = 4.0
TARGET_128K_SPEEDUP = 1.5
NO_SLOWDOWN = 1.05
MEMORY_WITHIN = 1.05
DEFAULT_CELL = "qwen2.5-0.5b/f16"


@dataclass(frozen=True)
class Cell:
    """One arm at one size: the prefill time, or a lower bound when the run hit its cap."""

    seconds: float | None
    lower_bound: float | None
    rc: int
    mem_mib: int | None = None

    def text(self) -> str:
        if self.seconds is not None:
            return f"{self.seconds:.2f}"
        if self.lower_bound is not None:
            return f">{self.lower_bound:.0f} (rc {self.rc})"
        return f"failed (rc {self.rc})"


def read_rows(paths: list[Path]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in paths:
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as e:
                raise ValueError(f"{path}:{lineno}: not JSON ({e})") from None
            if (
                not isinstance(row, dict)
                or row.get("arm") not in ARMS
                or not isinstance(row.get("n"), int)
            ):
                raise ValueError(f"{path}:{lineno}: not a sparse_speed.sh row (arm, n)")
            rows.append(row)
    return rows


def models(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The rows per model (``cell``; rows without one are the default model's)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        out.setdefault(str(row.get("cell", DEFAULT_CELL)), []).append(row)
    return out


def cells(rows: list[dict[str, Any]]) -> dict[int, dict[str, Cell]]:
    """The last row of each (size, arm) of one model: a rerun replaces an earlier one."""
    out: dict[int, dict[str, Cell]] = {}
    for row in rows:
        avg = row.get("avg_ns")
        rc = int(row.get("rc", 1))
        seconds = avg / 1e9 if rc == 0 and isinstance(avg, (int, float)) else None
        bound = float(row["wall_s"]) if seconds is None and rc == 124 else None
        out.setdefault(row["n"], {})[row["arm"]] = Cell(seconds, bound, rc, memory(row))
    return out


def memory(row: dict[str, Any]) -> int | None:
    """The run's own GPU memory: its peak reading minus the card's reading before it (MiB)."""
    peak, idle = row.get("gpu_mem_peak_mib"), row.get("gpu_mem_idle_mib")
    if not isinstance(peak, int) or not isinstance(idle, int) or peak < idle:
        return None
    return peak - idle


def memory_ratio(dense: Cell | None, sparse: Cell | None) -> float | None:
    """Sparse / dense GPU memory of one size (None unless both were sampled and dense used some)."""
    if dense is None or sparse is None or dense.mem_mib is None or sparse.mem_mib is None:
        return None
    return sparse.mem_mib / dense.mem_mib if dense.mem_mib > 0 else None


def speedup(dense: Cell | None, sparse: Cell | None) -> float | None:
    if dense is None or sparse is None or dense.seconds is None or sparse.seconds is None:
        return None
    return dense.seconds / sparse.seconds


def targets(table: dict[int, dict[str, Cell]]) -> list[dict[str, Any]]:
    res: list[dict[str, Any]] = []
    big = table.get(1048576, {})
    sp = big.get("dca-sparse")
    res.append(
        {
            "target": "1M prefill (sparse DCA) <= 60 s",
            "measured": sp.seconds if sp else None,
            "met": bool(sp and sp.seconds is not None and sp.seconds <= TARGET_1M_S),
        }
    )
    s1m = speedup(big.get("dca-dense"), sp)
    res.append(
        {
            "target": "1M: >= 4x dense DCA",
            "measured": s1m,
            "met": s1m is not None and s1m >= TARGET_1M_SPEEDUP,
        }
    )
    s128 = speedup(table.get(131072, {}).get("dca-dense"), table.get(131072, {}).get("dca-sparse"))
    res.append(
        {
            "target": "128k: >= 1.5x dense DCA",
            "measured": s128,
            "met": s128 is not None and s128 >= TARGET_128K_SPEEDUP,
        }
    )
    for mode in ("dca", "plain"):
        s32 = speedup(
            table.get(32768, {}).get(f"{mode}-dense"), table.get(32768, {}).get(f"{mode}-sparse")
        )
        res.append(
            {
                "target": f"32k ({mode}): no slowdown below the threshold "
                f"(sparse/dense <= {NO_SLOWDOWN})",
                "measured": None if s32 is None else 1.0 / s32,
                "met": s32 is not None and 1.0 / s32 <= NO_SLOWDOWN,
            }
        )
    ratios = [
        (n, mode, r)
        for n, row in sorted(table.items())
        for mode in ("dca", "plain")
        if (r := memory_ratio(row.get(f"{mode}-dense"), row.get(f"{mode}-sparse"))) is not None
    ]
    worst = max(ratios, key=lambda t: t[2], default=None)
    res.append(
        {
            "target": f"GPU memory: sparse within {MEMORY_WITHIN - 1:.0%} of dense "
            "(worst size and mode)",
            "measured": None if worst is None else worst[2],
            "where": None if worst is None else f"{worst[0]} {worst[1]}",
            "met": bool(ratios) and all(r <= MEMORY_WITHIN for _, _, r in ratios),
        }
    )
    return res


def markdown(table: dict[int, dict[str, Cell]]) -> str:
    head = (
        "| tokens | "
        + " | ".join(f"{a} (s)" for a in ARMS)
        + " | DCA speed-up | plain speed-up | GPU MiB dense / sparse (DCA; plain) |"
    )
    lines = [head, "|" + "---|" * (len(ARMS) + 4)]
    for n in sorted(table):
        row = table[n]
        vals = [row[a].text() if a in row else "-" for a in ARMS]
        ups = []
        for mode in ("dca", "plain"):
            s = speedup(row.get(f"{mode}-dense"), row.get(f"{mode}-sparse"))
            ups.append("-" if s is None else f"{s:.2f}x")
        mems = []
        for mode in ("dca", "plain"):
            d, sp = row.get(f"{mode}-dense"), row.get(f"{mode}-sparse")
            dm = "-" if d is None or d.mem_mib is None else str(d.mem_mib)
            sm = "-" if sp is None or sp.mem_mib is None else str(sp.mem_mib)
            mems.append(f"{dm} / {sm}")
        lines.append(f"| {n} | " + " | ".join([*vals, *ups, "; ".join(mems)]) + " |")
    return "\n".join(lines)


def plot(tables: dict[str, dict[int, dict[str, Cell]]], out: Path) -> None:
    """Speed-up (dense / sparse) against tokens per model and mode, the 1.0 line, the targets."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for model, table in tables.items():
        for mode in ("dca", "plain"):
            pts = [
                (n, s)
                for n in sorted(table)
                if (s := speedup(table[n].get(f"{mode}-dense"), table[n].get(f"{mode}-sparse")))
                is not None
            ]
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(xs, ys, marker="o", label=f"{model} {mode}")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.scatter(
        [131072, 1048576],
        [TARGET_128K_SPEEDUP, TARGET_1M_SPEEDUP],
        marker="*",
        s=120,
        color="black",
        label="targets (128k, 1M; DCA)",
    )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("speed-up of sparse prefill (dense time / sparse time)")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", linewidth=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--plot", type=Path, help="write the speed-up plot (PNG) here")
    args = ap.parse_args(argv)
    try:
        rows = read_rows(args.files)
    except (OSError, ValueError) as e:
        print(f"sparse_gpu_table: {e}", file=sys.stderr)
        return 2
    data: dict[str, Any] = {"rows": rows, "models": {}}
    for model, model_rows in models(rows).items():
        table = cells(model_rows)
        print(f"### {model}\n")
        print(markdown(table))
        tg = targets(table)
        for t in tg:
            m = t["measured"]
            shown = "not measured" if m is None else f"{m:.3g}"
            if t.get("where"):
                shown += f" at {t['where']}"
            print(f"- {t['target']}: {shown} ({'met' if t['met'] else 'not met'})")
        print()
        data["models"][model] = {
            "targets": tg,
            "table": {str(n): {a: c.__dict__ for a, c in r.items()} for n, r in table.items()},
        }
    if args.json:
        args.json.write_text(json.dumps(data, indent=1) + "\n")
    if args.plot:
        plot({m: cells(r) for m, r in models(rows).items()}, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
