"""Hostile or odd GGUF metadata with --dca on (CPU): every case ends in a clear error at context
creation (exit 1, the message names the value, where it came from and the fix; no logits) or in a
logged fallback that docs/dca.md documents ("Defaults and where they come from"), never in an
abort, NaN logits or a silently wrong result. ``--dca off`` keeps upstream's behaviour, bytes
included, whatever the metadata.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from . import reference as ref
from .model_runs import (
    GPU_PLAIN_MAX,
    ON_GPU,
    Plan,
    random_tokens,
    reference_logits,
    rel_err_all,
    run_tool,
    run_tool_proc,
    single_plan,
)
from .test_dca_config import EXACT, LOG_INFO, resolved, tiny
from .tiny_models import TinyModels, TinySpec

GUESS = "original training length is not in the GGUF"
U32_MAX, I32_MAX = 2**32 - 1, 2**31 - 1
DERIVED = "derived from the original training length"
KEY_FIX = "--override-kv llama.attention.dca.original_max_position_embeddings=int:N"
LINEAR = ("--override-kv", "llama.rope.scaling.type=str:linear", "--override-kv")
SCALE_ERROR = ("rope frequency scale", "--override-kv llama.rope.scaling.factor=float:N")


# metadata (TinySpec fields), extra flags, the fragments the error must hold
REFUSED: dict[str, tuple[dict[str, Any], tuple[str, ...], tuple[str, ...]]] = {
    # context_length too small to derive a chunk size from (3/4 of 0 or 1 is 0; of 2, chunk 1 and
    # window 1): the error says the values were derived, from what, and to give them
    "ctx-train-0": ({"n_ctx_train": 0}, (), ("--dca-chunk-size must be > 0", f"{DERIVED} 0 [")),
    "ctx-train-1": ({"n_ctx_train": 1}, (), ("--dca-chunk-size must be > 0", f"{DERIVED} 1 [")),
    "ctx-train-2": ({"n_ctx_train": 2}, (), ("--dca-local-window (1)", f"{DERIVED} 2 [")),
    # a chunk size given over a context_length that is only a guess: the fix names the GGUF key
    "ctx-train-0-chunk-given": (
        {"n_ctx_train": 0},
        ("--dca-chunk-size", "32", "--dca-local-window", "4"),
        ("original training length (0, GGUF context_length)", KEY_FIX),
    ),
    # lengths past llama.cpp's 32-bit positions: the default chunk size would wrap the query
    # positions (before the fix: logits silently different from plain attention, no error)
    "ctx-train-u32-max": (
        {"n_ctx_train": U32_MAX},
        (),
        (f"must be <= {I32_MAX}", f"{DERIVED} {U32_MAX} [GGUF context_length]", KEY_FIX),
    ),
    "dca-original-u32-max": (
        {"dca_orig": U32_MAX},
        (),
        (f"must be <= {I32_MAX}", "[GGUF attention.dca.original_max_position_embeddings]"),
    ),
    "yarn-original-u32-max": (
        {"yarn": (4.0, U32_MAX)},
        (),
        (f"must be <= {I32_MAX}", "[GGUF rope.scaling.original_context_length]"),
    ),
    "dca-chunk-over-i32": (
        {"dca_chunk_size": 2**31, "dca_local_size": 8, "dca_orig": U32_MAX},
        (),
        (f"--dca-chunk-size (2147483648, GGUF attention.dca.chunk_size) must be <= {I32_MAX}",),
    ),
    # a rope base that makes every angle NaN (or every angle 0)
    "freq-base-nan": ({"rope_freq_base": math.nan}, (), ("rope frequency base nan (GGUF",)),
    "freq-base-negative": (
        {"rope_freq_base": -10000.0},
        (),
        ("rope frequency base -10000 (GGUF rope.freq_base)",),
    ),
    "freq-base-inf": ({"rope_freq_base": math.inf}, (), ("rope frequency base inf (GGUF",)),
    "cli-freq-base-nan": ({}, ("--rope-freq-base", "nan"), ("base nan (--rope-freq-base)",)),
    # a trained linear rope scale (kept with DCA) of NaN or below 0
    "linear-factor-nan": ({}, (*LINEAR, "llama.rope.scaling.factor=float:nan"), SCALE_ERROR),
    "linear-factor-negative": ({}, (*LINEAR, "llama.rope.scaling.factor=float:-2"), SCALE_ERROR),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_hostile_metadata_is_refused_with_a_clear_error(
    case: str, dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    meta, flags, fragments = REFUSED[case]
    model = tiny(models_dir, **meta)
    args = ("-c", "256", "--dca", "on", *flags)
    proc, out = run_tool_proc(dca_tool, single_plan(8), model, args, tmp_path)
    assert proc.returncode == 1, f"expected a clean error exit:\n{proc.stderr[-3000:]}"
    assert "failed to initialize the context" in proc.stderr
    for fragment in fragments:
        assert fragment in proc.stderr, f"{fragment!r} not in:\n{proc.stderr[-3000:]}"
    assert not out.exists()


@pytest.mark.parametrize("case", ["freq-base-nan", "freq-base-negative", "dca-original-u32-max"])
def test_dca_off_keeps_upstream_behaviour_on_hostile_metadata(
    case: str, dca_tool: Path, upstream_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    """--dca off runs what upstream runs (NaN logits for a NaN rope base included), bit for bit."""
    model = tiny(models_dir, **REFUSED[case][0])
    plan = single_plan(40, n_gen=4)
    up = run_tool(upstream_tool, plan, model, ("-c", "256"), tmp_path / "up")
    off = run_tool(dca_tool, plan, model, ("-c", "256", "--dca", "off"), tmp_path / "off")
    assert off.raw == up.raw and off.tokens == up.tokens


def test_a_model_without_global_layers_warns_that_dca_changes_nothing(
    dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    """gemma3 whose two layers are both sliding-window (pattern 3): DCA applies to no layer, which
    the context says; the logits are those of --dca off, bit for bit."""
    model = models_dir.write(TinySpec("gemma3", swa_pattern=3))
    plan = single_plan(120, n_gen=4)
    flags = ("--dca", "on", "--dca-chunk-size", "45", "--dca-local-window", "5")
    off = run_tool(dca_tool, plan, model, ("-c", "256", "--dca", "off"), tmp_path / "off")
    on = run_tool(dca_tool, plan, model, ("-c", "256", *flags), tmp_path / "on")
    assert "every attention layer of the model is sliding-window" in on.log
    assert "sliding-window" not in off.log
    assert on.raw == off.raw


def test_missing_context_length_fails_to_load_as_upstream(
    dca_tool: Path, upstream_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    """No context_length key: llama.cpp refuses the model at load (exit 1, no abort), with or
    without DCA, as the unpatched build does."""
    model = tiny(models_dir, n_ctx_train=-1)
    for tool, name, flags in (
        (upstream_tool, "up", ()),
        (dca_tool, "dca", ("--dca", "on")),
    ):
        args = ("-c", "256", *flags)
        proc, out = run_tool_proc(tool, single_plan(8), model, args, tmp_path / name)
        assert proc.returncode == 1, proc.stderr[-2000:]
        assert "context_length" in proc.stderr and "failed to load model" in proc.stderr
        assert not out.exists()


def _dca_vs_plain_reference(
    tool: Path, model: Path, flags: tuple[str, ...], work: Path
) -> tuple[float, str]:
    """|DCA - the float64 plain-attention reference| of one 150-token exact run, and DCA's log
    (the reference knows no YaRN: with --dca on the model ropes unscaled, docs/dca.md)."""
    plan = Plan(seqs=(random_tokens(150, seed=21),), steps=("call 0:100", "call 0:50", "gen 0 3"))
    args = ("-c", "256", "-b", "128", "-ub", "32", *EXACT, "--dca", "on", *flags, *LOG_INFO)
    dca = run_tool(tool, plan, model, args, work)
    assert np.isfinite(np.frombuffer(dca.raw, dtype=np.float32)).all()
    want = reference_logits(model, dca.tokens, ref.RunConfig())
    return rel_err_all(dca.logits(), want), dca.log


# metadata, the original length and its source as logged, whether it is logged as a guess
FALLBACKS: dict[str, tuple[dict[str, Any], int, str, bool]] = {
    # the largest length positions hold: the default chunk covers any context, i.e. plain attention
    "ctx-train-i32-max": ({"n_ctx_train": I32_MAX}, I32_MAX, "GGUF context_length", True),
    # YaRN without its original length (0 = absent): context_length, logged as a guess
    "yarn-original-0": ({"yarn": (4.0, 0)}, 8192, "GGUF context_length", True),
    # an original length above context_length (contradictory, but given): used as given, logged
    # with its source; the chunk (75000) then covers any context of this model
    "yarn-original-over-ctx": (
        {"yarn": (4.0, 100000)},
        100000,
        "GGUF rope.scaling.original_context_length",
        False,
    ),
}


@pytest.mark.parametrize("case", list(FALLBACKS))
def test_odd_metadata_falls_back_as_documented(
    case: str, dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    meta, original, source, guess = FALLBACKS[case]
    model = tiny(models_dir, **meta)
    err, log = _dca_vs_plain_reference(dca_tool, model, (), tmp_path)
    r = resolved(log)
    assert (r.original, r.original_source) == (original, source)
    assert (GUESS in log) == guess
    # the resolved chunk is longer than the sequence: DCA must be plain attention (unscaled rope)
    assert r.chunk_size - r.local_window > 160
    assert err <= (GPU_PLAIN_MAX if ON_GPU else 1e-4), f"DCA vs plain reference {err:.3g}"


def test_huge_original_length_with_a_given_chunk_size_matches_reference(
    dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    """original_max_position_embeddings 2^32-1 with --dca-chunk-size 45: the length only drives
    mscale (auto on, factor 1 everywhere below it), so DCA is the reference's over 4 chunks."""
    model = tiny(models_dir, dca_orig=U32_MAX)
    flags = ("--dca-chunk-size", "45", "--dca-local-window", "5")
    plan = Plan(seqs=(random_tokens(150, seed=21),), steps=("call 0:100", "call 0:50", "gen 0 3"))
    args = ("-c", "256", "-b", "128", "-ub", "32", *EXACT, "--dca", "on", *flags, *LOG_INFO)
    dump = run_tool(dca_tool, plan, model, args, tmp_path)
    assert resolved(dump.log).mscale == "on (auto)"
    want = reference_logits(model, dump.tokens, ref.RunConfig(dca=ref.DcaConfig(45, 5)))
    assert rel_err_all(dump.logits(), want) <= (GPU_PLAIN_MAX if ON_GPU else 1e-3)
