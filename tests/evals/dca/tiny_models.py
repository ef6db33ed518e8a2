"""Tiny random-weight GGUF models for the DCA tests (the project's own generator).

Each model is a complete GGUF that llama.cpp loads: the arch's metadata, a tokenizer (below)
and random weights for every tensor the loader expects, for llama, qwen2, qwen3,
qwen3moe, gemma3, gemma4, qwen35 and qwen35moe, each drawn from its own seeded generator, with
the attention sharpness as a parameter (below).

Qwen3.5 (``qwen35``, ``qwen35moe``): the attention layers as the pinned upstream builds them
(src/models/qwen35*.cpp): attn_q projects each head's query and its output gate side by side,
Q/K RMS norms, M-RoPE (``rope.dimension_sections``, partial rotary: ``n_rot`` defaults to half
the head), a sigmoid output gate, ``post_attention_norm`` before the FFN (qwen35moe: softmax
top-k experts plus a sigmoid-gated shared expert). 4 layers, every 2nd attention
(``full_attention_interval`` 2), the others Gated DeltaNet (the ``ssm_*`` tensors). Variant
``qwen35`` / ``qwen35moe``: the Gated DeltaNet layers are silent (``ssm_out`` zero: they add
exactly nothing to the residual stream, their FFN still runs), so the float64 reference, which
does not implement Gated DeltaNet, covers the whole model; a model with no recurrent layer at all
cannot be used, as upstream's hybrid input asserts on its unused state-copy tensor.
``qwen35-hybrid`` / ``qwen35moe-hybrid``: live Gated DeltaNet layers.

The same generator makes the random-weight models of the shape benchmark
(evals/dca/shape_matrix.py): the per-layer shapes of real models (``n_embd``, heads, ``head_dim``,
``n_ff``), fewer layers (``layers``), Gemma-3's local:global layer pattern (``swa_pattern``) and
Q8_0 projection matrices (``weight_type``; drawn by tiling a small random block, since their
values do not change the work a kernel does).

Why sharp attention: with the default 0.02 weight scale, scores are ~0 and attention is almost
uniform, so positions barely matter and a wrong DCA position would still "match". ``qk_scale``
scales the Q/K projections (archs without Q/K norms); ``qk_norm_scale`` is the weight of the
Q/K RMS norms (archs with them: qwen3, qwen3moe, gemma3, gemma4), which fixes the size of Q and
K after normalisation. Both default to values that give score standard deviations of ~6.

Notes:
 - numpy shapes are the REVERSE of ggml ne: ggml {n_embd, n_vocab} -> numpy (n_vocab, n_embd).
 - the tokenizer (``tokenizer``): llama.cpp's "test" tokenizer (src/llama-vocab.cpp:
   tokenizer_model == "test"; text in 5-byte chunks, so the server and Python tests can send
   text); "llama", a SentencePiece vocabulary (``<unk>``, ``<s>``, ``</s>``, the byte-fallback
   tokens of ASCII ``<0x00>``..``<0x7F>``, then ``tok_<id>`` fillers), which every llama.cpp
   loads, also those older than the "test" tokenizer (llama-cpp-python 0.3.35's), with a real
   vocabulary that llama-server needs; or "no_vocab" with ``<arch>.vocab_size``: token ids only,
   and llama-server refuses it. ASCII bytes only: whatever ids a random model generates then
   detokenize to valid UTF-8, which llama-server's output parser requires (a lone 0x80-0xFF byte
   fails a completion with HTTP 500, "does not match the expected Content-only format"); text
   with other characters tokenizes to ``<unk>``. ``tokenizer_for`` picks the one a source tree
   loads; ``TinyModels`` writes a session's models with it. The weights do not depend on the
   tokenizer, and the tests feed token ids, so they feed the same ids whichever it is.
 - every tensor written must be consumed by the loader ("wrong number of tensors").
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import numpy.typing as npt

ARCHS: tuple[str, ...] = (
    "llama",
    "qwen2",
    "qwen3",
    "qwen3moe",
    "gemma3",
    "gemma4",
    "qwen35",
    "qwen35moe",
)
QWEN35_ARCHS: frozenset[str] = frozenset({"qwen35", "qwen35moe"})
HYBRID_VARIANTS: tuple[str, ...] = ("qwen35-hybrid", "qwen35moe-hybrid")
QK_NORM_ARCHS: frozenset[str] = frozenset({"qwen3", "qwen3moe", "gemma3", "gemma4", *QWEN35_ARCHS})
MOE_ARCHS: frozenset[str] = frozenset({"qwen3moe", "qwen35moe"})
QWEN35_SSM = {"conv_kernel": 4, "state_size": 16, "group_count": 2, "time_step_rank": 2}
"""The Gated DeltaNet shape of the tiny hybrid models: head size ``state_size`` for keys and
values, ``group_count`` key heads, ``time_step_rank`` value heads (inner size = their product)."""
N_EXPERT = 4
TOKENIZERS: tuple[str, ...] = ("test", "llama", "no_vocab")
SPM_SPECIALS: tuple[str, ...] = ("<unk>", "<s>", "</s>")  # ids 0, 1, 2: unk, bos, eos
SPM_BYTES = 128  # byte-fallback tokens <0x00>..<0x7F>: ASCII (see the module notes)


@dataclass(frozen=True)
class TinySpec:
    """Shape and randomness of one tiny model. ``variant`` is an arch or ``gemma4-shared``."""

    variant: str
    seed: int = 0
    qk_scale: float = 0.25
    qk_norm_scale: float = 2.5
    vo_scale: float = 0.05
    n_vocab: int = 256
    n_ctx_train: int = 8192
    n_embd: int = 128
    n_ff: int = 192
    n_head: int = 2
    n_head_kv: int = 1
    head_dim: int = 64
    sliding_window: int = 48
    # optional metadata (0 / None = absent): the GGUF DCA keys of patch 0078
    # (<arch>.attention.dca.{chunk_size,local_size,original_max_position_embeddings}) and YaRN rope
    # scaling (factor, rope.scaling.original_context_length); the weights do not depend on them
    dca_chunk_size: int = 0
    dca_local_size: int = 0
    dca_orig: int = 0
    # the converter's JSON copy of dual_chunk_attention_config (<arch>.attention.dca.config; "":
    # absent)
    dca_config: str = ""
    yarn: tuple[float, int] | None = None
    # general.basename / general.name ("" = absent): the release a GGUF names, which the known-model
    # table of DCA defaults matches (with context_length and rope_freq_base)
    basename: str = ""
    name: str = ""
    # other shapes and rope layouts (0 / defaults = the usual tiny model): ``n_rot`` rotary dims
    # (rope.dimension_count; < head_dim is partial rotary; gemma4: its global layers only),
    # ``head_dim_swa`` gemma4's SWA-layer head size (key_length_swa; its global layers use
    # head_dim), ``rope_freqs`` gemma4's global-layer frequency factors ("ones", or
    # "proportional": the first quarter of the pairs rotate, the others get factor 1e30, i.e. do
    # not), ``k_eq_v`` gemma4's global layers without attn_v (V is the K projection),
    # ``rope_freq_base`` and ``n_ctx_train`` < 0 (no context_length key: hostile metadata)
    n_rot: int = 0
    head_dim_swa: int = 0
    rope_freqs: str = "ones"
    k_eq_v: bool = False
    rope_freq_base: float = 10000.0
    layers: int = 0  # 0: the tests' layer count (2; gemma4 5 or 6)
    swa_pattern: int = 2  # gemma3: every swa_pattern-th layer is global, the others sliding-window
    weight_type: str = "f32"  # "f32" or "q8_0" (the 2-D projection matrices)
    tokenizer: str = "test"  # one of TOKENIZERS (see the module notes)
    # qwen35 / qwen35moe: every ``attn_interval``-th layer is attention (full_attention_interval),
    # and the Gated DeltaNet shape (conv_kernel, state_size, group_count, time_step_rank); () is
    # QWEN35_SSM. Real shapes (Qwen3.5-9B: 4 and (4, 128, 16, 32)) are for the throughput matrix.
    attn_interval: int = 2
    ssm_shape: tuple[int, ...] = ()

    @property
    def arch(self) -> str:
        if self.variant.startswith("gemma4"):
            return "gemma4"
        return self.variant.removesuffix("-hybrid")

    @property
    def hybrid(self) -> bool:
        """qwen35 / qwen35moe whose Gated DeltaNet layers are live (not silent)."""
        return self.variant in HYBRID_VARIANTS

    @property
    def rot_dims(self) -> int:
        """rope.dimension_count: ``n_rot``, else the head (qwen35: half of it, partial rotary)."""
        if self.n_rot:
            return self.n_rot
        return self.head_dim // 2 if self.arch in QWEN35_ARCHS else self.head_dim

    def rope_sections(self) -> list[int]:
        """qwen35 M-RoPE sections (t, h, w, e) over the ``rot_dims / 2`` rotated pairs, as Qwen3.5's
        [11, 11, 10] over its 32: every section gets pairs, so a section left at the token's plain
        position would show."""
        pairs = self.rot_dims // 2
        t = -(-pairs // 3)
        h = -(-(pairs - t) // 2)
        return [t, h, pairs - t - h, 0]

    def recurrent_layers(self) -> list[bool]:
        """Per layer: Gated DeltaNet (True) or attention (qwen35: every ``attn_interval``-th layer
        attention, by default every 2nd)."""
        qwen35 = self.arch in QWEN35_ARCHS
        return [qwen35 and (il + 1) % self.attn_interval != 0 for il in range(self.n_layer)]

    @property
    def ssm(self) -> dict[str, int]:
        """The Gated DeltaNet shape: ``ssm_shape`` if given, else QWEN35_SSM."""
        if not self.ssm_shape:
            return dict(QWEN35_SSM)
        return dict(zip(("conv_kernel", "state_size", "group_count", "time_step_rank"),
                        self.ssm_shape, strict=True))

    @property
    def n_shared_kv(self) -> int:
        return 2 if self.variant == "gemma4-shared" else 0

    @property
    def n_layer(self) -> int:
        if self.layers > 0:
            return self.layers
        if self.arch == "gemma4":
            return 6 if self.n_shared_kv else 5
        return 4 if self.arch in QWEN35_ARCHS else 2

    @property
    def embd_scale(self) -> float:
        """Token embedding scale. Gemma multiplies embeddings by sqrt(n_embd): keep its residual
        stream near RMS 1 so that the (post-normed) attention output is a large part of it."""
        return 0.1 if self.arch.startswith("gemma") else 0.5

    @property
    def qk_norm_weight(self) -> float:
        """Q/K norm weight. gemma4 uses attention scale 1.0 instead of 1/sqrt(head_dim): scale its
        norms down by head_dim**0.25 so that its scores are as sharp as the other archs' (and stay
        far from f16's coarse range in CPU flash attention)."""
        if self.arch == "gemma4":
            return self.qk_norm_scale / math.sqrt(math.sqrt(self.head_dim))
        return self.qk_norm_scale

    def swa_layers(self) -> list[bool]:
        """Per layer: sliding-window (True) or global, as written to the GGUF."""
        if self.arch == "gemma4":
            # the last KV-owning layer before the shared ones must be global, the one before it SWA
            if self.n_shared_kv:
                return [True, True, True, False, True, False]
            return [True, True, True, True, False]
        if self.arch == "gemma3":
            # scalar n: layer il is sliding-window iff il % n < n - 1 (2: layer 0 SWA, 1 global)
            return [il % self.swa_pattern < self.swa_pattern - 1 for il in range(self.n_layer)]
        return [False] * self.n_layer

    def layer_head_dim(self, il: int) -> int:
        """The head size of layer ``il`` (gemma4: ``head_dim_swa`` on its SWA layers)."""
        if self.arch == "gemma4" and self.head_dim_swa and self.swa_layers()[il]:
            return self.head_dim_swa
        return self.head_dim

    def file_name(self) -> str:
        meta = ""
        if self.dca_chunk_size or self.dca_local_size or self.dca_orig:
            meta += f"-dca{self.dca_chunk_size}.{self.dca_local_size}.{self.dca_orig}"
        if self.dca_config:
            meta += "-dcacfg" + hashlib.sha256(self.dca_config.encode()).hexdigest()[:10]
        if self.yarn is not None:
            meta += f"-yarn{self.yarn[0]:g}.{self.yarn[1]}"
        if self.basename or self.name:
            ident = hashlib.sha256(f"{self.basename}\0{self.name}".encode()).hexdigest()[:10]
            meta += f"-id{ident}"
        shape = ""
        dims = (self.n_embd, self.n_ff, self.n_head, self.n_head_kv, self.head_dim)
        if (*dims, self.n_vocab, self.n_ctx_train) != (128, 192, 2, 1, 64, 256, 8192):
            shape = (
                f"-E{self.n_embd}-F{self.n_ff}-H{self.n_head}-K{self.n_head_kv}-D{self.head_dim}"
                f"-V{self.n_vocab}-C{self.n_ctx_train}"
            )
        if (self.layers, self.swa_pattern, self.weight_type) != (0, 2, "f32"):
            shape += f"-L{self.layers}-p{self.swa_pattern}-{self.weight_type}"
        if self.tokenizer != "test":
            shape += f"-tk{self.tokenizer}"
        if (self.attn_interval, self.ssm_shape) != (2, ()):
            shape += f"-i{self.attn_interval}-ssm" + ".".join(map(str, self.ssm_shape))
        rope = (self.n_rot, self.head_dim_swa, self.rope_freqs, self.k_eq_v, self.rope_freq_base)
        if rope != (0, 0, "ones", False, 10000.0):
            shape += (
                f"-r{self.n_rot}-ds{self.head_dim_swa}-{self.rope_freqs}-kv{int(self.k_eq_v)}"
                f"-b{self.rope_freq_base:g}"
            )
        return (
            f"tiny-{self.variant}-s{self.seed}-qk{self.qk_scale:g}-n{self.qk_norm_scale:g}"
            f"-vo{self.vo_scale:g}-w{self.sliding_window}-e{self.embd_scale:g}{meta}-f3-g4{shape}.gguf"
        )


