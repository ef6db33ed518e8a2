#!/usr/bin/env python3
"""DCA on / off throughput across model shapes and KV types: the shape matrix.

Random-weight GGUFs with the per-layer shapes of real models (n_embd, heads, KV heads, head_dim,
FFN size; fewer layers; Q8_0 projection matrices), made by the project's own generator
(tests/evals/dca/tiny_models.py), benchmarked with ONE llama-bench run per cell that covers DCA off and
on and both depths:

    llama-bench -m MODEL -fa 1 -ngl 99 -p 512 -n 64 -d 32768,131072 -dca 0,1,1,0 -r R \
                -ctk KV -ctv KV -o json

Each arm runs in I contexts (--instances, default 2, in the balanced order 0,1,1,0) of R
repetitions each (--reps, default 2). On the H200 the decode rate of one arm differed between two
contexts of one process by up to 9 % (median 3.6 %, 16 pairs, in the preload run; see
results/dca-shapes/2026-12-01/README.md), as much as the target's margin, and the repetitions
inside one context do not sample that. The ratio is the mean of the DCA contexts over the mean of
the plain ones; `instance_ratios` keeps each pair.

Every model has n_ctx_train = 32768 (Qwen2.5's), so DCA uses the same chunks everywhere
(chunk 24576, local window 4096, chunk length 20480): depth 32k is chunk 1, 128k chunk 6, 512k
chunk 25.

    shape_matrix.py plan   [--matrix gpu|cpu] [--reps R] [--instances I]
                         the cells and their estimated H200 time
    shape_matrix.py run    --bin DIR --work DIR --out FILE.json [--matrix gpu|cpu] [--cells a,b]
                         [--reps R] [--instances I] [--budget-s S] [--threads N]
                         [--wait-load L] [--gguf-py DIR]
    shape_matrix.py models --work DIR [--matrix gpu|cpu] [--cells a,b] [--gguf-py DIR]
    shape_matrix.py path   --work DIR --cells a,b [--gguf-py DIR]    the GGUF of each cell

`run` writes one JSON (the llama-bench rows of every cell with its exact command, the DCA / plain
ratio rows of evals/device/throughput_summary.py with their spread, the median, the cells skipped
for the time budget) and prints the table. It exits 1 when a ratio misses 0.95 or the median is
below 1.0 (the acceptance target), 2 on a failed run. The GGUFs are written under --work and
reused. The `gguf` package comes from --gguf-py (the llama.cpp tree's own gguf-py, as on the GPU
machine, which has numpy but no pip index) or from the environment.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import types
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

N_CTX_TRAIN = 32768
DEPTHS = (32768, 131072)
TARGET_CELL = 0.95
TARGET_MEDIAN = 1.0


@dataclass(frozen=True)
class Shape:
    """The per-layer shape of a real model, with fewer layers (``layers`` of ``real_layers``)."""

    name: str
    mimics: str
    arch: str
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    layers: int
    real_layers: int
    swa_pattern: int = 2  # gemma3: one global layer in swa_pattern (the real 5:1 is 6)
    sliding_window: int = 512
    # qwen35: rotary dims (partial rotary), every attn_interval-th layer attention, the others
    # Gated DeltaNet of ssm = (conv_kernel, state_size, group_count, time_step_rank)
    n_rot: int = 0
    attn_interval: int = 2
    ssm: tuple[int, int, int, int] = ()
    n_vocab: int = 256  # the real vocabulary only where it matters (the memory shapes' logits)
    # the trained context (DCA's default chunks follow it) and RoPE base; the matrices' cells all
    # use Qwen2.5's 32768, the sparse-prefill CPU table (sparse_cpu_table.py) SmolLM2's 8192
    n_ctx_train: int = N_CTX_TRAIN
    rope_freq_base: float = 10000.0

    @property
    def gqa(self) -> int:
        return self.n_head // self.n_head_kv

    @property
    def dca_layers(self) -> int:
        """Layers that run DCA (gemma3: the global ones only)."""
        if self.arch == "gemma3":
            return self.layers // self.swa_pattern
        if self.arch == "qwen35":
            return self.layers // self.attn_interval
        return self.layers

    @property
    def attn_width(self) -> int:
        """sum over layers of n_head * head_dim (full-attention layers only): the cost of a fill"""
        return self.dca_layers * self.n_head * self.head_dim


SHAPES: dict[str, Shape] = {s.name: s for s in (
    Shape("qwen2.5-0.5b", "Qwen2.5-0.5B", "qwen2", 896, 14, 2, 64, 4864, 24, 24),
    Shape("qwen2.5-0.5b-l4", "Qwen2.5-0.5B", "qwen2", 896, 14, 2, 64, 4864, 4, 24),
    Shape("qwen1.5-0.5b", "Qwen1.5-0.5B", "qwen2", 1024, 16, 16, 64, 2816, 6, 24),
    Shape("llama3.2-1b", "Llama-3.2-1B", "llama", 2048, 32, 8, 64, 8192, 4, 16),
    Shape("qwen3-0.6b", "Qwen3-0.6B", "qwen3", 1024, 16, 8, 128, 3072, 4, 28),
    Shape("llama3-8b", "Llama-3-8B", "llama", 4096, 32, 8, 128, 14336, 2, 32),
    Shape("qwen2.5-1.5b", "Qwen2.5-1.5B", "qwen2", 1536, 12, 2, 128, 8960, 4, 28),
    Shape("qwen2.5-7b", "Qwen2.5-7B", "qwen2", 3584, 28, 4, 128, 18944, 2, 28),
    Shape("qwen2.5-3b", "Qwen2.5-3B", "qwen2", 2048, 16, 2, 128, 11008, 4, 36),
    Shape("gemma3-1b", "Gemma-3-1B", "gemma3", 1152, 4, 1, 256, 6912, 12, 26, 6, 512),
    Shape("gemma3-4b", "Gemma-3-4B", "gemma3", 2560, 8, 4, 256, 10240, 6, 34, 6, 1024),
    Shape("qwen2.5-0.5b-l2", "Qwen2.5-0.5B", "qwen2", 896, 14, 2, 64, 4864, 2, 24),
    Shape("qwen3-0.6b-l2", "Qwen3-0.6B", "qwen3", 1024, 16, 8, 128, 3072, 2, 28),
    Shape("qwen1.5-0.5b-l2", "Qwen1.5-0.5B", "qwen2", 1024, 16, 16, 64, 2816, 2, 24),
    # Qwen3.5-9B (config.json text_config): 32 layers, every 4th attention (16 query heads, 4 KV
    # heads of 256, rotary over 64 of them), the others Gated DeltaNet (conv kernel 4, 16 key heads
    # and 32 value heads of 128); 8 layers here keep its 3:1 mix
    Shape("qwen3.5-9b", "Qwen3.5-9B", "qwen35", 4096, 16, 4, 256, 12288, 8, 32,
          n_rot=64, attn_interval=4, ssm=(4, 128, 16, 32)),
    # all 32 layers and the real vocabulary (248,320): the KV cache, recurrent state and compute
    # buffers of the real model (its weights are Q8_0 here, the embeddings f32: see gpu_mem.py)
    Shape("qwen3.5-9b-full", "Qwen3.5-9B", "qwen35", 4096, 16, 4, 256, 12288, 32, 32,
          n_rot=64, attn_interval=4, ssm=(4, 128, 16, 32), n_vocab=248320),
    # SmolLM2-135M (config.json): 30 layers, 9 query heads and 3 KV heads of 64, FFN 1536, trained
    # at 8192 with RoPE base 100000; one layer here (prefill time per layer does not depend on the
    # weights), for the sparse-prefill CPU table (evals/dca/sparse_cpu_table.py)
    # the full-attention layers of Qwen3-Next-80B-A3B (12 of its 48 layers; a dense FFN of its
    # shared expert's width stands in for the MoE): GQA 8 with head dim 256, a shape the pinned
    # upstream's CUDA sparse flash attention has kernels for (sparse prefill's speed table)
    Shape("qwen3-next-attn", "Qwen3-Next-80B", "qwen3", 2048, 16, 2, 256, 512, 12, 48),
    Shape("smollm2-135m-l1", "SmolLM2-135M", "llama", 576, 9, 3, 64, 1536, 1, 30,
          n_ctx_train=8192, rope_freq_base=100000.0),
)}


@dataclass(frozen=True)
class Cell:
    """One llama-bench run: a shape, a KV cache type, its depths."""

    name: str
    shape: str
    kv: str
    depths: tuple[int, ...] = DEPTHS
    why: str = ""
    dca_args: tuple[str, ...] = ()  # llama-bench --dca-chunk-size / --dca-local-window, if given


# The GPU matrix, in run order (the reported weak case first, the 512k cell last). Chosen to fit about
# 8 device-minutes (see `plan`): every GQA (1, 2, 4, 6, 7, 8) and head dim (64, 128, 256) with f16
# KV at 32k and 128k; q8_0 and q4_0 KV on one shape per head dim; one 512k cell.
GPU_CELLS: tuple[Cell, ...] = (
    Cell("qwen2.5-0.5b/f16", "qwen2.5-0.5b", "f16",
         why="the issue's case: GQA 7, hd 64, all 24 layers"),
    Cell("qwen2.5-7b/f16", "qwen2.5-7b", "f16", why="GQA 7, hd 128"),
    Cell("qwen2.5-3b/f16", "qwen2.5-3b", "f16", why="GQA 8, hd 128"),
    Cell("qwen2.5-1.5b/f16", "qwen2.5-1.5b", "f16", why="GQA 6, hd 128"),
    Cell("llama3-8b/f16", "llama3-8b", "f16", why="GQA 4, hd 128"),
    Cell("llama3.2-1b/f16", "llama3.2-1b", "f16", why="GQA 4, hd 64"),
    Cell("qwen3-0.6b/f16", "qwen3-0.6b", "f16", why="GQA 2, hd 128, Q/K norms"),
    Cell("qwen1.5-0.5b/f16", "qwen1.5-0.5b", "f16", why="GQA 1, hd 64"),
    Cell("gemma3-1b/f16", "gemma3-1b", "f16", why="GQA 4, hd 256, 2 global of 12 layers"),
    Cell("gemma3-4b/f16", "gemma3-4b", "f16", why="GQA 2, hd 256, 1 global of 6 layers"),
    Cell("qwen2.5-0.5b-l4/q8_0", "qwen2.5-0.5b-l4", "q8_0", why="quantized KV, hd 64, GQA 7"),
    Cell("qwen2.5-0.5b-l4/q4_0", "qwen2.5-0.5b-l4", "q4_0", why="quantized KV, hd 64, GQA 7"),
    Cell("llama3-8b/q8_0", "llama3-8b", "q8_0", why="quantized KV, hd 128, GQA 4"),
    Cell("llama3-8b/q4_0", "llama3-8b", "q4_0", why="quantized KV, hd 128, GQA 4"),
    Cell("qwen3.5-9b/f16", "qwen3.5-9b", "f16",
         why="hybrid: 2 attention of 8 layers (GQA 4, hd 256, M-RoPE over 64 dims), Gated DeltaNet"),
    Cell("qwen3.5-9b/q8_0", "qwen3.5-9b", "q8_0", why="hybrid, quantized KV"),
    Cell("gemma3-1b/q8_0", "gemma3-1b", "q8_0", why="quantized KV, hd 256, GQA 4"),
    Cell("gemma3-1b/q4_0", "gemma3-1b", "q4_0", why="quantized KV, hd 256, GQA 4"),
    Cell("qwen2.5-0.5b-l4/f16@512k", "qwen2.5-0.5b-l4", "f16", (524288,), why="one 512k cell"),
)

# The CPU matrix (this 2-core machine, shared): two layers of small shapes at depth 8192 with the
# chunks of an 8k-trained model (chunk 6144, window 1024: depth 8192 is chunk 1, as 32k is on the
# GPU); one 32k fill takes most of an hour here.
_CPU_DCA = ("--dca-chunk-size", "6144", "--dca-local-window", "1024")
CPU_CELLS: tuple[Cell, ...] = (
    Cell("qwen2.5-0.5b-l2/f16", "qwen2.5-0.5b-l2", "f16", (8192,), "GQA 7, hd 64", _CPU_DCA),
    Cell("qwen3-0.6b-l2/f16", "qwen3-0.6b-l2", "f16", (8192,), "GQA 2, hd 128", _CPU_DCA),
    Cell("qwen1.5-0.5b-l2/f16", "qwen1.5-0.5b-l2", "f16", (8192,), "GQA 1, hd 64", _CPU_DCA),
    Cell("qwen2.5-0.5b-l2/q8_0", "qwen2.5-0.5b-l2", "q8_0", (8192,), "quantized KV", _CPU_DCA),
)

# Models for device memory (evals/device/gpu_mem.py), not benchmarked: the KV type is gpu_mem's --kv.
MEMORY_CELLS: tuple[Cell, ...] = (
    Cell("qwen3.5-9b-full/any", "qwen3.5-9b-full", "f16", why="Qwen3.5-9B memory at 256k-1M"),
)

# Models of the sparse prefill speed table (evals/device/sparse_speed.sh), not benchmarked here.
SPARSE_CELLS: tuple[Cell, ...] = (
    Cell("qwen2.5-0.5b/f16", "qwen2.5-0.5b", "f16", why="the issue's model: GQA 7, hd 64"),
    Cell("qwen3-next-attn/f16", "qwen3-next-attn", "f16",
         why="GQA 8, hd 256: the upstream CUDA sparse kernel's shape"),
)

MATRICES = {"gpu": GPU_CELLS, "cpu": CPU_CELLS, "memory": MEMORY_CELLS, "sparse": SPARSE_CELLS}

# Time model of one llama-bench run on the H200, fitted to the pair-launch run's benches of the same
# command (results/dca-cuda/2026-11-29-pair-launch/bench-*.json, test_time stamps): SmolLM2-135M, attention
# width 30 x 9 x 64 = 17280, took about 31 s for DCA off + on at 32k + 128k with -r 4; Gemma-3-270M
# (3 global layers x 4 x 256 = 3072) about 13 s. The depth fills dominate: one fill per (DCA, depth)
# (llama-bench keeps the filled cache per depth), their cost grows with the attention width and the
# square of the depth. A run with one depth fills once (llama-bench reuses that depth's cache
# for DCA on as well; no kernel's work depends on the key values).
_T_FIXED_S = 9.1
_T_PER_WIDTH_S = 1.27e-3  # both fills at 32k + 128k, DCA off + on, per unit of attention width
_FILL_128K_SHARE = 1.0 / (2 * (1 + 1 / 16))  # one fill at 128k, as a share of the above
_T_GGUF_S = 3.0  # writing the GGUF on the device (tiled Q8_0), at most


def estimate_s(cell: Cell, reps: int, instances: int = 1) -> float:
    shape = SHAPES[cell.shape]
    n_fills = 2 if len(cell.depths) > 1 else 1
    fill = sum(n_fills * _FILL_128K_SHARE * (d / 131072) ** 2 for d in cell.depths)
    width = shape.attn_width * fill * _T_PER_WIDTH_S
    return _T_GGUF_S + _T_FIXED_S * max(1.0, reps * instances / 4) + width


def dca_order(instances: int) -> str:
    """llama-bench's -dca list for INSTANCES contexts per arm, in balanced order (0,1,1,0,...):
    neither arm always runs first, so a drift over the run weighs on both."""
    order: list[str] = []
    for i in range(instances):
        order += ["0", "1"] if i % 2 == 0 else ["1", "0"]
    return ",".join(order)


def bench_command(bin_dir: Path, model: Path, cell: Cell, reps: int, ngl: int,
                  threads: int | None, instances: int = 1) -> list[str]:
    cmd = [str(bin_dir / "llama-bench"), "-m", str(model), "-fa", "1", "-ngl", str(ngl),
           "-p", "512", "-n", "64", "-d", ",".join(map(str, cell.depths)),
           "-dca", dca_order(instances),
           "-r", str(reps), "-ctk", cell.kv, "-ctv", cell.kv, "-o", "json", *cell.dca_args]
    if threads:
        cmd += ["-t", str(threads)]
    return cmd


def import_gguf(gguf_py: Path | None) -> str:
    """Import gguf (from gguf_py if given and present); return where it came from."""
    if gguf_py and (gguf_py / "gguf" / "__init__.py").exists():
        sys.path.insert(0, str(gguf_py))
    try:
        importlib.import_module("yaml")
    except ImportError:  # gguf.metadata imports yaml; the writer never uses it
        sys.modules["yaml"] = types.ModuleType("yaml")
    try:
        mod = importlib.import_module("gguf")
    except ImportError as exc:
        where = f"{gguf_py} has no gguf/__init__.py and " if gguf_py else ""
        raise SystemExit(
            f"dca_shapes: cannot import the gguf package ({exc}): {where}it is not installed; pass "
            "--gguf-py TREE/gguf-py (the llama.cpp tree's own) or install the `gguf` package"
        ) from exc
    return str(Path(mod.__file__ or "?").parent)


def write_model(shape: Shape, work: Path) -> Path:
    sys.path.insert(0, str(REPO / "tests" / "evals"))
    from dca.tiny_models import TinySpec, write_tiny_gguf  # type: ignore[import-not-found,unused-ignore]

    spec = TinySpec(shape.arch, n_ctx_train=shape.n_ctx_train, n_embd=shape.n_embd, n_ff=shape.n_ff,
                    n_head=shape.n_head, n_head_kv=shape.n_head_kv, head_dim=shape.head_dim,
                    layers=shape.layers, swa_pattern=shape.swa_pattern,
                    sliding_window=shape.sliding_window, weight_type="q8_0",
                    n_rot=shape.n_rot, attn_interval=shape.attn_interval, ssm_shape=shape.ssm,
                    n_vocab=shape.n_vocab, rope_freq_base=shape.rope_freq_base)
    path: Path = write_tiny_gguf(spec, work)
    return path


def _summary_module() -> Any:
    sys.path.insert(0, str(REPO / "evals" / "device"))
    return importlib.import_module("throughput_summary")


def _ratio_spread(bench_rows: list[dict[str, Any]], row: dict[str, Any]) -> dict[str, float]:
    """Per-repetition DCA / plain ratios of one summary row (repetition i of DCA over repetition i
    of plain, the instances of each arm in run order): min, max and the standard deviation
    propagated from the two arms' standard deviations."""
    test_name = _summary_module()._test_name

    def samples(dca: bool) -> list[float]:
        out: list[float] = []
        for b in bench_rows:
            same_cell = test_name(b) == row["test"] and int(b["n_depth"]) == row["depth"]
            if same_cell and bool(b.get("dca")) == dca:
                out += [float(x) for x in b["samples_ts"]]
        if not out:
            raise KeyError(row["test"])
        return out
    plain, dca = samples(False), samples(True)
    per_rep = [d / p for d, p in zip(dca, plain, strict=False) if p]
    rel_p, rel_d = row["plain_sd"] / row["plain_ts"], row["dca_sd"] / row["dca_ts"]
    rel = (rel_p**2 + rel_d**2) ** 0.5
    return {"ratio_min": round(min(per_rep), 3), "ratio_max": round(max(per_rep), 3),
            "ratio_sd": round(row["ratio"] * rel, 3)}


