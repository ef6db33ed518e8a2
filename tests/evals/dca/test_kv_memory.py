"""evals/dca/kv_memory.py, the memory table of docs/dca.md ("Which model for 1M on one 24 GB
card"): its KV formula against the sizes llama.cpp logs for tiny models (f16, q8_0, q4_0 K/V;
two head layouts; context sizes off the 256 grid), and the table kept in results/ and shown in
docs/dca.md against what the script computes now."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from evals.dca import kv_memory as km

from .model_runs import run_tool_proc, single_plan
from .tiny_models import TinyModels, TinySpec, write_tiny_gguf

ROOT = Path(__file__).resolve().parents[3]
TABLE_JSON = ROOT / "results" / "dca-memory" / "2026-12-05-qwen35-9b" / "table.json"
DOC = ROOT / "docs" / "dca.md"

KV_LINE = re.compile(
    r"llama_kv_cache: size = +([0-9.]+) MiB \( *(\d+) cells, +(\d+) layers.*?"
    r"K \((\w+)\): +([0-9.]+) MiB, V \((\w+)\): +([0-9.]+) MiB"
)


def tiny_shape(spec: TinySpec) -> km.Shape:
    """The tiny model as a kv_memory shape (attention only)."""
    return replace(
        km.QWEN25_7B_1M,
        name=spec.file_name(),
        n_layer=spec.n_layer,
        n_layer_kv=spec.n_layer,
        n_head_kv=spec.n_head_kv,
        head_dim_k=spec.head_dim,
        head_dim_v=spec.head_dim,
    )


@pytest.mark.parametrize("kv_type", km.KV_TYPES)
@pytest.mark.parametrize("n_ctx", [256, 1000, 4096])
@pytest.mark.parametrize("heads", [(2, 1, 64), (4, 2, 128)])
def test_the_formula_is_the_size_llama_cpp_logs(
    kv_type: str,
    n_ctx: int,
    heads: tuple[int, int, int],
    dca_tool: Path,
    models_dir: TinyModels,
    tmp_path: Path,
) -> None:
    n_head, n_head_kv, head_dim = heads
    spec = TinySpec(
        "qwen2", n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim, n_embd=n_head * head_dim
    )
    model = models_dir.write(spec)
    # a quantized V cache needs flash attention in llama.cpp
    args = ("-c", str(n_ctx), "-ctk", kv_type, "-ctv", kv_type, "-fa", "on", "-lv", "4")
    proc, _ = run_tool_proc(dca_tool, single_plan(4), model, args, tmp_path)
    m = KV_LINE.search(proc.stderr)
    assert m is not None, f"no KV size line:\n{proc.stderr[-3000:]}"
    cells, layers = int(m[2]), int(m[3])
    assert (m[4], m[6]) == (kv_type, kv_type)
    assert cells == km.kv_cells(n_ctx) and layers == spec.n_layer
    want = km.kv_bytes(tiny_shape(spec), n_ctx, kv_type) / 2**20
    # the log prints MiB with two decimals
    assert abs(float(m[1]) - want) <= 0.006, f"logged {m[1]} MiB, formula {want:.4f} MiB"


# a tiny qwen35 (Qwen3.5's hybrid layout: 3 Gated DeltaNet layers, then 1 attention layer)
QWEN35_TINY = replace(
    km.QWEN35_9B,
    name="tiny-qwen35",
    n_layer=8,
    n_layer_kv=2,
    n_head_kv=2,
    head_dim_k=64,
    head_dim_v=64,
    d_conv=4,
    d_inner=8 * 64,  # 8 value heads of 64
    d_state=64,
    n_group=4,  # key heads
)
N_EMBD, N_HEAD, N_FF, N_VOCAB = 128, 4, 96, 64


def write_tiny_qwen35(path: Path) -> Path:
    """A qwen35 GGUF of QWEN35_TINY's shape (random weights, no vocabulary), written by the
    project's generator into `path`'s folder (the path written is returned): what llama.cpp
    needs to create its hybrid memory (a KV cache for the attention layers, recurrent state
    for the others) and log their sizes."""
    s = QWEN35_TINY
    assert s.head_dim_k == s.head_dim_v
    spec = TinySpec(
        "qwen35", n_ctx_train=4096, n_embd=N_EMBD, n_ff=N_FF, n_head=N_HEAD,
        n_head_kv=s.n_head_kv, head_dim=s.head_dim_k, n_rot=16, layers=s.n_layer,
        attn_interval=s.n_layer // s.n_layer_kv,
        ssm_shape=(s.d_conv, s.d_state, s.n_group, s.d_inner // s.d_state),
        n_vocab=N_VOCAB, tokenizer="no_vocab", rope_freq_base=1e7,
    )  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_tiny_gguf(spec, path.parent)


RS_LINE = re.compile(
    r"llama_memory_recurrent: size = +([0-9.]+) MiB \( *(\d+) cells, +(\d+) layers, +(\d+) seqs.*?"
    r"R \(f32\): +([0-9.]+) MiB, S \(f32\): +([0-9.]+) MiB"
)


@pytest.mark.parametrize("n_seq", [1, 3])
@pytest.mark.parametrize("kv_type", ["f16", "q8_0"])
def test_the_hybrid_formula_is_what_llama_cpp_logs_for_a_tiny_qwen35(
    n_seq: int, kv_type: str, dca_tool: Path, tmp_path: Path
) -> None:
    """KV of the attention layers and recurrent state of the Gated DeltaNet layers, as llama.cpp
    logs them for a tiny model of Qwen3.5's layout (one recurrent state per sequence)."""
    model = write_tiny_qwen35(tmp_path / "tiny-qwen35.gguf")
    args = ("-c", "4096", "-np", str(n_seq), "-ctk", kv_type, "-ctv", kv_type, "-fa", "on")
    proc, _ = run_tool_proc(dca_tool, single_plan(4), model, (*args, "-lv", "4"), tmp_path)
    kv = KV_LINE.search(proc.stderr)
    rs = RS_LINE.search(proc.stderr)
    assert kv is not None and rs is not None, f"no memory size lines:\n{proc.stderr[-3000:]}"
    s = QWEN35_TINY
    # the recurrent line counts every layer of the model; only the recurrent ones get a state
    assert (int(kv[3]), int(rs[3])) == (s.n_layer_kv, s.n_layer)
    if n_seq == 1:  # several sequences split the cells into streams: the one-sequence case only
        assert abs(float(kv[1]) - km.kv_bytes(s, 4096, kv_type) / 2**20) <= 0.006
    assert int(rs[2]) == n_seq
    assert abs(float(rs[1]) - km.recurrent_bytes(s, n_seq) / 2**20) <= 0.006
    # each state on its own: conv (R) and recurrent (S), f32, per recurrent layer and sequence
    n_rec = s.n_layer - s.n_layer_kv
    conv = (s.d_conv - 1) * (s.d_inner + 2 * s.n_group * s.d_state)
    assert abs(float(rs[5]) - n_rec * conv * 4 * n_seq / 2**20) <= 0.006
    assert abs(float(rs[6]) - n_rec * s.d_state * s.d_inner * 4 * n_seq / 2**20) <= 0.006