Tensors = dict[str, npt.NDArray[Any]]
"""name -> array: float32, or uint8 rows of Q8_0 blocks (see ``_Weights.matrix``)."""

WEIGHT_TYPES: tuple[str, ...] = ("f32", "q8_0")
_Q8_0_POOL_ROWS = 32  # random rows drawn per quantized matrix; the rest of its rows repeat them


class _Weights:
    """Seeded random tensors, given in ggml ``ne`` order."""

    def __init__(self, seed: int, weight_type: str = "f32") -> None:
        if weight_type not in WEIGHT_TYPES:
            raise ValueError(f"weight_type {weight_type!r}: use one of {', '.join(WEIGHT_TYPES)}")
        self._rng = np.random.default_rng(seed)
        self._weight_type = weight_type

    def normal(self, *ne: int, scale: float = 0.02) -> npt.NDArray[np.float32]:
        shape = tuple(reversed(ne))
        return (self._rng.standard_normal(shape) * scale).astype(np.float32)

    def matrix(self, *ne: int, scale: float = 0.02) -> npt.NDArray[Any]:
        """A projection matrix (``ne[0]`` inputs): float32 as ``normal``, or Q8_0 bytes (one row of
        ``ne[0] / 32`` blocks per output) tiled from a few random rows."""
        if self._weight_type == "f32":
            return self.normal(*ne, scale=scale)
        qtype = gguf.GGMLQuantizationType.Q8_0
        shape = tuple(reversed(ne))
        n_rows = math.prod(shape[:-1])
        pool = self.normal(ne[0], min(n_rows, _Q8_0_POOL_ROWS), scale=scale)
        rows = gguf.quants.quantize(pool, qtype)
        return np.resize(rows, (n_rows, rows.shape[-1])).reshape(*shape[:-1], rows.shape[-1])


