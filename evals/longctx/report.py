"""Markdown tables from results documents, and the generated blocks of docs/dca-results.md.

A generated block in a Markdown file reads::

    <!-- longctx:table accuracy results/longctx/DATE/FILE.json -->
    ... (generated; do not edit) ...
    <!-- longctx:end -->

``update_doc`` regenerates every block from the file it names (path relative to the repository
root), and ``stale_blocks`` lists the blocks whose text differs from what their file gives, so a
test keeps the numbers in the docs equal to the data. Kinds: ``accuracy`` (task x method rows,
one column per length: correct/n and the Wilson 95% interval) and ``memory`` (per server job:
context, KV type, peak device and host memory, llama.cpp's buffers).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from evals.fsio import write_if_changed

from . import results
from .errors import BadInput
from .tasks import TASKS

BLOCK = re.compile(
    r"(<!-- longctx:table (?P<kind>\w+) (?P<path>\S+) -->\n)(?P<body>.*?)(<!-- longctx:end -->)",
    re.DOTALL,
)


def _mult(m: float) -> str:
    return f"{m:g}x"


def accuracy_table(doc: Mapping[str, Any]) -> str:
    """task x method rows, one column per length: `k/n [lo, hi]` (blank: not run)."""
    cells = doc["cells"]
    lengths = sorted({(c["multiple"], c["length"]) for c in cells})
    head = "| task | method | " + " | ".join(f"{_mult(m)} ({n})" for m, n in lengths) + " |"
    lines = [head, "|---|---|" + "---|" * len(lengths)]
    index = {(c["task"], c["method"], c["length"]): c for c in cells}
    methods = sorted({c["method"] for c in cells})
    for task in [t for t in TASKS if any(c["task"] == t for c in cells)]:
        for m in methods:
            row = []
            for _, n in lengths:
                c = index.get((task, m, n))
                row.append(
                    "" if c is None
                    else f"{c['correct']}/{c['n']} [{c['wilson95'][0]:.2f}, {c['wilson95'][1]:.2f}]"
                )  # fmt: skip
            if any(row):
                lines.append(f"| {task} | {m} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def _kv_type(args: Sequence[str]) -> str:
    for flag in ("-ctk", "--cache-type-k"):
        if flag in args and args.index(flag) + 1 < len(args):
            return str(args[args.index(flag) + 1])
    return "f16"


def _mib(v: object) -> str:
    return "" if v is None else f"{float(v):.0f}"  # type: ignore[arg-type]


GPU_PREFIXES = ("CUDA", "ROCm", "Metal", "Vulkan", "SYCL")


def _buffers(buffers: Mapping[str, Mapping[str, float]]) -> str:
    """`model / KV / compute (where)`: the GPU's buffers, else the sum over host buffers."""
    gpus = [d for d in buffers if d.startswith(GPU_PREFIXES)]
    where = gpus[:1] if gpus else list(buffers)
    total = {k: sum(buffers[d].get(k, 0.0) for d in where) for k in ("model", "KV", "compute")}
    label = where[0] if gpus else "host"
    return " / ".join(_mib(total[k]) for k in ("model", "KV", "compute")) + f" ({label})"


# A "24 GB" card's memory as nvidia-smi reports it (RTX 4090: 24564 MiB; RTX 3090: 24576 MiB).
CARD_24GB_MIB = 24564


def _fits(device_mib: object) -> str:
    """Whether a process of this device peak fits a 24 GB card (its peak includes the CUDA
    context; a display or another process on that card needs room of its own)."""
    if device_mib is None:
        return ""
    return "yes" if float(device_mib) <= CARD_24GB_MIB else "no"  # type: ignore[arg-type]


def memory_table(doc: Mapping[str, Any]) -> str:
    """One row per server job that ran: method, context, KV type, status, the peaks, whether
    that peak fits a 24 GB card, and llama.cpp's own buffers (device peak: nvidia-smi for the
    process; all GPUs: the peak of the whole device minus what was in use before the server
    started)."""
    lines = [
        "| method | n_ctx | slots | KV | status | device peak MiB | all GPUs peak - before MiB | "
        "host peak MiB | fits 24 GB | model / KV / compute buffers MiB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for job in sorted(doc["jobs"], key=lambda j: (j.get("n_ctx", 0), j["method"])):
        mem = job.get("memory") or {}
        if job["status"] in ("unsupported", "budget") or not mem.get("buffers"):
            continue
        total, before = mem.get("device_total_mib"), mem.get("device_before_mib") or 0.0
        used = None if total is None else total - before
        lines.append(
            f"| {job['method']} | {job.get('n_ctx', '')} | {job['slots']} | "
            f"{_kv_type(job.get('args', []))} | {job['status']} | {_mib(mem.get('device_mib'))} | "
            f"{_mib(used)} | {_mib(mem.get('host_mib'))} | {_fits(mem.get('device_mib'))} | "
            f"{_buffers(mem['buffers'])} |"
        )
    return "\n".join(lines) + "\n"


KINDS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "accuracy": accuracy_table,
    "memory": memory_table,
}


def render(kind: str, path: Path) -> str:
    """The table `kind` of the results file at `path`."""
    if kind not in KINDS:
        raise BadInput(f"unknown table kind {kind!r}", hint=f"use {', '.join(KINDS)}")
    return KINDS[kind](results.load(path))


def _regenerate(text: str, root: Path) -> tuple[str, list[str]]:
    stale: list[str] = []

    def fill(match: re.Match[str]) -> str:
        body = render(match["kind"], root / match["path"])
        if body != match["body"]:
            stale.append(f"{match['kind']} {match['path']}")
        return match.group(1) + body + match.group(5)

    return BLOCK.sub(fill, text), stale


def stale_blocks(doc_path: Path, root: Path) -> list[str]:
    """The generated blocks of `doc_path` that differ from their results files."""
    return _regenerate(doc_path.read_text(encoding="utf-8"), root)[1]


def update_doc(doc_path: Path, root: Path) -> list[str]:
    """Regenerate every block of `doc_path`; the blocks that changed."""
    text, stale = _regenerate(doc_path.read_text(encoding="utf-8"), root)
    write_if_changed(doc_path, text.encode("utf-8"))
    return stale
