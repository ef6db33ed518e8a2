"""Flash attention + LSE accuracy harness: cases, float64 numpy reference, native probe, metrics.

Used by tests/evals/dca/test_fa_lse.py and evals/dca/fa_lse_accuracy.py (CI acceptance).

The reference is written from the definition, not from ggml's code:
  score[t, n] = scale * q_t . k_n                       (per head h, with K/V head h // (H / H_kv))
  score       = softcap * tanh(score / softcap)          if softcap != 0
  score      += slope_h * mask[t, n]                     (slope_h = 1 without ALiBi)
  LSE[t]      = log(sum_n exp(score[t, n]))              (natural log; -inf if every key is masked)
  O[t]        = sum_n exp(score[t, n] - LSE[t]) * v_n    (0 if every key is masked)
evaluated in float64 on exactly the K/V values the kernel saw (f16 / q8_0 round trip done by ggml)
and on the f32 Q as given. ggml itself converts Q to K's vec-dot type (f16 or q8_0) on the
one_chunk / split-KV paths and accumulates V in f16 there; that is part of the measured error.
"""

from __future__ import annotations

import dataclasses
import math
import struct
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from .builds import LlamaBuild, compile_native

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]

PROBE_SOURCE = "fa_lse_probe.c"
GGML_TYPE_IDS = {"f32": 0, "f16": 1, "q8_0": 8}
MASK_KINDS = ("none", "random", "causal", "bands", "empty", "tail")
"""empty: every key masked; tail: only the last quarter of the keys (leading KV chunks all -inf)."""
SINK_MARGIN = 2.0
"""Sink logit = max reference LSE of the head + this margin (see `recover_lse`)."""


@dataclass(frozen=True)
class FaCase:
    """One flash-attention problem: shapes, K/V type, parameters, mask pattern and seed."""

    dk: int
    n_kv: int
    n_batch: int
    n_head: int
    n_head_kv: int
    ne3: int
    kv_type: str
    n_threads: int
    mask: str
    seed: int
    temperature: float = 1.0
    max_bias: float = 0.0
    softcap: float = 0.0

    @property
    def dv(self) -> int:
        """Value head size (equal to the key head size in every case here)."""
        return self.dk

    @property
    def scale(self) -> float:
        """Softmax scale; temperature > 1 gives peakier attention."""
        return self.temperature / math.sqrt(self.dk)

    @property
    def path(self) -> str:
        """Which CPU kernel path ggml takes for this case (ggml-cpu/ops.cpp dispatcher)."""
        f16_or_f32 = self.kv_type in ("f16", "f32")
        if f16_or_f32 and self.n_batch == 1 and self.ne3 == 1 and self.n_kv >= 512:
            return "split_kv"
        if f16_or_f32 and self.n_batch >= 64:
            return "tiled"
        return "one_chunk"

    @property
    def name(self) -> str:
        """A readable id for pytest and the JSON record."""
        extra = "".join(
            [
                f"-t{self.temperature:g}" if self.temperature != 1.0 else "",
                f"-alibi{self.max_bias:g}" if self.max_bias else "",
                f"-cap{self.softcap:g}" if self.softcap else "",
            ]
        )
        return (
            f"{self.path}-{self.kv_type}-d{self.dk}-kv{self.n_kv}-b{self.n_batch}-h{self.n_head}"
            f"x{self.n_head_kv}-s{self.ne3}-{self.mask}-th{self.n_threads}{extra}-seed{self.seed}"
        )


@dataclass(frozen=True)
class FaInputs:
    """Probe inputs in numpy order: q [s,h,t,d], k [s,hkv,n,d], v [s,hkv,n,d], mask f16 [s,t,n]."""

    q: F32
    k: F32
    v: F32
    mask: npt.NDArray[np.float16] | None


@dataclass(frozen=True)
class FaResult:
    """Probe outputs: O [s,t,h,dv], LSE [s,t,h] (new op), O with sinks, K/V as the kernel saw."""

    o: F32
    lse: F32 | None
    o_sinks: tuple[F32, ...]
    lse_sinks: tuple[F32, ...]
    k_seen: F32
    v_seen: F32