def _filled(n: int, value: float) -> npt.NDArray[np.float32]:
    return np.full((n,), value, dtype=np.float32)


def _common_kv(wr: gguf.GGUFWriter, spec: TinySpec) -> None:
    if spec.n_ctx_train >= 0:
        wr.add_context_length(spec.n_ctx_train)
    wr.add_embedding_length(spec.n_embd)
    wr.add_block_count(spec.n_layer)
    wr.add_feed_forward_length(spec.n_ff)
    wr.add_head_count(spec.n_head)
    wr.add_head_count_kv(spec.n_head_kv)
    wr.add_key_length(spec.head_dim)
    wr.add_value_length(spec.head_dim)
    wr.add_rope_dimension_count(spec.rot_dims)
    wr.add_layer_norm_rms_eps(1e-6)
    wr.add_rope_freq_base(spec.rope_freq_base)
    if spec.tokenizer == "no_vocab":
        # llama-vocab.cpp: no tokens, n_tokens from <arch>.vocab_size (token_embd's rows)
        wr.add_tokenizer_model("no_vocab")
        wr.add_vocab_size(spec.n_vocab)
        return
    if spec.tokenizer == "llama":
        _spm_kv(wr, spec.n_vocab)
        return
    wr.add_tokenizer_model("test")
    wr.add_token_list([f"tok_{i}" for i in range(spec.n_vocab)])
    wr.add_token_scores([0.0] * spec.n_vocab)


