"""DCA graphs reused across ubatches: llama.cpp's graph reuse on the CPU (CI) and CUDA graphs on a
GPU (a CUDA crash DCA once caused).

A DCA ubatch graph depends on the ubatch and the cache (which of the three regimes are present, the
KV windows, n_kv), so consecutive ubatches alternate between graphs that differ. Two layers reuse
work across them and both must only do it for graphs that are really the same:

- llama.cpp reuses a built graph when ``can_reuse`` says the new ubatch needs the same one (CPU and
  GPU alike). Checked here on the CPU: every run equals, bit for bit, the same run with reuse off
  (``LLAMA_GRAPH_REUSE_DISABLE=1``), over ubatch sizes 32-512 (prefill crossing chunk boundaries
  at every position within a ubatch), decoding across a boundary, FA on and off, f32/f16/q8_0 KV.
- ggml-cuda captures a ggml graph into a CUDA graph and replays or updates it. With
  ``PATCHCTL_DCA_TOOL_ARGS="-ngl 99"`` on a CUDA build (``evals/device/dca_cuda_graphs.sh``) the
  same runs also equal the runs with CUDA graphs off (``GGML_CUDA_DISABLE_GRAPHS=1``) bit for bit,
  and stay within the GPU tolerance of the float64 reference (3x the same build's plain-attention
  error, as in test_dca_model.py). Before the fix the crashing configuration (f32 KV, FA off,
  ``-ub 128``) died with "an illegal instruction was encountered".

The model is the one that crashed: a qwen2 with 2 layers, 4 query heads, 2 KV heads, head dim 64.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from . import reference as ref
from .builds import LlamaBuild
from .model_runs import (
    GPU_PLAIN_FACTOR,
    ON_GPU,
    Dump,
    Plan,
    build_tool,
    gpu_plain_max,
    random_tokens,
    reference_logits,
    rel_err_all,
    run_tool,
)
from .tiny_models import TinySpec, tokenizer_for, write_tiny_gguf

DCA = ref.DcaConfig(
    chunk_size=320, local_window=64
)  # chunk_len 256, as on real models (a multiple of 256)
DCA_ON = ("--dca", "on", "--dca-chunk-size", "320", "--dca-local-window", "64")
N_PROMPT, N_GEN = 1400, 160  # prompt: 5+ chunks; decoding crosses the boundary at 1536
N_BATCH = 512

# (name, flags, reference KV type); quantized V needs flash attention
KV_MODES: dict[str, tuple[tuple[str, ...], str]] = {
    "f32-fa-off": (("-ctk", "f32", "-ctv", "f32", "-fa", "off"), "f32"),
    "f16-fa-off": (("-ctk", "f16", "-ctv", "f16", "-fa", "off"), "f32"),
    "f32-fa-on": (("-ctk", "f32", "-ctv", "f32", "-fa", "on"), "f32"),
    "f16-fa-on": (("-ctk", "f16", "-ctv", "f16", "-fa", "on"), "f32"),
    "q8_0-fa-on": (("-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on"), "q8_0"),
}
UBATCHES = (32, 96, 128, 200, 512)
# CI (CPU) runs one ubatch size per KV mode (the crash's -ub 128 with f32 KV and FA off among them);
# a GPU run takes every combination (evals/device/dca_cuda_graphs.sh)
CPU_CASES = [(128, "f32-fa-off"), (200, "f16-fa-off"), (32, "f16-fa-on"), (96, "q8_0-fa-on")]
GPU_CASES = [(ub, mode) for ub in UBATCHES for mode in KV_MODES]
CASES = GPU_CASES if ON_GPU else CPU_CASES


@pytest.fixture(scope="session")
def graphs_tool(dca_build: LlamaBuild) -> Path:
    return build_tool(dca_build)


@pytest.fixture(scope="session")
def issue_model(tmp_path_factory: pytest.TempPathFactory, dca_build: LlamaBuild) -> Path:
    spec = TinySpec("qwen2", n_embd=256, n_ff=384, n_head=4, n_head_kv=2, head_dim=64,
                    tokenizer=tokenizer_for(dca_build.src))
    return write_tiny_gguf(spec, tmp_path_factory.mktemp("graph-models"))


def plan() -> Plan:
    # the prompt in llama_decode calls of -b 512 tokens, as llama-completion feeds it; llama.cpp
    # splits each into ubatches of -ub tokens
    calls = [f"call 0:{min(N_BATCH, N_PROMPT - b)}" for b in range(0, N_PROMPT, N_BATCH)]
    return Plan(seqs=(random_tokens(N_PROMPT, seed=7),), steps=(*calls, f"gen 0 {N_GEN}"))


def run_with_env(
    tool: Path, model: Path, args: Sequence[str], work: Path, env: dict[str, str]
) -> Dump:
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return run_tool(tool, plan(), model, args, work)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def args_for(ub: int, mode: str, dca: bool = True) -> tuple[str, ...]:
    flags, _kv = KV_MODES[mode]
    batch = ("-c", "2048", "-b", str(N_BATCH), "-ub", str(ub))
    return (*batch, *flags, *(DCA_ON if dca else ("--dca", "off")))


def gpu_tolerance(mode: str, plain_err: float) -> float:
    """As test_dca_model.py on a GPU: 3x the same build's plain-attention error (q8_0: >= 5e-3)."""
    return max(GPU_PLAIN_FACTOR * plain_err, 5e-3 if mode.startswith("q8_0") else 1e-5)


@pytest.mark.parametrize(("ub", "mode"), CASES)
def test_dca_graph_runs_agree(
    ub: int, mode: str, graphs_tool: Path, issue_model: Path, tmp_path: Path
) -> None:
    args = args_for(ub, mode)
    got = run_with_env(graphs_tool, issue_model, args, tmp_path / "reuse", {})
    rebuilt = run_with_env(
        graphs_tool, issue_model, args, tmp_path / "rebuild", {"LLAMA_GRAPH_REUSE_DISABLE": "1"}
    )
    assert got.tokens == rebuilt.tokens
    assert got.raw == rebuilt.raw, "a reused graph gave other logits than a rebuilt one"
    if not ON_GPU:
        return

    direct = run_with_env(
        graphs_tool, issue_model, args, tmp_path / "direct", {"GGML_CUDA_DISABLE_GRAPHS": "1"}
    )
    assert got.tokens == direct.tokens
    assert got.raw == direct.raw, "CUDA graphs gave other logits than direct kernel launches"

    kv = KV_MODES[mode][1]
    plain = run_with_env(
        graphs_tool, issue_model, args_for(ub, mode, dca=False), tmp_path / "plain", {}
    )
    plain_want = reference_logits(issue_model, plain.tokens, ref.RunConfig(kv_type=kv))
    plain_err = rel_err_all(plain.logits(), plain_want)
    assert plain_err <= gpu_plain_max(kv), f"plain attention vs the reference: {plain_err:.3g}"
    want = reference_logits(issue_model, got.tokens, ref.RunConfig(dca=DCA, kv_type=kv))
    err = rel_err_all(got.logits(), want)
    tol = gpu_tolerance(mode, plain_err)
    assert err <= tol, f"DCA on the GPU vs the float64 reference: {err:.3g} > {tol:.3g}"
