"""CI (CPU) acceptance: ggml's vertical-slash selection ops against a float64 numpy reference.

The probe (tests/evals/dca/native/sparse_vs_probe.c; on the CPU backend, or the one named by
$PATCHCTL_SPARSE_VS_BACKEND, e.g. CUDA0 with a CUDA build) builds the graph that
llama_sparse_select builds for one KV group (the last queries' LSE from ggml_flash_attn_ext_lse,
chunked ggml_mul_mat scores, ggml_sparse_vs_acc per chunk, ggml_sparse_vs_mask) and returns the
accumulator and the mask.
The reference follows the method exactly in float64 (per KV group: each head's softmax on its
own, summed over the group's heads; cells from the causal mask's last visible column; candidate
columns and diagonals; forced sinks and local diagonals; top-k with ties to the lower index):

- scores: every column and diagonal sum within the tolerance of the type the backend's
  estimation really multiplies in (ESTIMATION_TYPE: f32 keys are f32 on the CPU, 1e-5 * L*G +
  1e-4 relative, and f16 on CUDA) of the float64 one; a score moved beyond it fails;
- the mask the op wrote equals the reference's selection made on the op's own scores, bit for
  bit (the selection has no rounding: exact ties go to the lower index);
- the float64 selection and the op's differ only where the float64 scores of the two sides of
  the boundary are within the score tolerance (near-ties of a float32 pipeline);
- ggml_sparse_vs_select (the form llama_sparse_select hands to flash attention: anchors and the
  kept columns' and diagonals' bitmaps) stands for exactly the mask ggml_sparse_vs_mask wrote from
  the same accumulator, and flash attention with LSE given the window's mask and that selection
  (ggml_flash_attn_ext_set_sparse_vs) equals flash attention given the sparse mask: bit for bit
  on the CPU, within f16 rounding on CUDA.

Cases: G = 1, 2, 4 and 8, with and without a mask (holes, a real row with no visible key, finite
nonzero values), windows before the queries (lo_k > 0, DCA's earlier chunks), padding rows,
chunks that split the window raggedly, f16 / f32 / q8_0 keys, and selections larger than the
candidates. Mutation tests show the comparisons reject a mask with one kept key dropped and a
selection with one kept column cleared.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from .builds import LlamaBuild, compile_native

F64 = npt.NDArray[np.float64]
SINKS = 30
LOCAL = 100
TYPES = {"f32": 0, "f16": 1, "q8_0": 8}
BACKEND_ENV = "PATCHCTL_SPARSE_VS_BACKEND"
"""A ggml backend name (e.g. CUDA0) the probe runs the ops on instead of the CPU (a GPU build)."""


@dataclass(frozen=True)
class Case:
    """One KV group over one window: shapes, selection sizes, key type, chunk."""

    name: str
    d: int
    t: int
    n_rows: int
    g: int
    n_kv: int
    lo_k: int
    lo_self: int
    n_self: int
    last_q: int
    vertical: int
    slash: int
    mask: bool
    kv: str
    chunk: int

    def cells(self) -> npt.NDArray[np.int64]:
        """Query t's cache cell (the window's last cells for plain attention); -1 for padding."""
        c = np.full(self.n_rows, -1, dtype=np.int64)
        c[: self.t] = self.lo_self + self.n_self - self.t + np.arange(self.t)
        return c


def plain(name: str, n_kv: int, t: int, g: int, **kw: object) -> Case:
    """Plain causal attention: the queries are the window's last t cells."""
    base = dict(
        d=64,
        n_rows=t,
        lo_k=0,
        lo_self=0,
        n_self=n_kv,
        last_q=32,
        vertical=100,
        slash=150,
        mask=True,
        kv="f16",
        chunk=256,
    )
    base.update(kw)
    return Case(name=name, t=t, g=g, n_kv=n_kv, **base)  # type: ignore[arg-type]


def window(name: str, n_kv: int, t: int, g: int, lo_k: int, **kw: object) -> Case:
    """A key window that ends before the queries (a DCA regime over earlier chunks)."""
    base = dict(
        d=64,
        n_rows=t,
        lo_self=lo_k + n_kv + 41,
        n_self=t + 3,
        last_q=32,
        vertical=60,
        slash=90,
        mask=False,
        kv="f16",
        chunk=256,
    )
    base.update(kw)
    return Case(name=name, t=t, g=g, n_kv=n_kv, lo_k=lo_k, **base)  # type: ignore[arg-type]


