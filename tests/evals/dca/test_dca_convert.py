"""The converter side of 0078-dca (conversion/dca_config.py in the patched tree): a model's
dual_chunk_attention_config becomes the GGUF keys llama.cpp reads with --dca on, all of them
(chunk_size, local_size, original_max_position_embeddings) plus the whole config as JSON; the
converter module itself needs torch, this one does not, so it is tested on its own."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from .builds import LlamaBuild
from .model_runs import run_tool, single_plan
from .test_dca_config import LOG_INFO, resolved
from .tiny_models import TinyModels, TinySpec, write_tiny_gguf

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


# --dca-config FILE (apply_dca_config_file): a DCA configuration kept beside config.json, as
# Qwen3-*-2507 ship config_1m.json. No verbatim copy of a published config_1m.json could be
# found in the public code searched when this was written, and none is invented here: these
# configs are synthetic, a tiny model's config.json and a "1M" file that adds
# max_position_embeddings and a dual_chunk_attention_config with the fields vLLM and SGLang read
# (the sparse-attention ones inside it).
TINY_CONFIG: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "num_hidden_layers": 2,
    "hidden_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "vocab_size": 256,
    "max_position_embeddings": 8192,
    "rope_theta": 10000.0,
}
TINY_DCA = {
    "chunk_size": 96,
    "local_size": 12,
    "original_max_position_embeddings": 128,
    "sparse_attention_enabled": True,
    "sparse_attention_threshold": 32768,
    "sparse_attention_last_q": 64,
    "sparse_attention_config": [{"0": ["vertical_and_slash", 1000, 6096, 0.5]}] * 2,
}
TINY_CONFIG_1M = {
    **TINY_CONFIG,
    "max_position_embeddings": 32768,
    "dual_chunk_attention_config": TINY_DCA,
}

ApplyFn = Callable[[dict[str, Any], str], dict[str, Any]]


@pytest.fixture(scope="module")
def apply_dca_config_file(dca_build: LlamaBuild) -> ApplyFn:
    fn: ApplyFn = _module(dca_build).apply_dca_config_file
    return fn


def _write(path: Path, config: object) -> str:
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    return str(path)


def test_a_1m_config_file_replaces_the_dca_config_and_length(
    apply_dca_config_file: ApplyFn, tmp_path: Path
) -> None:
    merged = apply_dca_config_file(
        dict(TINY_CONFIG), _write(tmp_path / "config_1m.json", TINY_CONFIG_1M)
    )
    assert merged["dual_chunk_attention_config"] == TINY_DCA
    assert merged["max_position_embeddings"] == 32768
    assert {k: v for k, v in merged.items() if k not in TINY_CONFIG_1M} == {}
    assert "dual_chunk_attention_config" not in TINY_CONFIG  # the input is not modified


REFUSED_FILES: dict[str, tuple[object | None, str]] = {
    "not-json": (None, "cannot read it as JSON"),
    "a-list": ([TINY_CONFIG_1M], "must hold a JSON object"),
    "no-dca": (dict(TINY_CONFIG), "has no dual_chunk_attention_config"),
    "malformed-dca": (
        {**TINY_CONFIG_1M, "dual_chunk_attention_config": {"chunk_size": "96"}},
        "chunk_size",
    ),
    "other-model-layers": ({**TINY_CONFIG_1M, "num_hidden_layers": 48}, "num_hidden_layers is 48"),
    "other-model-arch": (
        {**TINY_CONFIG_1M, "architectures": ["Qwen3MoeForCausalLM"]},
        "describes another model",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED_FILES))
def test_a_bad_dca_config_file_is_refused_naming_it(
    case: str, apply_dca_config_file: ApplyFn, tmp_path: Path
) -> None:
    content, fragment = REFUSED_FILES[case]
    path = tmp_path / f"{case}.json"
    if content is None:
        path.write_text("{ not json", encoding="utf-8")
    else:
        _write(path, content)
    with pytest.raises(ValueError) as err:
        apply_dca_config_file(dict(TINY_CONFIG), str(path))
    assert f"--dca-config {path}" in str(err.value) and fragment in str(err.value)


def test_a_missing_dca_config_file_is_refused(
    apply_dca_config_file: ApplyFn, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="cannot read it as JSON"):
        apply_dca_config_file(dict(TINY_CONFIG), str(tmp_path / "config_1m.json"))


def test_round_trip_config_1m_to_gguf_to_llama_cpp(
    apply_dca_config_file: ApplyFn,
    dca_gguf_kv: KvFn,
    dca_tool: Path,
    models_dir: TinyModels,
    tmp_path: Path,
) -> None:
    """config.json + --dca-config config_1m.json -> the converter's keys in a GGUF -> read back
    with gguf-py -> resolved by llama.cpp with --dca on: the file's chunk, window and original
    length, each from its GGUF key, and the whole DCA config (sparse settings included) as JSON."""
    import gguf

    merged = apply_dca_config_file(
        dict(TINY_CONFIG), _write(tmp_path / "config_1m.json", TINY_CONFIG_1M)
    )
    kv = tuple(dca_gguf_kv("qwen2", merged))
    spec = replace(
        TinySpec("qwen2"),
        n_ctx_train=merged["max_position_embeddings"],
        tokenizer=models_dir.tokenizer,
    )
    model = write_tiny_gguf(spec, models_dir.dir, kv)

    reader = gguf.GGUFReader(str(model))
    back: dict[str, int | str] = {}
    for key, field in reader.fields.items():
        if ".attention.dca." in key or key == "qwen2.context_length":
            value = field.contents()
            assert isinstance(value, (int, str))
            back[key] = value
    assert back == {**dict(kv), "qwen2.context_length": 32768}
    whole = back["qwen2.attention.dca.config"]
    assert isinstance(whole, str) and json.loads(whole) == TINY_DCA

    plan = single_plan(40, n_gen=2)
    dump = run_tool(
        dca_tool, plan, model, ("-c", "256", "--dca", "on", *LOG_INFO), tmp_path / "run"
    )
    r = resolved(dump.log)
    assert (r.chunk_size, r.chunk_source) == (96, "GGUF attention.dca.chunk_size")
    assert (r.local_window, r.local_source) == (12, "GGUF attention.dca.local_size")
    assert (r.original, r.original_source) == (
        128,
        "GGUF attention.dca.original_max_position_embeddings",
    )


# The published configs (tests/evals/dca/data/hf-configs; SOURCE.md there names each file's
# source, revision and how exact the copy is): the same checks on the real texts, read as the
# converter reads config.json. Each file is pinned by its sha256 so an edit shows here.
HF_CONFIGS = Path(__file__).parent / "data" / "hf-configs"
PUBLISHED: dict[str, str] = {
    "Qwen2.5-14B-Instruct-1M.config.json": (
        "c4e96c0217a9d9bb38842b40874ee2afa9f8277e4a56a4ae6ef02b6b35700c8a"
    ),
    "Qwen2.5-7B-Instruct-1M.openvino-fp16.config.json": (
        "cb8106d3bed85b3cdcf8315fb70729fc22286d9efec5a03606d9a71f9b1f0dee"
    ),
}
PUBLISHED_DCA = {
    "chunk_size": 262144,
    "local_size": 8192,
    "original_max_position_embeddings": 262144,
}
"""What both files say (and docs/dca.md quotes): the numbers asserted below come from here, and
this from the files (test_published_configs_are_the_recorded_files)."""


def _published(name: str) -> dict[str, Any]:
    text = (HF_CONFIGS / name).read_bytes()
    assert hashlib.sha256(text).hexdigest() == PUBLISHED[name], f"{name} was edited"
    config = json.loads(text)
    assert isinstance(config, dict)
    return config


def test_published_configs_are_the_recorded_files() -> None:
    source = (HF_CONFIGS / "SOURCE.md").read_text(encoding="utf-8")
    assert sorted(p.name for p in HF_CONFIGS.glob("*.json")) == sorted(PUBLISHED)
    for name, digest in PUBLISHED.items():
        config = _published(name)
        assert f"`{name}`" in source and digest in source
        assert config["dual_chunk_attention_config"] == PUBLISHED_DCA
        assert config["model_type"] == "qwen2" and config["max_position_embeddings"] == 1010000
        assert config["rope_theta"] == 1e7


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_published_config_becomes_every_key(name: str, dca_gguf_kv: KvFn) -> None:
    config = _published(name)
    kv = dca_gguf_kv("qwen2", config)
    assert [k for k, _ in kv] == [
        "qwen2.attention.dca.chunk_size",
        "qwen2.attention.dca.local_size",
        "qwen2.attention.dca.original_max_position_embeddings",
        "qwen2.attention.dca.config",
    ]
    got = dict(kv)
    assert got["qwen2.attention.dca.chunk_size"] == 262144
    assert got["qwen2.attention.dca.local_size"] == 8192
    assert got["qwen2.attention.dca.original_max_position_embeddings"] == 262144
    whole = got["qwen2.attention.dca.config"]
    assert isinstance(whole, str) and json.loads(whole) == config["dual_chunk_attention_config"]


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_published_config_given_as_dca_config_file(
    name: str, apply_dca_config_file: ApplyFn, tmp_path: Path
) -> None:
    """--dca-config pointed at the published file of the same model: a config.json without the
    DCA block (and a shorter max_position_embeddings) gets the file's block and length."""
    published = _published(name)
    plain = {k: v for k, v in published.items() if k != "dual_chunk_attention_config"}
    plain["max_position_embeddings"] = 32768
    merged = apply_dca_config_file(plain, str(HF_CONFIGS / name))
    assert merged["dual_chunk_attention_config"] == PUBLISHED_DCA
    assert merged["max_position_embeddings"] == 1010000
    assert merged == published


