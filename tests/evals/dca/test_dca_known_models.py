"""DCA defaults from the known-model table (CPU): a GGUF without DCA keys whose metadata names a
release with a published dual_chunk_attention_config gets that configuration, logged as "from
the known-model table (<entry>)"; a GGUF that differs in any matched field (architecture,
general.basename / general.name, context_length, rope.freq_base) keeps today's guess and its
warning, and a GGUF with DCA keys keeps its keys. docs/dca.md, "Defaults and where they come
from", lists the entries and their sources.

The tiny models carry the real metadata values of the third-party Qwen2.5-7B/14B-Instruct-1M
GGUFs (general.basename "Qwen2.5", general.name "Qwen2.5 7B Instruct 1M", context_length
1010000, rope.freq_base 1e7, arch qwen2); their weights are the usual tiny random ones.
"""

from __future__ import annotations

from dataclasses import replace
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
)
from .test_dca_config import EXACT, LOG_INFO, resolved
from .tiny_models import TinyModels, TinySpec

GUESS = "original training length is not in the GGUF"
TABLE = "known-model table (Qwen2.5-7B/14B-Instruct-1M)"
QWEN25_1M: dict[str, Any] = {
    "basename": "Qwen2.5",
    "name": "Qwen2.5 7B Instruct 1M",
    "n_ctx_train": 1010000,
    "rope_freq_base": 1e7,
}
"""The metadata of Qwen2.5-7B-Instruct-1M GGUFs converted by upstream's convert_hf_to_gguf.py
(config.json max_position_embeddings 1010000, rope_theta 1e7; the converter's basename and name
from the model id "Qwen2.5-7B-Instruct-1M")."""

PLAN = Plan(seqs=(random_tokens(150, seed=21),), steps=("call 0:100", "call 0:50", "gen 0 3"))
ARGS = ("-c", "256", "-b", "128", "-ub", "32", *EXACT, *LOG_INFO)


def qwen25(models_dir: TinyModels, arch: str = "qwen2", **meta: Any) -> Path:
    return models_dir.write(replace(TinySpec(arch), **{**QWEN25_1M, **meta}))


# metadata changes from QWEN25_1M (on arch qwen2 unless "arch" is given) that still match
MATCHES: dict[str, dict[str, Any]] = {
    "7b": {},
    "14b": {"name": "Qwen2.5 14B Instruct 1M"},
    "basename-lower-case": {"basename": "qwen2.5"},
    # older converters wrote no general.basename: general.name "Qwen2.5 ..." identifies it
    "name-only": {"basename": ""},
    "name-only-dashes": {"basename": "", "name": "Qwen2.5-7B-Instruct-1M"},
}


