#!/usr/bin/env python3
"""How far each deliberate DCA mistake lies from its tolerance, on the DCA build the tests use,
as JSON on stdout: the margins behind test_dca_model.py's and test_dca_kv_types.py's mistake
tests (each must be >= 10), with the tolerances they come from and the CPU the build ran on.

The tolerances are derived in the run from the same build's plain attention against the float64
reference, so they move with the CPU's rounding; this script shows that the mistakes stay
>= 10 tolerances away on the CPU it runs on. Run it on a portable and on a native build:

    PATCHCTL_DCA_SRC=TREE PATCHCTL_DCA_BUILD=BUILD python evals/dca/dca_margins.py > margins.json
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.evals.dca import test_dca_kv_types as kv
from tests.evals.dca import test_dca_model as dm
from tests.evals.dca.model_runs import print_errors
from tests.evals.dca.tiny_models import TinyModels


def model_margins(tool: Path, models: TinyModels, work: Path) -> dict[str, dict[str, float]]:
    """test_dca_model.py: every (arch, mode, mistake) its mistake test asserts."""
    out: dict[str, dict[str, float]] = {}
    for arch, mode, mistake in dm.MISTAKE_CASES:
        r = dm.multichunk_result(arch, mode, "split-kv", tool, models, work / arch / mode)
        key = f"model/{arch}/{mode}"
        row = out.setdefault(
            key, {"plain_err": r.plain_err, "dca_err": r.dca_err, "tolerance": r.tolerance}
        )
        row[f"margin/{mistake}"] = r.mistake_err(mistake) / r.tolerance
    return out


def kv_margins(tool: Path, models: TinyModels, work: Path) -> dict[str, dict[str, float]]:
    """test_dca_kv_types.py: the two mistakes per (arch, cache)."""
    out: dict[str, dict[str, float]] = {}
    for arch, cache in kv.CACHE_CASES:
        case = work / "kv" / arch / cache
        r = kv.cache_run(arch, cache, tool, models, case)
        tol = r.typical_tolerance
        row = {"plain_typical": r.plain_err.typical, "typical_tolerance": tol}
        for what, err in kv.mistake_errors(r, tool, case).items():
            row[f"margin/{what}"] = err / tol
        out[f"kv/{arch}/{cache}"] = row
    return out


def cpu_flags() -> dict[str, float]:
    """The instruction-set features of this CPU that change ggml's rounding (1.0 = present)."""
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    lines = [ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")]
    flags = lines[0] if lines else []
    wanted = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_int8", "amx_bf16")
    return {f"cpu/{f}": float(f in flags) for f in wanted}


def measure(tool: Path, work: Path) -> dict[str, dict[str, float]]:
    models = TinyModels(work / "models")
    out = {**model_margins(tool, models, work), **kv_margins(tool, models, work)}
    lowest = min(v for row in out.values() for k, v in row.items() if k.startswith("margin/"))
    out["summary"] = {"lowest_margin": lowest, "required": dm.MISTAKE_MARGIN, **cpu_flags()}
    return out


if __name__ == "__main__":
    sys.exit(print_errors(measure))
