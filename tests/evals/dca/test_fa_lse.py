"""CI (CPU) acceptance: ggml_flash_attn_ext_lse against a float64 numpy reference.

For every case (random shapes: head dims 64/128/256, GQA 1/2/4, n_kv 256..1024, batch 1/7/64/130,
ne3 1/2, f16 / q8_0 / f32 K/V, masks with holes, windows and fully masked rows, some ALiBi and
softcap; see fa_lse_harness.draw_cases) the existing ggml_flash_attn_ext runs first on the same
inputs, and its measured error sets the bound for the new op (fa_lse_harness.Bounds):

- O:   err_new(O) <= max(1.25 * err_existing(O), 16 u max|O|).
- LSE: the existing op does not return its LSE, but its kernel keeps M and S; an attention sink
  (ggml_flash_attn_ext_add_sinks) changes O by exactly S / (S + exp(sink - M)), so the existing
  op's own M + log S is read back from O with and without a sink (fa_lse_harness.recover_lse).
  Its error against the float64 LSE, plus a few f32 roundings, bounds the new op's LSE error.
- Fully masked rows: O == 0 and LSE == -inf bitwise; no NaN anywhere.

Also: the op with an attention sink (LSE includes it, per the ggml.h contract); a path witness
(one_chunk cases equal ggml's use_ref run bitwise, split-KV / tiled cases differ from it); and the
probe built against the unpatched tree, whose ggml_flash_attn_ext error the patch must not worsen.

The mutation tests show the comparator rejects an LSE taken in log2 (every case), an LSE shifted
by 1e-2 (every case whose bound is below 5e-3: all but q8_0 at high temperature, where the
existing op's own LSE error reaches ~5e-2), a finite or NaN LSE or a NaN O on fully masked rows,
and an O off by 1% (where the O bound is below 1e-3).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pytest

from . import fa_lse_harness as fa
from .builds import LlamaBuild

CASES = fa.draw_cases()
LIVE_CASES = tuple(c for c in CASES if c.mask != "empty")
LSE_SHIFT = 1e-2


def _ids(case: fa.FaCase) -> str:
    return case.name


@dataclass(frozen=True)
class Measured:
    """Everything measured on one case: the existing op, the reference, bounds, the new op."""

    case: fa.FaCase
    existing: fa.Existing
    ref: fa.Reference
    bounds: fa.Bounds
    new: fa.FaResult

    @property
    def new_lse(self) -> fa.F32:
        """The new op's LSE (always present for op 1)."""
        assert self.new.lse is not None
        return self.new.lse


@pytest.fixture(scope="module")
def measure(dca_build: LlamaBuild) -> Iterator[Callable[[fa.FaCase], Measured]]:
    """A cached case -> Measured function using probes built against the DCA tree."""
    existing_probe = fa.probe_binary(dca_build, with_lse=False)
    new_probe = fa.probe_binary(dca_build, with_lse=True)
    cache: dict[fa.FaCase, Measured] = {}

    def run(case: fa.FaCase) -> Measured:
        if case not in cache:
            inputs = fa.make_inputs(case)
            existing, ref = fa.measure_existing(existing_probe, case, inputs)
            new = fa.run_probe(new_probe, case, inputs, 1)
            cache[case] = Measured(case, existing, ref, fa.derive_bounds(existing, ref), new)
        return cache[case]

    yield run


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_new_op_within_existing_op_error(case: fa.FaCase, measure: Callable[..., Measured]) -> None:
    m = measure(case)
    problems = fa.new_op_problems(m.new.o, m.new_lse, m.ref, m.bounds)
    assert not problems, problems


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_existing_op_masked_rows_and_nan(case: fa.FaCase, measure: Callable[..., Measured]) -> None:
    """The baseline itself gives O = 0 on fully masked rows and no NaN (else bounds are moot)."""
    m = measure(case)
    assert fa.masked_row_problems(m.existing.result.o, None, m.ref) == []
    assert fa.masked_row_problems(m.existing.ref_path_o, None, m.ref) == []