def test_published_config_of_another_model_is_refused(
    apply_dca_config_file: ApplyFn,
) -> None:
    """The 14B's file given for a model of another shape is refused, naming the first field of
    the model's identity that differs; so is the 7B's file given for the 14B."""
    path = HF_CONFIGS / "Qwen2.5-14B-Instruct-1M.config.json"
    with pytest.raises(ValueError) as err:
        apply_dca_config_file(dict(TINY_CONFIG), str(path))
    assert f"--dca-config {path}" in str(err.value)
    assert "num_hidden_layers is 48 there but 2" in str(err.value)
    other = HF_CONFIGS / "Qwen2.5-7B-Instruct-1M.openvino-fp16.config.json"
    with pytest.raises(ValueError, match="num_hidden_layers is 28 there but 48"):
        apply_dca_config_file(_published(path.name), str(other))


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_round_trip_published_config_to_llama_cpp(
    name: str,
    dca_gguf_kv: KvFn,
    dca_tool: Path,
    models_dir: TinyModels,
    tmp_path: Path,
) -> None:
    """The published file -> the converter's keys in a tiny GGUF carrying the release's metadata
    (qwen2, context_length 1010000, rope base 1e7, basename Qwen2.5) -> read back with gguf-py,
    key by key -> llama.cpp with --dca on takes each size from its GGUF key. The same GGUF without
    the keys gets the same three numbers from the known-model table: the table entry agrees
    with the published file."""
    import gguf

    config = _published(name)
    kv = tuple(dca_gguf_kv("qwen2", config))
    spec = replace(
        TinySpec("qwen2"),
        n_ctx_train=config["max_position_embeddings"],
        rope_freq_base=config["rope_theta"],
        basename="Qwen2.5",
        name="Qwen2.5 14B Instruct 1M" if "14B" in name else "Qwen2.5 7B Instruct 1M",
        tokenizer=models_dir.tokenizer,
    )
    keyed = write_tiny_gguf(spec, models_dir.dir, kv)
    reader = gguf.GGUFReader(str(keyed))
    for key, value in kv:
        assert reader.fields[key].contents() == value, key
    assert reader.fields["qwen2.context_length"].contents() == 1010000

    plan = single_plan(40, n_gen=2)
    args = ("-c", "256", "--dca", "on", *LOG_INFO)
    from_keys = resolved(run_tool(dca_tool, plan, keyed, args, tmp_path / "keys").log)
    want = PUBLISHED_DCA
    assert (from_keys.chunk_size, from_keys.chunk_source) == (
        want["chunk_size"],
        "GGUF attention.dca.chunk_size",
    )
    assert (from_keys.local_window, from_keys.local_source) == (
        want["local_size"],
        "GGUF attention.dca.local_size",
    )
    assert (from_keys.original, from_keys.original_source) == (
        want["original_max_position_embeddings"],
        "GGUF attention.dca.original_max_position_embeddings",
    )

    bare = write_tiny_gguf(spec, models_dir.dir)
    from_table = resolved(run_tool(dca_tool, plan, bare, args, tmp_path / "table").log)
    assert from_table.chunk_source.startswith("known-model table")
    assert (from_table.chunk_size, from_table.local_window, from_table.original) == (
        from_keys.chunk_size,
        from_keys.local_window,
        from_keys.original,
    )


