#!/usr/bin/env python3
"""The errors behind tests/evals/dca/test_dca_model_shapes.py, as JSON on stdout: per shape and mode
(and per chunk edge), DCA vs the float64 reference, --dca off vs the plain reference, the test's
tolerance and the distance to the reference with the inter position off by one. The same
``compare`` the tests assert with, on the DCA build the tests use (PATCHCTL_DCA_SRC /
PATCHCTL_DCA_BUILD, tests/evals/dca/builds.py).

    PATCHCTL_DCA_SRC=TREE PATCHCTL_DCA_BUILD=BUILD python evals/dca/dca_model_shapes_errors.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.evals.dca import test_dca_model_shapes as shapes
from tests.evals.dca.model_runs import print_errors
from tests.evals.dca.tiny_models import TinyModels, TinySpec


def measure(tool: Path, work: Path) -> dict[str, dict[str, float]]:
    models = TinyModels(work / "models")
    out: dict[str, dict[str, float]] = {}
    for shape, mode in shapes.SHAPE_CASES:
        specs = shapes.Q8_0_SHAPES if mode == "flash-q8_0" else shapes.SHAPES
        model = models.write(specs[shape])
        c = shapes.compare(
            tool, model, shapes.shapes_plan(), shapes.ARGS, shapes.CHUNK, mode, work / shape / mode
        )
        out[f"{shape}/{mode}"] = vars(c)
    for arch in ("llama", "qwen2"):
        for edge, dca in shapes.EDGES.items():
            model = models.write(TinySpec(arch))
            plan = shapes.edge_plan(dca)
            args = shapes.EDGE_ARGS
            c = shapes.compare(tool, model, plan, args, dca, "exact", work / arch / edge)
            out[f"{arch}/{edge}/exact"] = vars(c)
    return out


if __name__ == "__main__":
    sys.exit(print_errors(measure))
