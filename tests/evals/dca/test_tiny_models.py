"""tests/evals/dca/tiny_models.py: the shape options of the shape benchmark
(evals/dca/shape_matrix.py)."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from .tiny_models import (
    TinyModels,
    TinySpec,
    build_tensors,
    spm_tokens,
    tokenizer_for,
    write_tiny_gguf,
)


def _field(reader: gguf.GGUFReader, key: str) -> object:
    field = reader.get_field(key)
    assert field is not None, key
    return field.contents()


def test_the_tests_models_keep_their_file_names() -> None:
    # cached models are found by name: the new options must not rename the tests' defaults
    assert TinySpec("qwen2").file_name() == "tiny-qwen2-s0-qk0.25-n2.5-vo0.05-w48-e0.5-f3-g4.gguf"
    assert TinySpec("qwen2", n_embd=896).file_name() != TinySpec("qwen2").file_name()
    assert TinySpec("qwen2", layers=4).file_name() != TinySpec("qwen2", layers=3).file_name()
    assert TinySpec("qwen2", weight_type="q8_0").file_name() != TinySpec("qwen2").file_name()


def test_q8_0_projections_with_real_shapes(tmp_path: Path) -> None:
    spec = TinySpec("qwen2", n_embd=896, n_ff=4864, n_head=14, n_head_kv=2, head_dim=64,
                    n_ctx_train=32768, layers=3, weight_type="q8_0")
    reader = gguf.GGUFReader(str(write_tiny_gguf(spec, tmp_path)))
    tensors = {t.name: t for t in reader.tensors}
    assert _field(reader, "qwen2.block_count") == 3
    assert _field(reader, "qwen2.context_length") == 32768
    assert {f"blk.{i}.attn_q.weight" for i in range(3)} <= set(tensors)
    q8 = gguf.GGMLQuantizationType.Q8_0
    for name, ne in (("attn_q", [896, 896]), ("attn_k", [896, 128]), ("ffn_down", [4864, 896])):
        t = tensors[f"blk.2.{name}.weight"]
        assert t.tensor_type == q8 and list(t.shape) == ne
    assert tensors["blk.0.attn_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    assert tensors["blk.0.attn_q.bias"].tensor_type == gguf.GGMLQuantizationType.F32


def test_q8_0_rows_are_random_not_constant() -> None:
    t = build_tensors(TinySpec("llama", n_embd=256, n_ff=512, layers=1, weight_type="q8_0"))
    rows = t["blk.0.ffn_up.weight"]
    assert rows.dtype == np.uint8 and rows.shape == (512, 256 // 32 * 34)
    # the 32 drawn rows differ, later rows repeat them
    assert len({bytes(r) for r in rows[:32]}) == 32
    assert bytes(rows[32]) == bytes(rows[0])


def test_gemma3_layer_pattern(tmp_path: Path) -> None:
    spec = TinySpec("gemma3", layers=6, swa_pattern=6, sliding_window=512)
    reader = gguf.GGUFReader(str(write_tiny_gguf(spec, tmp_path)))
    assert _field(reader, "gemma3.attention.sliding_window_pattern") == 6
    assert _field(reader, "gemma3.attention.sliding_window") == 512


def test_unknown_weight_type_is_rejected() -> None:
    with pytest.raises(ValueError, match="weight_type 'q4_k'"):
        build_tensors(TinySpec("qwen2", weight_type="q4_k"))


def test_no_vocab_tokenizer_has_no_token_list_and_its_own_file_name(tmp_path: Path) -> None:
    # llama.cpp older than the "test" tokenizer (llama-cpp-python 0.3.35) loads "no_vocab" with
    # <arch>.vocab_size; the weights are the same, the cached file is not
    spec = TinySpec("gemma3", tokenizer="no_vocab")
    assert spec.file_name() != TinySpec("gemma3").file_name()
    reader = gguf.GGUFReader(str(write_tiny_gguf(spec, tmp_path)))
    assert _field(reader, "tokenizer.ggml.model") == "no_vocab"
    assert _field(reader, "gemma3.vocab_size") == spec.n_vocab
    assert reader.get_field("tokenizer.ggml.tokens") is None
    test = gguf.GGUFReader(str(write_tiny_gguf(TinySpec("gemma3"), tmp_path)))
    assert _field(test, "tokenizer.ggml.model") == "test"
    assert len(_field(test, "tokenizer.ggml.tokens")) == spec.n_vocab  # type: ignore[arg-type]
    embd = {t.name: bytes(t.data) for t in reader.tensors}
    assert embd == {t.name: bytes(t.data) for t in test.tensors}


def test_llama_tokenizer_is_a_sentencepiece_vocab_with_byte_tokens(tmp_path: Path) -> None:
    # what llama-vocab.cpp's SPM loader reads: the token list (one per token_embd row), types,
    # the special ids, and "<0xXX>" byte tokens; no BOS/EOS added to text
    spec = TinySpec("qwen2", tokenizer="llama")
    assert spec.file_name() != TinySpec("qwen2").file_name()
    reader = gguf.GGUFReader(str(write_tiny_gguf(spec, tmp_path)))
    assert _field(reader, "tokenizer.ggml.model") == "llama"
    tokens = _field(reader, "tokenizer.ggml.tokens")
    types = _field(reader, "tokenizer.ggml.token_type")
    assert isinstance(tokens, list) and isinstance(types, list)
    assert len(tokens) == len(types) == spec.n_vocab == len(set(tokens))
    assert tokens[:4] == ["<unk>", "<s>", "</s>", "<0x00>"]
    assert tokens[3 + 0x0A] == "<0x0A>" and tokens[3 + 0x7F] == "<0x7F>"  # ASCII bytes only
    assert tokens[131:] == [f"tok_{i}" for i in range(131, spec.n_vocab)]
    assert types[:3] == [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    assert set(types[3:131]) == {gguf.TokenType.BYTE}
    assert set(types[131:]) == {gguf.TokenType.NORMAL}
    assert [_field(reader, f"tokenizer.ggml.{k}_token_id") for k in ("unknown", "bos", "eos")] == [
        0, 1, 2
    ]
    assert _field(reader, "tokenizer.ggml.add_bos_token") is False
    test = gguf.GGUFReader(str(write_tiny_gguf(TinySpec("qwen2"), tmp_path)))
    assert {t.name: bytes(t.data) for t in reader.tensors} == {
        t.name: bytes(t.data) for t in test.tensors
    }


def test_llama_tokenizer_fits_its_byte_tokens_to_a_small_vocab_and_needs_room() -> None:
    tokens, types = spm_tokens(10)
    assert tokens[3:] == [f"<0x{b:02X}>" for b in range(7)] and len(types) == 10
    with pytest.raises(ValueError, match="n_vocab 3"):
        spm_tokens(3)


def test_unknown_tokenizer_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="tokenizer 'gpt2'"):
        write_tiny_gguf(TinySpec("qwen2", tokenizer="gpt2"), tmp_path)
    assert not list(tmp_path.iterdir())


def _tree(root: Path, vocab_source: str) -> Path:
    (root / "src").mkdir(parents=True)
    (root / "src" / "llama-vocab.cpp").write_text(vocab_source)
    return root


def test_tokenizer_is_picked_by_what_the_tree_loads(tmp_path: Path) -> None:
    new = _tree(tmp_path / "new", 'if (tokenizer_model == "no_vocab") {}\n'
                'else if (tokenizer_model == "test") { type = LLAMA_VOCAB_TYPE_TEST; }\n')
    old = _tree(tmp_path / "old", 'if (tokenizer_model == "no_vocab") {}\n'
                'else if (tokenizer_model == "llama") {}\n')
    bare = _tree(tmp_path / "bare", 'if (tokenizer_model == "no_vocab") {}\n')
    assert tokenizer_for(new) == "test"
    assert tokenizer_for(old) == "llama"
    assert tokenizer_for(bare) == "no_vocab"
    with pytest.raises(ValueError, match=r"llama-vocab\.cpp"):
        tokenizer_for(tmp_path / "none")


def test_tiny_models_write_with_their_tokenizer(tmp_path: Path) -> None:
    models = TinyModels(tmp_path, "no_vocab")
    path = models.write(TinySpec("llama"))
    assert path == tmp_path / TinySpec("llama", tokenizer="no_vocab").file_name()
    assert _field(gguf.GGUFReader(str(path)), "tokenizer.ggml.model") == "no_vocab"
    assert TinyModels(tmp_path).write(TinySpec("llama")).name == TinySpec("llama").file_name()


def test_qwen35_interval_and_recurrent_shape_of_a_real_model(tmp_path: Path) -> None:
    # the throughput matrix's Qwen3.5-9B shape: every 4th layer attention, its Gated DeltaNet sizes
    spec = TinySpec("qwen35", n_embd=256, n_ff=384, n_head=4, n_head_kv=2, head_dim=64, n_rot=16,
                    layers=8, attn_interval=4, ssm_shape=(4, 32, 4, 8))
    assert spec.recurrent_layers() == [True, True, True, False] * 2
    assert TinySpec("qwen35").file_name() == TinySpec("qwen35", attn_interval=2).file_name()
    assert spec.file_name() != TinySpec("qwen35", n_embd=256, n_ff=384, n_head=4, n_head_kv=2,
                                        head_dim=64, n_rot=16, layers=8).file_name()
    reader = gguf.GGUFReader(str(write_tiny_gguf(spec, tmp_path)))
    assert _field(reader, "qwen35.full_attention_interval") == 4
    assert _field(reader, "qwen35.ssm.state_size") == 32
    assert _field(reader, "qwen35.ssm.group_count") == 4
    assert _field(reader, "qwen35.ssm.time_step_rank") == 8
    assert _field(reader, "qwen35.ssm.inner_size") == 32 * 8
    shapes = {t.name: [int(n) for n in t.shape] for t in reader.tensors}
    # qkv of the recurrent layer: 2 key projections (4 heads x 32) and the values (8 heads x 32)
    assert shapes["blk.0.attn_qkv.weight"] == [256, 2 * 4 * 32 + 8 * 32]
    assert shapes["blk.0.ssm_a"] == [8]
    assert "blk.3.attn_k.weight" in shapes and "blk.3.attn_qkv.weight" not in shapes
    assert "blk.7.attn_k.weight" in shapes and "blk.4.attn_k.weight" not in shapes
