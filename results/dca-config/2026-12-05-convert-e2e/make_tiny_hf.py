"""Write tiny HF-format Qwen2 models (random weights, a 300-piece sentencepiece tokenizer) whose
config.json is the published Qwen2.5-14B-Instruct-1M config with the sizes shrunk, for a run of
the patched convert_hf_to_gguf.py. Needs torch, safetensors and sentencepiece (CPU only).

    python make_tiny_hf.py PUBLISHED_CONFIG OUT_DIR

OUT_DIR/with-dca/        config.json keeps the published dual_chunk_attention_config verbatim
OUT_DIR/plain/           the same model, config.json without it (max_position_embeddings 32768)
OUT_DIR/config_1m.json   the plain config plus the published block and length, a --dca-config
                         file of the tiny model's own shape (as Qwen3-2507 ship config_1m.json)
OUT_DIR/with-sparse/     with-dca plus a sparse_attention_config.json (as Qwen2.5-1M ship one);
                         its patterns are synthetic (no published copy was found), in vLLM's
                         layout, one object per layer: "<head>": ["vertical_and_slash", v, s, score]
"""

from __future__ import annotations

import io
import json
import shutil
import sys
from pathlib import Path

import sentencepiece as spm
import torch
from safetensors.torch import save_file

# the sizes that change; every other field (the DCA block, rope_theta, max_position_embeddings,
# model_type, architectures, ...) stays as published
SHRINK = {
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "max_window_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
}


def tokenizer(out: Path) -> int:
    lines = [f"the tiny model number {i} reads a long context of {i % 7} words" for i in range(400)]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=model,
        vocab_size=300,
        model_type="bpe",
        character_coverage=1.0,
        bos_id=1,
        eos_id=2,
        unk_id=0,
        pad_id=-1,
    )
    (out / "tokenizer.model").write_bytes(model.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    return int(sp.get_piece_size())


def weights(cfg: dict, out: Path) -> None:
    g = torch.Generator().manual_seed(0)
    h, ff, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = h // cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"] * hd

    def r(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * 0.05).to(torch.bfloat16)

    t = {
        "model.embed_tokens.weight": r(v, h),
        "model.norm.weight": torch.ones(h, dtype=torch.bfloat16),
        "lm_head.weight": r(v, h),
    }
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t |= {
            p + "input_layernorm.weight": torch.ones(h, dtype=torch.bfloat16),
            p + "post_attention_layernorm.weight": torch.ones(h, dtype=torch.bfloat16),
            p + "self_attn.q_proj.weight": r(h, h),
            p + "self_attn.q_proj.bias": r(h),
            p + "self_attn.k_proj.weight": r(kv, h),
            p + "self_attn.k_proj.bias": r(kv),
            p + "self_attn.v_proj.weight": r(kv, h),
            p + "self_attn.v_proj.bias": r(kv),
            p + "self_attn.o_proj.weight": r(h, h),
            p + "mlp.gate_proj.weight": r(ff, h),
            p + "mlp.up_proj.weight": r(ff, h),
            p + "mlp.down_proj.weight": r(h, ff),
        }
    save_file(t, str(out / "model.safetensors"), metadata={"format": "pt"})


def main(published: Path, out: Path) -> None:
    cfg = json.loads(published.read_text(encoding="utf-8"))
    dca = cfg["dual_chunk_attention_config"]
    cfg |= SHRINK
    with_dca = out / "with-dca"
    with_dca.mkdir(parents=True, exist_ok=True)
    cfg["vocab_size"] = tokenizer(with_dca)
    weights(cfg, with_dca)
    (with_dca / "config.json").write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")

    plain_dir = out / "plain"
    plain_dir.mkdir(exist_ok=True)
    for f in ("tokenizer.model", "model.safetensors"):
        shutil.copyfile(with_dca / f, plain_dir / f)
    plain = {k: v for k, v in cfg.items() if k != "dual_chunk_attention_config"}
    plain["max_position_embeddings"] = 32768
    (plain_dir / "config.json").write_text(json.dumps(plain, indent=2) + "\n", encoding="utf-8")

    sparse_dir = out / "with-sparse"
    sparse_dir.mkdir(exist_ok=True)
    for f in ("tokenizer.model", "model.safetensors", "config.json"):
        shutil.copyfile(with_dca / f, sparse_dir / f)
    patterns = [
        {
            "0": ["vertical_and_slash", 1000, 6096, 0.9],
            "1": ["vertical_and_slash", 1500, 6096, 0.8],
        },
        {
            "0": ["vertical_and_slash", 1000, 7000, 0.7],
            "1": ["vertical_and_slash", 1000, 6096, 0.6],
        },
    ]
    (sparse_dir / "sparse_attention_config.json").write_text(json.dumps(patterns, indent=2) + "\n")

    one_m = {**plain, "max_position_embeddings": 1010000, "dual_chunk_attention_config": dca}
    (out / "config_1m.json").write_text(json.dumps(one_m, indent=2) + "\n", encoding="utf-8")
    wrote = ", ".join(str(p) for p in (with_dca, plain_dir, sparse_dir, out / "config_1m.json"))
    print(f"vocab {cfg['vocab_size']}; wrote {wrote}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
