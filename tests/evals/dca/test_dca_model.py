"""CI (CPU) acceptance: DCA in the llama.cpp graph, checked end to end on tiny models.

- ``--dca off``: logits and greedy tokens byte-identical to the unpatched upstream build.
- ``--dca on`` with chunk >= sequence: equal to plain attention (1e-4 relative), all eight archs
  (plus gemma4 with shared-KV layers and the hybrid qwen35 / qwen35moe); also for chunk_size + 1
  tokens on the exact path, and a prefill split into ubatches + single-token decode equals
  one-shot prefill under DCA.
- multi-chunk (6 chunks, ubatches crossing chunk boundaries, decode past boundaries, two
  sequences, split and unified KV): equal to the independent float64 numpy reference with DCA
  (tests/evals/dca/reference.py), for llama, qwen2, qwen3, gemma3 (DCA on its global layer only),
  qwen35 and qwen35moe (M-RoPE, every layer attention), and on the exact path also gemma4 and
  gemma4 with shared-KV layers.
  * f32 KV, flash attention off (the exact path): within 1e-3 (the required bound) and within a
    tighter bound derived from the same build's plain-attention error (1e-5 .. 6e-5).
  * flash attention on (CPU FA computes in f16): the tolerance is 2x the same build's
    plain-attention error against the reference (measured in the test); q8_0 KV likewise,
    floored at 5e-3 (the reference models the Hadamard rotation and q8_0 round trip).
- every deliberate DCA mistake (reference.MUTATIONS; for the M-RoPE models also an h section left at
  the plain position, reference.MROPE_MUTATIONS) puts the mutated reference at least 10x the
  tolerance away from llama.cpp, so a DCA with that mistake cannot pass. Every tolerance comes
  from the same run's plain-attention error, so it follows the CPU's rounding; gemma4's reference
  comparisons run on a model with softer attention (REFERENCE_SPECS), where its plain path is
  far enough below the f16-merge mistake (evals/dca/dca_margins.py prints every margin). The
  f16-merge mistake (~1e-3 of the logit scale) is below CPU FA's own f16 noise, so it is required
  on the exact path only. llama.cpp itself run with parameters off by one is caught too.
- bad --dca values end with an error naming the flag.

The tiny models have sharp attention (see tiny_models.py), otherwise positions barely matter.
Relative error = max |a - b| / max |b| over all logits of all sequences.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from . import reference as ref
from .model_runs import (
    F32,
    GPU_PLAIN_FACTOR,
    GPU_PLAIN_MAX,
    ON_GPU,
    Dump,
    Plan,
    _on_gpu,
    assert_dca_off_is_upstream,
    model_path,
    random_tokens,
    reference_logits,
    rel_err_all,
    run_tool,
    single_plan,
    tolerance,
)
from .tiny_models import ARCHS, HYBRID_VARIANTS, QWEN35_ARCHS, TinyModels, TinySpec

CHUNK_SIZE, LOCAL_WINDOW = 64, 8  # chunk_len 56: 300 tokens span 6 chunks
DCA = ref.DcaConfig(chunk_size=CHUNK_SIZE, local_window=LOCAL_WINDOW)
DCA_ON = (
    "--dca",
    "on",
    "--dca-chunk-size",
    str(CHUNK_SIZE),
    "--dca-local-window",
    str(LOCAL_WINDOW),
)
WIDE_DCA_ON = ("--dca", "on", "--dca-chunk-size", "128", "--dca-local-window", "16")
EXACT = ("-ctk", "f32", "-ctv", "f32", "-fa", "off")
FLASH = ("-fa", "on")  # default f16 KV; CPU FA computes in f16
MODES: dict[str, tuple[str, ...]] = {
    "exact": EXACT,
    "flash": FLASH,
    "flash-q8_0": (*FLASH, "-ctk", "q8_0", "-ctv", "q8_0"),  # quantized KV (needs FA for V)
}
# How the reference models each mode's KV cache. f16: CPU FA's f16 V accumulation dominates and is
# not modelled, so the float64 (f32) reference is used; q8_0: Hadamard rotation + q8_0 round trip
# (without them the q8_0 noise, amplified by the sharp attention, is ~3-7% of the logit scale).
MODE_KV_TYPE = {"exact": "f32", "flash": "f32", "flash-q8_0": "q8_0"}


# f32 KV, FA off: DCA vs the reference, and how far plain llama.cpp may be from the reference
# before the reference is taken to be wrong (a sanity bound: the power of these tests is in the
# mistakes lying >= MISTAKE_MARGIN x a tolerance derived from plain's measured error, not here)
SPEC_EXACT_TOL = 1e-3
SPEC_EQUAL_TOL = 1e-4  # chunk >= sequence vs plain attention
MISTAKE_MARGIN = 10.0  # every deliberate mistake must be this many tolerances away
REFERENCE_ARCHS = ("llama", "qwen2", "qwen3", "gemma3", "qwen35", "qwen35moe")  # every mode
# gemma4 (5-6 layers, 4 of them SWA) is compared on the exact path only: its plain CPU FA error is
# ~1e-2 of the logit scale and the DCA/plain ratio of that noise (1.7-2.1x) is too close to any
# fixed margin to make a trustworthy FA tolerance.
EXACT_REFERENCE_ARCHS = (*REFERENCE_ARCHS, "gemma4", "gemma4-shared")
# the eight archs, plus gemma4 with shared-KV layers and the hybrid qwen35 models (Gated DeltaNet
# layers between the attention ones; the reference does not implement those)
VARIANTS = (*ARCHS, "gemma4-shared", *HYBRID_VARIANTS)
ALL_MUTATIONS = {**ref.MUTATIONS, **ref.MROPE_MUTATIONS}


# gemma4 (attention scale 1.0, one or two global layers among SWA ones) with the default Q/K norm
# weight has a plain f32 path about 1e-4 of the logit scale away from the float64 reference on an
# AVX2 build, within 3-7x of the whole effect of the f16-merge mistake: no tolerance derived from
# that noise could be 10x below the mistake. With softer attention (Q/K norm weight 1.0 instead
# of 2.5) the plain path is ~2e-6 away and the f16 merge ~20x its tolerance, while every position
# mistake stays > 1000x away (evals/dca/dca_margins.py; docs/dca.md, "Tolerances"). So the
# reference comparisons of gemma4 run on that input; the other gemma4 tests keep the default.
REFERENCE_SPECS: dict[str, TinySpec] = {
    "gemma4": TinySpec("gemma4", qk_norm_scale=1.0),
    "gemma4-shared": TinySpec("gemma4-shared", qk_norm_scale=1.0),
}


def reference_model(models_dir: TinyModels, arch: str) -> Path:
    """The model `arch`'s float64-reference comparisons run on (REFERENCE_SPECS, else the
    default tiny model)."""
    spec = REFERENCE_SPECS.get(arch)
    return models_dir.write(spec) if spec is not None else model_path(models_dir, arch)


def multichunk_plan() -> Plan:
    """Two sequences (300 and 230 tokens, chunk_len 56 -> 6 and 5 chunks): a mixed prefill,
    20 single-token decode steps crossing boundaries 168 (seq 0) and 112 (seq 1), then more
    prefill crossing boundaries in ubatches of 40, then 6 greedy tokens on sequence 0."""
    steps = ["call 0:150 1:100", *["call 0:1 1:1"] * 20, "call 0:60", "call 1:110 0:70", "gen 0 6"]
    return Plan(seqs=(random_tokens(300, seed=1), random_tokens(230, seed=2)), steps=tuple(steps))


MULTI_ARGS = ("-c", "1024", "-b", "512", "-ub", "40", "-np", "2")
KV_LAYOUTS = {"split-kv": (), "unified-kv": ("-kvu",)}


# ---------------------------------------------------------------------------------------------
# reference side


# ---------------------------------------------------------------------------------------------
# 1. --dca off is byte-identical to upstream


OFF_PLANS: dict[str, tuple[Plan, tuple[str, ...]]] = {
    "one-seq": (single_plan(160, n_gen=16), ("-c", "512", "-b", "512", "-ub", "64")),
    "two-seq": (multichunk_plan(), MULTI_ARGS),
}


@pytest.mark.parametrize("plan_name", list(OFF_PLANS))
@pytest.mark.parametrize("fa", ["off", "on"])
@pytest.mark.parametrize("arch", VARIANTS)
def test_dca_off_is_byte_identical_to_upstream(
    arch: str,
    fa: str,
    plan_name: str,
    dca_tool: Path,
    upstream_tool: Path,
    models_dir: TinyModels,
    tmp_path: Path,
) -> None:
    model = model_path(models_dir, arch)
    plan, base = OFF_PLANS[plan_name]
    assert_dca_off_is_upstream(dca_tool, upstream_tool, plan, model, (*base, "-fa", fa), tmp_path)


# ---------------------------------------------------------------------------------------------
# 2. --dca on with the chunk covering the sequence equals plain attention


def run_plain_and_wide_dca(
    tool: Path, plan: Plan, model: Path, args: Sequence[str], work: Path
) -> tuple[Dump, Dump]:
    """The same run with --dca off and with a chunk wider than the sequence (WIDE_DCA_ON)."""
    plain = run_tool(tool, plan, model, (*args, "--dca", "off"), work / "plain")
    return plain, run_tool(tool, plan, model, (*args, *WIDE_DCA_ON), work / "dca")


@pytest.mark.parametrize("fa", ["off", "on"])
@pytest.mark.parametrize("arch", VARIANTS)
def test_dca_on_single_chunk_equals_plain(
    arch: str, fa: str, dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    """100 tokens, chunk_size 128, local window 16: chunk_len 112 covers the whole sequence."""
    model = model_path(models_dir, arch)
    plan = single_plan(100, n_gen=8)
    args = ("-c", "512", "-b", "512", "-ub", "32", "-fa", fa)
    plain, dca = run_plain_and_wide_dca(dca_tool, plan, model, args, tmp_path)
    assert dca.tokens == plain.tokens
    assert rel_err_all(dca.logits(), plain.logits()) <= SPEC_EQUAL_TOL


@pytest.mark.parametrize("arch", VARIANTS)
def test_dca_on_up_to_chunk_size_equals_plain_exact(
    arch: str, dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    """129 = chunk_size + 1 tokens over two chunks (chunk_len 112): every DCA distance is still the
    true distance, so with the exact path DCA must equal plain attention."""
    model = model_path(models_dir, arch)
    plan = single_plan(129)
    args = ("-c", "512", "-b", "512", "-ub", "48", *EXACT)
    plain, dca = run_plain_and_wide_dca(dca_tool, plan, model, args, tmp_path)
    if not ON_GPU:
        assert rel_err_all(dca.logits(), plain.logits()) <= SPEC_EQUAL_TOL
        return
    if arch in HYBRID_VARIANTS:
        # GPU, live Gated DeltaNet layers: no float64 reference implements them; DCA and plain
        # attention of the same build, the same recurrent layers, held to the bound the plain
        # path meets against the reference on the other models
        assert rel_err_all(dca.logits(), plain.logits()) <= GPU_PLAIN_MAX
        return
    # GPU: both against the float64 plain-attention reference (DCA with every distance true is plain
    # attention), DCA held to GPU_PLAIN_FACTOR x the plain path's own error
    want = reference_logits(model, plain.tokens, ref.RunConfig(kv_type="f32"))
    plain_err = rel_err_all(plain.logits(), want)
    assert plain_err <= GPU_PLAIN_MAX
    assert rel_err_all(dca.logits(), want) <= max(GPU_PLAIN_FACTOR * plain_err, SPEC_EQUAL_TOL)


# ---------------------------------------------------------------------------------------------
# 3. multi-chunk DCA against the numpy reference, and every deliberate mistake caught


@dataclass(frozen=True)
class MultiChunkResult:
    model: Path
    got: tuple[F32, ...]  # llama.cpp DCA logits per sequence
    tokens: tuple[tuple[int, ...], ...]
    dca_err: float  # llama.cpp DCA vs reference DCA
    plain_err: float  # same build, --dca off, vs reference plain attention
    tolerance: float
    kv_type: str

    def mistake_err(self, mistake: str) -> float:
        """|llama.cpp DCA - reference with the deliberate mistake| (relative)."""
        run = ref.RunConfig(dca=DCA, mutation=ALL_MUTATIONS[mistake], kv_type=self.kv_type)
        return rel_err_all(self.got, reference_logits(self.model, self.tokens, run))


_RESULTS: dict[tuple[str, str, str], MultiChunkResult] = {}


def multichunk_result(
    arch: str, mode: str, layout: str, tool: Path, models_dir: TinyModels, work: Path
) -> MultiChunkResult:
    """Run the multi-chunk plan with --dca off and on (cached per arch, mode and KV layout)."""
    key = (arch, mode, layout)
    if key in _RESULTS:
        return _RESULTS[key]
    model = reference_model(models_dir, arch)
    plan = multichunk_plan()
    args = (*MULTI_ARGS, *KV_LAYOUTS[layout], *MODES[mode])
    plain = run_tool(tool, plan, model, (*args, "--dca", "off"), work / "plain")
    dca = run_tool(tool, plan, model, (*args, *DCA_ON), work / "dca")
    got = tuple(dca.logits())
    kv = MODE_KV_TYPE[mode]
    plain_ref = reference_logits(model, plain.tokens, ref.RunConfig(kv_type=kv))
    plain_err = rel_err_all(plain.logits(), plain_ref)
    dca_ref = reference_logits(model, dca.tokens, ref.RunConfig(dca=DCA, kv_type=kv))
    dca_err = rel_err_all(got, dca_ref)
    tol = tolerance(mode, plain_err)
    result = MultiChunkResult(model, got, dca.tokens, dca_err, plain_err, tol, kv)
    _RESULTS[key] = result
    return result


@pytest.mark.parametrize("layout", list(KV_LAYOUTS))
@pytest.mark.parametrize("arch", EXACT_REFERENCE_ARCHS)
def test_multichunk_exact_matches_reference(
    arch: str, layout: str, dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    r = multichunk_result(arch, "exact", layout, dca_tool, models_dir, tmp_path)
    assert r.plain_err <= (GPU_PLAIN_MAX if ON_GPU else SPEC_EXACT_TOL), (
        f"reference itself disagrees with plain llama.cpp: {r.plain_err:.3g}"
    )
    if not ON_GPU:
        assert r.dca_err <= SPEC_EXACT_TOL, f"DCA vs reference {r.dca_err:.3g} > {SPEC_EXACT_TOL}"
    assert r.dca_err <= r.tolerance, (
        f"DCA vs reference {r.dca_err:.3g} > tolerance {r.tolerance:.3g}"
    )


FLASH_CASES = [
    (arch, layout, mode)
    for arch in REFERENCE_ARCHS
    for mode in ("flash", "flash-q8_0")
    for layout in (KV_LAYOUTS if mode == "flash" else ["split-kv"])  # q8_0: one layout (time)
]


@pytest.mark.parametrize(("arch", "layout", "mode"), FLASH_CASES)
def test_multichunk_flash_attn_matches_reference(
    arch: str, layout: str, mode: str, dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    r = multichunk_result(arch, mode, layout, dca_tool, models_dir, tmp_path)
    assert r.plain_err <= (GPU_PLAIN_MAX if ON_GPU else 1e-2), (
        f"plain FA vs float64 reference unexpectedly large: {r.plain_err:.3g}"
    )
    assert r.dca_err <= r.tolerance, (
        f"DCA ({mode}) vs reference {r.dca_err:.3g} > tolerance {r.tolerance:.3g} (2x plain error)"
    )


# In the flash-attention mode the f16 merge mistake (~1e-3 of the logit scale) is smaller than
# CPU FA's own f16 rounding, so no FA tolerance can be 10x below it: it is required to be caught
# on the exact path (f32 KV, FA off), where the tolerance is ~1e-5.
MISTAKE_CASES = [
    (arch, mode, mistake)
    for mode in MODES
    for arch in (EXACT_REFERENCE_ARCHS if mode == "exact" else REFERENCE_ARCHS)
    for mistake in ref.MUTATIONS
    if not (mode != "exact" and mistake == "merge_in_f16")
] + [
    (arch, mode, mistake)
    for mode in MODES
    for arch in QWEN35_ARCHS
    for mistake in ref.MROPE_MUTATIONS
]


@pytest.mark.parametrize(("arch", "mode", "mistake"), MISTAKE_CASES)
def test_each_deliberate_mistake_is_caught(
    arch: str, mode: str, mistake: str, dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    r = multichunk_result(arch, mode, "split-kv", dca_tool, models_dir, tmp_path)
    assert r.dca_err <= r.tolerance, "llama.cpp DCA must match the correct reference first"
    err = r.mistake_err(mistake)
    assert err >= MISTAKE_MARGIN * r.tolerance, (
        f"mistake {mistake}: |llama.cpp - mutated ref| = {err:.3g} is not "
        f">= {MISTAKE_MARGIN:g} x tolerance {r.tolerance:.3g}"
    )


# llama.cpp run with parameters one off from the reference's: the end-to-end comparison (not
# only the mutated reference) must see a real llama.cpp-side position change of one.
OFF_BY_ONE = {
    "chunk_size+1": ("--dca-chunk-size", str(CHUNK_SIZE + 1), "--dca-local-window", "9"),
    "local_window+1": ("--dca-chunk-size", str(CHUNK_SIZE), "--dca-local-window", "9"),
}


@pytest.mark.parametrize("change", list(OFF_BY_ONE))
@pytest.mark.parametrize("arch", REFERENCE_ARCHS)
def test_llamacpp_position_change_of_one_is_detected(
    arch: str, change: str, dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    """chunk_size+1 with local_window+1 keeps chunk_len (only the succ clamp and the inter
    position move by one); local_window+1 shifts chunk_len by one."""
    r = multichunk_result(arch, "exact", "split-kv", dca_tool, models_dir, tmp_path / "ok")
    model = reference_model(models_dir, arch)
    args = (*MULTI_ARGS, *EXACT, "--dca", "on", *OFF_BY_ONE[change])
    moved = run_tool(dca_tool, multichunk_plan(), model, args, tmp_path / "moved")
    want = reference_logits(model, moved.tokens, ref.RunConfig(dca=DCA))
    err = rel_err_all(moved.logits(), want)
    assert err >= MISTAKE_MARGIN * r.tolerance, (
        f"{change}: {err:.3g} vs tolerance {r.tolerance:.3g}"
    )


def test_sequences_span_three_or_more_chunks() -> None:
    plan = multichunk_plan()
    chunk_len = DCA.chunk_len
    assert all(len(s) // chunk_len >= 3 for s in plan.seqs)


@pytest.mark.parametrize("arch", VARIANTS)
def test_multichunk_split_decode_equals_one_shot(
    arch: str, dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    """Every variant (also those without a numpy reference): 300 tokens over 6 chunks give the
    same DCA logits prefilled in one ubatch as in ubatches of 40 plus single-token decode steps
    across chunk boundaries 112 and 168."""
    model = model_path(models_dir, arch)
    toks = (random_tokens(300, seed=1),)
    one_shot = Plan(seqs=toks, steps=("call 0:300",))
    split = Plan(seqs=toks, steps=("call 0:100", *["call 0:1"] * 80, "call 0:120"))
    base = ("-c", "512", "-b", "512", *EXACT, *DCA_ON)
    a = run_tool(dca_tool, one_shot, model, (*base, "-ub", "512"), tmp_path / "one")
    b = run_tool(dca_tool, split, model, (*base, "-ub", "40"), tmp_path / "split")
    tol = SPEC_EQUAL_TOL
    if ON_GPU:
        # GPU kernels differ between one 300-token ubatch and 40-token / single-token steps: the
        # same two runs with --dca off give the backend's own split-vs-one-shot difference
        plain = ("-c", "512", "-b", "512", *EXACT, "--dca", "off")
        pa = run_tool(dca_tool, one_shot, model, (*plain, "-ub", "512"), tmp_path / "plain-one")
        pb = run_tool(dca_tool, split, model, (*plain, "-ub", "40"), tmp_path / "plain-split")
        tol = max(GPU_PLAIN_FACTOR * rel_err_all(pb.logits(), pa.logits()), SPEC_EQUAL_TOL)
    assert rel_err_all(b.logits(), a.logits()) <= tol


@dataclass(frozen=True)
class SeqRmCase:
    """A run that uses llama_memory_seq_rm and a fresh run ending in the same sequence 0."""

    args: tuple[str, ...]
    run: Plan
    fresh: Plan
    skip: tuple[int, int]  # sequence-0 rows to skip in run / fresh: the rest are compared


_OLD, _NEW = random_tokens(200, seed=1), random_tokens(100, seed=2)
_S0, _S1 = random_tokens(300, seed=1), random_tokens(100, seed=3)

SEQ_RM_CASES = {
    # llama-server reuses a cached prompt by dropping its tail and decoding the new tail at the same
    # positions: until refilled, the freed cells are holes inside the DCA windows (300 tokens,
    # chunk_len 56: three chunks). The cells are refilled in order, so the runs are bitwise equal.
    "tail-reuse": SeqRmCase(
        args=("-c", "512"),
        run=Plan(seqs=(_OLD + _NEW,), steps=("call 0:200", "rm 0 150", "call 0:100")),
        fresh=Plan(seqs=(_OLD[:150] + _NEW,), steps=("call 0:150", "call 0:100")),
        skip=(200, 150),
    ),
    # sequence 0 decoded in turns with sequence 1 in one unified cache, sequence 1 removed, then 200
    # more tokens of sequence 0: they fill the freed cells, so cell order no longer follows position
    # (six chunks): windows with holes and foreign-order cells, so masks are needed.
    "fragmented": SeqRmCase(
        args=("-c", "1024", "-np", "2", "-kvu"),
        run=Plan(seqs=(_S0, _S1), steps=(*("call 0:20 1:20",) * 5, "rm 1 0", "call 0:200")),
        fresh=Plan(seqs=(_S0, ()), steps=("call 0:100", "call 0:200")),
        skip=(100, 100),
    ),
}


def _seq_rm_err(case: SeqRmCase, tool: Path, model: Path, args: Sequence[str], work: Path) -> float:
    """|sequence 0's compared logits after llama_memory_seq_rm - the fresh run's|."""
    a = run_tool(tool, case.run, model, args, work / "run")
    b = run_tool(tool, case.fresh, model, args, work / "fresh")
    return rel_err_all([a.logits()[0][case.skip[0] :]], [b.logits()[0][case.skip[1] :]])


@pytest.mark.parametrize("case", list(SEQ_RM_CASES))
@pytest.mark.parametrize("mode", ["exact", "flash"])
@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_dca_after_seq_rm_equals_fresh_run(
    arch: str, mode: str, case: str, dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    """After llama_memory_seq_rm the new logits equal a fresh run's as closely as plain
    attention's do (see SEQ_RM_CASES)."""
    c = SEQ_RM_CASES[case]
    model = model_path(models_dir, arch)
    args = (*c.args, "-b", "512", "-ub", "32", *MODES[mode])
    plain = _seq_rm_err(c, dca_tool, model, (*args, "--dca", "off"), tmp_path / "plain")
    dca = _seq_rm_err(c, dca_tool, model, (*args, *DCA_ON), tmp_path / "dca")
    assert plain <= (GPU_PLAIN_MAX if ON_GPU else 1e-2)
    assert dca <= max(3.0 * plain, SPEC_EQUAL_TOL), (dca, plain)