@pytest.mark.parametrize("case", LIVE_CASES, ids=_ids)
def test_lse_is_the_kernels_own_normaliser(
    case: fa.FaCase, measure: Callable[..., Measured]
) -> None:
    """The new LSE equals the existing kernel's M + log S (read back via a sink) to f32 rounding."""
    m = measure(case)
    live = fa.live_rows(m.ref)
    gap = np.abs(m.new_lse[live].astype(np.float64) - m.existing.lse[live]).max()
    slack = fa.ROUNDOFF_ULPS * fa.F32_UNIT_ROUNDOFF * (1.0 + float(np.abs(m.ref.lse[live]).max()))
    assert gap <= slack


SINK_CASES = CASES


@pytest.mark.parametrize("case", SINK_CASES, ids=_ids)
def test_new_op_with_sinks(
    case: fa.FaCase, dca_build: LlamaBuild, measure: Callable[..., Measured]
) -> None:
    """With ggml_flash_attn_ext_add_sinks the LSE includes the sink (ggml.h contract):
    LSE = logaddexp(LSE_ref, sink), O = O_ref * exp(LSE_ref - LSE); fully masked rows give
    O = 0 and LSE = sink. Held to the same bounds as without sinks (a sink only shrinks both
    errors: O is scaled by a factor <= 1 and d logaddexp(L, s) / dL <= 1)."""
    m = measure(case)
    sinks = fa.median_sinks(m.ref)
    probe = fa.probe_binary(dca_build, with_lse=True)
    got = fa.run_probe(probe, case, fa.make_inputs(case), 1, [sinks])
    want = fa.with_sinks(m.ref, sinks)
    o, lse = got.o_sinks[0], got.lse_sinks[0]
    problems = fa.new_op_problems(o, lse, want, m.bounds)
    assert not problems, problems
    masked = m.ref.masked
    assert np.all(o[masked] == 0.0)
    assert np.array_equal(lse[masked], np.broadcast_to(sinks, masked.shape)[masked])


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_merge_of_two_key_halves_equals_attention_over_all_keys(
    case: fa.FaCase, dca_build: LlamaBuild, measure: Callable[..., Measured]
) -> None:
    """ggml_flash_attn_ext_lse_merge (the DCA merge): the LSE op over keys [0, n/2) and [n/2, n),
    merged, matches the float64 attention over all n keys. Rows with no visible key in one half
    take the other half alone; rows with none in either give O = 0, LSE = -inf (masked cases).

    Bound: O = c_a O_a + c_b O_b with c_a + c_b = 1, so an O error is at most the halves' O error
    plus max|O| times the weights' error, and c_a (1 - c_a) <= 1/4 times the two LSE errors gives
    at most bounds.lse / 2; the merged LSE = logaddexp of the halves' is off by at most theirs. The
    halves are held to the whole op's bounds (fewer keys each) plus f32 rounding of the merge."""
    m = measure(case)
    probe = fa.probe_binary(dca_build, with_lse=True)
    got = fa.run_probe(probe, case, fa.make_inputs(case), fa.OP_LSE_MERGED_HALVES)
    assert got.lse is not None
    live = fa.live_rows(m.ref)
    max_o = float(np.abs(m.ref.o[live]).max()) if live.any() else 0.0
    slack = fa.ROUNDOFF_ULPS * fa.F32_UNIT_ROUNDOFF
    bounds = fa.Bounds(
        o=m.bounds.o + (0.5 * m.bounds.lse + slack) * max(1.0, max_o), lse=m.bounds.lse + slack
    )
    problems = fa.new_op_problems(got.o, got.lse, m.ref, bounds)
    assert not problems, problems


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_merge_counts_sinks_once(
    case: fa.FaCase, dca_build: LlamaBuild, measure: Callable[..., Measured]
) -> None:
    """Sinks added to one part of a merge (each part's LSE counts its own sinks) give the attention
    over all keys with the sinks counted once, within the merge test's bounds."""
    m = measure(case)
    sinks = fa.median_sinks(m.ref)
    probe = fa.probe_binary(dca_build, with_lse=True)
    got = fa.run_probe(probe, case, fa.make_inputs(case), fa.OP_LSE_MERGED_HALVES, [sinks])
    want = fa.with_sinks(m.ref, sinks)
    live = fa.live_rows(m.ref)
    max_o = float(np.abs(m.ref.o[live]).max()) if live.any() else 0.0
    slack = fa.ROUNDOFF_ULPS * fa.F32_UNIT_ROUNDOFF
    bounds = fa.Bounds(
        o=m.bounds.o + (0.5 * m.bounds.lse + slack) * max(1.0, max_o), lse=m.bounds.lse + slack
    )
    problems = fa.new_op_problems(got.o_sinks[0], got.lse_sinks[0], want, bounds)
    assert not problems, problems
    twice = fa.with_sinks(want, sinks)  # what a merge counting the sink per part would give
    assert fa.new_op_problems(got.o_sinks[0], got.lse_sinks[0], twice, bounds)