@dataclass
class RunResult:
    cell: str
    shape: dict[str, Any]
    kv: str
    why: str
    command: list[str]
    rc: int
    wall_s: float
    estimate_s: float
    bench: list[dict[str, Any]] = field(default_factory=list)
    stderr_tail: str = ""


def _wait_load(limit: float | None, max_wait_s: float = 900.0) -> None:
    if not limit:
        return
    t0 = time.time()
    while os.getloadavg()[0] > limit and time.time() - t0 < max_wait_s:
        time.sleep(15)


def run_cell(cell: Cell, args: argparse.Namespace) -> RunResult:
    shape = SHAPES[cell.shape]
    model = write_model(shape, args.work)
    cmd = bench_command(args.bin, model, cell, args.reps, args.ngl, args.threads, args.instances)
    if args.nice:
        cmd = ["nice", "-n", str(args.nice), *cmd]
    _wait_load(args.wait_load)
    t0 = time.time()
    res = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    wall = time.time() - t0
    out = RunResult(cell.name, {**asdict(shape), "gqa": shape.gqa, "model_file": model.name},
                    cell.kv, cell.why, cmd, res.returncode, round(wall, 1),
                    round(estimate_s(cell, args.reps, args.instances), 1),
                    stderr_tail=res.stderr[-2000:])
    if res.returncode == 0:
        try:
            out.bench = json.loads(res.stdout)
        except json.JSONDecodeError as e:
            out.rc = 2
            out.stderr_tail += f"\nllama-bench output is not JSON: {e}"
    return out


