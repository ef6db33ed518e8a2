"""Sparse prefill (MInference vertical-slash, llama-sparse.cpp) on tiny models, against the float64
reference (tests/evals/dca/reference.py: sparse_keep, sparse_plain_attention, sparse_dca_attention).

- A threshold at or above the KV length: byte-identical to --sparse-prefill off (the graph is the
  dense one), plain attention and DCA.
- Budgets covering every key: byte-identical to dense (the per-head mask has the dense mask's
  finite entries), plain attention and DCA.
- Small budgets: the logits equal the float64 reference of the same selection (same columns and
  diagonals from the same scores: the reference estimates from f16-rounded keys as llama.cpp reads
  them from its cache, on a prompt whose selection is not within rounding of a tie), within the
  tolerance of dense flash attention in the same run (2x the dense path's own error against the
  dense reference); the sparse reference lies at least MARGIN tolerances from the dense one, so a
  selection that ignored the budget, or picked other keys, fails. The prefill in ubatches of 64
  and in one ubatch: each against its own reference (the selection is per ubatch).
- A model's DCA config (GGUF <arch>.attention.dca.config, written by the converter from HF's
  dual_chunk_attention_config) gives the defaults: the largest per-head budgets, vLLM's threshold
  and last_q keys, each logged with its source; a flag wins; a malformed config is an error.
- Bad values end with an error naming the flag.

CPU flash attention (the sparse path needs it) computes in f16; the KV cache is f16 by default.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from . import reference as ref
from .model_runs import (
    Plan,
    model_path,
    random_tokens,
    reference_logits,
    rel_err_all,
    run_tool,
    run_tool_proc,
    single_plan,
)
from .tiny_models import TinyModels, TinySpec

N_TOKENS = 300
VERTICAL, SLASH, LAST_Q = 34, 104, 16  # 4 columns and 4 diagonals beyond the always-kept 30 and 100


def sparse_on(vertical: int = VERTICAL, slash: int = SLASH, threshold: int = 0) -> tuple[str, ...]:
    return (
        *("--sparse-prefill", "on", "--sparse-last-q", str(LAST_Q)),
        *("--sparse-vertical", str(vertical), "--sparse-slash", str(slash)),
        *("--sparse-threshold", str(threshold)),
    )


BASE = ("-c", "512", "-b", "512", "-fa", "on")
# chunk_len 56: 300 tokens span 6 chunks; a ubatch of >= 64 tokens holds a chunk's first 8 rows, so
# DCA never merges its successive and inter regimes into one call (which would select over both)
CHUNK_SIZE, LOCAL_WINDOW = 64, 8
DCA = ref.DcaConfig(chunk_size=CHUNK_SIZE, local_window=LOCAL_WINDOW)
DCA_ON = (
    *("--dca", "on"),
    *("--dca-chunk-size", str(CHUNK_SIZE), "--dca-local-window", str(LOCAL_WINDOW)),
)
ATTN = {"plain": (), "dca": DCA_ON}
ARCHS = ("llama", "qwen2", "qwen3")
MAX_SEEDS = 20
UBATCHES = (64, 512)
MARGIN = 10.0


def _run_config(attn: str, sparse: ref.SparseConfig | None) -> ref.RunConfig:
    return ref.RunConfig(dca=DCA if attn == "dca" else None, sparse=sparse)


def unambiguous_prompt(model: Path, run: ref.RunConfig) -> tuple[int, ...]:
    """The first prompt (token seeds 1, 2, ...) whose reference selection has no boundary within
    ref.MIN_SELECTION_GAP of a tie: with sharp tiny models many column and diagonal sums are
    nearly equal, and one there can flip with the f16 rounding of a single key element, which
    says nothing about the method."""
    for seed in range(1, MAX_SEEDS + 1):
        tokens = random_tokens(N_TOKENS, seed=seed)
        try:
            reference_logits(model, (tokens,), run)
        except ref.AmbiguousSelection:
            continue
        return tokens
    pytest.fail(f"no prompt among {MAX_SEEDS} seeds selects unambiguously", pytrace=False)


@pytest.mark.parametrize("attn", list(ATTN))
def test_threshold_at_kv_length_is_byte_identical_to_off(
    attn: str, dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    model = model_path(models_dir, "qwen2")
    plan = single_plan(N_TOKENS, n_gen=4)
    args = (*BASE, "-ub", "64", *ATTN[attn])
    off = run_tool(dca_tool, plan, model, args, tmp_path / "off")
    # -c 512: the KV length is at most 512
    high = run_tool(dca_tool, plan, model, (*args, *sparse_on(threshold=512)), tmp_path / "high")
    below = run_tool(dca_tool, plan, model, (*args, *sparse_on(threshold=511)), tmp_path / "below")
    assert high.raw == off.raw
    assert below.raw != off.raw  # one cell less and the same run is sparse


@pytest.mark.parametrize("attn", list(ATTN))
def test_budgets_covering_every_key_are_byte_identical_to_dense(
    attn: str, dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    model = model_path(models_dir, "qwen2")
    plan = single_plan(N_TOKENS, n_gen=4)
    args = (*BASE, "-ub", "64", *ATTN[attn])
    dense = run_tool(dca_tool, plan, model, args, tmp_path / "dense")
    full = run_tool(
        dca_tool, plan, model, (*args, *sparse_on(vertical=4096, slash=4096)), tmp_path / "full"
    )
    small = run_tool(dca_tool, plan, model, (*args, *sparse_on()), tmp_path / "small")
    assert full.raw == dense.raw
    assert small.raw != dense.raw  # the same flags with small budgets do change the result


@pytest.mark.parametrize("ubatch", UBATCHES)
@pytest.mark.parametrize("attn", list(ATTN))
@pytest.mark.parametrize("arch", ARCHS)
def test_sparse_equals_reference(
    arch: str, attn: str, ubatch: int, dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    model = model_path(models_dir, arch)
    cfg = ref.SparseConfig(vertical=VERTICAL, slash=SLASH, last_q=LAST_Q, ubatch=ubatch)
    tokens = unambiguous_prompt(model, _run_config(attn, cfg))
    plan = Plan(seqs=(tokens,), steps=(f"call 0:{N_TOKENS}",))
    args = (*BASE, "-ub", str(ubatch), *ATTN[attn])

    dense = run_tool(dca_tool, plan, model, args, tmp_path / "dense")
    sparse = run_tool(dca_tool, plan, model, (*args, *sparse_on()), tmp_path / "sparse")
    want_dense = reference_logits(model, dense.tokens, _run_config(attn, None))
    want_sparse = reference_logits(model, sparse.tokens, _run_config(attn, cfg))

    dense_err = rel_err_all(dense.logits(), want_dense)
    tol = 2.0 * dense_err
    err = rel_err_all(sparse.logits(), want_sparse)
    effect = rel_err_all(want_sparse, want_dense)
    assert err <= tol, f"sparse vs reference {err:.3g} > {tol:.3g} (dense error {dense_err:.3g})"
    assert effect >= MARGIN * tol, f"the selection changes the logits by {effect:.3g} only"


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--sparse-prefill", "maybe"),
        ("--sparse-vertical", "0"),
        ("--sparse-slash", "-3"),
        ("--sparse-threshold", "-1"),
        ("--sparse-last-q", "0"),
    ],
)
def test_bad_values_name_the_flag(
    flag: str, value: str, dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    model = model_path(models_dir, "qwen2")
    proc, _out = run_tool_proc(
        dca_tool, single_plan(8), model, (*BASE, flag, value), tmp_path / "bad"
    )
    assert isinstance(proc, subprocess.CompletedProcess)
    assert proc.returncode != 0
    assert flag in proc.stderr


# per layer, per head: ["vertical_and_slash", vertical, slash, score] (vLLM's format); the largest
# budgets (34 and 104) are the ones sparse_on() passes as flags
GGUF_SPARSE = {
    "chunk_size": 64,
    "local_size": 8,
    "sparse_attention_threshold": 0,
    "sparse_attention_last_q": LAST_Q,
    "sparse_attention_config": [
        {"0": ["vertical_and_slash", 34, 100, 0.9], "1": ["vertical_and_slash", 31, 104, 0.8]},
        {"0": ["vertical_and_slash", 30, 101, 0.7], "1": ["vertical_and_slash", 33, 102, 0.6]},
    ],
}
LOG_INFO = ("-lv", "4")


def _gguf_model(models_dir: TinyModels, config: object) -> Path:
    return models_dir.write(TinySpec("qwen2", dca_config=json.dumps(config)))


def test_gguf_config_gives_the_defaults(
    dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    plain_model = model_path(models_dir, "qwen2")
    gguf_model = _gguf_model(models_dir, GGUF_SPARSE)
    plan = single_plan(N_TOKENS)
    args = (*BASE, "-ub", "64")
    flags = run_tool(dca_tool, plan, plain_model, (*args, *sparse_on()), tmp_path / "flags")
    from_gguf = run_tool(
        dca_tool, plan, gguf_model, (*args, "--sparse-prefill", "on", *LOG_INFO), tmp_path / "gguf"
    )
    src = "GGUF qwen2.attention.dca.config"
    assert (
        f"vertical {VERTICAL} ({src}), slash {SLASH} ({src}), threshold 0 ({src})" in from_gguf.log
    )
    assert from_gguf.raw == flags.raw
    # a flag wins over the GGUF
    wide = ("--sparse-vertical", "4096", "--sparse-slash", "4096", *LOG_INFO)
    flag_wins = run_tool(
        dca_tool, plan, gguf_model, (*args, "--sparse-prefill", "on", *wide), tmp_path / "wide"
    )
    assert "vertical 4096 (flag), slash 4096 (flag), threshold 0 (GGUF" in flag_wins.log
    dense = run_tool(dca_tool, plan, plain_model, args, tmp_path / "dense")
    assert flag_wins.raw == dense.raw


@pytest.mark.parametrize(
    ("config", "names"),
    [
        ({"sparse_attention_threshold": -1}, "sparse_attention_threshold"),
        ({"sparse_attention_last_q": "64"}, "sparse_attention_last_q"),
        ({"sparse_attention_config": {"0": 1}}, "sparse_attention_config must be a list"),
        ({"sparse_attention_config": [{"0": ["a_shape", 1, 2, 0.5]}]}, "[0][0] must be"),
        (
            {"sparse_attention_config": [{"3": ["vertical_and_slash", 0, 2, 0.5]}]},
            "[0][3] vertical",
        ),
    ],
)
def test_malformed_gguf_config_is_an_error(
    config: object, names: str, dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    model = _gguf_model(models_dir, config)
    args = (*BASE, "--sparse-prefill", "on")
    proc, _out = run_tool_proc(dca_tool, single_plan(8), model, args, tmp_path / "bad")
    assert proc.returncode != 0
    assert "GGUF qwen2.attention.dca.config" in proc.stderr and names in proc.stderr
    # without --sparse-prefill on the config is not read
    off, _ = run_tool_proc(dca_tool, single_plan(8), model, BASE, tmp_path / "off")
    assert off.returncode == 0, off.stderr[-2000:]