def test_merge_refuses_sinks_on_both_parts(dca_build: LlamaBuild) -> None:
    """ggml_flash_attn_ext_lse_merge aborts when both inputs carry sinks (counted twice)."""
    case = CASES[0]
    probe = fa.probe_binary(dca_build, with_lse=True)
    sinks = np.zeros(case.n_head, dtype=np.float32)
    with pytest.raises(RuntimeError, match="counted twice"):
        fa.run_probe(probe, case, fa.make_inputs(case), fa.OP_LSE_MERGED_SINKS_TWICE, [sinks])


def test_merge_comparator_catches_a_dropped_half(
    dca_build: LlamaBuild, measure: Callable[..., Measured]
) -> None:
    """The merge check can fail: where rows see keys in both halves, the first half's attention
    alone (a merge that gave the second half weight 0) is rejected, on every such case."""
    probe = fa.probe_binary(dca_build, with_lse=True)
    checked = 0
    for case in LIVE_CASES:
        m = measure(case)
        half = case.n_kv // 2
        inputs = fa.make_inputs(case)
        mask = inputs.mask
        both = np.ones(m.ref.lse.shape, dtype=bool)  # [s, t, h]
        if mask is not None:
            seen = np.isfinite(mask.astype(np.float32))  # [s, t, n]
            both = np.broadcast_to(
                np.asarray(seen[..., :half].any(-1) & seen[..., half:].any(-1))[..., None],
                both.shape,
            )
        if not both.any():
            continue
        cut = fa.FaInputs(
            q=inputs.q,
            k=inputs.k[:, :, :half],
            v=inputs.v[:, :, :half],
            mask=None if mask is None else mask[..., :half],
        )
        got = fa.run_probe(probe, dataclasses.replace(case, n_kv=half), cut, fa.OP_LSE)
        assert got.lse is not None
        o = m.ref.o.astype(np.float32)
        lse = m.ref.lse.astype(np.float32)
        o[both], lse[both] = got.o[both], got.lse[both]
        assert fa.new_op_problems(o, lse, m.ref, m.bounds) != [], case.name
        checked += 1
    assert checked >= len(LIVE_CASES) // 2


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_path_witness(case: fa.FaCase, measure: Callable[..., Measured]) -> None:
    """one_chunk cases equal ggml's use_ref run bitwise; split-KV and tiled cases do not.

    This shows each case really took the kernel path it is labelled with. Masks that leave a
    row's keys in one KV chunk (bands, tail) or none (empty) may legitimately coincide.
    """
    m = measure(case)
    same = np.array_equal(
        m.existing.result.o.view(np.uint32), m.existing.ref_path_o.view(np.uint32)
    )
    if case.path == "one_chunk":
        assert same
    elif case.mask in ("none", "random", "causal"):
        assert not same