def summarize(results: list[RunResult]) -> list[dict[str, Any]]:
    ts = _summary_module()
    rows: list[dict[str, Any]] = []
    for r in results:
        if r.rc != 0 or not r.bench:
            continue
        tmp = Path(f"/tmp/dca-shapes-{os.getpid()}.json")
        tmp.write_text(json.dumps(r.bench))
        try:
            cell_rows = ts.summarize(r.cell, tmp, " ".join(r.command), TARGET_CELL)
        finally:
            tmp.unlink()
        for row in cell_rows:
            row.update(_ratio_spread(r.bench, row))
            row.update({"kv": r.kv, "gqa": r.shape["gqa"], "head_dim": r.shape["head_dim"],
                        "mimics": r.shape["mimics"], "file": r.shape["model_file"]})
            rows.append(row)
    return rows


def cmd_plan(args: argparse.Namespace) -> int:
    total = 0.0
    for cell in selected(args):
        s = SHAPES[cell.shape]
        est = estimate_s(cell, args.reps, args.instances)
        total += est
        print(f"{cell.name:<28} {s.mimics:<14} GQA {s.gqa:<2} hd {s.head_dim:<3} "
              f"layers {s.layers:>2}/{s.real_layers:<2} KV {cell.kv:<5} "
              f"depths {','.join(str(d // 1024) + 'k' for d in cell.depths):<10} ~{est:5.0f} s")
    print(f"total ~{total:.0f} s ({total / 60:.1f} min) on the H200, -r {args.reps} "
          f"x {args.instances} instances per arm")
    return 0