@dataclass(frozen=True)
class Reference:
    """Float64 reference: O [s,t,h,dv] and LSE [s,t,h]."""

    o: F64
    lse: F64

    @property
    def masked(self) -> npt.NDArray[np.bool_]:
        """Rows [s,t,h] whose keys are all masked."""
        return np.isneginf(self.lse)


def _mask_random(rng: np.random.Generator, t: int, n: int) -> F64:
    """Random finite penalties and holes; with 3+ rows also a fully masked row and a one-key row."""
    m = np.where(rng.random((t, n)) < 0.3, -np.inf, -rng.random((t, n)) * 4.0)
    if t >= 3:
        empty, single = rng.choice(t, size=2, replace=False)
        m[empty] = -np.inf
        m[single] = -np.inf
        m[single, rng.integers(n)] = 0.0
    return m


def _mask_causal(t: int, n: int) -> F64:
    """Bottom-right aligned causal mask (queries are the last t positions of n keys)."""
    rows = np.arange(t)[:, None] + (n - t)
    return np.where(np.arange(n)[None, :] <= rows, 0.0, -np.inf)


def _mask_bands(rng: np.random.Generator, t: int, n: int) -> F64:
    """DCA-like regimes: each row sees one contiguous key window; some windows are empty."""
    lo = rng.integers(0, n, size=t)
    hi = np.minimum(lo + rng.integers(0, n, size=t), n)
    if t > 1:
        hi[rng.integers(t)] = lo[rng.integers(t)]  # an empty window somewhere
    cols = np.arange(n)[None, :]
    return np.where((cols >= lo[:, None]) & (cols < hi[:, None]), 0.0, -np.inf)