def test_row_sizes_are_ggml_block_sizes() -> None:
    assert km.row_bytes("f16", 1024) == 2048
    assert km.row_bytes("q8_0", 1024) == 32 * 34
    assert km.row_bytes("q4_0", 1024) == 32 * 18
    with pytest.raises(ValueError, match="whole number of blocks"):
        km.row_bytes("q4_0", 100)


def test_qwen35_9b_at_1m_tokens() -> None:
    """The numbers docs/dca.md quotes: 8 of 32 layers with K/V of 4 x 256 per token, 32 KiB a
    token in f16; the 24 recurrent layers' state is 50.25 MiB per sequence at any length."""
    s = km.QWEN35_9B
    assert km.kv_bytes(s, 2**20, "f16") == 32 * 2**30
    assert km.kv_bytes(s, 2**20, "q8_0") == 17 * 2**30
    assert km.kv_bytes(s, 2**20, "q4_0") == 9 * 2**30
    assert km.recurrent_bytes(s) == 24 * (3 * (4096 + 2 * 16 * 128) + 128 * 4096) * 4
    assert km.recurrent_bytes(s, n_seq=4) == 4 * km.recurrent_bytes(s)


def _computed() -> dict[str, object]:
    rows = {s.name: km.table(s) for s in km.SHAPES}
    return {"shapes": [{"shape": s.name, "rows": rows[s.name]} for s in km.SHAPES]}


def test_the_kept_table_is_what_the_script_computes() -> None:
    kept = json.loads(TABLE_JSON.read_text(encoding="utf-8"))
    now = _computed()["shapes"]
    assert isinstance(now, list)
    for kept_shape, now_shape in zip(kept["shapes"], now, strict=True):
        assert kept_shape["shape"]["name"] == now_shape["shape"]
        assert kept_shape["rows"] == now_shape["rows"]


def test_docs_show_the_kept_table() -> None:
    """Every row of the qwen35-9B table in docs/dca.md is a row of the kept JSON."""
    kept = json.loads(TABLE_JSON.read_text(encoding="utf-8"))
    rows = {
        (r["n_ctx"], r["kv_type"]): r
        for shape in kept["shapes"]
        if shape["shape"]["name"] == "Qwen3.5-9B"
        for r in shape["rows"]
    }
    text = DOC.read_text(encoding="utf-8")
    section = text.split("\n## Which model for 1M on one 24 GB card\n", 1)[1].split("\n## ", 1)[0]
    doc_rows = re.findall(
        r"^\| Qwen3\.5-9B \| ([0-9,]+) \| (\w+) \| ([0-9.]+) \| ([0-9.]+) \| (-?[0-9.]+) "
        r"\| (yes|no) \|$",
        section,
        re.MULTILINE,
    )
    assert len(doc_rows) == len(rows)
    for n_ctx, kv_type, kv_gib, total_gib, left, fits in doc_rows:
        r = rows[(int(n_ctx.replace(",", "")), kv_type)]
        assert (float(kv_gib), float(total_gib), float(left)) == (
            r["kv_gib"],
            r["total_gib"],
            r["left_on_24gib"],
        )
        assert (fits == "yes") == r["fits_24gb"]
