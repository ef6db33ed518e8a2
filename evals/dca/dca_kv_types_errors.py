#!/usr/bin/env python3
"""The errors behind tests/evals/dca/test_dca_kv_types.py, as JSON on stdout: per arch and K/V cache,
DCA vs the float64 reference and --dca off vs the plain reference (the median all-regime row and
the largest row, each over the logit scale), the test's two tolerances, and the typical error of
the two deliberate mistakes. The same ``cache_run`` and ``mistake_errors`` the tests assert with,
on the DCA build the tests use (PATCHCTL_DCA_SRC / PATCHCTL_DCA_BUILD, tests/evals/dca/builds.py).

    PATCHCTL_DCA_SRC=TREE PATCHCTL_DCA_BUILD=BUILD python evals/dca/dca_kv_types_errors.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.evals.dca import test_dca_kv_types as kv
from tests.evals.dca.model_runs import print_errors
from tests.evals.dca.tiny_models import TinyModels


def measure(tool: Path, work: Path) -> dict[str, dict[str, float]]:
    models = TinyModels(work / "models")
    out: dict[str, dict[str, float]] = {}
    for arch, cache in kv.CACHE_CASES:
        case = work / arch / cache
        r = kv.cache_run(arch, cache, tool, models, case)
        out[f"{arch}/{cache}"] = {
            "dca_typical": r.dca_err.typical,
            "plain_typical": r.plain_err.typical,
            "typical_tolerance": r.typical_tolerance,
            "dca_largest": r.dca_err.largest,
            "plain_largest": r.plain_err.largest,
            "largest_tolerance": r.largest_tolerance,
            **{f"mistake/{k}": v for k, v in kv.mistake_errors(r, tool, case).items()},
        }
    return out


if __name__ == "__main__":
    sys.exit(print_errors(measure))
