#!/usr/bin/env python3
"""KV-cache and recurrent-state memory of a model shape at long contexts, computed the way
llama.cpp sizes them, and whether the total fits one 24 GB card: the table behind docs/dca.md
("Which model for 1M on one 24 GB card"), written as JSON on stdout.

llama.cpp's sizing (src/llama-kv-cache.cpp, llama-memory-recurrent.cpp, llama-hparams.cpp):
- an attention layer keeps K and V for every cell: n_ctx cells (n_ctx rounded up to 256), each
  row of n_head_kv * head_dim elements stored as ggml_row_size(type, n): f16 2 bytes per element,
  q8_0 34 bytes and q4_0 18 bytes per block of 32 elements;
- a recurrent (Gated DeltaNet) layer keeps, per sequence, a conv state of n_embd_r =
  (d_conv - 1) * (d_inner + 2 * n_group * d_state) and a recurrent state of n_embd_s =
  d_state * d_inner elements, both f32, whatever the context length;
- DCA adds no KV: the cache holds what plain attention's holds (keys roped at p mod chunk_len).
tests/evals/dca/test_kv_memory.py checks the attention part against the sizes llama.cpp logs
for tiny models, and that docs/dca.md shows what this script computes.

    python evals/dca/kv_memory.py > results/dca-memory/<date>-<what>/table.json
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass

GIB = 1024**3
GB = 1000**3
CARD_24GB = (
    24 * GIB
)  # RTX 3090 / 4090: 24 GiB of device memory (24,576 MiB; about 24,5xx MiB usable)
BLOCK = {"f16": (1, 2), "q8_0": (32, 34), "q4_0": (32, 18)}  # (elements, bytes) per block
CONTEXTS = (262144, 524288, 1010000, 1048576)
KV_TYPES = ("f16", "q8_0", "q4_0")


@dataclass(frozen=True)
class Shape:
    """The attention and recurrent shape of a model, with its public source."""

    name: str
    n_layer: int
    n_layer_kv: int  # layers with a KV cache (the attention layers)
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    # Gated DeltaNet / SSM layers (0 = none): conv kernel, inner size, state size, groups
    d_conv: int
    d_inner: int
    d_state: int
    n_group: int
    weights_bytes: int  # the GGUF of a common quant (its file size)
    weights_what: str
    source: str


QWEN35_9B = Shape(
    name="Qwen3.5-9B",
    n_layer=32,
    n_layer_kv=8,  # full_attention_interval 4: layers 3, 7, ..., 31
    n_head_kv=4,
    head_dim_k=256,
    head_dim_v=256,
    d_conv=4,  # linear_conv_kernel_dim
    d_inner=32 * 128,  # linear_num_value_heads * linear_value_head_dim
    d_state=128,  # linear_key_head_dim
    n_group=16,  # linear_num_key_heads
    weights_bytes=5_680_000_000,
    weights_what="Q4_K_M GGUF (unsloth/Qwen3.5-9B-GGUF Qwen3.5-9B-Q4_K_M.gguf, 5.68 GB as listed)",
    source=(
        "Qwen/Qwen3.5-9B config.json text_config: num_hidden_layers 32, full_attention_interval 4, "
        "num_key_value_heads 4, head_dim 256, linear_conv_kernel_dim 4, linear_num_key_heads 16, "
        "linear_num_value_heads 32, linear_key_head_dim 128, linear_value_head_dim 128"
    ),
)

QWEN25_7B_1M = Shape(
    name="Qwen2.5-7B-Instruct-1M",
    n_layer=28,
    n_layer_kv=28,
    n_head_kv=4,
    head_dim_k=128,
    head_dim_v=128,
    d_conv=0,
    d_inner=0,
    d_state=0,
    n_group=0,
    weights_bytes=4_683_074_144,
    weights_what="Q4_K_M GGUF (Qwen2.5-7B-Instruct-1M-Q4_K_M.gguf, 4,683,074,144 bytes as listed)",
    source=(
        "Qwen/Qwen2.5-7B-Instruct-1M config.json: num_hidden_layers 28, num_attention_heads 28, "
        "num_key_value_heads 4, hidden_size 3584 (head_dim 128)"
    ),
)

SHAPES = (QWEN35_9B, QWEN25_7B_1M)


def row_bytes(kv_type: str, n: int) -> int:
    """ggml_row_size(type, n): n elements of `kv_type`."""
    elems, nbytes = BLOCK[kv_type]
    if n % elems:
        raise ValueError(f"a {kv_type} row of {n} elements is not a whole number of blocks")
    return n // elems * nbytes


def kv_cells(n_ctx: int) -> int:
    """llama.cpp's cache size for a context: n_ctx rounded up to a multiple of 256."""
    return -(-n_ctx // 256) * 256


def kv_bytes(shape: Shape, n_ctx: int, type_k: str, type_v: str | None = None) -> int:
    """K and V of every attention layer for `n_ctx` tokens (one sequence or a unified cache)."""
    type_v = type_v or type_k
    per_cell = row_bytes(type_k, shape.n_head_kv * shape.head_dim_k)
    per_cell += row_bytes(type_v, shape.n_head_kv * shape.head_dim_v)
    return shape.n_layer_kv * kv_cells(n_ctx) * per_cell


def recurrent_bytes(shape: Shape, n_seq: int = 1) -> int:
    """The conv and recurrent states (f32) of every recurrent layer, per sequence."""
    if shape.d_inner == 0:
        return 0
    n_embd_r = (shape.d_conv - 1) * (shape.d_inner + 2 * shape.n_group * shape.d_state)
    n_embd_s = shape.d_state * shape.d_inner
    return (shape.n_layer - shape.n_layer_kv) * (n_embd_r + n_embd_s) * 4 * n_seq


def table(shape: Shape) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    rec = recurrent_bytes(shape)
    for n_ctx in CONTEXTS:
        for kv_type in KV_TYPES:
            kv = kv_bytes(shape, n_ctx, kv_type)
            total = kv + rec + shape.weights_bytes
            rows.append(
                {
                    "n_ctx": n_ctx,
                    "kv_type": kv_type,
                    "kv_bytes": kv,
                    "kv_gib": round(kv / GIB, 2),
                    "recurrent_bytes": rec,
                    "weights_bytes": shape.weights_bytes,
                    "total_gib": round(total / GIB, 2),
                    "left_on_24gib": round((CARD_24GB - total) / GIB, 2),
                    "fits_24gb": total < CARD_24GB,
                }
            )
    return rows


def main() -> int:
    out = {
        "what": (
            "KV cache + recurrent state + weights, as llama.cpp sizes them "
            "(evals/dca/kv_memory.py)"
        ),
        "card_bytes": CARD_24GB,
        "not_counted": "compute buffers (masks, activations, logits) and the CUDA context",
        "shapes": [{"shape": asdict(shape), "rows": table(shape)} for shape in SHAPES],
    }
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
