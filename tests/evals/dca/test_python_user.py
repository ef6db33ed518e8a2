"""The patched llama-cpp-python as a Python user meets it: every bad setting is an error that
explains itself, in the Python keyword's name, with `verbose=False` (the common case) too, and
no value is silently coerced.

- A DCA configuration llama.cpp refuses: the `ValueError` carries llama.cpp's reason, with the
  flag names turned into the keywords (`dca_local_window`, not `--dca-local-window`). This needs
  ggml's log levels mapped right (llama-cpp-python 0.3.36 used an older enum: ERROR lines
  counted as DEBUG and were dropped, WARN lines as ERROR and were printed with verbose=False).
- `dca` is a bool: `"no"`, `"false"`, `"0"`, `0`, `1` are refused, never taken for on.
- A size that does not fit the C field (int32) is refused before ctypes wraps it.
- `verbose=True` prints llama.cpp's INFO lines (one DCA line per context) and not its DEBUG
  lines (the per-graph input listing, the per-ubatch DCA plan) unless the application set the
  `llama-cpp-python` logger to DEBUG.
- `use_extra_bufts=False` reaches llama_model_params: the loader never considers the CPU
  backend's extra buffer types (CPU_REPACK, AMX), as `llama-cli --no-repack` does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from .test_python_wheel import run_python
from .tiny_models import TinyModels, TinySpec

CONTEXT: dict[str, object] = {"n_ctx": 512, "n_batch": 512, "n_threads": 2, "n_threads_batch": 2}

CONSTRUCT = r"""
import json, logging, sys
from llama_cpp import Llama
cfg = json.loads(sys.argv[1])
if cfg.get("debug"):
    logging.getLogger("llama-cpp-python").setLevel(logging.DEBUG)
kwargs = cfg["kwargs"]
for key in cfg.get("literal", ()):  # values JSON cannot carry: Python literals
    kwargs[key] = eval(kwargs[key])
try:
    llm = Llama(model_path=cfg["model"], **kwargs)
except Exception as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
    sys.exit(0)
if cfg.get("decode"):
    llm.eval(llm.tokenize(b" ".join(b"word%d" % i for i in range(100))))
params = {"dca": llm.context_params.dca, "dca_chunk_size": llm.context_params.dca_chunk_size,
          "use_extra_bufts": llm.model_params.use_extra_bufts}
print(json.dumps({"ok": True, "params": params}))
"""


def construct(
    site: Path, model: Path, kwargs: Mapping[str, object], **cfg: object
) -> tuple[dict[str, Any], str]:
    """`Llama(model, **kwargs)` in a child: (its JSON report, its stderr)."""
    config = {"model": str(model), "kwargs": dict(kwargs), **cfg}
    proc = run_python(site, "-c", CONSTRUCT, json.dumps(config))
    assert proc.returncode == 0, proc.stderr[-4000:]
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return report, proc.stderr


@pytest.fixture(scope="module")
def qwen2(models_dir: TinyModels) -> Path:
    return models_dir.write(TinySpec("qwen2"))


REFUSED = {
    # chunk_len = 64 - 40 = 24 <= 40: llama.cpp's rule, the reason named by the keywords
    "window-too-wide": (
        {"dca_chunk_size": 64, "dca_local_window": 40},
        "dca_local_window (40) must be smaller than chunk_len = dca_chunk_size - dca_local_window",
    ),
    # larger than the model's original training length (8192 in the tiny GGUF)
    "chunk-beyond-training": (
        {"dca_chunk_size": 16384, "dca_local_window": 64},
        "dca_chunk_size (16384, dca_chunk_size) must be <= the model's original training length",
    ),
}


@pytest.mark.parametrize("verbose", [False, True], ids=["quiet", "verbose"])
@pytest.mark.parametrize("case", list(REFUSED))
def test_a_refused_dca_config_says_why_in_the_python_names(
    case: str, verbose: bool, python_site: Path, qwen2: Path
) -> None:
    sizes, reason = REFUSED[case]
    kwargs = {**CONTEXT, "dca": True, **sizes, "verbose": verbose}
    report, _stderr = construct(python_site, qwen2, kwargs)
    assert report.get("error") == "ValueError", report
    message = str(report["message"])
    assert message.startswith("Failed to create llama_context: "), message
    assert reason in message, message
    assert "--dca" not in message, message


def test_a_refused_kv_cache_says_why_too(python_site: Path, qwen2: Path) -> None:
    """Not DCA: any context llama.cpp refuses with an ERROR line (a quantized V cache without
    flash attention) has that line as the error's reason."""
    kwargs = {**CONTEXT, "type_v": 8, "flash_attn": False, "verbose": False}  # GGML_TYPE_Q8_0
    report, _stderr = construct(python_site, qwen2, kwargs)
    assert report.get("error") == "ValueError", report
    assert "quantized V cache requires flash_attn to be enabled" in str(report["message"])


