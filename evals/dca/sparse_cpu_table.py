#!/usr/bin/env python3
"""Sparse prefill on the CPU: prefill time vs context, dense / sparse x plain / DCA.

One random-weight GGUF with SmolLM2-135M's per-layer shape (``smollm2-135m-l1`` of
evals/dca/shape_matrix.py: n_embd 576, 9 query heads and 3 KV heads of 64, FFN 1536, trained at 8192
so that DCA's default chunks are SmolLM2's, chunk 6144 and local window 1024) with ONE of its 30
layers, made by the project's generator (tests/evals/dca/tiny_models.py). Prefill time per layer
does not depend on the weights' values, and every layer does the same work, so the attention time of
the real model is about 30 times this one's; the table reports what was measured, unscaled.

Each measurement is one llama-bench process that prefills one prompt of N tokens once:

    llama-bench -m MODEL -t T -fa 1 -p N -n 0 -r 1 --no-warmup -dca D -sparse S \\
                [--sparse-threshold X] -o json

(llama-bench sizes the context to N + n_gen + depth = N). The arms per context:

    dense-plain   -dca 0 -sparse 0
    dense-dca     -dca 1 -sparse 0
    sparse-plain  -dca 0 -sparse 1                          (default threshold, 32768)
    sparse-dca    -dca 1 -sparse 1
    sparse-plain@X  -dca 0 -sparse 1 --sparse-threshold X   (--low-threshold, default 4096)
    sparse-dca@X    -dca 1 -sparse 1 --sparse-threshold X
    sparse-plain@X-head, sparse-dca@X-head   the same with --sparse-per-head 1 (one selection and
                    one attention per query head instead of per KV group)

with the default budgets (1000 vertical, 6096 slash, last_q 64). Repetition r of a context runs the
arms in order, r + 1 in the reverse order (balanced: a drift of the machine's load weighs on every
arm alike). The 1-min load average is recorded before and after every measurement (on a shared
machine the other load is the main source of noise), and the CPU time (user + system) of the
llama-bench process, which that load moves much less than the wall time.

    sparse_cpu_table.py plan  [--contexts 16384,32768,65536] [--reps R] [--arms a,b]
    sparse_cpu_table.py model --work DIR [--gguf-py DIR]            the GGUF (written if missing)
    sparse_cpu_table.py run   --bin DIR --work DIR --out FILE.json [--contexts ...] [--reps R]
                              [--arms a,b] [--threads T] [--low-threshold X] [--stop-at EPOCH]
                              [--gguf-py DIR] [--tree ID]
    sparse_cpu_table.py table FILE.json [FILE.json ...]            the markdown table

`run` writes the JSON after every measurement (a run cut short keeps what it measured; the
measurements it did not start are listed with the reason), exits 2 when a llama-bench run fails, 1
when it stopped before the plan's end (--stop-at), else 0. `table` merges the JSON files and prints
the mean prefill time and CPU time per context and arm with their spread, the sparse / dense ratios
of both (same DCA setting), and for contexts not above the default threshold whether sparse on
equals sparse off within the noise (the sparse path must cost nothing where it does not engage).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SHAPE = "smollm2-135m-l1"
CONTEXTS = (16384, 32768, 65536)
# llama_sparse_prefill_default_params(): vLLM's sparse_attention_threshold
DEFAULT_THRESHOLD = 32768
LOW_THRESHOLD = 4096
# a time ratio within this of 1.0 is "equal within noise", even where the repetitions' spread is
# narrower
NOISE_FLOOR = 0.05


@dataclass(frozen=True)
class Arm:
    name: str
    dca: bool
    sparse: bool
    low: bool = False  # sparse with --sparse-threshold LOW (else the default threshold)
    per_head: bool = False  # sparse selecting per query head (--sparse-per-head 1)

    def args(self, low_threshold: int) -> list[str]:
        out = ["-dca", str(int(self.dca)), "-sparse", str(int(self.sparse))]
        if self.low:
            out += ["--sparse-threshold", str(low_threshold)]
        if self.per_head:
            out += ["--sparse-per-head", "1"]
        return out

    def threshold(self, low_threshold: int) -> int | None:
        if not self.sparse:
            return None
        return low_threshold if self.low else DEFAULT_THRESHOLD


ARMS: tuple[Arm, ...] = (
    Arm("dense-plain", False, False),
    Arm("dense-dca", True, False),
    Arm("sparse-plain", False, True),
    Arm("sparse-dca", True, True),
    Arm("sparse-plain-low", False, True, True),
    Arm("sparse-dca-low", True, True, True),
    Arm("sparse-plain-low-head", False, True, True, True),
    Arm("sparse-dca-low-head", True, True, True, True),
)
ARM_BY_NAME = {a.name: a for a in ARMS}


@dataclass(frozen=True)
class Step:
    context: int
    rep: int
    arm: str


def plan(contexts: list[int], reps: int, arms: list[Arm]) -> list[Step]:
    """Contexts ascending; in each, repetition r runs the arms forward (r even) or reversed."""
    steps: list[Step] = []
    for n in sorted(contexts):
        for r in range(reps):
            order = arms if r % 2 == 0 else list(reversed(arms))
            steps += [Step(n, r, a.name) for a in order]
    return steps


def bench_command(bin_dir: Path, model: Path, n: int, arm: Arm, threads: int,
                  low_threshold: int) -> list[str]:
    return [str(bin_dir / "llama-bench"), "-m", str(model), "-t", str(threads), "-fa", "1",
            "-p", str(n), "-n", "0", "-r", "1", "--no-warmup", *arm.args(low_threshold),
            "-o", "json"]


def write_model(work: Path, gguf_py: Path | None) -> Path:
    sys.path.insert(0, str(HERE))
    sm = importlib.import_module("shape_matrix")
    sm.import_gguf(gguf_py)
    path: Path = sm.write_model(sm.SHAPES[SHAPE], work)
    return path


def shape_info() -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    sm = importlib.import_module("shape_matrix")
    return asdict(sm.SHAPES[SHAPE])


@dataclass
class Measurement:
    context: int
    rep: int
    arm: str
    dca: bool
    sparse: bool
    threshold: int | None
    command: list[str]
    rc: int
    wall_s: float
    load_before: float
    load_after: float
    started: float
    cpu_s: float = 0.0  # the llama-bench process's user + system time (the whole process)
    prefill_s: float | None = None
    tokens_per_s: float | None = None
    row: dict[str, Any] = field(default_factory=dict)
    stderr_tail: str = ""


def children_cpu_s() -> float:
    """User + system time of this process's finished children so far."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def measure(step: Step, args: argparse.Namespace, model: Path) -> Measurement:
    arm = ARM_BY_NAME[step.arm]
    cmd = bench_command(args.bin, model, step.context, arm, args.threads, args.low_threshold)
    load0 = os.getloadavg()[0]
    cpu0 = children_cpu_s()
    t0 = time.time()
    res = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    wall = time.time() - t0
    cpu = children_cpu_s() - cpu0
    m = Measurement(step.context, step.rep, arm.name, arm.dca, arm.sparse,
                    arm.threshold(args.low_threshold), cmd, res.returncode, round(wall, 2),
                    round(load0, 2), round(os.getloadavg()[0], 2), round(t0, 1), round(cpu, 2),
                    stderr_tail=res.stderr[-1500:])
    if res.returncode != 0:
        return m
    try:
        rows = json.loads(res.stdout)
        row = next(r for r in rows if int(r["n_prompt"]) == step.context and int(r["n_gen"]) == 0)
        m.row = row
        m.prefill_s = round(float(row["avg_ns"]) / 1e9, 3)
        m.tokens_per_s = round(float(row["avg_ts"]), 2)
        if bool(row.get("dca")) != arm.dca or bool(row.get("sparse")) != arm.sparse:
            raise ValueError(f"row has dca={row.get('dca')} sparse={row.get('sparse')}")
    except (json.JSONDecodeError, StopIteration, KeyError, TypeError, ValueError) as e:
        m.rc = 2
        m.stderr_tail += f"\nllama-bench output is not one prefill row of {step.context}: {e!r}"
    return m