def spm_tokens(n_vocab: int) -> tuple[list[str], list[int]]:
    """The "llama" tokenizer's tokens and token types: SPM_SPECIALS, the ASCII byte-fallback
    tokens from ``<0x00>`` (as many of the 128 as fit), then NORMAL ``tok_<id>`` fillers to
    ``n_vocab``."""
    n_bytes = min(SPM_BYTES, n_vocab - len(SPM_SPECIALS))
    if n_bytes < 1:
        need = len(SPM_SPECIALS) + 1
        raise ValueError(f"n_vocab {n_vocab}: the llama tokenizer needs at least {need} tokens")
    tokens = [*SPM_SPECIALS, *(f"<0x{b:02X}>" for b in range(n_bytes))]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * n_bytes
    tokens += [f"tok_{i}" for i in range(len(tokens), n_vocab)]
    types += [gguf.TokenType.NORMAL] * (n_vocab - len(types))
    return tokens, [int(t) for t in types]


def _spm_kv(wr: gguf.GGUFWriter, n_vocab: int) -> None:
    # llama-vocab.cpp, tokenizer_model == "llama": LLAMA_VOCAB_TYPE_SPM, its byte tokens found by
    # their "<0xXX>" text. add_bos_token false: tokenized text gets no BOS prepended (SPM's default
    # would add one). A generated </s> (id 2) ends a server completion, as EOS does.
    tokens, types = spm_tokens(n_vocab)
    wr.add_tokenizer_model("llama")
    wr.add_token_list(tokens)
    wr.add_token_scores([0.0] * n_vocab)
    wr.add_token_types(types)
    wr.add_unk_token_id(0)
    wr.add_bos_token_id(1)
    wr.add_eos_token_id(2)
    wr.add_add_bos_token(False)
    wr.add_add_eos_token(False)


