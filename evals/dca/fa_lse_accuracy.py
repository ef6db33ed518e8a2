"""Measure CPU flash-attention accuracy (existing op vs ggml_flash_attn_ext_lse) and write JSON.

Records, per case and per kernel path, the error of ggml_flash_attn_ext and of
ggml_flash_attn_ext_lse against a float64 numpy reference on the same inputs, the bounds that
tests/evals/dca/test_fa_lse.py derives from them, and the gap between the new LSE and the existing
kernel's own normaliser. Data, not a claim: the tests decide pass/fail.

    python evals/dca/fa_lse_accuracy.py [--out results/fa-lse/2026-11-29-cpu-accuracy/fa-lse-cpu-accuracy.json]

The llama.cpp trees are the DCA tests' own (tests/evals/dca/builds.py): PATCHCTL_DCA_SRC +
PATCHCTL_DCA_BUILD (and PATCHCTL_UPSTREAM_SRC + PATCHCTL_UPSTREAM_BUILD for the bitwise
comparison with the unpatched op) name built trees; unset, patchctl produces and builds them.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "evals"))

from dca import fa_lse_harness as fa  # noqa: E402
from dca.builds import LlamaBuild, provide  # noqa: E402
from dca.trees import TreeBuilder, dca_room, upstream_room  # noqa: E402

DEFAULT_OUT = REPO / "results" / "fa-lse" / "2026-11-29-cpu-accuracy" / "fa-lse-cpu-accuracy.json"


def _say(line: str) -> None:
    print(f"[dca trees] {line}", file=sys.stderr, flush=True)


def _bitwise_equal(a: fa.F32, b: fa.F32) -> bool:
    return bool(np.array_equal(a.view(np.uint32), b.view(np.uint32)))


def _git(src: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(src), *args], capture_output=True, check=False)
    return proc.stdout.decode("utf-8", "strict").strip() if proc.returncode == 0 else ""


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def _case_record(
    case: fa.FaCase, existing_probe: Path, new_probe: Path, upstream_probe: Path | None
) -> dict[str, Any]:
    """Measure one case: existing op, new op, bounds, and the checks the test makes."""
    inputs = fa.make_inputs(case)
    existing, ref = fa.measure_existing(existing_probe, case, inputs)
    bounds = fa.derive_bounds(existing, ref)
    new = fa.run_probe(new_probe, case, inputs, 1)
    assert new.lse is not None
    live = fa.live_rows(ref)
    gap = np.abs(new.lse[live].astype(np.float64) - existing.lse[live]) if live.any() else [0.0]
    sinks = fa.median_sinks(ref)
    with_sinks = fa.run_probe(new_probe, case, inputs, 1, [sinks])
    ref_sinks = fa.with_sinks(ref, sinks)
    return {
        "case": case.name,
        "path": case.path,
        "kv_type": case.kv_type,
        "shape": {
            "dk": case.dk,
            "n_kv": case.n_kv,
            "n_batch": case.n_batch,
            "n_head": case.n_head,
            "n_head_kv": case.n_head_kv,
            "ne3": case.ne3,
            "n_threads": case.n_threads,
        },
        "params": {"scale": case.scale, "max_bias": case.max_bias, "softcap": case.softcap},
        "mask": case.mask,
        "fully_masked_rows": int(ref.masked.sum()),
        "existing_o_max_abs_err": fa.max_abs_err(existing.result.o, ref.o, live),
        "existing_use_ref_o_max_abs_err": fa.max_abs_err(existing.ref_path_o, ref.o, live),
        "existing_lse_max_abs_err": fa.max_abs_err(existing.lse, ref.lse, live),
        "new_o_max_abs_err": fa.max_abs_err(new.o, ref.o, live),
        "new_lse_max_abs_err": fa.max_abs_err(new.lse, ref.lse, live),
        "bound_o": bounds.o,
        "bound_lse": bounds.lse,
        "new_vs_existing_normaliser_max_abs": float(np.max(gap)),
        "existing_o_bitwise_equal_upstream": (
            None
            if upstream_probe is None
            else _bitwise_equal(fa.run_probe(upstream_probe, case, inputs, 0).o, existing.result.o)
        ),
        "new_o_bitwise_equal_existing": _bitwise_equal(new.o, existing.result.o),
        "problems": fa.new_op_problems(new.o, new.lse, ref, bounds),
        "with_sinks_lse_max_abs_err": fa.max_abs_err(
            with_sinks.lse_sinks[0], ref_sinks.lse, np.ones_like(live)
        ),
        "with_sinks_problems": fa.new_op_problems(
            with_sinks.o_sinks[0], with_sinks.lse_sinks[0], ref_sinks, bounds
        ),
    }


def _summary(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Worst case per (path, kv_type)."""
    keys = (
        "existing_o_max_abs_err", "existing_lse_max_abs_err", "new_o_max_abs_err",
        "new_lse_max_abs_err", "new_vs_existing_normaliser_max_abs",
    )  # fmt: skip
    out: dict[str, dict[str, Any]] = {}
    for rec in records:
        group = out.setdefault(f"{rec['path']}/{rec['kv_type']}", {"cases": 0})
        group["cases"] += 1
        for key in keys:
            group[f"max_{key}"] = max(group.get(f"max_{key}", 0.0), rec[key])
        group["cases_with_problems"] = group.get("cases_with_problems", 0) + bool(rec["problems"])
        group["cases_with_sink_problems"] = group.get("cases_with_sink_problems", 0) + bool(
            rec["with_sinks_problems"]
        )
    return dict(sorted(out.items()))


def measure_all(build: LlamaBuild, upstream: LlamaBuild, seed: int) -> dict[str, Any]:
    """Run every case of fa.draw_cases(seed) and return the JSON document."""
    existing_probe = fa.probe_binary(build, with_lse=False)
    new_probe = fa.probe_binary(build, with_lse=True)
    upstream_probe = fa.probe_binary(upstream, with_lse=False)
    cases = fa.draw_cases(seed)
    records = [_case_record(c, existing_probe, new_probe, upstream_probe) for c in cases]
    return {
        "what": "CPU flash attention error vs a float64 numpy reference (issue 5)",
        "command": "python evals/dca/fa_lse_accuracy.py " + " ".join(sys.argv[1:]),
        "generated_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "seed": seed,
        "llama_cpp": {
            "src": str(build.src),
            "build": str(build.build),
            "head": _git(build.src, "rev-parse", "HEAD"),
            "head_subject": _git(build.src, "log", "-1", "--format=%s"),
            "dirty_files": len(_git(build.src, "status", "--porcelain").splitlines()),
        },
        "upstream_build": str(upstream.build),
        "machine": {"cpu": _cpu_model(), "python": platform.python_version()},
        "numpy": np.__version__,
        "bounds_doc": (fa.Bounds.__doc__ or "").strip(),
        "summary": _summary(records),
        "cases": records,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--seed", type=int, default=fa.DEFAULT_SEED)
    args = parser.parse_args(argv)
    builder = TreeBuilder(_say)  # one builder: a tree shared by both is built once
    dca = provide("DCA", dca_room, lambda: builder)
    doc = measure_all(dca, provide("UPSTREAM", upstream_room, lambda: builder), args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    bad = sum(g["cases_with_problems"] for g in doc["summary"].values())
    bad_sinks = sum(g["cases_with_sink_problems"] for g in doc["summary"].values())
    print(
        f"wrote {args.out}: {len(doc['cases'])} cases, {bad} with problems, {bad_sinks} with sinks"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