# sparse_attention_config.json beside config.json (apply_sparse_attention_file): Qwen2.5-7B/14B-
# Instruct-1M ship their per-head sparse patterns in that file, which vLLM and SGLang load into the
# DCA config. No verbatim copy of it could be found (SOURCE.md), so the patterns here are synthetic:
# vLLM's layout (one object per layer, "<head>": ["vertical_and_slash", vertical, slash, score]),
# MInference's published default budgets (1000 vertical, 6096 slash) on every head but two, sized
# to the published 14B config (48 layers, 40 heads) that sits beside them.
SparseFn = Callable[[dict[str, Any], Path], tuple[dict[str, Any], "str | None"]]
N_LAYER_14B, N_HEAD_14B = 48, 40
VERTICAL_MAX, SLASH_MAX = 1500, 7000  # layer 7 head 3's vertical, layer 40 head 39's slash


def _patterns(n_layer: int = N_LAYER_14B, n_head: int = N_HEAD_14B) -> list[dict[str, Any]]:
    def pattern(il: int, h: int) -> list[object]:
        vertical = VERTICAL_MAX if (il, h) == (7, 3) else 1000
        slash = SLASH_MAX if (il, h) == (40, 39) else 6096
        return ["vertical_and_slash", vertical, slash, 0.9]

    return [{str(h): pattern(il, h) for h in range(n_head)} for il in range(n_layer)]