CASES = (
    plain("plain-g4", 1000, 96, 4),
    plain("plain-g1-pad", 700, 40, 1, n_rows=48, last_q=40, chunk=300),
    plain("plain-g8-q8", 1500, 80, 8, kv="q8_0", chunk=512, d=128),
    plain("plain-g2-f32-all", 600, 64, 2, kv="f32", vertical=5000, slash=5000),
    window("window-g2", 700, 48, 2, 200),
    window("window-g1-mask", 900, 33, 1, 17, mask=True, chunk=128),
    window("window-g4-one-chunk", 513, 64, 4, 5, chunk=4096, vertical=10, slash=10),
)


def _mask_arrays(case: Case) -> tuple[F64 | None, F64]:
    """The window's mask (causal, holes, one empty real row, some finite values), mask_self."""
    rng = np.random.default_rng(abs(hash(case.name)) % 2**32)
    cells = case.cells()
    self_cols = np.arange(case.n_self) + case.lo_self
    mask_self = np.where(self_cols[None, :] <= cells[:, None], 0.0, -np.inf)
    mask_self[cells < 0] = -np.inf
    if not case.mask:
        return None, mask_self
    keys = np.arange(case.n_kv) + case.lo_k
    vis = (keys[None, :] <= cells[:, None]) & (rng.random((case.n_rows, case.n_kv)) > 0.1)
    vis[cells < 0] = False
    if case.t > 3:
        vis[case.t // 2] = False  # a real query that sees no key of this window
    vals = np.where(rng.random(vis.shape) < 0.1, -rng.random(vis.shape) * 2.0, 0.0)
    vals = vals.astype(np.float16).astype(np.float64)
    return np.where(vis, vals, -np.inf), mask_self


@dataclass(frozen=True)
class Probed:
    """The probe's results on one case, and its inputs."""

    q: F64
    k: F64
    mask: F64 | None
    mask_self: F64
    acc: F64
    out: F64
    sel: npt.NDArray[np.int32]  # ggml_sparse_vs_select [3, W]: anchors, column bits, diagonal bits
    fa_mask: tuple[F64, F64]  # flash attention (O, LSE) with the sparse mask
    fa_sel: tuple[F64, F64]  # flash attention (O, LSE) with the window's mask and the selection


def _run(binary: Path, case: Case) -> Probed:
    rng = np.random.default_rng(7 + len(case.name))
    q = rng.standard_normal((case.g, case.t, case.d)).astype(np.float32) * 1.5
    k = rng.standard_normal((case.n_kv, case.d)).astype(np.float32)
    k[rng.integers(0, case.n_kv, 12)] *= 3.0  # a few strong columns
    v = rng.standard_normal((case.n_kv, case.d)).astype(np.float32)
    mask, mask_self = _mask_arrays(case)
    ints = [
        2,
        case.d,
        case.t,
        case.n_rows,
        case.g,
        case.n_kv,
        case.n_self,
        case.lo_k,
        case.lo_self,
        case.last_q,
        case.vertical,
        case.slash,
        int(mask is not None),
        TYPES[case.kv],
        case.chunk,
        0,
    ]
    scale = 1.0 / np.sqrt(case.d)
    parts = [b"SPARSVS1", struct.pack("<16i", *ints), struct.pack("<2f", scale, 0.0)]
    parts += [a.astype("<f4").tobytes() for a in (q, k, v)]
    if mask is not None:
        parts.append(mask.astype("<f2").tobytes())
    parts.append(mask_self.astype("<f2").tobytes())
    n_dg = max(1, case.lo_self + case.n_self - case.lo_k)
    with tempfile.TemporaryDirectory(prefix="sparse-vs-") as tmp:
        req, out = Path(tmp) / "in.bin", Path(tmp) / "out.bin"
        req.write_bytes(b"".join(parts))
        backend = os.environ.get(BACKEND_ENV)
        cmd = [str(binary), str(req), str(out), *([backend] if backend else [])]
        proc = subprocess.run(cmd, capture_output=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"probe failed ({proc.returncode}) on {case.name}: {proc.stderr!r}")
        raw = out.read_bytes()
    sizes = [case.n_kv + n_dg, case.n_rows * case.n_kv, case.n_kv * case.d]
    head = 4 * sum(sizes)
    flat = np.frombuffer(raw[:head], dtype="<f4").astype(np.float64)
    acc, out_mask, k_seen = np.split(flat, np.cumsum(sizes)[:-1])
    n_sel = int(np.frombuffer(raw[head : head + 4], dtype="<i4")[0])
    sel = np.frombuffer(raw[head + 4 : head + 4 + 4 * n_sel], dtype="<i4").reshape(3, -1)
    rest = raw[head + 4 + 4 * n_sel :]
    n_o = int(np.frombuffer(rest[:4], dtype="<i4")[0])
    n_l = case.t * case.g
    fa = np.frombuffer(rest[4:], dtype="<f4").astype(np.float64)
    want = 2 * (n_o + n_l)
    assert fa.size == want, f"probe output: {fa.size} attention floats, expected {want}"
    o_m, l_m, o_s, l_s = np.split(fa, np.cumsum([n_o, n_l, n_o]))
    return Probed(
        q.astype(np.float64),
        k_seen.reshape(case.n_kv, case.d),
        mask,
        mask_self,
        acc,
        out_mask.reshape(case.n_rows, case.n_kv),
        sel,
        (o_m, l_m),
        (o_s, l_s),
    )


def reference_scores(case: Case, p: Probed) -> tuple[F64, F64]:
    """vsum[j], dsum[d] in float64: each head's softmax over visible keys, summed over the group."""
    cells = case.cells()
    n_dg = max(1, case.lo_self + case.n_self - case.lo_k)
    vsum, dsum = np.zeros(case.n_kv), np.zeros(n_dg)
    big_l = min(case.last_q, case.t)
    scale = 1.0 / np.sqrt(case.d)
    for i in range(big_l):
        t = case.t - big_l + i
        m = p.mask[t] if p.mask is not None else np.zeros(case.n_kv)
        vis = np.isfinite(m)
        if not vis.any():
            continue
        for g in range(case.g):
            s = scale * (p.k @ p.q[g, t]) + np.where(vis, m, 0.0)
            s = np.where(vis, s, -np.inf)
            e = np.exp(s - s.max())
            prob = e / e.sum()
            vsum += prob
            d = cells[t] - case.lo_k - np.arange(case.n_kv)
            ok = vis & (d >= 0) & (d < n_dg)
            np.add.at(dsum, d[ok], prob[ok])
    return vsum, dsum


def _top(score: F64, cand: npt.NDArray[np.bool_], n_forced: int, n: int) -> npt.NDArray[np.bool_]:
    key = np.where(np.arange(score.size) < n_forced, np.inf, score)
    idx = np.flatnonzero(cand)
    order = idx[np.lexsort((idx, -key[idx]))]  # by key descending, then index ascending
    keep = np.zeros(score.size, dtype=bool)
    keep[order[:n]] = True
    return keep


def select(
    case: Case, p: Probed, vsum: F64, dsum: F64
) -> tuple[F64, npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """The method's selection from the given scores: the mask, and the kept columns / diagonals."""
    cells = case.cells()
    n_dg = dsum.size
    vis = (
        np.isfinite(p.mask) if p.mask is not None else np.ones((case.n_rows, case.n_kv), dtype=bool)
    )
    real = vis[: case.t]
    vcand: npt.NDArray[np.bool_] = np.asarray(real.any(axis=0), dtype=bool)
    d = cells[:, None] - case.lo_k - np.arange(case.n_kv)[None, :]
    dcand = np.zeros(n_dg, dtype=bool)
    dr = d[: case.t]
    ok = real & (dr >= 0) & (dr < n_dg) & (cells[: case.t, None] >= 0)
    dcand[dr[ok]] = True
    vkeep = _top(vsum, vcand, max(0, SINKS - case.lo_k), case.vertical)
    dkeep = _top(dsum, dcand, LOCAL, case.slash)
    return _kept_mask(case, p, cells - case.lo_k, cells >= 0, vkeep, dkeep), vkeep, dkeep


def _kept_mask(
    case: Case,
    p: Probed,
    anchor: npt.NDArray[np.int64],
    live: npt.NDArray[np.bool_],
    vkeep: npt.NDArray[np.bool_],
    dkeep: npt.NDArray[np.bool_],
) -> F64:
    """The sparse mask of kept columns and diagonals: a live row t sees key j iff the window's mask
    lets it and column j or diagonal anchor[t] - j is kept (anchor = the row's cell - lo_k)."""
    d = anchor[:, None] - np.arange(case.n_kv)[None, :]
    on_diag = np.zeros(d.shape, dtype=bool)
    inr = (d >= 0) & (d < dkeep.size)
    on_diag[inr] = dkeep[d[inr]]
    vis = np.isfinite(p.mask) if p.mask is not None else np.ones(d.shape, dtype=bool)
    keep = live[:, None] & vis & (vkeep[None, :] | on_diag)
    base = p.mask if p.mask is not None else np.zeros(d.shape)
    return np.where(keep, base, -np.inf)


@pytest.fixture(scope="module")
def probe(dca_build: LlamaBuild) -> Path:
    return compile_native("sparse_vs_probe.c", dca_build)


@pytest.fixture(scope="module")
def probed(probe: Path) -> dict[str, Probed]:
    return {c.name: _run(probe, c) for c in CASES}


TOL = {"f32": (1e-5, 1e-4), "f16": (1e-4, 1e-2), "q8_0": (2e-4, 5e-2)}
"""Per type the estimation multiplies in: (absolute per estimation row, relative) score tolerance.
ggml_mul_mat converts the queries to the keys' dot type (f16, or 8-bit blocks for q8_0) as flash
attention does, which moves a logit s by ~|s| 2^-11 (f16) or ~1% (q8_0) and its probability
accordingly; f32 products keep f32."""

ESTIMATION_TYPE = {
    "CPU": {"f32": "f32", "f16": "f16", "q8_0": "q8_0"},
    "CUDA": {"f32": "f16", "f16": "f16", "q8_0": "q8_0"},
}
"""Per backend and key type: the type whose rounding the estimation's products carry. The CPU
multiplies f32 keys in f32 (flash attention's LSE and ggml_mul_mat alike). CUDA does not: its
flash attention converts f32 K to f16 for its tensor-core and tile kernels (launch_fattn's
need_f16_K) and rounds Q to f16 there, and its f32 ggml_mul_mat runs through cuBLAS with
CUBLAS_TF32_TENSOR_OP_MATH (TF32: 10 stored mantissa bits, the unit roundoff 2^-11 of f16). So on
CUDA both the LSE and the scores of f32 keys carry an f16-sized rounding of q and k: a logit moves
by up to ~2^-10 |s|, its probability relatively by its own move plus the LSE's, and the f32 row
(1e-4) cannot hold (measured on an H100: 9.1e-4 relative on the f32-key case); the f16 row is
the bound of that arithmetic. f16 keys are f16 on both; q8_0 keys: CUDA quantizes the queries to
8-bit blocks (q8_1) as the CPU does (q8_0)."""


def backend_kind() -> str:
    """CPU or CUDA: the kind of the backend $PATCHCTL_SPARSE_VS_BACKEND names (unset: the CPU)."""
    name = os.environ.get(BACKEND_ENV, "CPU")
    for kind in ESTIMATION_TYPE:
        if name.upper().startswith(kind):
            return kind
    raise ValueError(
        f"{BACKEND_ENV}={name!r}: no estimation precision is known for this backend; "
        f"use one of {', '.join(ESTIMATION_TYPE)} (e.g. CUDA0) or add it to ESTIMATION_TYPE"
    )


def _tol(case: Case, ref: F64, kind: str | None = None) -> F64:
    per_row, rel = TOL[ESTIMATION_TYPE[kind or backend_kind()][case.kv]]
    return per_row * min(case.last_q, case.t) * case.g + rel * np.abs(ref)


def scores_off(case: Case, acc: F64, vsum: F64, dsum: F64, kind: str | None = None) -> F64:
    """The accumulator's column and diagonal sums minus the float64 ones, where beyond the
    tolerance of the backend's estimation type (0 elsewhere)."""
    ref = np.concatenate([vsum, dsum])
    diff = acc - ref
    return np.where(np.abs(diff) <= _tol(case, ref, kind), 0.0, diff)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_scores_match_float64(case: Case, probed: dict[str, Probed]) -> None:
    p = probed[case.name]
    vsum, dsum = reference_scores(case, p)
    got_v = p.acc[: case.n_kv]
    assert np.isfinite(p.acc).all()
    assert vsum.sum() > 0.5  # the case estimates something
    rel = np.abs(got_v - vsum) / (np.abs(vsum) + 1e-3)
    off = scores_off(case, p.acc, vsum, dsum)
    assert not off.any(), (backend_kind(), np.abs(got_v - vsum).max(), rel.max(), off[off != 0])


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_mask_is_the_selection_of_its_scores(case: Case, probed: dict[str, Probed]) -> None:
    p = probed[case.name]
    want, vkeep, dkeep = select(case, p, p.acc[: case.n_kv], p.acc[case.n_kv :])
    assert 0 < vkeep.sum() <= case.vertical and 0 < dkeep.sum() <= case.slash
    np.testing.assert_array_equal(p.out, want.astype(np.float16).astype(np.float64))
    assert np.isfinite(p.out).any() and (p.out == -np.inf).any()


def _bits(words: npt.NDArray[np.int32], n: int) -> npt.NDArray[np.bool_]:
    """The first n bits of a bitmap of 32-bit words (bit b of word w is index 32w + b)."""
    as_bytes = words.astype("<i4").view(np.uint8)
    return np.unpackbits(as_bytes, bitorder="little")[:n].astype(bool)


def mask_of_selection(case: Case, p: Probed) -> F64:
    """The mask a ggml_sparse_vs_select result stands for (ggml.h): row t sees key j iff the
    window's mask lets it and column j or diagonal anchor[t] - j is kept."""
    anchor = p.sel[0, : case.n_rows].astype(np.int64)
    cols = _bits(p.sel[1], case.n_kv)
    diags = _bits(p.sel[2], p.acc.size - case.n_kv)
    return _kept_mask(case, p, anchor, anchor != np.iinfo(np.int32).min, cols, diags)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_select_is_the_mask_in_compact_form(case: Case, probed: dict[str, Probed]) -> None:
    """ggml_sparse_vs_select keeps what ggml_sparse_vs_mask keeps, from the same accumulator: the
    anchors are the rows' cells minus the window's first, and the bitmaps give the sparse mask."""
    p = probed[case.name]
    cells = case.cells()
    want_anchor = np.where(cells >= 0, cells - case.lo_k, np.iinfo(np.int32).min)
    np.testing.assert_array_equal(p.sel[0, : case.n_rows], want_anchor)
    assert not p.sel[0, case.n_rows :].any() and p.sel.shape[1] >= case.n_rows
    np.testing.assert_array_equal(mask_of_selection(case, p), p.out)


def test_compact_form_comparison_rejects_a_dropped_column(probed: dict[str, Probed]) -> None:
    """The comparison above can fail: clearing a kept column that some row sees only as a column
    (not on a kept diagonal) changes the mask the selection stands for."""
    case = CASES[0]
    p = probed[case.name]
    for j in np.flatnonzero(_bits(p.sel[1], case.n_kv)):
        sel = p.sel.copy()
        sel[1].view(np.uint32)[j // 32] &= np.uint32(~(1 << int(j % 32)) & 0xFFFFFFFF)
        if not np.array_equal(mask_of_selection(case, dataclasses.replace(p, sel=sel)), p.out):
            return
    raise AssertionError("no kept column changes the mask when dropped")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_attention_under_the_selection_is_attention_under_its_mask(
    case: Case, probed: dict[str, Probed]
) -> None:
    """Flash attention given the window's mask and the selection (ggml_flash_attn_ext_set_sparse_vs)
    equals flash attention given the sparse mask: bit for bit on the CPU (it writes that mask and
    runs on it); on CUDA within f16 rounding (its sparse kernel may take the lists from the bitmaps,
    another summation order)."""
    p = probed[case.name]
    (o_m, l_m), (o_s, l_s) = p.fa_mask, p.fa_sel
    assert np.isfinite(o_m).all() and np.isfinite(l_m).any()
    if backend_kind() == "CPU":
        np.testing.assert_array_equal(o_s, o_m)
        np.testing.assert_array_equal(l_s, l_m)
    else:
        np.testing.assert_allclose(o_s, o_m, rtol=2e-3, atol=2e-3)
        np.testing.assert_allclose(l_s, l_m, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_selection_matches_float64_up_to_near_ties(case: Case, probed: dict[str, Probed]) -> None:
    p = probed[case.name]
    vsum, dsum = reference_scores(case, p)
    _, v_ref, d_ref = select(case, p, vsum, dsum)
    _, v_got, d_got = select(case, p, p.acc[: case.n_kv], p.acc[case.n_kv :])
    for ref_keep, got_keep, score in ((v_ref, v_got, vsum), (d_ref, d_got, dsum)):
        differ = np.flatnonzero(ref_keep != got_keep)
        if differ.size == 0:
            continue
        # a swap across the boundary: each swapped element's float64 score is within tolerance of
        # the boundary (the lowest kept or the highest dropped score among the unforced)
        n_forced = max(0, SINKS - case.lo_k) if score is vsum else LOCAL
        free = np.arange(score.size) >= n_forced
        kept, dropped = score[ref_keep & free], score[~ref_keep & free]
        bounds = [
            b
            for b in (kept.min() if kept.size else None, dropped.max() if dropped.size else None)
            if b is not None
        ]
        for e in differ:
            assert free[e], f"{case.name}: forced element {e} differs"
            assert min(abs(score[e] - b) for b in bounds) <= 2 * _tol(case, score[e : e + 1])[0], (
                case.name,
                e,
                score[e],
                bounds,
            )


def test_comparison_rejects_a_dropped_key(probed: dict[str, Probed]) -> None:
    case = CASES[0]
    p = probed[case.name]
    want, _, _ = select(case, p, p.acc[: case.n_kv], p.acc[case.n_kv :])
    broken = p.out.copy()
    kept = np.argwhere(np.isfinite(broken))
    broken[tuple(kept[len(kept) // 2])] = -np.inf
    assert not np.array_equal(broken, want.astype(np.float16).astype(np.float64))


def _f16_estimation(case: Case, p: Probed) -> Probed:
    """The probe's inputs as CUDA's estimation multiplies them: q and k rounded to f16."""
    q16 = p.q.astype(np.float16).astype(np.float64)
    k16 = p.k.astype(np.float16).astype(np.float64)
    return dataclasses.replace(p, q=q16, k=k16)


def test_f32_keys_on_cuda_are_held_to_the_f16_bound(probed: dict[str, Probed]) -> None:
    """Why the f32-key case gets the f16 row on CUDA: the float64 scores of f16-rounded q and k
    (what CUDA's flash attention and TF32 ggml_mul_mat multiply) lie outside the CPU's f32 bound
    and inside the f16 one."""
    case = next(c for c in CASES if c.kv == "f32")
    p = probed[case.name]
    vsum, dsum = reference_scores(case, p)
    rounded = np.concatenate(reference_scores(case, _f16_estimation(case, p)))
    assert scores_off(case, rounded, vsum, dsum, "CPU").any()
    assert not scores_off(case, rounded, vsum, dsum, "CUDA").any()


@pytest.mark.parametrize("kind", list(ESTIMATION_TYPE))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_score_comparison_rejects_a_score_beyond_the_bound(
    case: Case, kind: str, probed: dict[str, Probed]
) -> None:
    """One column sum and one diagonal sum moved by 1.5 times their tolerance each fail the
    comparison on every backend kind; the float64 scores themselves pass."""
    p = probed[case.name]
    vsum, dsum = reference_scores(case, p)
    ref = np.concatenate([vsum, dsum])
    assert not scores_off(case, ref, vsum, dsum, kind).any()
    for j in (int(np.argmax(vsum)), case.n_kv + int(np.argmax(dsum))):
        moved = ref.copy()
        moved[j] += 1.5 * _tol(case, ref[j : j + 1], kind)[0]
        assert np.flatnonzero(scores_off(case, moved, vsum, dsum, kind)).tolist() == [j]


def test_unknown_backend_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BACKEND_ENV, "Vulkan0")
    with pytest.raises(ValueError, match=f"{BACKEND_ENV}='Vulkan0'.*ESTIMATION_TYPE"):
        backend_kind()
    monkeypatch.setenv(BACKEND_ENV, "CUDA1")
    assert backend_kind() == "CUDA"
    monkeypatch.delenv(BACKEND_ENV)
    assert backend_kind() == "CPU"