def selected(args: argparse.Namespace) -> list[Cell]:
    cells = list(MATRICES[args.matrix])
    if args.cells:
        want = args.cells.split(",")
        unknown = [w for w in want if w not in {c.name for c in cells}]
        if unknown:
            raise SystemExit(f"dca_shapes: unknown cell(s) {unknown}; see `shape_matrix.py plan`")
        cells = [c for c in cells if c.name in want]
    return cells


def cmd_models(args: argparse.Namespace) -> int:
    print(f"gguf from {import_gguf(args.gguf_py)}")
    for cell in selected(args):
        t0 = time.time()
        path = write_model(SHAPES[cell.shape], args.work)
        print(f"{cell.name:<28} {path.name} {path.stat().st_size / 2**20:8.1f} MiB "
              f"{time.time() - t0:5.1f} s", flush=True)
    return 0


def write_doc(args: argparse.Namespace, gguf_from: str, t_start: float, results: list[RunResult],
              skipped: list[dict[str, Any]], done: bool) -> list[dict[str, Any]]:
    """Write the result JSON (after every cell, so that a run cut short keeps what it measured)."""
    rows = summarize(results)
    ratios = [r["ratio"] for r in rows]
    doc = {
        "what": "DCA on / off throughput across model shapes and KV types",
        "tree": args.tree, "matrix": args.matrix, "reps": args.reps, "instances": args.instances,
        "gguf_from": gguf_from,
        "host": platform.node(), "n_ctx_train": N_CTX_TRAIN, "complete": done,
        "targets": {"cell": f">= {TARGET_CELL}", "median": f">= {TARGET_MEDIAN}"},
        "median_ratio": statistics.median(ratios) if ratios else None,
        "min_ratio": min(ratios) if ratios else None,
        "cells_missing_target": sorted({f"{r['model']} {r['test']}@{r['depth']}" for r in rows
                                        if not r["met"]}),
        "wall_s": round(time.time() - t_start, 1), "skipped_for_budget": skipped,
        "rows": rows, "runs": [asdict(r) for r in results],
    }
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return rows