@pytest.fixture(scope="module")
def apply_sparse_file(dca_build: LlamaBuild) -> SparseFn:
    fn: SparseFn = _module(dca_build).apply_sparse_attention_file
    return fn


def _model_dir(tmp_path: Path, patterns: object | None) -> tuple[Path, dict[str, Any]]:
    """A model folder holding the published 14B config.json and, unless None, the patterns."""
    model = tmp_path / "model"
    model.mkdir()
    name = "Qwen2.5-14B-Instruct-1M.config.json"
    (model / "config.json").write_bytes((HF_CONFIGS / name).read_bytes())
    if patterns is not None:
        _write(model / "sparse_attention_config.json", patterns)
    return model, _published(name)


def test_sparse_file_goes_into_the_published_dca_config(
    apply_sparse_file: SparseFn, dca_gguf_kv: KvFn, tmp_path: Path
) -> None:
    model, config = _model_dir(tmp_path, _patterns())
    merged, note = apply_sparse_file(config, model)
    assert merged["dual_chunk_attention_config"] == {
        **PUBLISHED_DCA,
        "sparse_attention_config": _patterns(),
        "sparse_attention_enabled": True,
    }
    assert note is not None and "48 layers" in note and "sparse_attention_config.json" in note
    assert config["dual_chunk_attention_config"] == PUBLISHED_DCA  # the input is not modified
    kv = dict(dca_gguf_kv("qwen2", merged))
    assert kv["qwen2.attention.dca.chunk_size"] == 262144
    assert kv["qwen2.attention.dca.local_size"] == 8192
    assert kv["qwen2.attention.dca.original_max_position_embeddings"] == 262144
    whole = kv["qwen2.attention.dca.config"]
    assert isinstance(whole, str)
    assert json.loads(whole) == merged["dual_chunk_attention_config"]


def test_sparse_file_replaces_an_inline_one_and_keeps_enabled(
    apply_sparse_file: SparseFn, tmp_path: Path
) -> None:
    """As in vLLM: the file wins over a sparse_attention_config already in the DCA config, and
    a sparse_attention_enabled the config states is kept."""
    (tmp_path / "sparse_attention_config.json").write_text(json.dumps(_patterns(2, 2)))
    config = {
        **TINY_CONFIG_1M,
        "dual_chunk_attention_config": {**TINY_DCA, "sparse_attention_enabled": False},
    }
    merged, note = apply_sparse_file(config, tmp_path)
    dca = merged["dual_chunk_attention_config"]
    assert dca["sparse_attention_config"] == _patterns(2, 2) != TINY_DCA["sparse_attention_config"]
    assert dca["sparse_attention_enabled"] is False
    assert note is not None and "replace" in note


@pytest.mark.parametrize(
    ("case", "patterns", "fragment"),
    [
        ("no-file", None, None),
        ("empty", [], "ignored: it is empty"),
    ],
)
def test_sparse_file_absent_or_empty_changes_nothing(
    case: str,
    patterns: object | None,
    fragment: str | None,
    apply_sparse_file: SparseFn,
    tmp_path: Path,
) -> None:
    model, config = _model_dir(tmp_path, patterns)
    merged, note = apply_sparse_file(config, model)
    assert merged == config
    assert note is None if fragment is None else (note is not None and fragment in note)


def test_sparse_file_without_a_dca_config_is_ignored(
    apply_sparse_file: SparseFn, tmp_path: Path
) -> None:
    _write(tmp_path / "sparse_attention_config.json", _patterns(2, 2))
    merged, note = apply_sparse_file(dict(TINY_CONFIG), tmp_path)
    assert merged == TINY_CONFIG
    assert note is not None and "no dual_chunk_attention_config" in note