def _meta_kv(wr: gguf.GGUFWriter, spec: TinySpec) -> None:
    if spec.basename:
        wr.add_basename(spec.basename)
    if spec.name:
        wr.add_name(spec.name)
    for key, value in (
        ("chunk_size", spec.dca_chunk_size),
        ("local_size", spec.dca_local_size),
        ("original_max_position_embeddings", spec.dca_orig),
    ):
        if value:
            wr.add_uint32(f"{spec.arch}.attention.dca.{key}", value)
    if spec.dca_config:
        wr.add_string(f"{spec.arch}.attention.dca.config", spec.dca_config)
    if spec.yarn is not None:
        wr.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        wr.add_rope_scaling_factor(spec.yarn[0])
        wr.add_rope_scaling_orig_ctx_len(spec.yarn[1])


def _qwen35_kv(wr: gguf.GGUFWriter, spec: TinySpec) -> None:
    arch = spec.arch
    wr.add_array(f"{arch}.rope.dimension_sections", spec.rope_sections())
    wr.add_uint32(f"{arch}.full_attention_interval", spec.attn_interval)
    ssm = spec.ssm
    for key, value in ssm.items():
        wr.add_uint32(f"{arch}.ssm.{key}", value)
    wr.add_uint32(f"{arch}.ssm.inner_size", ssm["state_size"] * ssm["time_step_rank"])
    if arch == "qwen35moe":
        wr.add_uint32(f"{arch}.expert_shared_feed_forward_length", spec.n_ff)