def cmd_run(args: argparse.Namespace) -> int:
    gguf_from = import_gguf(args.gguf_py)
    args.work.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    results: list[RunResult] = []
    skipped: list[dict[str, Any]] = []
    for cell in selected(args):
        est = estimate_s(cell, args.reps, args.instances)
        left = args.budget_s - (time.time() - t_start) if args.budget_s else None
        if left is not None and est > left:
            skipped.append({"cell": cell.name, "estimate_s": round(est, 1),
                            "left_s": round(left, 1)})
            print(f"skip {cell.name}: ~{est:.0f} s estimated, {left:.0f} s left", flush=True)
            continue
        r = run_cell(cell, args)
        results.append(r)
        print(f"{cell.name:<28} rc={r.rc} {r.wall_s:6.1f} s (estimated {r.estimate_s:.0f} s)",
              flush=True)
        if r.rc != 0:
            print(r.stderr_tail[-800:], flush=True)
        write_doc(args, gguf_from, t_start, results, skipped, done=False)
    rows = write_doc(args, gguf_from, t_start, results, skipped, done=True)
    ratios = [r["ratio"] for r in rows]
    med = statistics.median(ratios) if ratios else None
    print(f"\n{'cell':<28} {'test':<6} {'depth':>7} {'plain':>9} {'DCA':>9} {'ratio':>6} "
          f"{'min':>6} {'max':>6}")
    for row in rows:
        print(f"{row['model']:<28} {row['test']:<6} {row['depth']:>7} {row['plain_ts']:>9.1f} "
              f"{row['dca_ts']:>9.1f} {row['ratio']:6.3f} {row['ratio_min']:6.3f} "
              f"{row['ratio_max']:6.3f}{'' if row['met'] else '  MISSED'}")
    print(f"median {med}, min {min(ratios) if ratios else None}, "
          f"wall {round(time.time() - t_start, 1)} s, skipped {len(skipped)}")
    if any(res.rc != 0 for res in results):
        return 2
    met = rows and med is not None and med >= TARGET_MEDIAN and all(row["met"] for row in rows)
    return 0 if met else 1