def test_cases_cover_the_matrix() -> None:
    """The cases cover every path, type, head dim, GQA ratio, batch and ne3 the op must support."""
    paths_types = {(c.path, c.kv_type) for c in CASES}
    assert paths_types >= {
        ("split_kv", "f16"), ("split_kv", "f32"), ("tiled", "f16"), ("tiled", "f32"),
        ("one_chunk", "f16"), ("one_chunk", "f32"), ("one_chunk", "q8_0"),
    }  # fmt: skip
    assert {c.dk for c in CASES} >= {64, 128, 256}
    assert {c.n_head // c.n_head_kv for c in CASES} >= {1, 2, 4}
    assert {c.n_batch for c in CASES} >= {1, 7, 64, 130}
    assert {c.ne3 for c in CASES} >= {1, 2}
    assert {c.path for c in CASES if c.mask == "empty"} >= {"split_kv", "tiled", "one_chunk"}
    assert min(c.n_kv for c in CASES) >= 256 and max(c.n_kv for c in CASES) <= 1024


# --- the comparator can fail ---------------------------------------------------------------


def test_comparator_catches_lse_offset(measure: Callable[..., Measured]) -> None:
    """LSE + 1e-2 is rejected on every case whose bound is below 5e-3 (all but coarse q8_0)."""
    sensitive = [measure(c) for c in LIVE_CASES if measure(c).bounds.lse < LSE_SHIFT / 2]
    assert len(sensitive) >= 0.75 * len(LIVE_CASES)
    assert {m.case.path for m in sensitive} == {"split_kv", "tiled", "one_chunk"}
    for m in sensitive:
        shifted = m.new_lse + np.float32(LSE_SHIFT)
        assert fa.new_op_problems(m.new.o, shifted, m.ref, m.bounds) != [], m.case.name


@pytest.mark.parametrize("case", LIVE_CASES, ids=_ids)
def test_comparator_catches_lse_in_log2(case: fa.FaCase, measure: Callable[..., Measured]) -> None:
    m = measure(case)
    log2 = (m.new_lse * np.float32(1.0 / math.log(2.0))).astype(np.float32)
    assert fa.new_op_problems(m.new.o, log2, m.ref, m.bounds) != []


def test_comparator_catches_masked_row_errors(measure: Callable[..., Measured]) -> None:
    """A finite or NaN LSE, or a NaN O, on fully masked rows is rejected (every path)."""
    with_masked = [measure(c) for c in CASES if measure(c).ref.masked.any()]
    assert {m.case.path for m in with_masked} == {"split_kv", "tiled", "one_chunk"}
    for m in with_masked:
        masked = m.ref.masked
        for value in (0.0, -3.0e38, np.nan):
            lse = m.new_lse.copy()
            lse[masked] = value
            assert fa.new_op_problems(m.new.o, lse, m.ref, m.bounds) != [], (m.case.name, value)
        o = m.new.o.copy()
        o[masked] = np.nan
        assert fa.new_op_problems(o, m.new_lse, m.ref, m.bounds) != [], m.case.name


def test_comparator_catches_o_off_by_one_percent(measure: Callable[..., Measured]) -> None:
    """O * 1.01 is rejected on every case whose O bound is below 1e-3 (f32 and the tiled path)."""
    sensitive = [measure(c) for c in LIVE_CASES if measure(c).bounds.o < 1e-3]
    assert {m.case.path for m in sensitive} == {"split_kv", "tiled", "one_chunk"}
    for m in sensitive:
        o = (m.new.o * np.float32(1.01)).astype(np.float32)
        assert fa.new_op_problems(o, m.new_lse, m.ref, m.bounds) != [], m.case.name


# --- the probe and the unpatched tree --------------------------------------------------------


@pytest.mark.parametrize("case", fa.EDGE_CASES + CASES[:6], ids=_ids)
def test_existing_op_no_worse_than_upstream(
    case: fa.FaCase, upstream_build: LlamaBuild, measure: Callable[..., Measured]
) -> None:
    """The probe builds against the unpatched tree, and the patch leaves ggml_flash_attn_ext's
    error where it was (same error bound; bitwise equality is expected but not required)."""
    probe = fa.probe_binary(upstream_build, with_lse=False)
    m = measure(case)
    upstream = fa.run_probe(probe, case, fa.make_inputs(case), 0)
    live = fa.live_rows(m.ref)
    err_up = fa.max_abs_err(upstream.o, m.ref.o, live)
    err_dca = fa.max_abs_err(m.existing.result.o, m.ref.o, live)
    floor = fa.ROUNDOFF_ULPS * fa.F32_UNIT_ROUNDOFF
    assert err_dca <= max(fa.K_O * err_up, floor)
    assert fa.masked_row_problems(upstream.o, None, m.ref) == []


def test_probe_without_flag_refuses_the_lse_op(upstream_build: LlamaBuild) -> None:
    case = CASES[0]
    probe = fa.probe_binary(upstream_build, with_lse=False)
    with pytest.raises(RuntimeError, match=r"probe failed \(3\)"):
        fa.run_probe(probe, case, fa.make_inputs(case), 1)
