"""The converter side of 0078-dca (conversion/dca_config.py in the patched tree): a model's
dual_chunk_attention_config becomes the GGUF keys llama.cpp reads with --dca on, all of them
(chunk_size, local_size, original_max_position_embeddings) plus the whole config as JSON; the
converter module itself needs torch, this one does not, so it is tested on its own."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from .builds import LlamaBuild
from .tiny_models import TinySpec, write_tiny_gguf

# Qwen/Qwen2.5-14B-Instruct-1M config.json (huggingface.co, revision d5c878c)
QWEN_1M = {
    "max_position_embeddings": 1010000,
    "rope_scaling": None,
    "dual_chunk_attention_config": {
        "chunk_size": 262144,
        "local_size": 8192,
        "original_max_position_embeddings": 262144,
    },
}

KvFn = Callable[[str, dict[str, Any]], list[tuple[str, int | str]]]


def _module(build: LlamaBuild) -> ModuleType:
    path = build.src / "conversion" / "dca_config.py"
    spec = importlib.util.spec_from_file_location("patchctl_dca_config", path)
    assert spec is not None and spec.loader is not None, f"cannot load {path}"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def dca_gguf_kv(dca_build: LlamaBuild) -> KvFn:
    fn: KvFn = _module(dca_build).dca_gguf_kv
    return fn


def test_qwen_1m_config_becomes_every_key(dca_gguf_kv: KvFn) -> None:
    kv = dict(dca_gguf_kv("qwen2", QWEN_1M))
    assert kv["qwen2.attention.dca.chunk_size"] == 262144
    assert kv["qwen2.attention.dca.local_size"] == 8192
    assert kv["qwen2.attention.dca.original_max_position_embeddings"] == 262144
    whole = kv["qwen2.attention.dca.config"]
    assert isinstance(whole, str)
    assert json.loads(whole) == QWEN_1M["dual_chunk_attention_config"]


def test_sparse_attention_keys_are_kept_in_the_json(dca_gguf_kv: KvFn) -> None:
    config = {
        "dual_chunk_attention_config": {
            "chunk_size": 262144,
            "local_size": 8192,
            "original_max_position_embeddings": 262144,
            "sparse_attention_enabled": True,
            "sparse_attention_threshold": 32768,
            "sparse_attention_config": [{"0": ["vertical_and_slash", 1000, 6096, 0.5]}],
        }
    }
    kv = dict(dca_gguf_kv("qwen3moe", config))
    whole = kv["qwen3moe.attention.dca.config"]
    assert isinstance(whole, str)
    assert json.loads(whole) == config["dual_chunk_attention_config"]


def test_no_config_writes_nothing(dca_gguf_kv: KvFn) -> None:
    assert dca_gguf_kv("llama", {"max_position_embeddings": 8192}) == []


@pytest.mark.parametrize(
    "bad",
    [
        [1, 2],
        {"chunk_size": "262144"},
        {"chunk_size": -1},
        {"local_size": True},
        {"chunk_size": 2**32},
    ],
)
def test_malformed_config_is_refused(dca_gguf_kv: KvFn, bad: object) -> None:
    with pytest.raises(ValueError, match="dual_chunk_attention_config"):
        dca_gguf_kv("qwen2", {"dual_chunk_attention_config": bad})


def test_the_keys_are_the_ones_the_tests_models_carry(dca_gguf_kv: KvFn, tmp_path: Path) -> None:
    """The key names the converter writes are those TinySpec writes (which test_dca_config.py
    shows llama.cpp resolving), read back from a GGUF."""
    import gguf

    spec = TinySpec("qwen2", dca_chunk_size=1024, dca_local_size=32, dca_orig=1024)
    reader = gguf.GGUFReader(str(write_tiny_gguf(spec, tmp_path)))
    written = {k for k in reader.fields if ".attention.dca." in k}
    converted = {k for k, v in dca_gguf_kv("qwen2", QWEN_1M) if isinstance(v, int)}
    assert written == converted