def cmd_path(args: argparse.Namespace) -> int:
    """Print the GGUF of each selected cell (written first if missing), one per line."""
    import_gguf(args.gguf_py)
    for cell in selected(args):
        print(write_model(SHAPES[cell.shape], args.work))
    return 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("plan", "run", "models", "path"):
        p = sub.add_parser(name)
        p.add_argument("--matrix", choices=sorted(MATRICES), default="gpu")
        p.add_argument("--cells", default="", help="comma-separated cell names (default: all)")
        p.add_argument("--reps", type=int, default=2, help="repetitions per instance (default 2)")
        p.add_argument("--instances", type=int, default=2,
                       help="llama-bench contexts per arm, in balanced order (default 2: -dca 0,1,1,0)")
        if name != "plan":
            p.add_argument("--work", type=Path, required=True, help="where the GGUFs go (reused)")
            p.add_argument("--gguf-py", type=Path, default=None)
        if name == "run":
            p.add_argument("--bin", type=Path, required=True,
                           help="llama.cpp bin/ with llama-bench")
            p.add_argument("--out", type=Path, required=True)
            p.add_argument("--ngl", type=int, default=99)
            p.add_argument("--threads", type=int, default=None)
            p.add_argument("--budget-s", type=float, default=None,
                           help="skip the cells whose estimate no longer fits")
            p.add_argument("--wait-load", type=float, default=None,
                           help="wait before each cell (15 min at most) for a 1-min load below")
            p.add_argument("--nice", type=int, default=0)
            p.add_argument("--tree", default=None, help="the tree measured, kept in the JSON")
    args = ap.parse_args(argv)
    commands = {"plan": cmd_plan, "run": cmd_run, "models": cmd_models, "path": cmd_path}
    return commands[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