@pytest.mark.parametrize("case", list(MATCHES))
def test_a_known_release_without_dca_keys_gets_its_published_config(
    case: str, dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    model = qwen25(models_dir, **MATCHES[case])
    dump = run_tool(dca_tool, PLAN, model, (*ARGS, "--dca", "on"), tmp_path)
    r = resolved(dump.log)
    assert (r.chunk_size, r.chunk_source) == (262144, TABLE)
    assert (r.local_window, r.local_source) == (8192, TABLE)
    assert (r.original, r.original_source) == (262144, TABLE)
    assert r.mscale == "on (auto)"  # the original length is known, as with the converter's keys
    assert f"matches the {TABLE}" in dump.log
    assert GUESS not in dump.log and "are defaults" not in dump.log
    # 150 tokens in one chunk of 262144: plain attention (mscale is 1 below the original length)
    want = reference_logits(model, dump.tokens, ref.RunConfig())
    assert np.isfinite(np.frombuffer(dump.raw, dtype=np.float32)).all()
    assert rel_err_all(dump.logits(), want) <= (GPU_PLAIN_MAX if ON_GPU else 1e-4)


def test_the_table_gives_what_the_converters_keys_give(
    dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    """The table's values are those a GGUF converted with the DCA keys carries: the same chunk
    length and mscale, hence the same logits, bit for bit."""
    table = run_tool(dca_tool, PLAN, qwen25(models_dir), (*ARGS, "--dca", "on"), tmp_path / "t")
    keyed = qwen25(models_dir, dca_chunk_size=262144, dca_local_size=8192, dca_orig=262144)
    keys = run_tool(dca_tool, PLAN, keyed, (*ARGS, "--dca", "on"), tmp_path / "k")
    a, b = resolved(table.log), resolved(keys.log)
    assert (a.chunk_size, a.local_window, a.original, a.mscale) == (
        b.chunk_size,
        b.local_window,
        b.original,
        b.mscale,
    )
    assert b.chunk_source == "GGUF attention.dca.chunk_size"
    assert table.raw == keys.raw


# near misses: one matched field differs -> no table entry, today's guess from context_length
NEAR_MISSES: dict[str, tuple[dict[str, Any], int]] = {
    # other basename (another Qwen2.5 family, another model family)
    "basename-qwen2.5-coder": ({"basename": "Qwen2.5-Coder"}, 1010000),
    "basename-qwen2": ({"basename": "Qwen2", "name": "Qwen2 7B Instruct 1M"}, 1010000),
    "basename-llama": ({"basename": "Llama-3.1", "name": "Llama 3.1 8B 1M"}, 1010000),
    # a basename that differs wins over a name that would match
    "basename-differs-name-matches": ({"basename": "Mistral"}, 1010000),
    # no basename, and a name that only starts with the basename's characters
    "name-qwen2.50": ({"basename": "", "name": "Qwen2.50 7B"}, 1010000),
    "no-identity": ({"basename": "", "name": ""}, 1010000),
    # other context length: Qwen2.5-7B-Instruct (32768), a 1M-ish length of another release
    "ctx-32768": ({"n_ctx_train": 32768}, 32768),
    "ctx-1000000": ({"n_ctx_train": 1000000}, 1000000),
    # other rope base (Qwen2.5-7B-Instruct's is 1e6)
    "rope-base-1e6": ({"rope_freq_base": 1e6}, 1010000),
    # other architecture with the same metadata
    "arch-llama": ({"arch": "llama"}, 1010000),
}


@pytest.mark.parametrize("case", list(NEAR_MISSES))
def test_a_near_miss_keeps_the_warned_guess(
    case: str, dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    meta, ctx = NEAR_MISSES[case]
    model = qwen25(models_dir, **meta)
    dump = run_tool(dca_tool, PLAN, model, (*ARGS, "--dca", "on"), tmp_path)
    r = resolved(dump.log)
    assert (r.original, r.original_source) == (ctx, "GGUF context_length")
    assert (r.chunk_size, r.chunk_source) == (
        (3 * ctx) // 4,
        "3/4 of the original length (ChunkLlama)",
    )
    assert GUESS in dump.log
    assert "known-model table" not in dump.log


# GGUF metadata that the table never overrides: the matched release with DCA keys or a
# rope-scaling original length -> those keys, as without the table
KEYS_WIN: dict[str, tuple[dict[str, Any], tuple[int, str], tuple[int, str]]] = {
    "dca-keys": (
        {"dca_chunk_size": 131072, "dca_local_size": 4096, "dca_orig": 262144},
        (131072, "GGUF attention.dca.chunk_size"),
        (262144, "GGUF attention.dca.original_max_position_embeddings"),
    ),
    "dca-original-only": (
        {"dca_orig": 131072},
        ((3 * 131072) // 4, "3/4 of the original length (ChunkLlama)"),
        (131072, "GGUF attention.dca.original_max_position_embeddings"),
    ),
    "yarn-original": (
        {"yarn": (4.0, 65536)},
        ((3 * 65536) // 4, "3/4 of the original length (ChunkLlama)"),
        (65536, "GGUF rope.scaling.original_context_length"),
    ),
}


@pytest.mark.parametrize("case", list(KEYS_WIN))
def test_gguf_keys_win_over_the_table(
    case: str, dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    meta, chunk, original = KEYS_WIN[case]
    dump = run_tool(dca_tool, PLAN, qwen25(models_dir, **meta), (*ARGS, "--dca", "on"), tmp_path)
    r = resolved(dump.log)
    assert (r.chunk_size, r.chunk_source) == chunk
    assert (r.original, r.original_source) == original
    assert "known-model table" not in dump.log


def test_command_line_sizes_win_over_the_table(
    dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    """--dca-chunk-size / --dca-local-window replace the table's sizes; the original length (and
    so mscale) stays the table's. 150 tokens over chunks of 45: DCA against the reference."""
    flags = ("--dca", "on", "--dca-chunk-size", "45", "--dca-local-window", "5")
    model = qwen25(models_dir)
    dump = run_tool(dca_tool, PLAN, model, (*ARGS, *flags), tmp_path)
    r = resolved(dump.log)
    assert (r.chunk_size, r.chunk_source) == (45, "--dca-chunk-size")
    assert (r.local_window, r.local_source) == (5, "--dca-local-window")
    assert (r.original, r.original_source) == (262144, TABLE)
    want = reference_logits(model, dump.tokens, ref.RunConfig(dca=ref.DcaConfig(45, 5)))
    assert rel_err_all(dump.logits(), want) <= (GPU_PLAIN_MAX if ON_GPU else 1e-3)


def test_dca_off_ignores_the_table(
    dca_tool: Path, upstream_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    """--dca off on a matching GGUF: no DCA line, and upstream's logits, bit for bit."""
    model = qwen25(models_dir)
    args = ("-c", "256", *EXACT, *LOG_INFO)
    up = run_tool(upstream_tool, PLAN, model, args, tmp_path / "up")
    off = run_tool(dca_tool, PLAN, model, (*args, "--dca", "off"), tmp_path / "off")
    assert "known-model table" not in off.log and "dca = on" not in off.log
    assert off.raw == up.raw and off.tokens == up.tokens
