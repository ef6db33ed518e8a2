"""An independent float64 numpy forward pass of the tiny models, with Dual Chunk Attention.

The model is read back from its GGUF file with gguf's GGUFReader (no llama.cpp code involved).
Supported archs: llama (NORM rope), qwen2 (q/k/v bias), qwen3 (q/k RMS norms), qwen3moe (as qwen3
with a softmax-gated top-k MoE FFN, weights renormalized), gemma3 (embedding scale, q/k norms, post
norms, pre-scaled Q, GELU FFN, sliding-window layers), gemma4 (as gemma3 plus attention scale 1.0,
weightless V norm, per-layer SWA array, shared-KV layers, logit softcap 30, per-layer head sizes
(key_length_swa), rope frequency factors on the global layers, V = the K projection where a global
layer has no attn_v), qwen35 / qwen35moe whose Gated DeltaNet layers are silent (ssm_out zero:
they add nothing to the residual, their FFN runs; live Gated DeltaNet is not implemented, and a
model with it is refused): attn_q giving each head's
query and output gate side by side, q/k RMS norms, interleaved M-RoPE (``rope_multi``: sections
t, h, w, e over the rotated pairs; a text token has every component at its position), the
sigmoid output gate, post_attention_norm before the FFN, and qwen35moe's sigmoid-gated shared
expert. Partial rotary (rope.dimension_count < head size): the first n_rot dims are roped, the
others pass through, as ggml's rope.
Where llama.cpp's CPU evaluation rounds in a way that the sharp tiny models amplify, the
reference follows it: rope angles as ggml's float32 rope cache, GELU through ggml's f16 table,
and (``RunConfig.kv_type``) the KV cache's f16 / bf16 / Hadamard-rotated q8_0 and q4_0 round
trip.

DCA (docs/dca.md), for chunk_size cs, local window w, chunk length cl = cs - w:
keys are roped at ``p mod cl``; queries at ``p mod cl`` (intra), ``min(p mod cl + cl, cs)``
(successive) and ``cs`` (inter). Key j is intra for query i when ``i // cl == j // cl``,
successive when the chunks differ by 1, inter when they differ by 2 or more. The three partial
softmaxes merged by LSE equal one softmax over the union of the three score sets, which is what
the correct reference computes. Gemma3 applies DCA to its global (non-SWA) layers only.

``Mutation`` switches in deliberate DCA mistakes, so a test can show each one is detectable.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from gguf import GGUFReader

F64 = npt.NDArray[np.float64]
SUPPORTED_ARCHS: tuple[str, ...] = (
    "llama",
    "qwen2",
    "qwen3",
    "qwen3moe",
    "gemma3",
    "gemma4",
    "qwen35",
    "qwen35moe",
)
GEMMA_ARCHS = frozenset({"gemma3", "gemma4"})
QWEN35_ARCHS = frozenset({"qwen35", "qwen35moe"})
NEG_INF = -np.inf


@dataclass(frozen=True)
class DcaConfig:
    """DCA parameters: ``chunk_size`` (cs, the largest query position) and ``local_window`` (w);
    ``mscale_orig`` > 0 turns on the attention scaling of docs/dca.md "mscale" for that original
    training length (see ``mscale_factors``)."""

    chunk_size: int
    local_window: int
    mscale_orig: int = 0

    @property
    def chunk_len(self) -> int:
        return self.chunk_size - self.local_window


def mscale_factors(n: int, orig: int) -> F64:
    """Per query position i, the factor its logits are multiplied by: vLLM's
    ``m = max(1, 0.1 ln(L / orig) + 1)`` with L = i + 1 (the sequence length at that query),
    applied to both q and k, i.e. m squared; all ones when ``orig`` is 0."""
    if orig <= 0:
        return np.ones(n)
    length = np.arange(1, n + 1, dtype=np.float64)
    m = np.maximum(1.0, 0.1 * np.log(length / orig) + 1.0)
    out: F64 = m * m
    return out


@dataclass(frozen=True)
class Mutation:
    """Deliberate DCA mistakes (all off = the correct DCA)."""

    inter_at_cs_minus_1: bool = False
    keys_unwrapped: bool = False
    succ_unclamped: bool = False
    drop_succ: bool = False
    drop_inter: bool = False
    merge_f16: bool = False
    mscale_once: bool = False  # the mscale factor m applied once instead of squared
    mrope_h_unmoved: bool = False  # M-RoPE: the h section left at the token's plain position


CORRECT = Mutation()
MUTATIONS: dict[str, Mutation] = {
    "inter_at_cs_minus_1": Mutation(inter_at_cs_minus_1=True),
    "keys_not_wrapped": Mutation(keys_unwrapped=True),
    "succ_not_clamped": Mutation(succ_unclamped=True),
    "succ_regime_dropped": Mutation(drop_succ=True),
    "inter_regime_dropped": Mutation(drop_inter=True),
    "merge_in_f16": Mutation(merge_f16=True),
}
MSCALE_MUTATIONS: dict[str, Mutation] = {"mscale_not_squared": Mutation(mscale_once=True)}
# M-RoPE models only: DCA must move every section, not only the temporal one
MROPE_MUTATIONS: dict[str, Mutation] = {"mrope_h_section_unmoved": Mutation(mrope_h_unmoved=True)}


@dataclass(frozen=True)
class HParams:
    arch: str
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    rms_eps: float
    rope_base: float
    swa_layers: frozenset[int]
    sliding_window: int
    softcap: float
    kv_source: tuple[
        int, ...
    ]  # per layer: the layer whose K/V it attends to (itself if it owns KV)
    head_dim_swa: int = 0  # 0: head_dim (gemma4 key_length_swa)
    n_rot: int = 0  # rotary dims of the global layers (0: the whole head)
    n_rot_swa: int = 0  # of the SWA layers (0: the whole head)
    n_expert_used: int = 0  # qwen3moe
    mrope_sections: tuple[int, ...] = ()  # qwen35: rope.dimension_sections (t, h, w, e)
    recurrent_layers: frozenset[int] = frozenset()  # qwen35: silent Gated DeltaNet layers

    def layer_head_dim(self, il: int) -> int:
        return self.head_dim_swa if il in self.swa_layers and self.head_dim_swa else self.head_dim

    def layer_n_rot(self, il: int) -> int:
        n_rot = self.n_rot_swa if il in self.swa_layers else self.n_rot
        return n_rot or self.layer_head_dim(il)

    @property
    def neox(self) -> bool:
        return self.arch != "llama"

    @property
    def gemma(self) -> bool:
        return self.arch in GEMMA_ARCHS

    @property
    def qwen35(self) -> bool:
        return self.arch in QWEN35_ARCHS


@dataclass(frozen=True)
class TinyModel:
    hp: HParams
    tensors: dict[str, F64]

    def t(self, name: str) -> F64:
        return self.tensors[name]

    def opt(self, name: str) -> F64 | None:
        return self.tensors.get(name)


def _field(reader: GGUFReader, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    if field is None:
        if default is None:
            raise KeyError(f"GGUF key {key} missing")
        return default
    return field.contents()


def _swa_layers(reader: GGUFReader, arch: str, n_layer: int) -> frozenset[int]:
    if arch == "gemma4":  # a per-layer array
        flags = list(_field(reader, f"{arch}.attention.sliding_window_pattern"))
        return frozenset(il for il in range(n_layer) if flags[il])
    if arch != "gemma3" or int(_field(reader, f"{arch}.attention.sliding_window", 0)) == 0:
        return frozenset()
    pattern = int(_field(reader, f"{arch}.attention.sliding_window_pattern", 6))
    # llama_hparams::set_swa_pattern(n_pattern, dense_first=false)
    return frozenset(il for il in range(n_layer) if il % pattern < pattern - 1)


def _kv_source(reader: GGUFReader, arch: str, n_layer: int, swa: frozenset[int]) -> tuple[int, ...]:
    """gemma4 shared-KV layers read the KV of the last KV layer of their kind (the reuse lambda
    of llama-model.cpp create_memory)."""
    shared = int(_field(reader, f"{arch}.attention.shared_kv_layers", 0)) if arch == "gemma4" else 0
    first_shared = n_layer - shared
    return tuple(
        il if il < first_shared else first_shared - (2 if il in swa else 1) for il in range(n_layer)
    )


def _attn_scale(arch: str, head_dim: int) -> float:
    # gemma3 pre-scales Q by 1/sqrt(head_dim) (f_attention_scale); gemma4 uses 1.0
    return 1.0 if arch == "gemma4" else 1.0 / float(np.sqrt(head_dim))


def _softcap(reader: GGUFReader, arch: str) -> float:
    default = {"gemma3": 0.0, "gemma4": 30.0}.get(arch, 0.0)  # llama_hparams default is 30
    return float(_field(reader, f"{arch}.final_logit_softcapping", default)) if default else 0.0


def _mrope_sections(reader: GGUFReader, arch: str) -> tuple[int, ...]:
    """qwen35's M-RoPE sections (none for the other archs)."""
    if arch not in QWEN35_ARCHS:
        return ()
    return tuple(int(v) for v in _field(reader, f"{arch}.rope.dimension_sections"))