def _arch_kv(wr: gguf.GGUFWriter, spec: TinySpec) -> None:
    if spec.arch in MOE_ARCHS:
        wr.add_expert_count(N_EXPERT)
        wr.add_expert_used_count(2)
        wr.add_expert_feed_forward_length(spec.n_ff)
    if spec.arch in QWEN35_ARCHS:
        _qwen35_kv(wr, spec)
    if spec.arch == "gemma3":
        wr.add_sliding_window(spec.sliding_window)
        wr.add_sliding_window_pattern(spec.swa_pattern)  # see TinySpec.swa_layers
        wr.add_rope_freq_base_swa(10000.0)
    if spec.arch == "gemma4":
        wr.add_sliding_window_pattern(spec.swa_layers())
        wr.add_sliding_window(spec.sliding_window)
        wr.add_embedding_length_per_layer_input(0)
        head_dim_swa = spec.head_dim_swa or spec.head_dim
        wr.add_key_length_swa(head_dim_swa)
        wr.add_value_length_swa(head_dim_swa)
        if spec.n_rot or spec.head_dim_swa:  # SWA layers: full rotary of their own head size
            wr.add_rope_dimension_count_swa(head_dim_swa)
        wr.add_rope_freq_base_swa(10000.0)
        wr.add_shared_kv_layers(spec.n_shared_kv)


def _attn_tensors(t: Tensors, rnd: _Weights, spec: TinySpec, il: int) -> None:
    p = f"blk.{il}."
    head_dim = spec.layer_head_dim(il)
    q_dim, kv_dim = spec.n_head * head_dim, spec.n_head_kv * head_dim
    qk_norm = spec.arch in QK_NORM_ARCHS
    proj_scale = 0.02 if qk_norm else spec.qk_scale
    has_kv = not (spec.n_shared_kv and il >= spec.n_layer - spec.n_shared_kv)
    # qwen35: each head's query, then its output gate (2 * head_dim rows per head)
    q_rows = 2 * q_dim if spec.arch in QWEN35_ARCHS else q_dim
    t[p + "attn_q.weight"] = rnd.matrix(spec.n_embd, q_rows, scale=proj_scale)
    if has_kv:
        t[p + "attn_k.weight"] = rnd.matrix(spec.n_embd, kv_dim, scale=proj_scale)
        if not (spec.k_eq_v and not spec.swa_layers()[il]):
            t[p + "attn_v.weight"] = rnd.matrix(spec.n_embd, kv_dim, scale=spec.vo_scale)
    if spec.arch == "qwen2":
        t[p + "attn_q.bias"] = rnd.normal(q_dim)
        t[p + "attn_k.bias"] = rnd.normal(kv_dim)
        t[p + "attn_v.bias"] = rnd.normal(kv_dim)
    t[p + "attn_output.weight"] = rnd.matrix(q_dim, spec.n_embd, scale=spec.vo_scale)
    if qk_norm:
        t[p + "attn_q_norm.weight"] = _filled(head_dim, spec.qk_norm_weight)
        if has_kv:
            t[p + "attn_k_norm.weight"] = _filled(head_dim, spec.qk_norm_weight)