def _template(args: argparse.Namespace, model: Path) -> str:
    """The command of every measurement, N the context and ARM the arm's args."""
    cmd = bench_command(args.bin, model, 0, ARMS[0], args.threads, args.low_threshold)
    cmd[cmd.index("-p") + 1] = "N"
    i = cmd.index("-dca")
    return " ".join([*cmd[:i], "ARM", *cmd[i + 4:]])


def _doc(args: argparse.Namespace, model: Path, done: list[Measurement], left: list[Step],
         why_left: str) -> dict[str, Any]:
    return {
        "what": "sparse prefill on the CPU: prefill time vs context, dense / sparse x plain / DCA",
        "shape": shape_info(), "model_file": model.name, "tree": args.tree,
        "host": platform.node(), "cpus": os.cpu_count(), "threads": args.threads,
        "contexts": sorted(args.contexts), "reps": args.reps,
        "arms": [{**asdict(ARM_BY_NAME[a]), "args": ARM_BY_NAME[a].args(args.low_threshold)}
                 for a in args.arms],
        "default_threshold": DEFAULT_THRESHOLD, "low_threshold": args.low_threshold,
        "budgets": {"vertical": 1000, "slash": 6096, "last_q": 64},
        "dca_defaults": {"chunk_size": 6144, "local_window": 1024},
        "command_template": _template(args, model),
        "complete": not left,
        "not_run": [{**asdict(s), "why": why_left} for s in left],
        "measurements": [asdict(m) for m in done],
    }