def make_mask(case: FaCase, rng: np.random.Generator) -> npt.NDArray[np.float16] | None:
    """The case's mask, [ne3, n_batch, n_kv] in f16 (what ggml requires), or None."""
    if case.mask == "none":
        return None
    t, n = case.n_batch, case.n_kv
    slabs = []
    for _ in range(case.ne3):
        if case.mask == "random":
            slabs.append(_mask_random(rng, t, n))
        elif case.mask == "causal":
            slabs.append(_mask_causal(t, n))
        elif case.mask == "bands":
            slabs.append(_mask_bands(rng, t, n))
        elif case.mask == "empty":
            slabs.append(np.full((t, n), -np.inf))
        elif case.mask == "tail":
            slabs.append(np.where(np.arange(n)[None, :] >= n - n // 4, np.zeros((t, n)), -np.inf))
        else:
            raise ValueError(f"unknown mask kind {case.mask!r}")
    return np.stack(slabs).astype(np.float16)


DEFAULT_SEED = 20261129
RANDOM_MASKS = ("none", "random", "causal", "bands")


def _draw_case(rng: np.random.Generator, n_batch: int, kv_type: str, split_kv: bool) -> FaCase:
    """One random case; split_kv forces the decode shape that takes the split-KV path."""
    mask = str(rng.choice(RANDOM_MASKS))
    max_bias = float(rng.choice([0.0, 0.0, 0.0, 8.0]))
    return FaCase(
        dk=int(rng.choice([64, 128, 256])),
        n_kv=int(rng.integers(512 if split_kv else 256, 1025)),
        n_batch=n_batch,
        n_head=0,  # set below from GQA ratio
        n_head_kv=int(rng.choice([1, 2])),
        ne3=1 if split_kv else int(rng.choice([1, 2])),
        kv_type=kv_type,
        n_threads=int(rng.choice([1, 2, 3, 4])),
        mask="random" if max_bias and mask == "none" else mask,
        seed=int(rng.integers(1 << 31)),
        temperature=float(rng.choice([1.0, 3.0])),
        max_bias=max_bias,
        softcap=float(rng.choice([0.0, 0.0, 0.0, 20.0])),
    )


def draw_cases(seed: int = DEFAULT_SEED, per_combo: int = 2) -> tuple[FaCase, ...]:
    """Random shapes over batch {1, 7, 64, 130} x K/V {f16, q8_0, f32}, plus fixed edge cases.

    Batch 1 decode shapes (first draw per type) take the split-KV path for f16/f32, batch >= 64
    the tiled path for f16/f32; everything else (and all q8_0) takes one_chunk.
    """
    rng = np.random.default_rng(seed)
    cases = []
    for n_batch in (1, 7, 64, 130):
        for kv_type in ("f16", "q8_0", "f32"):
            for i in range(per_combo):
                c = _draw_case(rng, n_batch, kv_type, split_kv=n_batch == 1 and i == 0)
                gqa = int(rng.choice([1, 2, 4]))
                cases.append(dataclasses.replace(c, n_head=c.n_head_kv * gqa))
    return (*cases, *EDGE_CASES)


EDGE_CASES = (
    FaCase(128, 600, 1, 4, 2, 1, "f16", 2, "empty", 101),  # split-KV, every key masked
    FaCase(128, 800, 1, 8, 2, 1, "f16", 2, "tail", 102),  # split-KV, first chunk all -inf
    FaCase(128, 1024, 1, 4, 2, 1, "f32", 4, "tail", 103),  # split-KV, 3 of 4 chunks all -inf
    FaCase(64, 300, 64, 4, 4, 1, "f32", 2, "empty", 104),  # tiled, every key masked
    FaCase(128, 700, 130, 4, 1, 2, "f16", 2, "bands", 105),  # tiled, DCA-like windows
    FaCase(64, 256, 7, 4, 2, 2, "q8_0", 2, "empty", 106),  # one_chunk, every key masked
    FaCase(256, 512, 64, 2, 1, 1, "f16", 2, "tail", 107, temperature=3.0),  # tiled, leading -inf
)


def make_inputs(case: FaCase) -> FaInputs:
    """Seeded random q/k/v (standard normal) and the mask."""
    rng = np.random.default_rng(case.seed)
    q = rng.standard_normal((case.ne3, case.n_head, case.n_batch, case.dk), dtype=np.float32)
    k = rng.standard_normal((case.ne3, case.n_head_kv, case.n_kv, case.dk), dtype=np.float32)
    v = rng.standard_normal((case.ne3, case.n_head_kv, case.n_kv, case.dv), dtype=np.float32)
    return FaInputs(q=q, k=k, v=v, mask=make_mask(case, rng))


def alibi_slopes(n_head: int, max_bias: float) -> F64:
    """ALiBi slopes per head (Press et al.; the n_head not a power of two variant)."""
    if max_bias <= 0.0:
        return np.ones(n_head)
    n_pow2 = 2 ** math.floor(math.log2(n_head))
    base = 2.0 ** (-max_bias / n_pow2)
    extra = 2.0 ** (-max_bias / 2.0 / n_pow2)
    return np.array(
        [base ** (h + 1) if h < n_pow2 else extra ** (2 * (h - n_pow2) + 1) for h in range(n_head)]
    )


def reference(case: FaCase, inputs: FaInputs, k_seen: F32, v_seen: F32) -> Reference:
    """Float64 attention and natural-log LSE from the definition (module docstring)."""
    group = case.n_head // case.n_head_kv
    q = inputs.q.astype(np.float64)
    k = np.repeat(k_seen.astype(np.float64), group, axis=1)  # head h reads K/V head h // group
    v = np.repeat(v_seen.astype(np.float64), group, axis=1)
    scores = np.matmul(q, k.swapaxes(-1, -2)) * case.scale  # [s,h,t,n]
    if case.softcap:
        scores = case.softcap * np.tanh(scores / case.softcap)
    if inputs.mask is not None:
        slopes = alibi_slopes(case.n_head, case.max_bias)[None, :, None, None]
        mask = inputs.mask.astype(np.float64)[:, None, :, :]
        with np.errstate(invalid="ignore"):
            scores = scores + np.where(np.isneginf(mask), -np.inf, slopes * mask)
    row_max = scores.max(axis=-1, keepdims=True)
    safe_max = np.where(np.isneginf(row_max), 0.0, row_max)
    weights = np.exp(scores - safe_max)
    total = weights.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):
        lse = (safe_max + np.log(total))[..., 0]
    o = np.matmul(weights / np.where(total == 0.0, 1.0, total), v)  # [s,h,t,dv]
    return Reference(o=o.transpose(0, 2, 1, 3), lse=lse.transpose(0, 2, 1))


def with_sinks(ref: Reference, sinks: F32) -> Reference:
    """The reference after adding one sink logit per head: exp(sink) joins the denominator only."""
    lse = np.logaddexp(ref.lse, sinks.astype(np.float64)[None, None, :])
    factor = np.where(ref.masked, 0.0, np.exp(ref.lse - lse))
    return Reference(o=ref.o * factor[..., None], lse=lse)


def median_sinks(ref: Reference) -> F32:
    """One sink per head at the median finite reference LSE (so sink and keys both matter)."""
    per_head = ref.lse.reshape(-1, ref.lse.shape[-1]).T
    return np.array(
        [
            float(np.median(row[np.isfinite(row)])) if np.isfinite(row).any() else 0.0
            for row in per_head
        ],
        dtype=np.float32,
    )


def sink_logits(case: FaCase, ref: Reference) -> F32:
    """One sink logit per head: max finite reference LSE of that head + SINK_MARGIN (0 if none)."""
    finite = np.where(ref.masked, -np.inf, ref.lse)
    per_head = finite.max(axis=(0, 1))
    return np.where(np.isneginf(per_head), 0.0, per_head + SINK_MARGIN).astype(np.float32)


def recover_lse(o: F32, o_sink: F32, sinks: F32) -> F64:
    """The existing op's own normaliser M + log(S), read back through an attention sink.

    A sink adds exp(sink) to the softmax denominator and nothing to the numerator, so
    O_sink = O * S' / (S' + exp(sink - M)) with S' = S (the kernel's running sum at max M), i.e.
    rho = O_sink / O = 1 / (1 + exp(sink - L)) and L = sink + log(rho / (1 - rho)).
    The kernel applies the sink after the K/V loop with f32 scalings, so rho carries only a few f32
    roundings (relative ~1e-7) and L is recovered to ~1e-6 while rho stays away from 1 (sink
    above L, hence SINK_MARGIN). rho is a least-squares fit over the row's Dv outputs.
    Masked rows give NaN.
    """
    o64, os64 = o.astype(np.float64), o_sink.astype(np.float64)
    den = (o64 * o64).sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = (os64 * o64).sum(axis=-1) / den
        lse = sinks.astype(np.float64)[None, None, :] + np.log(rho / (1.0 - rho))
    return np.where(den > 0.0, lse, np.nan)


def _header(case: FaCase, op: int, n_sink_sets: int, has_mask: bool, use_ref: bool) -> bytes:
    ints = (
        op, case.n_threads, case.dk, case.dv, case.n_kv, case.n_batch, case.n_head, case.n_head_kv,
        case.ne3, GGML_TYPE_IDS[case.kv_type], int(has_mask), n_sink_sets, int(use_ref), 0, 0, 0,
    )  # fmt: skip
    return (
        b"FALSEPB1"
        + struct.pack("<16i", *ints)
        + struct.pack("<4f", case.scale, case.max_bias, case.softcap, 0.0)
    )


def encode_request(
    case: FaCase, inputs: FaInputs, op: int, sinks: Sequence[F32], use_ref: bool = False
) -> bytes:
    """The probe's input file (format documented in tests/evals/dca/native/fa_lse_probe.c)."""
    parts = [_header(case, op, len(sinks), inputs.mask is not None, use_ref)]
    parts += [a.astype("<f4").tobytes() for a in (inputs.q, inputs.k, inputs.v)]
    if inputs.mask is not None:
        parts.append(inputs.mask.astype("<f2").tobytes())
    parts += [s.astype("<f4").tobytes() for s in sinks]
    return b"".join(parts)


OP_EXISTING = 0
"""Probe op: ggml_flash_attn_ext."""
OP_LSE = 1
"""Probe op: ggml_flash_attn_ext_lse."""
OP_LSE_MERGED_HALVES = 2
"""Probe op: the LSE op on each half of the keys, merged by ggml_flash_attn_ext_lse_merge (a sink
set goes to the first half only)."""
OP_LSE_MERGED_SINKS_TWICE = 3
"""Probe op: as OP_LSE_MERGED_HALVES with the sinks on both halves, which the merge must refuse."""


def decode_result(case: FaCase, data: bytes, op: int, n_sink_sets: int) -> FaResult:
    """Split the probe's output file into arrays."""
    flat = np.frombuffer(data, dtype="<f4")
    o_shape = (case.ne3, case.n_batch, case.n_head, case.dv)
    with_lse = op in (OP_LSE, OP_LSE_MERGED_HALVES, OP_LSE_MERGED_SINKS_TWICE)
    per_run = [math.prod(o_shape)] + ([math.prod(o_shape[:3])] if with_lse else [])
    n_kv_rows = case.ne3 * case.n_head_kv * case.n_kv
    sizes = per_run * (1 + n_sink_sets) + [n_kv_rows * case.dk, n_kv_rows * case.dv]
    if flat.size != sum(sizes):
        raise ValueError(f"probe output has {flat.size} floats, expected {sum(sizes)}")
    chunks = np.split(flat.astype(np.float32), np.cumsum(sizes)[:-1])
    runs = [chunks[i * len(per_run) : (i + 1) * len(per_run)] for i in range(1 + n_sink_sets)]
    o = tuple(run[0].reshape(o_shape) for run in runs)
    lse = tuple(run[1].reshape(o_shape[:3]) for run in runs) if with_lse else ()
    kv_shape = (case.ne3, case.n_head_kv, case.n_kv)
    k_seen, v_seen = chunks[-2].reshape(*kv_shape, case.dk), chunks[-1].reshape(*kv_shape, case.dv)
    return FaResult(o[0], lse[0] if lse else None, o[1:], lse[1:], k_seen, v_seen)


def probe_binary(build: LlamaBuild, with_lse: bool) -> Path:
    """The probe compiled against `build` (with the LSE op only when asked)."""
    return compile_native(PROBE_SOURCE, build, ["-DPROBE_LSE"] if with_lse else [])


def run_probe(
    binary: Path,
    case: FaCase,
    inputs: FaInputs,
    op: int,
    sinks: Sequence[F32] = (),
    use_ref: bool = False,
) -> FaResult:
    """Run the probe once (use_ref forces ggml's reference one_chunk path); raise if it fails."""
    with tempfile.TemporaryDirectory(prefix="fa-lse-") as tmp:
        req, out = Path(tmp) / "in.bin", Path(tmp) / "out.bin"
        req.write_bytes(encode_request(case, inputs, op, sinks, use_ref))
        proc = subprocess.run([str(binary), str(req), str(out)], capture_output=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"probe failed ({proc.returncode}) on {case.name}: {proc.stderr!r}")
        return decode_result(case, out.read_bytes(), op, len(sinks))


def max_abs_err(got: npt.NDArray[np.floating], want: F64, rows: npt.NDArray[np.bool_]) -> float:
    """Largest |got - want| over the selected rows (0 if none); NaN propagates as inf."""
    if not rows.any():
        return 0.0
    diff = np.abs(got[rows].astype(np.float64) - want[rows])
    return float(np.nan_to_num(diff, nan=np.inf, posinf=np.inf).max())


# --- measurement ------------------------------------------------------------------------------

F32_UNIT_ROUNDOFF = 2.0**-24
K_O = 1.25
"""The new op's O error may exceed the existing op's by at most this factor (or the floor)."""
ROUNDOFF_ULPS = 16
"""Floors and slacks, in units of f32 unit roundoff times the magnitude of the quantity."""


@dataclass(frozen=True)
class Existing:
    """ggml_flash_attn_ext on one case: O, O with sinks, its normaliser read back, the use_ref O."""

    result: FaResult
    sinks: F32
    lse: F64
    ref_path_o: F32


@dataclass(frozen=True)
class Bounds:
    """What the new op is held to on one case, derived from the existing op on the same inputs.

    o:   max(K_O * err_existing(O), floor_o); floor_o = 16 u max(1, max|O_ref|) (f32 resolution).
    lse: err_existing(LSE) + slack; err_existing(LSE) is the existing kernel's own normaliser
         M + log S (read back through a sink, `recover_lse`) against the float64 LSE, and
         slack = 16 u (1 + max|LSE_ref|) covers the f32 roundings of the read-back and of the new
         op's final M + logf(S). The same M and S give the same LSE, so a correct op meets this;
         an LSE that is off by c > bound - err, or scaled by log2(e), does not.
    """

    o: float
    lse: float


def measure_existing(binary: Path, case: FaCase, inputs: FaInputs) -> tuple[Existing, Reference]:
    """Run ggml_flash_attn_ext (plain, with a sink, and on the use_ref path) and the reference."""
    rough = reference(
        case, inputs, inputs.k, inputs.v
    )  # K/V before f16/q8_0: close enough for sinks
    sinks = sink_logits(case, rough)
    result = run_probe(binary, case, inputs, 0, [sinks])
    ref = reference(case, inputs, result.k_seen, result.v_seen)
    ref_path = run_probe(binary, case, inputs, 0, use_ref=True)
    lse = recover_lse(result.o, result.o_sinks[0], sinks)
    return Existing(result, sinks, lse, ref_path.o), ref


def live_rows(ref: Reference) -> npt.NDArray[np.bool_]:
    """Rows [s,t,h] with at least one unmasked key."""
    return ~ref.masked


def derive_bounds(existing: Existing, ref: Reference) -> Bounds:
    """The Bounds for one case (see Bounds)."""
    live = live_rows(ref)
    max_o = float(np.abs(ref.o[live]).max()) if live.any() else 0.0
    max_lse = float(np.abs(ref.lse[live]).max()) if live.any() else 0.0
    floor_o = ROUNDOFF_ULPS * F32_UNIT_ROUNDOFF * max(1.0, max_o)
    slack = ROUNDOFF_ULPS * F32_UNIT_ROUNDOFF * (1.0 + max_lse)
    err_o = max_abs_err(existing.result.o, ref.o, live)
    err_lse = max_abs_err(existing.lse, ref.lse, live)
    return Bounds(o=max(K_O * err_o, floor_o), lse=err_lse + slack)


NEG_INF_BITS = np.float32(-np.inf).view(np.uint32)


def masked_row_problems(o: F32, lse: F32 | None, ref: Reference) -> list[str]:
    """Fully masked rows must give O == 0 exactly and LSE == -inf bitwise; nothing may be NaN."""
    problems = []
    if np.isnan(o).any():
        problems.append(f"O has {int(np.isnan(o).sum())} NaN values")
    if lse is not None and np.isnan(lse).any():
        problems.append(f"LSE has {int(np.isnan(lse).sum())} NaN values")
    masked = ref.masked
    if masked.any() and not np.all(o[masked] == 0.0):
        problems.append(
            f"fully masked rows: O != 0 in {int((o[masked] != 0.0).any(axis=-1).sum())} rows"
        )
    if lse is not None and masked.any():
        bad = lse[masked].view(np.uint32) != NEG_INF_BITS
        if bad.any():
            problems.append(f"fully masked rows: LSE is not -inf in {int(bad.sum())} rows")
    if lse is not None and np.isneginf(lse[~masked]).any():
        problems.append("a row with a finite reference LSE has LSE = -inf")
    return problems


def new_op_problems(o: F32, lse: F32, ref: Reference, bounds: Bounds) -> list[str]:
    """The comparator for ggml_flash_attn_ext_lse output; empty when it passes."""
    live = live_rows(ref)
    problems = masked_row_problems(o, lse, ref)
    err_o = max_abs_err(o, ref.o, live)
    err_lse = max_abs_err(lse, ref.lse, live)
    if not err_o <= bounds.o:
        problems.append(f"O error {err_o:.3e} > bound {bounds.o:.3e}")
    if not err_lse <= bounds.lse:
        problems.append(f"LSE error {err_lse:.3e} > bound {bounds.lse:.3e}")
    return problems