def _recurrent_tensors(t: Tensors, rnd: _Weights, spec: TinySpec, il: int) -> None:
    """A Gated DeltaNet layer (llama_model_qwen35::load_arch_tensors): decaying (ssm_a < 0), mildly
    gated, its output the size of an attention layer's; silent (``ssm_out`` zero) unless the
    variant is a ``-hybrid`` one."""
    p = f"blk.{il}."
    ssm = spec.ssm
    key_dim = ssm["state_size"] * ssm["group_count"]
    value_dim = ssm["state_size"] * ssm["time_step_rank"]
    n_v_heads = ssm["time_step_rank"]
    t[p + "attn_qkv.weight"] = rnd.matrix(spec.n_embd, 2 * key_dim + value_dim, scale=0.1)
    t[p + "attn_gate.weight"] = rnd.matrix(spec.n_embd, value_dim, scale=0.1)
    t[p + "ssm_conv1d.weight"] = rnd.normal(ssm["conv_kernel"], 2 * key_dim + value_dim, scale=0.3)
    t[p + "ssm_dt.bias"] = _filled(n_v_heads, 0.0)
    t[p + "ssm_a"] = _filled(n_v_heads, -1.0)
    t[p + "ssm_beta.weight"] = rnd.matrix(spec.n_embd, n_v_heads, scale=0.1)
    t[p + "ssm_alpha.weight"] = rnd.matrix(spec.n_embd, n_v_heads, scale=0.1)
    t[p + "ssm_norm.weight"] = _filled(ssm["state_size"], 1.0)
    out = rnd.matrix(value_dim, spec.n_embd, scale=spec.vo_scale)
    t[p + "ssm_out.weight"] = out if spec.hybrid else np.zeros_like(out)


def _ffn_tensors(t: Tensors, rnd: _Weights, spec: TinySpec, il: int) -> None:
    p = f"blk.{il}."
    # qwen35: post_attention_norm is the FFN's input norm (no ffn_norm)
    norm = "post_attention_norm" if spec.arch in QWEN35_ARCHS else "ffn_norm"
    t[p + norm + ".weight"] = _filled(spec.n_embd, 1.0)
    if spec.arch in MOE_ARCHS:
        t[p + "ffn_gate_inp.weight"] = rnd.normal(spec.n_embd, N_EXPERT)
        t[p + "ffn_gate_exps.weight"] = rnd.matrix(spec.n_embd, spec.n_ff, N_EXPERT)
        t[p + "ffn_up_exps.weight"] = rnd.matrix(spec.n_embd, spec.n_ff, N_EXPERT)
        t[p + "ffn_down_exps.weight"] = rnd.matrix(spec.n_ff, spec.n_embd, N_EXPERT)
        if spec.arch == "qwen35moe":  # the shared expert and its sigmoid gate (one value a token)
            t[p + "ffn_gate_inp_shexp.weight"] = rnd.normal(spec.n_embd, scale=0.1)
            t[p + "ffn_gate_shexp.weight"] = rnd.matrix(spec.n_embd, spec.n_ff, scale=0.1)
            t[p + "ffn_up_shexp.weight"] = rnd.matrix(spec.n_embd, spec.n_ff, scale=0.1)
            t[p + "ffn_down_shexp.weight"] = rnd.matrix(spec.n_ff, spec.n_embd, scale=0.1)
        return
    t[p + "ffn_gate.weight"] = rnd.matrix(spec.n_embd, spec.n_ff, scale=0.1)
    t[p + "ffn_up.weight"] = rnd.matrix(spec.n_embd, spec.n_ff, scale=0.1)
    t[p + "ffn_down.weight"] = rnd.matrix(spec.n_ff, spec.n_embd, scale=0.1)