def _one_bad(il: int, head: str, pattern: object) -> list[dict[str, Any]]:
    patterns = _patterns()
    patterns[il][head] = pattern
    return patterns


def _without_head(il: int, head: str) -> list[dict[str, Any]]:
    patterns = _patterns()
    del patterns[il][head]
    return patterns


BAD_SPARSE: dict[str, tuple[object, str]] = {
    "an-object": ({"0": _patterns()[0]}, "must be a list with one entry per layer"),
    "too-few-layers": (_patterns()[:47], "has 47 layer entries but the model has 48 layers"),
    "layer-not-object": ([*_patterns()[:5], ["x"], *_patterns()[6:]], "[5]: must be an object"),
    "head-not-index": (_one_bad(2, "x", ["vertical_and_slash", 1, 2, 0.5]), "[2]['x']: the key"),
    "head-out-of-range": (_one_bad(2, "40", ["vertical_and_slash", 1, 2, 0.5]), "0 to 39"),
    "head-missing": (_without_head(9, "17"), "[9]: no pattern for head(s) [17]"),
    "other-type": (_one_bad(3, "0", ["a_shape", 128, 1024, 0.5]), "[3]['0']: must be"),
    "too-short": (_one_bad(3, "1", ["vertical_and_slash", 100]), "[3]['1']: must be"),
    "vertical-zero": (_one_bad(4, "2", ["vertical_and_slash", 0, 6096, 0.5]), "vertical_size"),
    "slash-text": (_one_bad(4, "2", ["vertical_and_slash", 1000, "6096", 0.5]), "slash_size"),
    "slash-bool": (_one_bad(4, "2", ["vertical_and_slash", 1000, True, 0.5]), "slash_size"),
    "vertical-huge": (_one_bad(4, "2", ["vertical_and_slash", 2**31, 6096, 0.5]), "below 2^31"),
}


@pytest.mark.parametrize("case", list(BAD_SPARSE))
def test_a_bad_sparse_file_is_refused_naming_the_entry(
    case: str, apply_sparse_file: SparseFn, tmp_path: Path
) -> None:
    patterns, fragment = BAD_SPARSE[case]
    model, config = _model_dir(tmp_path, patterns)
    with pytest.raises(ValueError) as err:
        apply_sparse_file(config, model)
    assert str(model / "sparse_attention_config.json") in str(err.value)
    assert fragment in str(err.value)


def test_an_unreadable_sparse_file_is_refused(apply_sparse_file: SparseFn, tmp_path: Path) -> None:
    model, config = _model_dir(tmp_path, None)
    (model / "sparse_attention_config.json").write_text("[{", encoding="utf-8")
    with pytest.raises(ValueError, match="cannot read it as JSON"):
        apply_sparse_file(config, model)


def test_round_trip_sparse_file_to_llama_cpp(
    apply_sparse_file: SparseFn,
    dca_gguf_kv: KvFn,
    dca_tool: Path,
    models_dir: TinyModels,
    tmp_path: Path,
) -> None:
    """The published 14B config.json and the patterns beside it -> the converter's keys in a tiny
    GGUF -> llama.cpp with --dca on --sparse-prefill on: the DCA sizes from their keys, and the
    sparse budgets (the largest of every head's) from the GGUF's DCA config."""
    model, config = _model_dir(tmp_path, _patterns())
    merged, _ = apply_sparse_file(config, model)
    kv = tuple(dca_gguf_kv("qwen2", merged))
    spec = replace(
        TinySpec("qwen2"),
        n_ctx_train=merged["max_position_embeddings"],
        rope_freq_base=merged["rope_theta"],
        tokenizer=models_dir.tokenizer,
    )
    gguf_model = write_tiny_gguf(spec, models_dir.dir, kv)
    args = ("-c", "256", "--dca", "on", "--sparse-prefill", "on", *LOG_INFO)
    log = run_tool(dca_tool, single_plan(40, n_gen=2), gguf_model, args, tmp_path / "run").log
    r = resolved(log)
    assert (r.chunk_size, r.chunk_source) == (262144, "GGUF attention.dca.chunk_size")
    assert (r.original, r.local_window) == (262144, 8192)
    src = "GGUF qwen2.attention.dca.config"
    assert f"vertical {VERTICAL_MAX} ({src}), slash {SLASH_MAX} ({src})" in log