def cmd_run(args: argparse.Namespace) -> int:
    args.work.mkdir(parents=True, exist_ok=True)
    model = write_model(args.work, args.gguf_py)
    steps = plan(args.contexts, args.reps, [ARM_BY_NAME[a] for a in args.arms])
    done: list[Measurement] = []
    rc = 0
    for i, step in enumerate(steps):
        if args.stop_at and time.time() >= args.stop_at:
            args.out.write_text(json.dumps(_doc(args, model, done, steps[i:], "stop-at reached"),
                                           indent=1) + "\n")
            print(f"stopped at --stop-at: {len(steps) - i} measurements not run", flush=True)
            return 1
        m = measure(step, args, model)
        done.append(m)
        print(f"{m.context:>6} rep {m.rep} {m.arm:<17} rc={m.rc} prefill {m.prefill_s} s "
              f"(wall {m.wall_s} s, cpu {m.cpu_s} s, load {m.load_before} -> {m.load_after})",
              flush=True)
        if m.rc != 0:
            print(m.stderr_tail[-800:], flush=True)
            rc = 2
        args.out.write_text(json.dumps(_doc(args, model, done, steps[i + 1:], "not reached"),
                                       indent=1) + "\n")
        if rc:
            break
    return rc


def summarize(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (context, arm): the mean prefill time of its successful measurements, and the
    mean CPU time of the process over those that recorded it (``mean_cpu_s``, None if none did)."""
    times: dict[tuple[int, str], list[float]] = {}
    loads: dict[tuple[int, str], list[float]] = {}
    cpus: dict[tuple[int, str], list[float]] = {}
    for doc in docs:
        for m in doc["measurements"]:
            if m["rc"] == 0 and m["prefill_s"] is not None:
                key = (int(m["context"]), str(m["arm"]))
                times.setdefault(key, []).append(float(m["prefill_s"]))
                loads.setdefault(key, []).append((m["load_before"] + m["load_after"]) / 2)
                if m.get("cpu_s"):
                    cpus.setdefault(key, []).append(float(m["cpu_s"]))
    rows = []
    for (n, arm), ts in sorted(times.items(), key=lambda kv: (kv[0][0], _arm_index(kv[0][1]))):
        mean = statistics.fmean(ts)
        rows.append({"context": n, "arm": arm, "n": len(ts), "mean_s": round(mean, 2),
                     "min_s": round(min(ts), 2), "max_s": round(max(ts), 2),
                     "tokens_per_s": round(n / mean, 1),
                     "load": round(statistics.fmean(loads[(n, arm)]), 2),
                     "mean_cpu_s": (round(statistics.fmean(cpus[(n, arm)]), 2)
                                    if cpus.get((n, arm)) else None),
                     "min_cpu_s": min(cpus[(n, arm)]) if cpus.get((n, arm)) else None,
                     "max_cpu_s": max(cpus[(n, arm)]) if cpus.get((n, arm)) else None,
                     "n_cpu": len(cpus.get((n, arm), []))})
    return rows


def _arm_index(name: str) -> int:
    return [a.name for a in ARMS].index(name) if name in ARM_BY_NAME else len(ARMS)


def ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Sparse / dense mean time at each context, DCA setting and threshold, with the spread from
    the extremes (slowest sparse over fastest dense and the reverse), the same in CPU time where
    both arms recorded it, and, where the default threshold is not below the context (the sparse
    path engages only on a ubatch that attends to MORE than the threshold), whether the two are
    equal within noise (judged on CPU time where there is CPU time, else on wall time)."""
    by = {(r["context"], r["arm"]): r for r in rows}
    out = []
    for r in rows:
        arm = ARM_BY_NAME.get(r["arm"])
        if arm is None or not arm.sparse:
            continue
        dense = by.get((r["context"], "dense-dca" if arm.dca else "dense-plain"))
        if dense is None:
            continue
        ratio = r["mean_s"] / dense["mean_s"]
        lo, hi = r["min_s"] / dense["max_s"], r["max_s"] / dense["min_s"]
        row = {"context": r["context"], "arm": r["arm"], "dca": arm.dca,
               "threshold": "low" if arm.low else DEFAULT_THRESHOLD,
               "ratio": round(ratio, 3), "ratio_lo": round(lo, 3), "ratio_hi": round(hi, 3),
               "n": min(r["n"], dense["n"]), "cpu_ratio": None}
        if r["mean_cpu_s"] and dense["mean_cpu_s"]:
            row["cpu_ratio"] = round(r["mean_cpu_s"] / dense["mean_cpu_s"], 3)
            row["cpu_ratio_lo"] = round(r["min_cpu_s"] / dense["max_cpu_s"], 3)
            row["cpu_ratio_hi"] = round(r["max_cpu_s"] / dense["min_cpu_s"], 3)
        if not arm.low and r["context"] <= DEFAULT_THRESHOLD:
            # the sparse path never engages: equal when 1.0 lies within the spread of the
            # repetitions or the means differ by at most NOISE_FLOOR
            basis = "cpu" if row["cpu_ratio"] is not None else "wall"
            m, a, b = ((row["cpu_ratio"], row["cpu_ratio_lo"], row["cpu_ratio_hi"])
                       if basis == "cpu" else (ratio, lo, hi))
            row["below_threshold_equal"] = bool(a <= 1.0 <= b or abs(m - 1) <= NOISE_FLOOR)
            row["equal_judged_on"] = basis
        out.append(row)
    return out


def table(docs: list[dict[str, Any]]) -> str:
    rows = summarize(docs)
    rat = {(r["context"], r["arm"]): r for r in ratios(rows)}
    low = sorted({int(d["low_threshold"]) for d in docs})
    low_s = ",".join(map(str, low)) or "?"

    def label(arm: Arm | None, name: str) -> str:
        if arm is None:
            return name
        if not arm.sparse:
            return "dense"
        return (f"sparse{' per head' if arm.per_head else ''} "
                f"(threshold {low_s if arm.low else DEFAULT_THRESHOLD})")

    lines = ["| context | DCA | prefill | runs | mean time | min-max | tokens/s | CPU time "
             "| sparse / dense time | sparse / dense CPU | load avg |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        arm = ARM_BY_NAME.get(r["arm"])
        ra = rat.get((r["context"], r["arm"]))
        ratio = ("" if ra is None
                 else f"{ra['ratio']:.2f} ({ra['ratio_lo']:.2f}-{ra['ratio_hi']:.2f})")
        cpu = "" if r["mean_cpu_s"] is None else f"{r['mean_cpu_s']:.1f} s ({r['n_cpu']})"
        cpu_ratio = ""
        if ra is not None and ra["cpu_ratio"] is not None:
            cpu_ratio = f"{ra['cpu_ratio']:.2f} ({ra['cpu_ratio_lo']:.2f}-{ra['cpu_ratio_hi']:.2f})"
        if ra is not None and "below_threshold_equal" in ra:
            flag = ", equal" if ra["below_threshold_equal"] else ", NOT equal"
            if ra["equal_judged_on"] == "cpu":
                cpu_ratio += flag
            else:
                ratio += flag
        lines.append(
            f"| {r['context'] // 1024}k | {'on' if arm and arm.dca else 'off'} "
            f"| {label(arm, r['arm'])} | {r['n']} | {r['mean_s']:.1f} s "
            f"| {r['min_s']:.1f}-{r['max_s']:.1f} s | {r['tokens_per_s']:.0f} | {cpu} | {ratio} "
            f"| {cpu_ratio} | {r['load']:.1f} |")
    return "\n".join(lines)


def cmd_table(args: argparse.Namespace) -> int:
    docs = []
    for p in args.files:
        try:
            docs.append(json.loads(Path(p).read_text()))
        except (OSError, json.JSONDecodeError) as e:
            print(f"sparse_cpu_table: cannot read {p}: {e}; pass the JSON that `run --out` wrote",
                  file=sys.stderr)
            return 2
    print(table(docs))
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    for s in plan(args.contexts, args.reps, [ARM_BY_NAME[a] for a in args.arms]):
        arm = ARM_BY_NAME[s.arm]
        print(f"{s.context:>6} rep {s.rep} {s.arm:<17} {' '.join(arm.args(args.low_threshold))}")
    return 0


def cmd_model(args: argparse.Namespace) -> int:
    print(write_model(args.work, args.gguf_py))
    return 0


def _ints(text: str) -> list[int]:
    try:
        vals = [int(v) for v in text.split(",") if v]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: a comma-separated list of token counts") from None
    if not vals or any(v < 512 for v in vals):
        raise argparse.ArgumentTypeError(f"{text!r}: every context must be >= 512 tokens")
    return vals


def _arms(text: str) -> list[str]:
    names = [a for a in text.split(",") if a]
    unknown = [a for a in names if a not in ARM_BY_NAME]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown arm(s) {unknown}; known: {', '.join(ARM_BY_NAME)}")
    return names


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("plan", "model", "run"):
        p = sub.add_parser(name)
        p.add_argument("--contexts", type=_ints, default=list(CONTEXTS))
        p.add_argument("--reps", type=int, default=2, help="repetitions per arm (default 2)")
        p.add_argument("--arms", type=_arms, default=[a.name for a in ARMS])
        p.add_argument("--low-threshold", type=int, default=LOW_THRESHOLD)
        if name != "plan":
            p.add_argument("--work", type=Path, required=True, help="where the GGUF goes (reused)")
            p.add_argument("--gguf-py", type=Path, default=None)
        if name == "run":
            p.add_argument("--bin", type=Path, required=True,
                           help="llama.cpp bin/ with llama-bench")
            p.add_argument("--out", type=Path, required=True)
            p.add_argument("--threads", type=int, default=2)
            p.add_argument("--stop-at", type=float, default=None,
                           help="start no measurement after this Unix time")
            p.add_argument("--tree", default=None, help="the tree measured, kept in the JSON")
    t = sub.add_parser("table")
    t.add_argument("files", nargs="+")
    args = ap.parse_args(argv)
    if args.cmd != "table" and (args.reps < 1 or args.low_threshold < 0):
        ap.error("--reps must be >= 1 and --low-threshold >= 0")
    commands = {"plan": cmd_plan, "model": cmd_model, "run": cmd_run, "table": cmd_table}
    return commands[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