def build_tensors(spec: TinySpec) -> Tensors:
    """All tensors of the model (name -> numpy array, numpy shape = reversed ggml ne)."""
    rnd = _Weights(spec.seed, spec.weight_type)
    t: Tensors = {
        "token_embd.weight": rnd.normal(spec.n_embd, spec.n_vocab, scale=spec.embd_scale),
        "output_norm.weight": _filled(spec.n_embd, 1.0),
    }
    recurrent = spec.recurrent_layers()
    for il in range(spec.n_layer):
        t[f"blk.{il}.attn_norm.weight"] = _filled(spec.n_embd, 1.0)
        if recurrent[il]:
            _recurrent_tensors(t, rnd, spec, il)
        else:
            _attn_tensors(t, rnd, spec, il)
        if spec.arch in ("gemma3", "gemma4"):
            t[f"blk.{il}.post_attention_norm.weight"] = _filled(spec.n_embd, 1.0)
            # small: CPU GELU goes through an f16 table whose rounding the float64 reference
            # can only follow up to f32-vs-f64 ties; keep that noise far below the attention signal
            t[f"blk.{il}.post_ffw_norm.weight"] = _filled(spec.n_embd, 0.03)
        _ffn_tensors(t, rnd, spec, il)
    if spec.arch == "gemma4":
        t["rope_freqs.weight"] = rope_freq_factors(spec)
    return t


ROPE_FREQS: tuple[str, ...] = ("ones", "proportional")


def rope_freq_factors(spec: TinySpec) -> npt.NDArray[np.float32]:
    """gemma4's global-layer rope frequency factors (head_dim / 2 of them, see TinySpec)."""
    n = spec.head_dim // 2
    if spec.rope_freqs == "ones":
        return _filled(n, 1.0)
    if spec.rope_freqs == "proportional":
        out = _filled(n, 1e30)
        out[: max(1, n // 4)] = 1.0
        return out
    raise ValueError(f"rope_freqs {spec.rope_freqs!r}: use one of {', '.join(ROPE_FREQS)}")


def tokenizer_for(src: Path) -> str:
    """The tokenizer of TOKENIZERS that the llama.cpp source tree `src` loads: "test" when its
    src/llama-vocab.cpp knows it, else "llama" (SentencePiece, which llama.cpp has loaded since
    GGUF began), else "no_vocab"."""
    vocab = src / "src" / "llama-vocab.cpp"
    try:
        text = vocab.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ValueError(f"{vocab}: cannot read the tree's tokenizers ({exc.strerror})") from exc
    for name in ("test", "llama"):
        if f'tokenizer_model == "{name}"' in text:
            return name
    return "no_vocab"


@dataclass(frozen=True)
class TinyModels:
    """Where a session's tiny models are written, with the tokenizer the tree under test loads."""

    dir: Path
    tokenizer: str = "test"

    def write(self, spec: TinySpec) -> Path:
        """`spec` (its tokenizer replaced by this set's) written under `dir`; its path."""
        return write_tiny_gguf(replace(spec, tokenizer=self.tokenizer), self.dir)


def write_tiny_gguf(
    spec: TinySpec, out_dir: Path, extra_kv: tuple[tuple[str, int | str], ...] = ()
) -> Path:
    """Write the model to ``out_dir`` (reused if already there) and return its path. ``extra_kv``:
    more metadata as a converter would write it (int: u32, str: string), after the spec's."""
    if spec.tokenizer not in TOKENIZERS:
        raise ValueError(f"tokenizer {spec.tokenizer!r}: use one of {', '.join(TOKENIZERS)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    name = spec.file_name()
    if extra_kv:
        digest = hashlib.sha256(repr(extra_kv).encode()).hexdigest()[:10]
        name = name.removesuffix(".gguf") + f"-kv{digest}.gguf"
    path = out_dir / name
    if path.exists():
        return path
    tmp = path.with_suffix(".tmp")
    wr = gguf.GGUFWriter(str(tmp), spec.arch)
    _common_kv(wr, spec)
    _arch_kv(wr, spec)
    _meta_kv(wr, spec)
    for key, value in extra_kv:
        if isinstance(value, str):
            wr.add_string(key, value)
        else:
            wr.add_uint32(key, value)
    for name, arr in build_tensors(spec).items():
        quantized = arr.dtype == np.uint8
        wr.add_tensor(name, arr, raw_dtype=gguf.GGMLQuantizationType.Q8_0 if quantized else None)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    tmp.rename(path)
    return path
