"""CI (CPU) acceptance of DCA on real models and setups, except the production
shapes (test_dca_shapes.py) and llama-server (test_dca_server.py):

- defaults from the model's original training length: GGUF DCA keys, else
  rope.scaling.original_context_length, else context_length (a guess, warned); the window derived
  from the chunk size; each value logged with where it came from;
- mscale (docs/dca.md "mscale"): logits of query i scaled by max(1, 0.1 ln((i+1)/L) + 1)^2 on
  the queries, never on the cached keys, against the float64 reference;
- YaRN: DCA takes priority (no YaRN frequencies on top of DCA's positions), for a YaRN GGUF and
  for --rope-scaling yarn on the command line; chunk_size checked against the original length;
- non-causal batches (llama_set_causal_attn false, mtmd's image chunks): honoured within a chunk,
  refused with an error across a chunk boundary;
- graph reservation: several sequences' interleaved cells (llama-server's slots on a unified
  cache) never make the compute buffer outgrow its reservation;
- --dca-* values without --dca on warn; --split-mode tensor is refused at context creation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

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
    tolerance,
)
from .tiny_models import TinyModels, TinySpec

EXACT = ("-ctk", "f32", "-ctv", "f32", "-fa", "off")
FLASH = ("-fa", "on")
MODES = {"exact": EXACT, "flash": FLASH}
SPEC_EQUAL_TOL = 1e-4
LOG_INFO = ("-lv", "4")  # common's log shows llama.cpp's INFO lines (the resolution) from 4 on
MISTAKE_MARGIN = 10.0
N_CTX_TRAIN = 8192  # TinySpec's context_length

# the context's log line with the resolved DCA values (llama-dca.cpp, llama_dca_resolve)
DCA_LINE = re.compile(
    r"dca = on: chunk_size = (\d+) \[([^\]]*)\], local_window = (\d+) \[([^\]]*)\], "
    r"chunk_len = (\d+), original length = (\d+) \[([^\]]*)\], mscale = ([^\n]*)"
)


@dataclass(frozen=True)
class Resolved:
    chunk_size: int
    chunk_source: str
    local_window: int
    local_source: str
    original: int
    original_source: str
    mscale: str


def resolved(log: str) -> Resolved:
    m = DCA_LINE.search(log)
    assert m is not None, f"no DCA line in the log:\n{log[-3000:]}"
    return Resolved(int(m[1]), m[2], int(m[3]), m[4], int(m[6]), m[7], m[8].strip())


def tiny(models_dir: TinyModels, arch: str = "llama", **meta: Any) -> Path:
    return models_dir.write(replace(TinySpec(arch), **meta))


# ---------------------------------------------------------------------------------------------
# 1. defaults and their sources


@dataclass(frozen=True)
class DefaultsCase:
    meta: dict[str, Any]
    chunk: tuple[int, str]
    local: tuple[int, str]
    original: tuple[int, str]
    mscale: str
    guess_warning: bool  # "original training length is not in the GGUF"


DEFAULTS = {
    # no DCA keys, no rope scaling: context_length is the only length, a guess
    "bare": DefaultsCase(
        {},
        (6144, "3/4 of the original length (ChunkLlama)"),
        (1024, "1/8 of the original length (ChunkLlama)"),
        (N_CTX_TRAIN, "GGUF context_length"),
        "off (auto: original length unknown)",
        True,
    ),
    "dca-original": DefaultsCase(
        {"dca_orig": 2048},
        (1536, "3/4 of the original length (ChunkLlama)"),
        (256, "1/8 of the original length (ChunkLlama)"),
        (2048, "GGUF attention.dca.original_max_position_embeddings"),
        "on (auto)",
        False,
    ),
    "yarn": DefaultsCase(
        {"yarn": (4.0, 2048)},
        (1536, "3/4 of the original length (ChunkLlama)"),
        (256, "1/8 of the original length (ChunkLlama)"),
        (2048, "GGUF rope.scaling.original_context_length"),
        "on (auto)",
        False,
    ),
    # Qwen2.5-1M's shape of dual_chunk_attention_config, scaled down
    "dca-keys": DefaultsCase(
        {"dca_chunk_size": 1024, "dca_local_size": 32, "dca_orig": 1024},
        (1024, "GGUF attention.dca.chunk_size"),
        (32, "GGUF attention.dca.local_size"),
        (1024, "GGUF attention.dca.original_max_position_embeddings"),
        "on (auto)",
        False,
    ),
    "chunk-key-only": DefaultsCase(
        {"dca_chunk_size": 4096, "dca_orig": 4096},
        (4096, "GGUF attention.dca.chunk_size"),
        (128, "chunk_size/32 (Qwen2.5-1M's ratio)"),
        (4096, "GGUF attention.dca.original_max_position_embeddings"),
        "on (auto)",
        False,
    ),
}


@pytest.mark.parametrize("case", list(DEFAULTS))
def test_defaults_come_from_the_original_length_and_are_logged(
    case: str, dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    c = DEFAULTS[case]
    model = tiny(models_dir, **c.meta)
    args = ("-c", "512", "--dca", "on", *LOG_INFO)
    dump = run_tool(dca_tool, single_plan(8), model, args, tmp_path)
    r = resolved(dump.log)
    assert (r.chunk_size, r.chunk_source) == c.chunk
    assert (r.local_window, r.local_source) == c.local
    assert (r.original, r.original_source) == c.original
    assert r.mscale == c.mscale
    assert ("original training length is not in the GGUF" in dump.log) == c.guess_warning


def test_a_cli_value_wins_and_mscale_can_be_forced(
    dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    model = tiny(models_dir)
    args = ("-c", "512", "--dca", "on", "--dca-chunk-size", "4096", "--dca-mscale", "on", *LOG_INFO)
    r = resolved(run_tool(dca_tool, single_plan(8), model, args, tmp_path).log)
    assert (r.chunk_size, r.chunk_source) == (4096, "--dca-chunk-size")
    assert (r.local_window, r.local_source) == (128, "chunk_size/32 (Qwen2.5-1M's ratio)")
    assert r.mscale == "on"


OVERFLOW_WARNING = "possible training context overflow"
DCA_LONG_CONTEXT = re.compile(
    r"dca: n_ctx_seq \((\d+)\) > n_ctx_train \((\d+)\): DCA keeps every query position within "
    r"chunk_size (\d+) \(<= the original training length (\d+)\)"
)


def test_a_context_past_the_training_length_is_explained_not_warned(
    dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    """Under DCA a context longer than context_length is what DCA is for: one info line says that
    positions stay within the chunk, in place of upstream's overflow warning (kept with DCA off)."""
    model = tiny(models_dir, n_ctx_train=256)
    args = ("-c", "1024", *LOG_INFO)
    plain = run_tool(dca_tool, single_plan(8), model, args, tmp_path / "plain")
    dca = run_tool(dca_tool, single_plan(8), model, (*args, "--dca", "on"), tmp_path / "dca")
    assert OVERFLOW_WARNING in plain.log
    assert DCA_LONG_CONTEXT.search(plain.log) is None
    assert OVERFLOW_WARNING not in dca.log
    lines = DCA_LONG_CONTEXT.findall(dca.log)
    assert lines == [("1024", "256", "192", "256")], dca.log[-3000:]
    # one DCA line at info level per context (the resolution), not a second one from the context
    assert len(DCA_LINE.findall(dca.log)) == 1
    assert "dca                   = on" not in dca.log