BAD_VALUES: dict[str, tuple[tuple[str, ...], str]] = {
    "local-equals-chunk": (
        ("--dca-chunk-size", "64", "--dca-local-window", "64"),
        "--dca-local-window",
    ),
    "local-ge-chunk-len": (
        ("--dca-chunk-size", "64", "--dca-local-window", "40"),
        "--dca-local-window",
    ),
    "chunk-over-train": (
        ("--dca-chunk-size", "100000", "--dca-local-window", "8"),
        "--dca-chunk-size",
    ),
    "chunk-zero": (("--dca-chunk-size", "0", "--dca-local-window", "8"), "--dca-chunk-size"),
    "local-negative": (
        ("--dca-chunk-size", "64", "--dca-local-window", "-3"),
        "--dca-local-window",
    ),
}


@pytest.mark.parametrize("case", list(BAD_VALUES))
def test_bad_dca_values_fail_with_a_message_naming_the_flag(
    case: str, dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    """Bad values end with an error naming the flag: an exit code, never an abort or logits."""
    flags, flag = BAD_VALUES[case]
    plan_file, out = tmp_path / "plan.txt", tmp_path / "out.bin"
    plan_file.write_text(single_plan(8).render())
    model = model_path(models_dir, "llama")
    cmd = [str(dca_tool), str(plan_file), str(out), "--", "-m", str(model), "-c", "512"]
    proc = subprocess.run(
        [*cmd, "--dca", "on", *flags], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode in (1, 2), f"expected a clean error exit, got {proc.returncode}"
    assert flag in proc.stderr, f"error does not name {flag}:\n{proc.stderr[-2000:]}"
    assert not out.exists()


# ---------------------------------------------------------------------------------------------
# 4. the reference itself: validated against upstream, the spec's worked example, exactness

# A worked example: seq_len 10, chunk_len 4, local 2, chunk_size 6 (-1: above the diagonal)
SPEC_EXAMPLE_DISTANCES = [
    [0, -1, -1, -1, -1, -1, -1, -1, -1, -1],
    [1, 0, -1, -1, -1, -1, -1, -1, -1, -1],
    [2, 1, 0, -1, -1, -1, -1, -1, -1, -1],
    [3, 2, 1, 0, -1, -1, -1, -1, -1, -1],
    [4, 3, 2, 1, 0, -1, -1, -1, -1, -1],
    [5, 4, 3, 2, 1, 0, -1, -1, -1, -1],
    [6, 5, 4, 3, 2, 1, 0, -1, -1, -1],
    [6, 5, 4, 3, 3, 2, 1, 0, -1, -1],
    [6, 5, 4, 3, 4, 3, 2, 1, 0, -1],
    [6, 5, 4, 3, 5, 4, 3, 2, 1, 0],
]


def test_reference_positions_match_spec_worked_example() -> None:
    dist = ref.dca_distances(10, ref.DcaConfig(chunk_size=6, local_window=2))
    assert dist.tolist() == SPEC_EXAMPLE_DISTANCES


@pytest.mark.parametrize("mistake", list(ref.MUTATIONS))
def test_each_position_mistake_changes_the_spec_example(mistake: str) -> None:
    """Sanity of the mutations on the 10-token example (merge/drop mistakes keep positions)."""
    mut = ref.MUTATIONS[mistake]
    dist = ref.dca_distances(10, ref.DcaConfig(chunk_size=6, local_window=2), mut)
    moves_positions = mut.inter_at_cs_minus_1 or mut.keys_unwrapped or mut.succ_unclamped
    assert (dist.tolist() != SPEC_EXAMPLE_DISTANCES) == moves_positions


def test_reference_dca_is_exact_up_to_chunk_size(models_dir: TinyModels) -> None:
    """For sequences of at most chunk_size + 1 tokens DCA equals plain attention."""
    m = ref.load_model(model_path(models_dir, "qwen2"))
    toks = random_tokens(CHUNK_SIZE + 1, seed=3)
    plain = ref.forward(m, toks)
    # equal up to float32 rope-angle rounding (DCA ropes at smaller positions)
    assert ref.rel_err(ref.forward(m, toks, ref.RunConfig(dca=DCA)), plain) < 1e-5
    longer = random_tokens(CHUNK_SIZE + 2, seed=3)
    changed = ref.rel_err(ref.forward(m, longer, ref.RunConfig(dca=DCA)), ref.forward(m, longer))
    assert changed > 1e-3, "a sharp model must see the first compressed distance"


def test_reference_lse_merge_equals_union_softmax(models_dir: TinyModels) -> None:
    """The float64 LSE merge of the three partial softmaxes == one softmax over their union."""
    rng = np.random.default_rng(5)
    n, hd = 150, 16
    a = ref.AttnInput(
        q=rng.standard_normal((n, 2, hd)) * 2,
        k=rng.standard_normal((n, 1, hd)) * 2,
        v=rng.standard_normal((n, 1, hd)),
        scale=0.25,
        base=10000.0,
        neox=True,
    )
    scores, regime = ref.dca_regime_scores(a, DCA, ref.CORRECT)
    merged = ref.merge_partials(scores, regime, a.v, np.float64)
    assert ref.rel_err(merged, ref.dca_attention(a, DCA)) < 1e-12
    assert ref.rel_err(ref.merge_partials(scores, regime, a.v, np.float16), merged) > 1e-4


@pytest.mark.parametrize(
    ("arch", "mode"),
    [(a, "exact") for a in EXACT_REFERENCE_ARCHS] + [(a, "flash") for a in REFERENCE_ARCHS],
)
def test_reference_matches_upstream_plain_attention(
    arch: str, mode: str, upstream_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    """Validates the reference model code itself against the unpatched build (no DCA)."""
    model = reference_model(models_dir, arch)
    args = (*MULTI_ARGS, *(EXACT if mode == "exact" else FLASH))
    dump = run_tool(upstream_tool, multichunk_plan(), model, args, tmp_path)
    err = rel_err_all(dump.logits(), reference_logits(model, dump.tokens, ref.RunConfig()))
    assert err <= (SPEC_EXACT_TOL if mode == "exact" else 1e-2)


def test_on_gpu_reads_the_tool_args() -> None:
    """The GPU tolerances apply only when the dump tool offloads layers."""
    assert _on_gpu("-ngl 99") and _on_gpu("--n-gpu-layers 5")
    assert not _on_gpu("") and not _on_gpu("-ngl 0") and not _on_gpu("-t 2")