def test_quiet_prints_no_warnings_and_an_error_once(python_site: Path, qwen2: Path) -> None:
    """verbose=False: a WARN line (sizes given with DCA off are ignored) is not printed; the
    refusal's ERROR line is (logging's ERROR level, as the logger is set)."""
    kwargs = {**CONTEXT, "dca_chunk_size": 64, "verbose": False}
    report, stderr = construct(python_site, qwen2, kwargs)
    assert report.get("ok") is True, report
    assert "ignored without" not in stderr, stderr[-2000:]
    refused = {**CONTEXT, "dca": True, **REFUSED["window-too-wide"][0], "verbose": False}
    report, stderr = construct(python_site, qwen2, refused)
    assert report.get("error") == "ValueError"
    assert "failed to initialize the context" in stderr, stderr[-2000:]


NOT_BOOL = ['"no"', '"false"', '"0"', '"off"', "0", "1", "None"]


@pytest.mark.parametrize("value", NOT_BOOL)
def test_dca_takes_a_bool_only(value: str, python_site: Path, qwen2: Path) -> None:
    kwargs = {**CONTEXT, "dca": value, "verbose": False}
    report, _stderr = construct(python_site, qwen2, kwargs, literal=["dca"])
    assert report.get("error") == "ValueError", report
    assert str(report["message"]).startswith("dca must be True or False (got "), report


@pytest.mark.parametrize("value", [True, False])
def test_dca_true_and_false_reach_the_c_struct(value: bool, python_site: Path, qwen2: Path) -> None:
    report, _stderr = construct(python_site, qwen2, {**CONTEXT, "dca": value, "verbose": False})
    assert report.get("params") == {"dca": value, "dca_chunk_size": -1, "use_extra_bufts": True}


SIZES = {
    "2**31": "2**31",
    "2**32+64": "2**32 + 64",  # wrapped by ctypes to 64, a valid size: accepted silently before
    "-1": "-1",
    "float": "64.0",
    "bool": "True",
    "str": '"64"',
}


@pytest.mark.parametrize("key", ["dca_chunk_size", "dca_local_window"])
@pytest.mark.parametrize("size", list(SIZES))
def test_a_size_outside_int32_is_refused_before_ctypes(
    size: str, key: str, python_site: Path, qwen2: Path
) -> None:
    kwargs = {**CONTEXT, "dca": True, key: SIZES[size], "verbose": False}
    report, _stderr = construct(python_site, qwen2, kwargs, literal=[key])
    assert report.get("error") == "ValueError", report
    want = f"{key} must be a positive integer below 2**31 or None (got "
    assert str(report["message"]).startswith(want), report


def test_the_largest_int32_size_reaches_llama_cpp(python_site: Path, qwen2: Path) -> None:
    """2**31 - 1 is Python's to pass: llama.cpp refuses it (beyond the training length)."""
    kwargs = {**CONTEXT, "dca": True, "dca_chunk_size": 2**31 - 1, "verbose": False}
    report, _stderr = construct(python_site, qwen2, kwargs)
    assert "dca_chunk_size (2147483647, dca_chunk_size) must be <=" in str(report["message"])


def test_verbose_prints_one_dca_line_per_context_not_the_debug_lines(
    python_site: Path, qwen2: Path
) -> None:
    kwargs = {**CONTEXT, "dca": True, "dca_chunk_size": 64, "dca_local_window": 8}
    _report, info = construct(python_site, qwen2, {**kwargs, "verbose": True}, decode=True)
    assert info.count("dca = on: chunk_size = 64 [--dca-chunk-size]") == 1, info[-3000:]
    assert "dca plan:" not in info and "input tensor '" not in info, info[-3000:]
    assert "llama_model_loader:" in info  # INFO lines are printed
    _report, debug = construct(
        python_site, qwen2, {**kwargs, "verbose": True}, decode=True, debug=True
    )
    assert "dca plan:" in debug and "input tensor '" in debug, debug[-3000:]


@pytest.fixture(scope="module")
def quantized(models_dir: TinyModels) -> Path:
    """Q8_0 projection matrices: weights the CPU backend's CPU_REPACK buffer type takes."""
    return models_dir.write(replace(TinySpec("qwen2"), weight_type="q8_0"))


def test_use_extra_bufts_reaches_llama_model_params(python_site: Path, quantized: Path) -> None:
    """The loader's log (DEBUG and INFO) names CPU_REPACK when it may use the extra buffer
    types, and never with use_extra_bufts=False; the text is the same either way."""
    base = {**CONTEXT, "verbose": True}
    on, on_log = construct(python_site, quantized, base, debug=True, decode=True)
    off, off_log = construct(
        python_site, quantized, {**base, "use_extra_bufts": False}, debug=True, decode=True
    )
    assert on.get("params", {}).get("use_extra_bufts") is True, on
    assert off.get("params", {}).get("use_extra_bufts") is False, off
    assert "CPU_REPACK" in on_log, on_log[-3000:]
    assert "CPU_REPACK" not in off_log, off_log[-3000:]
    assert "load_tensors:" in off_log


@pytest.mark.parametrize("value", ['"false"', "0", "None"])
def test_use_extra_bufts_takes_a_bool_only(value: str, python_site: Path, qwen2: Path) -> None:
    kwargs = {**CONTEXT, "use_extra_bufts": value, "verbose": False}
    report, _stderr = construct(python_site, qwen2, kwargs, literal=["use_extra_bufts"])
    assert report.get("error") == "ValueError", report
    assert str(report["message"]).startswith("use_extra_bufts must be True or False (got ")
