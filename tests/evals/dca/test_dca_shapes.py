"""DCA at production chunk shapes, on the CPU in CI and on CUDA with
PATCHCTL_DCA_TOOL_ARGS="-ngl 99" (evals/device/dca_shapes_cuda.sh).

Every real configuration has chunk_len a multiple of 256 (Qwen2.5-1M: 253952; the defaults for
8k/32k models: 5120/20480), so the successive and inter windows, rounded to 256 cells, are fully
visible and run without a mask, the successive + inter regimes become one merged call once
p mod chunk_len >= local_window, and a decoded token past chunk 0 takes the one-launch decode path
on CUDA. test_dca_model.py's chunk_len 56 never reaches those paths. Here chunk_size 320 / 576
with local window 64 (chunk_len 256 / 512) over 1316 tokens: prefill ubatches of 128 and decode
steps crossing chunk boundaries, against the float64 reference (tests/evals/dca/reference.py).

The plans each ubatch took are read from llama.cpp's debug log (llama-dca.cpp logs "dca plan:"
per graph built), so the test shows these paths were taken, not only that the logits agree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from . import reference as ref
from .model_runs import (
    ON_GPU,
    Plan,
    model_path,
    random_tokens,
    reference_logits,
    rel_err_all,
    run_tool,
    tolerance,
)
from .tiny_models import TinyModels

SHAPES = {"cs320-w64": (320, 64), "cs576-w64": (576, 64)}
MODES = {"exact": ("-ctk", "f32", "-ctv", "f32", "-fa", "off"), "flash": ("-fa", "on")}
ARCHS = ("qwen2", "llama", "gemma3")
ARGS = ("-c", "2048", "-b", "1024", "-ub", "128")
MISTAKE_MARGIN = 10.0

# "dca plan: n_tokens = T, present = 111, masked = 100, merge12 = 1, lo = a b c, n = x y z"
PLAN_LINE = re.compile(
    r"dca plan: n_tokens = (\d+), present = ([01]{3}), masked = ([01]{3}), merge12 = ([01])"
)


def production_plan() -> Plan:
    """1310 prompt tokens and 6 generated: a 700-token prefill (ubatches of 128 across the chunk
    boundaries 256 and 512), 60 decode steps, 250 more, 30 decode steps across 1024 (a boundary of
    both shapes), 250 more across 1280, 20 decode steps, then greedy tokens."""
    steps = (
        "call 0:700",
        *["call 0:1"] * 60,
        "call 0:250",
        *["call 0:1"] * 30,
        "call 0:250",
        *["call 0:1"] * 20,
        "gen 0 6",
    )
    return Plan(seqs=(random_tokens(1310, seed=7),), steps=steps)


@dataclass(frozen=True)
class UbatchPlan:
    n_tokens: int
    present: str
    masked: str
    merge12: bool


def plans_taken(log: str) -> list[UbatchPlan]:
    return [UbatchPlan(int(m[1]), m[2], m[3], m[4] == "1") for m in PLAN_LINE.finditer(log)]


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("arch", ARCHS)
def test_production_shape_matches_reference(
    arch: str, shape: str, mode: str, dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    cs, w = SHAPES[shape]
    model = model_path(models_dir, arch)
    plan = production_plan()
    base = (*ARGS, *MODES[mode])
    plain = run_tool(dca_tool, plan, model, (*base, "--dca", "off"), tmp_path / "plain")
    flags = ("--dca", "on", "--dca-chunk-size", str(cs), "--dca-local-window", str(w), "-lv", "5")
    dca = run_tool(dca_tool, plan, model, (*base, *flags), tmp_path / "dca")

    plain_err = rel_err_all(plain.logits(), reference_logits(model, plain.tokens, ref.RunConfig()))
    tol = tolerance(mode, plain_err)
    config = ref.DcaConfig(chunk_size=cs, local_window=w)
    err = rel_err_all(dca.logits(), reference_logits(model, dca.tokens, ref.RunConfig(dca=config)))
    assert err <= tol, f"DCA vs reference {err:.3g} > tolerance {tol:.3g} (plain {plain_err:.3g})"

    taken = plans_taken(dca.log)
    assert taken, "no 'dca plan:' lines in the debug log (-lv 5)"
    # decode past chunk 0: two regimes for one token (the one-launch path on CUDA)
    assert any(p.n_tokens == 1 and p.present.count("1") >= 2 for p in taken)
    if mode == "flash":
        # a window without a mask (successive or successive+inter) and the merged call
        assert any(p.present[1] == "1" and p.masked[1] == "0" for p in taken)
        assert any(p.merge12 and p.present[1] == "1" for p in taken)
        # and the three regimes as separate calls (rows with p mod chunk_len < local_window)
        assert any(not p.merge12 and p.present == "111" for p in taken)
    if ON_GPU:
        return
    # the comparison has the power to see a position mistake at these shapes
    wrong = ref.RunConfig(dca=config, mutation=ref.MUTATIONS["inter_at_cs_minus_1"])
    assert rel_err_all(dca.logits(), reference_logits(model, dca.tokens, wrong)) >= (
        MISTAKE_MARGIN * tol
    )