@pytest.mark.parametrize(
    ("meta", "chunk", "original"),
    [({"yarn": (4.0, 2048)}, 3000, "2048"), ({"dca_orig": 1024}, 2000, "1024")],
)
def test_chunk_size_is_checked_against_the_original_length(
    meta: dict[str, Any],
    chunk: int,
    original: str,
    dca_tool: Path,
    models_dir: TinyModels,
    tmp_path: Path,
) -> None:
    """chunk_size <= context_length (8192) but > the original length: refused, naming it."""
    model = tiny(models_dir, **meta)
    args = ("-c", "512", "--dca", "on", "--dca-chunk-size", str(chunk))
    proc, out = run_tool_proc(dca_tool, single_plan(8), model, args, tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert f"original training length ({original}," in proc.stderr
    assert "--dca-chunk-size" in proc.stderr
    assert not out.exists()


def test_dca_values_without_dca_on_warn(
    dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    model = tiny(models_dir)
    quiet = run_tool(dca_tool, single_plan(8), model, ("-c", "512"), tmp_path / "quiet")
    args = ("-c", "512", "--dca-chunk-size", "64", "--dca-mscale", "on")
    loud = run_tool(dca_tool, single_plan(8), model, args, tmp_path / "loud")
    warning = "are ignored without --dca on"
    assert warning not in quiet.log
    assert warning in loud.log
    assert loud.raw == quiet.raw


@pytest.mark.skipif(
    not ON_GPU,
    reason="--split-mode tensor needs a GPU device: a CPU-only build refuses it at model load, "
    "before any context (evals/device/dca_shapes_cuda.sh runs it)",
)
def test_split_mode_tensor_is_refused_at_context_creation(
    dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    model = tiny(models_dir)
    args = ("-c", "512", "-sm", "tensor", "-fa", "on", "--dca", "on")
    proc, out = run_tool_proc(dca_tool, single_plan(8), model, args, tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "--split-mode tensor" in proc.stderr and "--split-mode layer" in proc.stderr
    assert not out.exists()


# ---------------------------------------------------------------------------------------------
# 2. mscale


MSCALE_ORIG = 128
MSCALE_DCA = ref.DcaConfig(chunk_size=64, local_window=8, mscale_orig=MSCALE_ORIG)
MSCALE_FLAGS = ("--dca", "on", "--dca-chunk-size", "64", "--dca-local-window", "8")


def mscale_plan() -> Plan:
    """300 tokens (6 chunks of 56), past the original length 128 from position 127 on: prefill
    ubatches and single-token decode steps on both sides of it, then greedy tokens."""
    steps = ("call 0:100", *["call 0:1"] * 40, "call 0:160", "gen 0 4")
    return Plan(seqs=(random_tokens(300, seed=1),), steps=steps)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("arch", ["qwen2", "gemma3", "qwen35"])
def test_mscale_matches_the_reference_and_leaves_the_cache_alone(
    arch: str, mode: str, dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    """The model's GGUF gives the original length 128 (auto = on). llama.cpp must match the
    reference that scales each query row's logits by its own factor, with keys cached unscaled
    (decode rows reuse keys written at other positions); --dca-mscale off matches the reference
    without mscale. On the exact path mscale dropped or not squared is >= 10x the tolerance away
    (under CPU FA's f16 noise the margin is 4-7x, as for test_dca_model's f16-merge mistake)."""
    model = tiny(models_dir, arch, dca_orig=MSCALE_ORIG)
    base = ("-c", "512", "-b", "512", "-ub", "48", *MODES[mode])
    plan = mscale_plan()
    plain = run_tool(dca_tool, plan, model, (*base, "--dca", "off"), tmp_path / "plain")
    on = run_tool(dca_tool, plan, model, (*base, *MSCALE_FLAGS, *LOG_INFO), tmp_path / "on")
    off_args = (*base, *MSCALE_FLAGS, "--dca-mscale", "off")
    off = run_tool(dca_tool, plan, model, off_args, tmp_path / "off")
    assert resolved(on.log).mscale == "on (auto)"

    plain_err = rel_err_all(plain.logits(), reference_logits(model, plain.tokens, ref.RunConfig()))
    tol = tolerance(mode, plain_err)
    want = reference_logits(model, on.tokens, ref.RunConfig(dca=MSCALE_DCA))
    err = rel_err_all(on.logits(), want)
    assert err <= tol, f"mscale on vs reference {err:.3g} > {tol:.3g}"

    no_mscale = replace(MSCALE_DCA, mscale_orig=0)
    want_off = reference_logits(model, off.tokens, ref.RunConfig(dca=no_mscale))
    assert rel_err_all(off.logits(), want_off) <= tol

    if ON_GPU or mode != "exact":
        return
    dropped = reference_logits(model, on.tokens, ref.RunConfig(dca=no_mscale))
    assert rel_err_all(on.logits(), dropped) >= MISTAKE_MARGIN * tol
    for mutation in ref.MSCALE_MUTATIONS.values():
        wrong = reference_logits(model, on.tokens, ref.RunConfig(dca=MSCALE_DCA, mutation=mutation))
        assert rel_err_all(on.logits(), wrong) >= MISTAKE_MARGIN * tol


def test_mscale_factor_is_the_specs() -> None:
    """max(1, 0.1 ln(L_seq/L) + 1)^2 for Qwen2.5-1M (original 262144) at 1,000,000 tokens: mscale
    1.1339, squared 1.2857; 1 up to the original length."""
    f = ref.mscale_factors(1_000_000, 262_144)
    assert f[262_143] == 1.0
    assert abs(f[-1] - 1.2857) < 1e-4


# ---------------------------------------------------------------------------------------------
# 3. YaRN: DCA takes priority


YARN_DCA = ref.DcaConfig(chunk_size=64, local_window=8)
YARN_PLAN_ARGS = ("-c", "512", "-b", "512", "-ub", "40", *EXACT)


def yarn_plan() -> Plan:
    steps = ("call 0:150", *["call 0:1"] * 20, "call 0:130")
    return Plan(seqs=(random_tokens(300, seed=1),), steps=steps)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_a_yarn_gguf_gets_dca_without_yarn_frequencies(
    arch: str, dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    """A GGUF with YaRN rope scaling (factor 4, original 2048): with --dca on the result is DCA
    over the model's unscaled rope (the reference knows no YaRN), and a warning says so."""
    model = tiny(models_dir, arch, yarn=(4.0, 2048))
    args = (*YARN_PLAN_ARGS, *MSCALE_FLAGS, "--dca-mscale", "off")
    dump = run_tool(dca_tool, yarn_plan(), model, args, tmp_path / "yarn")
    assert "DCA takes priority over YaRN (GGUF rope.scaling.type yarn)" in dump.log
    # the same weights without the YaRN keys: the same graph, so the same bits (CPU and GPU)
    unscaled = run_tool(dca_tool, yarn_plan(), tiny(models_dir, arch), args, tmp_path / "plain")
    assert dump.tokens == unscaled.tokens
    assert dump.raw == unscaled.raw, "a YaRN GGUF with --dca on differs from the unscaled model"
    err = rel_err_all(
        dump.logits(), reference_logits(model, dump.tokens, ref.RunConfig(dca=YARN_DCA))
    )
    # a GPU is far from the reference on these sharp tiny models (see model_runs.GPU_PLAIN_MAX)
    bound = GPU_PLAIN_MAX if ON_GPU else 1e-4
    assert err <= bound, f"YaRN GGUF + DCA vs DCA without YaRN: {err:.3g}"


@pytest.mark.parametrize(
    "rope_flags",
    [
        ("--rope-scaling", "yarn", "--rope-scale", "4", "--yarn-orig-ctx", "2048"),
        ("--rope-scaling", "linear", "--rope-scale", "2"),
    ],
    ids=["yarn", "linear"],
)
def test_command_line_rope_scaling_does_not_stack_on_dca(
    rope_flags: tuple[str, ...], dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    """--rope-scaling on the command line with --dca on: the same logits as without it (DCA's
    positions use the model's own rope), and a warning."""
    model = tiny(models_dir, "qwen2")
    args = (*YARN_PLAN_ARGS, *MSCALE_FLAGS)
    base = run_tool(dca_tool, yarn_plan(), model, args, tmp_path / "base")
    scaled = run_tool(dca_tool, yarn_plan(), model, (*args, *rope_flags), tmp_path / "scaled")
    assert "DCA takes priority over" in scaled.log
    assert scaled.raw == base.raw


# ---------------------------------------------------------------------------------------------
# 4. non-causal batches (mtmd's image chunks on Gemma 3)


def noncausal_plan(n_text: int, n_image: int) -> Plan:
    n = n_text + n_image + 30
    steps = (
        f"call 0:{n_text}",
        "causal 0",
        f"call 0:{n_image}",
        "causal 1",
        "call 0:30",
        "gen 0 4",
    )
    return Plan(seqs=(random_tokens(n, seed=4),), steps=steps)


@pytest.mark.parametrize("mode", list(MODES))
def test_noncausal_batch_with_chunk_covering_the_sequence_equals_plain(
    mode: str, dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    """gemma3: 40 text tokens, a 30-token non-causal batch, 30 causal tokens, 4 generated; DCA with
    a chunk covering them (chunk_len 112) equals plain attention, which lets the non-causal
    tokens see each other (a causal DCA would not)."""
    model = tiny(models_dir, "gemma3")
    base = ("-c", "512", "-b", "512", "-ub", "64", *MODES[mode])
    plan = noncausal_plan(40, 30)
    plain = run_tool(dca_tool, plan, model, (*base, "--dca", "off"), tmp_path / "plain")
    wide = ("--dca", "on", "--dca-chunk-size", "128", "--dca-local-window", "16")
    dca = run_tool(dca_tool, plan, model, (*base, *wide), tmp_path / "dca")
    causal = Plan(seqs=plan.seqs, steps=tuple(s for s in plan.steps if not s.startswith("causal")))
    plain_causal = run_tool(dca_tool, causal, model, (*base, "--dca", "off"), tmp_path / "causal")
    assert rel_err_all(plain_causal.logits(), plain.logits()) > 100 * SPEC_EQUAL_TOL, (
        "the non-causal batch must change plain attention's logits for this test to mean anything"
    )
    assert dca.tokens == plain.tokens
    assert rel_err_all(dca.logits(), plain.logits()) <= SPEC_EQUAL_TOL


def test_noncausal_batch_across_a_chunk_boundary_is_refused(
    dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    """Positions 40..69 with chunk_len 56: llama_decode fails with an error naming the boundary
    (no query of chunk 0 could see the chunk-1 keys after it); plain attention decodes it."""
    model = tiny(models_dir, "gemma3")
    base = ("-c", "512", "-b", "512", "-ub", "64", *EXACT)
    plan = noncausal_plan(40, 30)
    run_tool(dca_tool, plan, model, (*base, "--dca", "off"), tmp_path / "plain")
    proc, out = run_tool_proc(dca_tool, plan, model, (*base, *MSCALE_FLAGS), tmp_path / "dca")
    assert proc.returncode == 1
    assert "across the DCA chunk boundary at 56" in proc.stderr, proc.stderr[-2000:]
    assert not out.exists()


# ---------------------------------------------------------------------------------------------
# 5. graph reservation covers interleaved sequences


def slots_plan(n_seq: int = 4) -> Plan:
    """llama-server-like: n_seq sequences decoded in turns (their cells interleave in a unified
    cache), then each sequence's long prefill in turn, crossing chunk boundaries, then decode."""
    seqs = tuple(random_tokens(700, seed=10 + s) for s in range(n_seq))
    turn = " ".join(f"{s}:32" for s in range(n_seq))
    step = " ".join(f"{s}:1" for s in range(n_seq))
    steps = (
        *[f"call {turn}"] * 8,
        *[f"call {step}"] * 8,
        *[f"call {s}:436" for s in range(n_seq)],
    )
    return Plan(seqs=seqs, steps=steps)


@pytest.mark.parametrize("layout", ["unified-kv", "split-kv"])
def test_interleaved_sequences_never_grow_the_compute_buffer(
    layout: str, dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    """Four sequences as llama-server's default slots: the compute buffer after the run equals the
    one reserved at context creation (llama_context's destructor warns "does not match
    expectation" when the scheduler had to grow it); plain attention is the control."""
    model = tiny(models_dir, "qwen2")
    kv = ("-kvu",) if layout == "unified-kv" else ()
    base = ("-c", "3072", "-b", "512", "-ub", "128", "-np", "4", *kv, *FLASH)
    flags = ("--dca", "on", "--dca-chunk-size", "320", "--dca-local-window", "64")
    grown = "does not match expectation"
    plain = run_tool(dca_tool, slots_plan(), model, (*base, "--dca", "off"), tmp_path / "plain")
    assert grown not in plain.log
    dca = run_tool(dca_tool, slots_plan(), model, (*base, *flags), tmp_path / "dca")
    assert grown not in dca.log, [line for line in dca.log.splitlines() if grown in line]