def _recurrent_layers(reader: GGUFReader, arch: str, n_layer: int) -> frozenset[int]:
    """qwen35's Gated DeltaNet layers (llama_model_qwen35::load_arch_hparams); each must be silent
    (ssm_out zero), as the reference does not implement a live one."""
    if arch not in QWEN35_ARCHS:
        return frozenset()
    if f"{arch}.attention.recurrent_layers" in reader.fields:
        raise ValueError(f"reference reads {arch}.full_attention_interval, not recurrent_layers")
    interval = int(_field(reader, f"{arch}.full_attention_interval", 4))
    layers = frozenset(il for il in range(n_layer) if (il + 1) % interval != 0)
    out_w = {t.name: t for t in reader.tensors}
    for il in layers:
        if np.any(np.array(out_w[f"blk.{il}.ssm_out.weight"].data) != 0):
            raise ValueError(
                f"reference does not implement {arch}'s Gated DeltaNet layers: layer {il} is live "
                "(give a model whose recurrent layers are silent, ssm_out zero)"
            )
    return layers


def load_model(path: Path) -> TinyModel:
    """Read hyperparameters and tensors (as float64) from a tiny GGUF."""
    reader = GGUFReader(str(path))
    arch = str(_field(reader, "general.architecture"))
    if arch not in SUPPORTED_ARCHS:
        raise ValueError(f"reference does not implement arch {arch!r}")
    sections = _mrope_sections(reader, arch)
    n_layer = int(_field(reader, f"{arch}.block_count"))
    recurrent = _recurrent_layers(reader, arch, n_layer)
    n_head = int(_field(reader, f"{arch}.attention.head_count"))
    n_embd = int(_field(reader, f"{arch}.embedding_length"))
    head_dim = int(_field(reader, f"{arch}.attention.key_length", n_embd // n_head))
    swa = _swa_layers(reader, arch, n_layer)
    n_rot = int(_field(reader, f"{arch}.rope.dimension_count", head_dim))
    hp = HParams(
        arch=arch,
        n_layer=n_layer,
        n_head=n_head,
        n_head_kv=int(_field(reader, f"{arch}.attention.head_count_kv", n_head)),
        head_dim=head_dim,
        rms_eps=float(_field(reader, f"{arch}.attention.layer_norm_rms_epsilon")),
        rope_base=float(_field(reader, f"{arch}.rope.freq_base", 10000.0)),
        swa_layers=swa,
        sliding_window=int(_field(reader, f"{arch}.attention.sliding_window", 0)),
        softcap=_softcap(reader, arch),
        kv_source=_kv_source(reader, arch, n_layer, swa),
        head_dim_swa=int(_field(reader, f"{arch}.attention.key_length_swa", 0)),
        n_rot=n_rot,
        n_rot_swa=int(_field(reader, f"{arch}.rope.dimension_count_swa", n_rot)),
        n_expert_used=int(_field(reader, f"{arch}.expert_used_count", 0)),
        mrope_sections=sections,
        recurrent_layers=recurrent,
    )
    tensors = {t.name: np.array(t.data, dtype=np.float64) for t in reader.tensors}
    return TinyModel(hp=hp, tensors=tensors)


# ---------------------------------------------------------------------------------------------
# building blocks


def rms_norm(x: F64, weight: F64, eps: float) -> F64:
    scale: F64 = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return x * scale * weight


def rope_angles_ggml(pos: npt.NDArray[np.int64], base: float, dim: int) -> F64:
    """theta[p, i] = p * base^(-2i/dim), evaluated as ggml's CPU rope cache does it: in float32,
    theta_scale = powf(base, -2/dim) and theta *= theta_scale per pair (ops.cpp
    ggml_rope_cache_init). Exact float64 angles drift from these by ~p * i * 6e-8 rad, which the
    sharp tiny models turn into ~1e-5 of the logit scale at a few hundred tokens."""
    scale = np.float32(np.power(np.float32(base), np.float32(-2.0 / dim), dtype=np.float32))
    theta = np.empty((pos.shape[0], dim // 2), dtype=np.float32)
    cur = pos.astype(np.float32)
    for i in range(dim // 2):
        theta[:, i] = cur
        cur = (cur * scale).astype(np.float32)
    out: F64 = theta.astype(np.float64)
    return out


def rope(
    x: F64,
    pos: npt.NDArray[np.int64],
    base: float,
    neox: bool,
    n_rot: int = 0,
    freq_factors: F64 | None = None,
) -> F64:
    """Rotate x (tokens, heads, dim) by positions ``pos`` (tokens,); NEOX or NORM pairing. Only
    the first ``n_rot`` dims (0: all) rotate, the rest pass through; ``freq_factors`` (one per
    pair) divide the angles in float32, as ggml's rope cache does."""
    dim = n_rot or x.shape[-1]
    theta = rope_angles_ggml(pos, base, dim)
    if freq_factors is not None:
        ff = freq_factors[: dim // 2].astype(np.float32)
        theta = (theta.astype(np.float32) / ff[None, :]).astype(np.float64)
    # cos/sin rounded to float32 as in the rope cache; the rotation itself in float64
    cos = np.cos(theta).astype(np.float32).astype(np.float64)[:, None, :]
    sin = np.sin(theta).astype(np.float32).astype(np.float64)[:, None, :]
    out = x.copy()
    if neox:
        a, b = x[..., : dim // 2], x[..., dim // 2 : dim]
        out[..., :dim] = np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)
        return out
    a, b = x[..., 0:dim:2], x[..., 1:dim:2]
    out[..., 0:dim:2] = a * cos - b * sin
    out[..., 1:dim:2] = a * sin + b * cos
    return out


def imrope_components(n_pairs: int, sections: Sequence[int]) -> npt.NDArray[np.int64]:
    """Per rotated pair, the position component (0 t, 1 h, 2 w, 3 e) interleaved M-RoPE takes its
    angle from (ggml's ggml_mrope_cache_init with is_imrope)."""
    sect_dims = sum(sections)
    comp = np.empty(n_pairs, dtype=np.int64)
    for i in range(n_pairs):
        sector = i % sect_dims
        if sector % 3 == 1 and sector < 3 * sections[1]:
            comp[i] = 1
        elif sector % 3 == 2 and sector < 3 * sections[2]:
            comp[i] = 2
        elif sector % 3 == 0 and sector < 3 * sections[0]:
            comp[i] = 0
        else:
            comp[i] = 3
    return comp


def rope_multi(
    x: F64, pos4: npt.NDArray[np.int64], base: float, n_rot: int, sections: Sequence[int]
) -> F64:
    """Interleaved M-RoPE (NEOX pairing) of x (tokens, heads, dim) at positions ``pos4`` (4,
    tokens): pair i rotates by its component's angle (``imrope_components``), each component's
    angles evaluated as ggml's float32 cache does (``rope_angles_ggml``). With every component
    equal (text) this is the NEOX rope."""
    dim = n_rot or x.shape[-1]
    comp = imrope_components(dim // 2, sections)
    angles = np.stack([rope_angles_ggml(pos4[c], base, dim) for c in range(4)])  # (4, n, pairs)
    theta = angles[comp, :, np.arange(dim // 2)].T  # (n, pairs)
    cos = np.cos(theta).astype(np.float32).astype(np.float64)[:, None, :]
    sin = np.sin(theta).astype(np.float32).astype(np.float64)[:, None, :]
    out = x.copy()
    a, b = x[..., : dim // 2], x[..., dim // 2 : dim]
    out[..., :dim] = np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)
    return out


def gelu_ggml_cpu(x: F64) -> F64:
    """ggml CPU GELU (tanh form) as evaluated through its f16 lookup table (GGML_GELU_FP16)."""
    x16 = x.astype(np.float16).astype(np.float64)
    g = 0.5 * x16 * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * x16 * (1.0 + 0.044715 * x16 * x16)))
    y: F64 = g.astype(np.float16).astype(np.float64)
    return np.where(x <= -10.0, 0.0, np.where(x >= 10.0, x, y))


def silu(x: F64) -> F64:
    out: F64 = x / (1.0 + np.exp(-x))
    return out


def _softmax_rows(scores: F64) -> F64:
    m = np.max(scores, axis=-1, keepdims=True)
    e = np.exp(scores - m)
    out: F64 = e / np.sum(e, axis=-1, keepdims=True)
    return out


# ---------------------------------------------------------------------------------------------
# attention

INTRA, SUCC, INTER, MASKED = 0, 1, 2, 3


def regime_matrix(n_tokens: int, chunk_len: int) -> npt.NDArray[np.int64]:
    """regime[i, j] for query i and key j: INTRA/SUCC/INTER for j <= i, MASKED for j > i."""
    chunk = np.arange(n_tokens) // chunk_len
    diff = chunk[:, None] - chunk[None, :]
    regime = np.where(diff == 0, INTRA, np.where(diff == 1, SUCC, INTER)).astype(np.int64)
    causal = np.arange(n_tokens)[None, :] <= np.arange(n_tokens)[:, None]
    return np.where(causal, regime, MASKED)


@dataclass(frozen=True)
class AttnInput:
    """Un-roped q (tokens, n_head, dim), k and v (tokens, n_head_kv, dim) of one layer."""

    q: F64
    k: F64
    v: F64
    scale: float
    base: float
    neox: bool
    kv_type: str = "f32"
    n_rot: int = 0  # rotary dims (0: all)
    freq_factors: F64 | None = None
    mrope_sections: tuple[int, ...] = ()  # M-RoPE (qwen35): every component at ``pos``

    def rope(
        self, x: F64, pos: npt.NDArray[np.int64], h_pos: npt.NDArray[np.int64] | None = None
    ) -> F64:
        """Rope at ``pos``; M-RoPE: every component at ``pos``, except the h component at
        ``h_pos`` when given (the ``mrope_h_unmoved`` mistake)."""
        if not self.mrope_sections:
            return rope(x, pos, self.base, self.neox, self.n_rot, self.freq_factors)
        pos4 = np.stack([pos, pos if h_pos is None else h_pos, pos, pos])
        return rope_multi(x, pos4, self.base, self.n_rot, self.mrope_sections)

    def k_stored(self, k_roped: F64) -> F64:
        """K as read back from the cache (quantized caches: Hadamard-rotated, then quantized)."""
        return kv_round(_rotate(k_roped, self.kv_type), self.kv_type)

    def q_for_dot(self, q_roped: F64) -> F64:
        """ggml converts Q to the K type's vec_dot type (VEC_DOT_TYPE: f16 -> f16, bf16 -> bf16,
        q8_0 and q4_0 -> q8_0) for K.Q; with a quantized K it rotates Q by the same Hadamard
        matrix first."""
        return kv_round(_rotate(q_roped, self.kv_type), VEC_DOT_TYPE[self.kv_type])

    def v_stored(self) -> F64:
        return kv_round(_rotate(self.v, self.kv_type), self.kv_type)

    def out_from_stored_v(self, out: F64) -> F64:
        """Undo the V rotation (H @ H == I) on the attention output."""
        return _rotate(out, self.kv_type)


KV_TYPES: tuple[str, ...] = ("f32", "f16", "bf16", "q8_0", "q4_0")
QUANTIZED_KV_TYPES = frozenset({"q8_0", "q4_0"})
# the type ggml's CPU converts the other operand of a dot product with a K of this type to
# (ggml-cpu.c type_traits_cpu[...].vec_dot_type)
VEC_DOT_TYPE = {"f32": "f32", "f16": "f16", "bf16": "bf16", "q8_0": "q8_0", "q4_0": "q8_0"}
Q8_0_BLOCK = 32
Q4_0_BLOCK = 32


def quantize_q8_0(x: F64) -> F64:
    """ggml q8_0 round trip along the last axis: blocks of 32, scale amax/127 stored in f16."""
    blocks = x.reshape(*x.shape[:-1], -1, Q8_0_BLOCK)
    d = np.max(np.abs(blocks), axis=-1, keepdims=True) / 127.0
    inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1.0), 0.0)
    q = np.round(blocks * inv)
    d16 = d.astype(np.float16).astype(np.float64)
    out: F64 = (q * d16).reshape(x.shape)
    return out


def quantize_q4_0(x: F64) -> F64:
    """ggml q4_0 round trip along the last axis (quantize_row_q4_0_ref): blocks of 32, d = the
    value of largest magnitude (the first one) / -8, stored in f16; q = min(15, floor(x / d +
    8.5)) computed with 1 / d in float32; back as (q - 8) * d."""
    blocks = x.astype(np.float32).reshape(*x.shape[:-1], -1, Q4_0_BLOCK)
    first_max = np.argmax(np.abs(blocks), axis=-1)[..., None]
    d = np.take_along_axis(blocks, first_max, axis=-1) / np.float32(-8.0)
    inv = np.where(d != 0, np.float32(1.0) / np.where(d != 0, d, np.float32(1.0)), np.float32(0))
    q = np.minimum(15.0, np.floor(blocks * inv + np.float32(8.5)))
    d16 = d.astype(np.float16).astype(np.float64)
    out: F64 = ((q - 8.0) * d16).reshape(x.shape)
    return out


def round_bf16(x: F64) -> F64:
    """float32 -> bf16 with round-to-nearest-even (ggml_compute_fp32_to_bf16), back as float64."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    out: F64 = rounded.astype(np.uint32).view(np.float32).astype(np.float64)
    return out


HADAMARD_N = 64


def hadamard(n: int) -> F64:
    """Orthonormal Sylvester Walsh-Hadamard matrix (llama-kv-cache.cpp ggml_gen_hadamard)."""
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    out: F64 = h / np.sqrt(n)
    return out


def _rotate(x: F64, kv_type: str) -> F64:
    """llama.cpp rotates Q/K/V by a 64x64 Hadamard matrix per 64-block of the head vector when
    the cache type is quantized and the head size a multiple of 64 (llama_kv_cache: attn_rot_k /
    attn_rot_v); other head sizes (96, ...) are cached unrotated."""
    if kv_type not in QUANTIZED_KV_TYPES or x.shape[-1] % HADAMARD_N:
        return x
    blocks = x.reshape(*x.shape[:-1], -1, HADAMARD_N)
    out: F64 = (blocks @ hadamard(HADAMARD_N).T).reshape(x.shape)
    return out


def estimate_query(q: F64, key_type: str) -> F64:
    """The queries as sparse prefill's estimation multiplies them with keys of ``key_type``: ggml
    converts them to that type's dot-product type (f16 keys: f16 queries)."""
    return kv_round(q, VEC_DOT_TYPE[key_type])


def kv_round(x: F64, kv_type: str) -> F64:
    """The value llama.cpp's KV cache of type ``kv_type`` gives back for x."""
    if kv_type == "f32":
        return x
    if kv_type == "f16":
        out: F64 = x.astype(np.float16).astype(np.float64)
        return out
    if kv_type == "bf16":
        return round_bf16(x)
    if kv_type == "q8_0":
        return quantize_q8_0(x)
    if kv_type == "q4_0":
        return quantize_q4_0(x)
    raise ValueError(f"unsupported KV type {kv_type!r}")


def _gqa_scores(q: F64, k: F64, scale: float) -> F64:
    """scores (n_head, tokens_q, tokens_k); query head h uses kv head h // (n_head // n_head_kv)."""
    group = q.shape[1] // k.shape[1]
    k_rep = np.repeat(k, group, axis=1)
    out: F64 = np.einsum("ihd,jhd->hij", q, k_rep) * scale
    return out


def _gqa_out(p: F64, v: F64) -> F64:
    group = p.shape[0] // v.shape[1]
    v_rep = np.repeat(v, group, axis=1)
    out: F64 = np.einsum("hij,jhd->ihd", p, v_rep)
    return out


def plain_attention(a: AttnInput, window: int = 0) -> F64:
    """Causal attention at absolute positions; ``window`` > 0 keeps keys with i - j < window."""
    n = a.q.shape[0]
    pos = np.arange(n, dtype=np.int64)
    q = a.q_for_dot(a.rope(a.q, pos))
    scores = _gqa_scores(q, a.k_stored(a.rope(a.k, pos)), a.scale)
    dist = pos[:, None] - pos[None, :]
    visible = dist >= 0
    if window > 0:
        visible &= dist < window
    scores = np.where(visible[None], scores, NEG_INF)
    return a.out_from_stored_v(_gqa_out(_softmax_rows(scores), a.v_stored()))


def _dca_query_positions(
    n: int, dca: DcaConfig, mut: Mutation
) -> tuple[npt.NDArray[np.int64], ...]:
    pos = np.arange(n, dtype=np.int64)
    cl, cs = dca.chunk_len, dca.chunk_size
    intra = pos % cl
    succ = intra + cl if mut.succ_unclamped else np.minimum(intra + cl, cs)
    inter = np.full(n, cs - 1 if mut.inter_at_cs_minus_1 else cs, dtype=np.int64)
    return intra, succ, inter


def dca_distances(n: int, dca: DcaConfig, mut: Mutation = CORRECT) -> npt.NDArray[np.int64]:
    """RoPE distance (query position - key position) DCA gives each causal pair; -1 above the
    diagonal (test_dca_model.SPEC_EXAMPLE_DISTANCES is a worked example)."""
    pos = np.arange(n, dtype=np.int64)
    k_pos = pos if mut.keys_unwrapped else pos % dca.chunk_len
    regime = regime_matrix(n, dca.chunk_len)
    dist = np.full((n, n), -1, dtype=np.int64)
    for r, q_pos in enumerate(_dca_query_positions(n, dca, mut)):
        dist = np.where(regime == r, q_pos[:, None] - k_pos[None, :], dist)
    return dist


def dca_regime_parts(
    a: AttnInput, dca: DcaConfig, mut: Mutation = CORRECT, key_type: str | None = None
) -> tuple[list[F64], npt.NDArray[np.int64]]:
    """Each regime's scores (n_head, n, n) from its own query rope, and the regime map.
    ``key_type``: the keys rounded to that cache type and the queries to its dot-product type (the
    sparse estimation's view: its scores are ggml_mul_mat of the cached keys and the queries, its
    normalisation flash attention's LSE, both of which round the queries so), instead of the
    attention's (AttnInput.k_stored, q_for_dot)."""
    n = a.q.shape[0]
    pos = np.arange(n, dtype=np.int64)
    k_pos = pos if mut.keys_unwrapped else pos % dca.chunk_len
    h_pos = pos if mut.mrope_h_unmoved else None
    k_roped = a.rope(a.k, k_pos, h_pos)
    k = a.k_stored(k_roped) if key_type is None else kv_round(k_roped, key_type)
    q_view = a.q_for_dot if key_type is None else (lambda x: estimate_query(x, key_type))
    factors = mscale_factors(n, dca.mscale_orig)
    if mut.mscale_once:
        factors = np.sqrt(factors)
    # llama.cpp scales the roped query rows (never the cached keys)
    per_regime = [
        _gqa_scores(q_view(a.rope(a.q, qp, h_pos) * factors[:, None, None]), k, a.scale)
        for qp in _dca_query_positions(n, dca, mut)
    ]
    regime = regime_matrix(n, dca.chunk_len)
    if mut.drop_succ:
        regime = np.where(regime == SUCC, MASKED, regime)
    if mut.drop_inter:
        regime = np.where(regime == INTER, MASKED, regime)
    return per_regime, regime


def dca_regime_scores(
    a: AttnInput, dca: DcaConfig, mut: Mutation
) -> tuple[F64, npt.NDArray[np.int64]]:
    """Per-pair DCA scores (n_head, n, n), each from its regime's query rope; and the regime map."""
    per_regime, regime = dca_regime_parts(a, dca, mut)
    scores = np.full_like(per_regime[0], NEG_INF)
    for r, s in enumerate(per_regime):
        scores = np.where((regime == r)[None], s, scores)
    return scores, regime


def merge_partials(
    scores: F64, regime: npt.NDArray[np.int64], v: F64, dtype: type[np.floating[Any]]
) -> F64:
    """Each regime's softmax output and LSE computed exactly, then merged by LSE in ``dtype``
    (float64: the exact merge; float16: the "merge done in f16" mistake)."""
    parts: list[tuple[F64, F64]] = []
    for r in (INTRA, SUCC, INTER):
        s = np.where((regime == r)[None], scores, NEG_INF)
        m = np.max(s, axis=-1, keepdims=True)
        m_safe = np.where(np.isfinite(m), m, 0.0)
        e = np.exp(s - m_safe)
        tot = np.sum(e, axis=-1, keepdims=True)
        lse = np.where(tot > 0, m_safe + np.log(np.where(tot > 0, tot, 1.0)), NEG_INF)
        o = _gqa_out(e / np.where(tot > 0, tot, 1.0), v)  # (i, h, d); 0 for an empty regime
        parts.append((o, lse[..., 0].T))  # lse (i, h)
    lses = np.stack([p[1] for p in parts]).astype(dtype)
    outs: npt.NDArray[Any] = np.stack([p[0] for p in parts]).astype(dtype)
    top = np.max(lses, axis=0)
    w = np.exp((lses - top).astype(dtype)).astype(dtype)
    w = (w / np.sum(w, axis=0, dtype=dtype)).astype(dtype)
    merged: npt.NDArray[Any] = np.sum((w[..., None] * outs).astype(dtype), axis=0, dtype=dtype)
    out: F64 = np.asarray(merged, dtype=np.float64)
    return out


def dca_attention(a: AttnInput, dca: DcaConfig, mut: Mutation = CORRECT) -> F64:
    """DCA attention: one softmax over the union of the regime scores (== the exact LSE merge)."""
    scores, regime = dca_regime_scores(a, dca, mut)
    if mut.merge_f16:
        return a.out_from_stored_v(merge_partials(scores, regime, a.v_stored(), np.float16))
    return a.out_from_stored_v(_gqa_out(_softmax_rows(scores), a.v_stored()))


# ---------------------------------------------------------------------------------------------
# sparse prefill (MInference vertical-slash, as llama-sparse.cpp selects)

SINK_COLUMNS = 30  # the first key columns, always kept
LOCAL_DIAGONALS = 100  # the diagonals nearest the query, always kept


# a selection boundary closer than this (relative) can flip between llama.cpp and this float64
# reference: such an input cannot check "the same indices from the same scores". Not only
# llama.cpp's float32 scores: from the second layer on, the estimation's inputs carry the first
# layer's f16 flash-attention error (about 1e-3 relative on the tiny models), and a small diagonal
# sum added over a group's heads moved by 1.9e-3 there (one prompt of 20 flipped at 1e-3). 2e-3
# still leaves an unambiguous prompt among the first few seeds for every model the tests use.
MIN_SELECTION_GAP = 2e-3


@dataclass(frozen=True)
class SparseConfig:
    """Sparse prefill: per prefill ubatch of ``ubatch`` tokens (the last one may be shorter) with at
    least ``last_q`` tokens, each KV group (the query heads sharing one KV head; each query head
    with ``per_head``) keeps the ``vertical`` columns and ``slash`` diagonals its heads' last
    ``last_q`` queries score highest in sum. The tests give a threshold below every KV length."""

    vertical: int
    slash: int
    last_q: int
    ubatch: int
    key_type: str = (
        "f16"  # the cache type of the keys the estimation reads (llama.cpp reads the cache)
    )
    # select per query head (each head its own scores, as if it had its own KV head: llama.cpp's
    # --sparse-per-head on) instead of per KV group
    per_head: bool = False
    # the relative gap below which a selection boundary raises AmbiguousSelection (0: never, for
    # a selection that is only compared from afar, such as the other granularity's)
    min_gap: float = MIN_SELECTION_GAP
    # instead of raising: resolve boundaries within TieChoices.gap of a tie as it says (either side
    # is admissible; forward_matching finds the side a backend took)
    ties: TieChoices | None = None

    def groups(self, n_head: int, n_head_kv: int) -> int:
        """The number of selections per ubatch and part: one per KV group (per head if per_head)."""
        return n_head if self.per_head else n_head_kv


class AmbiguousSelection(ValueError):
    """The n-th and (n+1)-th candidate scores are within MIN_SELECTION_GAP of each other."""


def sparse_top(score: F64, n: int, min_gap: float = MIN_SELECTION_GAP) -> npt.NDArray[np.bool_]:
    """The ``n`` largest scores among the candidates (score >= 0), ties to the lower index.
    Raises AmbiguousSelection when the last kept and the first dropped finite positive scores
    are within ``min_gap`` (relative) of each other (exact ties, of forced or unseen candidates,
    break by index alike)."""
    idx = np.flatnonzero(score >= 0)
    order = idx[np.lexsort((idx, -score[idx]))]
    if n < order.size:
        last, first_out = score[order[n - 1]], score[order[n]]
        if np.isfinite(last) and first_out > 0 and last - first_out < min_gap * last:
            raise AmbiguousSelection(f"kept {last:.6g} vs dropped {first_out:.6g}")
    keep = np.zeros(score.shape[0], dtype=bool)
    keep[order[:n]] = True
    return keep


# one selection of a forward: (attention layer, ubatch start, part (DCA: the regime), KV group,
# "v" for the columns or "s" for the diagonals)
SiteKey = tuple[int, int, int, int, str]


def near_tie(
    score: F64, n: int, gap: float
) -> tuple[npt.NDArray[np.bool_], tuple[int, ...], int, int]:
    """Which of sparse_top's choices a rounding within ``gap`` can change. Each finite positive
    score may be off by gap/2 of itself, so two scores closer than ``gap`` of the larger may swap
    (the bound sparse_top's ``min_gap`` tests); exact ties of unmoved scores (zeros: candidates no
    estimation query sees) go to the lower index on every backend. A candidate is surely kept when
    fewer than ``n`` others can outrank it, surely dropped when ``n`` others surely do. Returns
    (surely kept, the near-tied rest in the reference's order: score descending, index ascending,
    how many of those are kept, the first surely dropped candidate or -1)."""
    idx = np.flatnonzero(score >= 0)
    order = idx[np.lexsort((idx, -score[idx]))]
    s = score[order]
    e = np.where(np.isfinite(s), 0.5 * gap * np.where(np.isfinite(s), s, 0.0), 0.0)
    lo, hi = s - e, s + e
    earlier = np.tri(s.size, k=-1, dtype=bool)  # [i, j]: j comes before i in the order
    same = (s[None, :] == s[:, None]) & earlier
    may = (hi[None, :] > lo[:, None]) | same
    fixed = (e[None, :] == 0) & (e[:, None] == 0)
    must = (lo[None, :] > hi[:, None]) | (same & fixed)
    np.fill_diagonal(may, False)
    np.fill_diagonal(must, False)
    sure = may.sum(axis=1) < n
    tied = ~sure & (must.sum(axis=1) < n)
    keep = np.zeros(score.shape[0], dtype=bool)
    keep[order[sure]] = True
    n_free = min(int(tied.sum()), max(0, n - int(sure.sum())))
    out = order[~sure & ~tied]
    return keep, tuple(int(i) for i in order[tied]), n_free, int(out[0]) if out.size else -1


@dataclass(frozen=True)
class NearTie:
    """A selection whose boundary lies within the gap of a tie: ``n`` of the ``tied`` candidates
    are kept (the reference keeps the first n), the rest of the selection is the same under any
    rounding within the gap. ``outside``: the best-scored candidate surely dropped (-1: none), a
    choice no rounding within the gap makes."""

    site: SiteKey
    tied: tuple[int, ...]
    n: int
    outside: int

    def choices(self) -> list[tuple[int, ...]]:
        """Every admissible choice, the reference's first."""
        return list(itertools.combinations(self.tied, self.n))


class TieChoices:
    """How sparse_keep resolves selections within ``gap`` (relative, near_tie) of a tie, for one
    forward: the reference's own choice, unless ``picks`` names the candidates kept among a
    site's near-tied ones; every near tie met is recorded in ``ties``. A pick is not checked
    against the near-tied set, so a test can also make a deliberately wrong selection."""

    def __init__(self, gap: float, picks: Mapping[SiteKey, tuple[int, ...]] | None = None) -> None:
        self.gap = gap
        self.picks = dict(picks or {})
        self.ties: list[NearTie] = []

    def top(self, score: F64, n: int, site: SiteKey) -> npt.NDArray[np.bool_]:
        keep, tied, n_free, outside = near_tie(score, n, self.gap)
        if 0 < n_free < len(tied):
            self.ties.append(NearTie(site, tied, n_free, outside))
        chosen = self.picks.get(site, tied[:n_free])
        if len(chosen) != n_free:
            raise ValueError(f"site {site}: {len(chosen)} picks for {n_free} places")
        keep[list(chosen)] = True
        return keep


def sparse_keep(
    scores: F64,
    visible: npt.NDArray[np.bool_],
    start: int,
    end: int,
    cfg: SparseConfig,
    n_head_kv: int,
    site: tuple[int, int] = (0, 0),
) -> npt.NDArray[np.bool_]:
    """keep (n_head, end - start, n) for the queries start..end-1 of one ubatch: within
    ``visible``, the selected columns and diagonals of each KV group (the G = n_head / n_head_kv
    query heads h with h // G == hk share KV head hk, and one selection), estimated from the
    softmax of the ``scores`` of the ubatch's last ``last_q`` queries over their visible keys,
    each head's softmax on its own, added over the group's heads. ``site``: (layer, part) of the
    caller, naming its selections for ``cfg.ties``."""
    n_head, n, _ = scores.shape
    if n_head_kv <= 0 or n_head % n_head_kv:
        raise ValueError(f"{n_head} query heads do not split into {n_head_kv} KV groups")
    group = n_head // n_head_kv
    cols = np.arange(n)
    keep = np.zeros((n_head, end - start, n), dtype=bool)
    for hk in range(n_head_kv):
        # -1: not a candidate (no query of the ubatch sees a key of it); 0: a candidate the
        # estimation queries do not see
        vsum = np.full(n, -1.0)
        dsum = np.full(n, -1.0)
        for i in range(start, end):
            vis = cols[visible[i]]
            vsum[vis] = 0.0
            dsum[i - vis] = 0.0
        for h in range(hk * group, (hk + 1) * group):
            for i in range(end - min(cfg.last_q, end - start), end):
                vis = cols[visible[i]]
                if vis.size == 0:
                    continue
                s = scores[h, i, vis]
                e = np.exp(s - np.max(s))
                p = e / np.sum(e)
                vsum[vis] += p
                dsum[i - vis] += p
        vsum[:SINK_COLUMNS] = np.where(vsum[:SINK_COLUMNS] >= 0, np.inf, vsum[:SINK_COLUMNS])
        dsum[:LOCAL_DIAGONALS] = np.where(
            dsum[:LOCAL_DIAGONALS] >= 0, np.inf, dsum[:LOCAL_DIAGONALS]
        )
        if cfg.ties is None:
            vk = sparse_top(vsum, cfg.vertical, cfg.min_gap)
            dk = sparse_top(dsum, cfg.slash, cfg.min_gap)
        else:  # site: (layer, part) of the caller
            vk = cfg.ties.top(vsum, cfg.vertical, (site[0], start, site[1], hk, "v"))
            dk = cfg.ties.top(dsum, cfg.slash, (site[0], start, site[1], hk, "s"))
        for i in range(start, end):
            d = i - cols
            on_diag = np.where(d >= 0, dk[np.clip(d, 0, n - 1)], False)
            keep[hk * group : (hk + 1) * group, i - start] = visible[i] & (vk | on_diag)
    return keep


def sparse_allowed(
    scores: Sequence[F64],
    visible: Sequence[npt.NDArray[np.bool_]],
    cfg: SparseConfig,
    n_head_kv: int,
    layer: int = 0,
) -> npt.NDArray[np.bool_]:
    """allowed (n_head, n, n): per ubatch and per part (plain attention: one; DCA: the regimes,
    each with its own estimation scores and visible pairs) the kept pairs of each KV group
    (sparse_keep); a ubatch shorter than last_q is dense."""
    n_head, n, _ = scores[0].shape
    allowed = np.zeros((n_head, n, n), dtype=bool)
    for start in range(0, n, cfg.ubatch):
        end = min(start + cfg.ubatch, n)
        for part, (s, vis) in enumerate(zip(scores, visible, strict=True)):
            if end - start < cfg.last_q:
                allowed[:, start:end] |= vis[None, start:end]
            else:
                site = (layer, part)
                allowed[:, start:end] |= sparse_keep(s, vis, start, end, cfg, n_head_kv, site)
    return allowed


def sparse_plain_attention(a: AttnInput, cfg: SparseConfig, layer: int = 0) -> F64:
    """Causal attention restricted to the vertical-slash selection of each ubatch."""
    n = a.q.shape[0]
    pos = np.arange(n, dtype=np.int64)
    q, k = a.rope(a.q, pos), a.rope(a.k, pos)
    scores = _gqa_scores(a.q_for_dot(q), a.k_stored(k), a.scale)
    estimate = _gqa_scores(estimate_query(q, cfg.key_type), kv_round(k, cfg.key_type), a.scale)
    groups = cfg.groups(a.q.shape[1], a.k.shape[1])
    allowed = sparse_allowed([estimate], [pos[:, None] >= pos[None, :]], cfg, groups, layer)
    scores = np.where(allowed, scores, NEG_INF)
    return a.out_from_stored_v(_gqa_out(_softmax_rows(scores), a.v_stored()))


def sparse_dca_attention(a: AttnInput, dca: DcaConfig, cfg: SparseConfig, layer: int = 0) -> F64:
    """DCA attention where each regime keeps its own vertical-slash selection (estimated with that
    regime's query rope over that regime's keys); one softmax over the union (== the LSE merge)."""
    per_regime, regime = dca_regime_parts(a, dca)
    estimate, _ = dca_regime_parts(a, dca, key_type=cfg.key_type)
    groups = cfg.groups(a.q.shape[1], a.k.shape[1])
    visible = [regime == r for r in (INTRA, SUCC, INTER)]
    allowed = sparse_allowed(estimate, visible, cfg, groups, layer)
    scores = np.full_like(per_regime[0], NEG_INF)
    for r, s in enumerate(per_regime):
        scores = np.where((regime == r)[None] & allowed, s, scores)
    return a.out_from_stored_v(_gqa_out(_softmax_rows(scores), a.v_stored()))


# ---------------------------------------------------------------------------------------------
# model forward


@dataclass(frozen=True)
class RunConfig:
    """``dca=None``: plain attention. ``mutation`` applies only when ``dca`` is set.
    ``kv_type`` rounds K, V (and Q for the K.Q product) as llama.cpp's KV cache of that type does;
    the float64 arithmetic around it is unchanged."""

    dca: DcaConfig | None = None
    mutation: Mutation = CORRECT
    kv_type: str = "f32"
    sparse: SparseConfig | None = None


def _heads(x: F64, dim: int) -> F64:
    return x.reshape(x.shape[0], -1, dim)


def _proj(m: TinyModel, il: int, name: str, x: F64) -> F64:
    p = f"blk.{il}.{name}"
    y = x @ m.t(p + ".weight").T
    bias = m.opt(p + ".bias")
    return _heads(y if bias is None else y + bias, m.hp.layer_head_dim(il))


def _q(m: TinyModel, il: int, x: F64) -> tuple[F64, F64 | None]:
    """The normed query (tokens, heads, dim) and qwen35's output gate (tokens, heads * dim)."""
    q = _proj(m, il, "attn_q", x)
    gate = None
    if m.hp.qwen35:  # per head: the query, then its gate
        q = q.reshape(q.shape[0], m.hp.n_head, -1)
        q, gate = q[..., : m.hp.head_dim], q[..., m.hp.head_dim :].reshape(q.shape[0], -1)
    norm = m.opt(f"blk.{il}.attn_q_norm.weight")
    return (q if norm is None else rms_norm(q, norm, m.hp.rms_eps)), gate


def _kv(m: TinyModel, il: int, x: F64) -> tuple[F64, F64]:
    k = _proj(m, il, "attn_k", x)
    # gemma4: a layer without attn_v uses the K projection as V (before K's norm and rope)
    v = k if m.opt(f"blk.{il}.attn_v.weight") is None else _proj(m, il, "attn_v", x)
    norm = m.opt(f"blk.{il}.attn_k_norm.weight")
    if norm is not None:
        k = rms_norm(k, norm, m.hp.rms_eps)
    if m.hp.arch == "gemma4":  # V is RMS-normed without a weight
        v = rms_norm(v, np.ones(1), m.hp.rms_eps)
    return k, v


KvStore = dict[int, tuple[F64, F64]]


def _attention(m: TinyModel, il: int, x: F64, run: RunConfig, kv_store: KvStore) -> F64:
    src = m.hp.kv_source[il]
    if src == il:
        kv_store[il] = _kv(m, il, x)
    k, v = kv_store[src]
    # gemma4: the global layers' rope frequency factors (proportional rope)
    ff = m.opt("rope_freqs.weight") if m.hp.arch == "gemma4" and il not in m.hp.swa_layers else None
    q, gate = _q(m, il, x)
    a = AttnInput(
        q=q,
        k=k,
        v=v,
        scale=_attn_scale(m.hp.arch, m.hp.layer_head_dim(il)),
        base=m.hp.rope_base,
        neox=m.hp.neox,
        kv_type=run.kv_type,
        n_rot=m.hp.layer_n_rot(il),
        freq_factors=ff,
        mrope_sections=m.hp.mrope_sections,
    )
    if il in m.hp.swa_layers:
        out = plain_attention(a, window=m.hp.sliding_window)
    elif run.dca is None:
        sparse = run.sparse
        out = plain_attention(a) if sparse is None else sparse_plain_attention(a, sparse, il)
    elif run.sparse is not None:
        out = sparse_dca_attention(a, run.dca, run.sparse, il)
    else:
        out = dca_attention(a, run.dca, run.mutation)
    flat = out.reshape(out.shape[0], -1)
    if gate is not None:  # qwen35: the sigmoid output gate, before the output projection
        flat = flat / (1.0 + np.exp(-gate))
    res: F64 = flat @ m.t(f"blk.{il}.attn_output.weight").T
    return res


def _moe_ffn(m: TinyModel, il: int, x: F64) -> F64:
    """qwen3moe: softmax gate, the top n_expert_used experts, their weights renormalized to sum 1,
    each a SiLU-gated FFN (llm_graph_context::build_moe_ffn with norm_w)."""
    p = f"blk.{il}."
    probs = _softmax_rows(x @ m.t(p + "ffn_gate_inp.weight").T)  # (tokens, n_expert)
    top = np.argsort(-probs, axis=-1, kind="stable")[:, : m.hp.n_expert_used]
    gate_w, up_w = m.t(p + "ffn_gate_exps.weight"), m.t(p + "ffn_up_exps.weight")
    down_w = m.t(p + "ffn_down_exps.weight")
    out: F64 = np.zeros_like(x)
    for i in range(x.shape[0]):
        w = probs[i, top[i]]
        w = w / np.sum(w)
        for e, we in zip(top[i], w, strict=True):
            hidden = silu(gate_w[e] @ x[i]) * (up_w[e] @ x[i])
            out[i] += we * (down_w[e] @ hidden)
    if m.opt(p + "ffn_up_shexp.weight") is not None:
        # qwen35moe: a shared expert, scaled by the sigmoid of its own one-value gate
        up = x @ m.t(p + "ffn_up_shexp.weight").T
        hidden = silu(x @ m.t(p + "ffn_gate_shexp.weight").T) * up
        shared = hidden @ m.t(p + "ffn_down_shexp.weight").T
        g = 1.0 / (1.0 + np.exp(-(x @ m.t(p + "ffn_gate_inp_shexp.weight"))))
        out += shared * g[:, None]
    return out


def _ffn(m: TinyModel, il: int, x: F64) -> F64:
    p = f"blk.{il}."
    if m.opt(p + "ffn_gate_inp.weight") is not None:
        return _moe_ffn(m, il, x)
    gate = x @ m.t(p + "ffn_gate.weight").T
    up = x @ m.t(p + "ffn_up.weight").T
    act = gelu_ggml_cpu(gate) if m.hp.gemma else silu(gate)
    out: F64 = (act * up) @ m.t(p + "ffn_down.weight").T
    return out


def _layer(m: TinyModel, il: int, h: F64, run: RunConfig, kv_store: KvStore) -> F64:
    p, eps = f"blk.{il}.", m.hp.rms_eps
    if il in m.hp.recurrent_layers:  # silent Gated DeltaNet: adds exactly zero
        attn: F64 = np.zeros_like(h)
    else:
        attn = _attention(m, il, rms_norm(h, m.t(p + "attn_norm.weight"), eps), run, kv_store)
    if m.hp.gemma:
        h = h + rms_norm(attn, m.t(p + "post_attention_norm.weight"), eps)
        ffn = _ffn(m, il, rms_norm(h, m.t(p + "ffn_norm.weight"), eps))
        out: F64 = h + rms_norm(ffn, m.t(p + "post_ffw_norm.weight"), eps)
        return out
    h = h + attn
    # qwen35: post_attention_norm is the FFN's input norm
    ffn_norm = "post_attention_norm" if m.hp.qwen35 else "ffn_norm"
    out = h + _ffn(m, il, rms_norm(h, m.t(p + ffn_norm + ".weight"), eps))
    return out


def forward(m: TinyModel, tokens: Sequence[int], run: RunConfig = RunConfig()) -> F64:
    """Logits (n_tokens, n_vocab) for one sequence starting at position 0."""
    embd = m.t("token_embd.weight")
    h: F64 = embd[np.asarray(tokens, dtype=np.int64)]
    if m.hp.gemma:
        h = h * np.sqrt(embd.shape[1])
    kv_store: KvStore = {}
    for il in range(m.hp.n_layer):
        h = _layer(m, il, h, run, kv_store)
    out_w = m.opt("output.weight")
    logits: F64 = (
        rms_norm(h, m.t("output_norm.weight"), m.hp.rms_eps) @ (embd if out_w is None else out_w).T
    )
    if m.hp.softcap:
        logits = np.tanh(logits / m.hp.softcap) * m.hp.softcap
    return logits


MAX_TIE_CHOICES = 64  # forwards tried per ubatch before a prompt counts as too ambiguous


def forward_matching(
    m: TinyModel,
    tokens: Sequence[int],
    run: RunConfig,
    got: npt.NDArray[Any],
    gap: float,
) -> tuple[F64, dict[SiteKey, tuple[int, ...]]]:
    """The sparse reference's logits under the choice at its near ties (selections within ``gap``
    of a tie, near_tie) that matches ``got`` (a backend's logits of the same tokens), and that
    choice per site. Only the near-tied candidates of a selection may change sides: a backend
    whose selection differs elsewhere matches none of the choices, and comparing ``got`` with the
    result fails. The choice is found ubatch by ubatch (a ubatch's logits depend on its own and
    the earlier ubatches' selections only; the earlier ones fixed first) and within a ubatch site
    by site in layer order (a later layer's near ties can depend on an earlier layer's choice):
    the choice whose logits of the ubatch lie nearest ``got``'s."""
    if run.sparse is None:
        raise ValueError("forward_matching needs a sparse run")
    sparse = run.sparse
    got64 = np.asarray(got, dtype=np.float64)

    def trial(picks: Mapping[SiteKey, tuple[int, ...]], n: int) -> tuple[F64, list[NearTie]]:
        ties = TieChoices(gap, picks)
        out = forward(m, tokens[:n], replace(run, sparse=replace(sparse, ties=ties)))
        return out, ties.ties

    want, ties = trial({}, len(tokens))
    scale = float(np.max(np.abs(want)))
    picks: dict[SiteKey, tuple[int, ...]] = {}
    for start in range(0, len(tokens), sparse.ubatch):
        if not any(t.site[1] == start for t in ties):
            continue
        end = min(start + sparse.ubatch, len(tokens))
        best: tuple[float, dict[SiteKey, tuple[int, ...]]] | None = None
        pending = [dict(picks)]
        tried = 0
        while pending:
            fixed = pending.pop()
            out, found = trial(fixed, end)
            tried += 1
            if tried > MAX_TIE_CHOICES:
                raise AmbiguousSelection(f"ubatch at {start}: more than {MAX_TIE_CHOICES} choices")
            open_ = [t for t in found if t.site[1] == start and t.site not in fixed]
            if open_:
                first = min(open_, key=lambda t: t.site)
                pending += [{**fixed, first.site: c} for c in reversed(first.choices())]
                continue
            err = float(np.max(np.abs(out[start:end] - got64[start:end]))) / scale
            if best is None or err < best[0]:
                best = (err, fixed)
        assert best is not None
        picks = best[1]
        want, ties = trial(picks, len(tokens))
    return want, picks


def rel_err(got: npt.NDArray[Any], want: npt.NDArray[Any]) -> float:
    """max |got - want| relative to the logit scale max |want|."""
    want64 = np.asarray(want, dtype=np.float64)
    diff = np.abs(np.asarray(got, dtype=np.float64) - want64)
    return float(np.max(diff) / np.max(np.abs(want64)))
