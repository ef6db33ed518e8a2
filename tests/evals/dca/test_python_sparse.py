"""Sparse prefill from the patched llama-cpp-python wheel: `Llama(sparse_prefill=True, ...)` and
`python -m llama_cpp.server --sparse_prefill true ...` reach llama.cpp's context
(llama_set_sparse_prefill) and compute what llama.cpp's own flags compute.

- Logits through `Llama.eval` (300 tokens, ubatches of 64, flash attention, f16 KV), plain
  attention and DCA: small budgets equal the native dump tool's run with the same --sparse-*
  flags on the same tree (float noise of two builds of one source) and differ from dense by far
  more; `sparse_per_head=True` equals the native run with --sparse-per-head on and differs from
  the per-group one; budgets covering every key, a threshold at the KV length and
  `sparse_prefill=False` with knobs given are byte-identical to a `Llama` without any sparse
  keyword.
- A model's DCA config (the GGUF's `<arch>.attention.dca.config`) gives the defaults a keyword
  leaves open, as llama.cpp's flags do, each printed with its source under `verbose`; a malformed
  config is a ValueError naming the entry.
- Every bad value is a ValueError naming the keyword, before the model loads; sparse prefill
  without flash attention is refused (it would silently stay dense); a value only llama.cpp
  refuses reaches the Python error in the keyword's name. The by-value struct reaches the C
  function field by field.
- The server takes the settings from its command line and from environment variables (as its
  other settings), and refuses a bad one at start, naming it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from . import reference as ref
from .model_runs import Plan, model_path, random_tokens, run_tool
from .test_python_server import HOST, _free_port, _request, server
from .test_python_user import construct
from .test_python_wheel import run_python
from .test_sparse_prefill import (
    BASE,
    DCA_ON,
    GGUF_SPARSE,
    LAST_Q,
    SELECT,
    SLASH,
    VERTICAL,
    _gguf_model,
    sparse_on,
)
from .test_sparse_prefill import DCA as SPARSE_DCA
from .tiny_models import TinyModels

N_TOKENS = 300
UBATCH = 64
CONTEXT: dict[str, object] = {
    "n_ctx": 512,
    "n_batch": 512,
    "n_ubatch": UBATCH,
    "n_threads": 2,
    "n_threads_batch": 2,
    "flash_attn": True,
}
NATIVE_ARGS = (*BASE, "-ub", str(UBATCH))
SAME_SOURCE_TOL = 1e-5  # two builds of one source: float noise only
SMALL: dict[str, object] = {
    "sparse_prefill": True,
    "sparse_vertical": VERTICAL,
    "sparse_slash": SLASH,
    "sparse_threshold": 0,
    "sparse_last_q": LAST_Q,
}
FULL = {**SMALL, "sparse_vertical": 4096, "sparse_slash": 4096}
PYTHON_DCA: dict[str, object] = {
    "dca": True,
    "dca_chunk_size": SPARSE_DCA.chunk_size,
    "dca_local_window": SPARSE_DCA.local_window,
}
ATTN: dict[str, tuple[dict[str, object], tuple[str, ...]]] = {
    "plain": ({}, ()),
    "dca": (PYTHON_DCA, DCA_ON),
}

LOGITS = r"""
import json, sys
import numpy as np
from llama_cpp import Llama
cfg = json.loads(sys.argv[1])
for kwargs, out in zip(cfg["runs"], cfg["outs"]):
    llm = Llama(model_path=cfg["model"], logits_all=True, verbose=False, **kwargs)
    llm.eval(cfg["tokens"])
    np.save(out, np.asarray(llm.scores[: len(cfg["tokens"])], dtype=np.float32))
    llm.close()
"""


def llama_logits(
    site: Path,
    model: Path,
    tokens: tuple[int, ...],
    runs: Mapping[str, Mapping[str, object]],
    work: Path,
) -> dict[str, npt.NDArray[np.float32]]:
    """`Llama(model, **kwargs).eval(tokens)` logits of every run, in one child process."""
    work.mkdir(parents=True, exist_ok=True)
    outs = {name: work / f"{name}.npy" for name in runs}
    config = {
        "model": str(model),
        "tokens": list(tokens),
        "runs": [dict(kwargs) for kwargs in runs.values()],
        "outs": [str(outs[name]) for name in runs],
    }
    proc = run_python(site, "-c", LOGITS, json.dumps(config))
    assert proc.returncode == 0, proc.stderr[-4000:]
    return {name: np.load(path) for name, path in outs.items()}


@pytest.mark.parametrize("attn", list(ATTN))
def test_sparse_keywords_compute_what_llama_cpp_flags_compute(
    attn: str, python_site: Path, dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    model = model_path(models_dir, "qwen2")
    tokens = random_tokens(N_TOKENS, seed=1)
    kwargs, flags = ATTN[attn]
    base = {**CONTEXT, **kwargs}
    got = llama_logits(
        python_site,
        model,
        tokens,
        {
            "dense": base,
            "small": {**base, **SMALL},
            "full": {**base, **FULL},
            "at-kv-length": {**SMALL, **base, "sparse_threshold": 512},  # n_ctx 512
            "off-with-knobs": {**SMALL, **base, "sparse_prefill": False},
            "per-head": {**base, **SMALL, "sparse_per_head": True},
            "off-per-head": {**SMALL, **base, "sparse_prefill": False, "sparse_per_head": True},
        },
        tmp_path / "py",
    )
    plan = Plan(seqs=(tokens,), steps=(f"call 0:{N_TOKENS}",))
    native = run_tool(
        dca_tool, plan, model, (*NATIVE_ARGS, *flags, *sparse_on()), tmp_path / "native"
    ).logits()[0]
    native_dense = run_tool(
        dca_tool, plan, model, (*NATIVE_ARGS, *flags), tmp_path / "native-dense"
    ).logits()[0]
    native_per_head = run_tool(
        dca_tool,
        plan,
        model,
        (*NATIVE_ARGS, *flags, *sparse_on(), *SELECT["head"]),
        tmp_path / "native-per-head",
    ).logits()[0]
    assert ref.rel_err(got["dense"], native_dense) <= SAME_SOURCE_TOL
    assert ref.rel_err(got["small"], native) <= SAME_SOURCE_TOL
    assert ref.rel_err(got["per-head"], native_per_head) <= SAME_SOURCE_TOL
    # two query heads on one KV head: one selection per head is not the group's
    apart = ref.rel_err(got["per-head"], got["small"])
    assert apart >= 100 * SAME_SOURCE_TOL, f"per head vs per group only {apart:.3g} apart"
    effect = ref.rel_err(got["small"], got["dense"])
    assert effect >= 100 * SAME_SOURCE_TOL, (
        f"the sparse keywords changed the logits by {effect:.3g}"
    )
    for same in ("full", "at-kv-length", "off-with-knobs", "off-per-head"):
        assert np.array_equal(got[same], got["dense"]), f"{same} is not byte-identical to dense"


def test_the_gguf_config_gives_the_defaults_and_a_keyword_wins(
    python_site: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    plain = model_path(models_dir, "qwen2")
    gguf = _gguf_model(models_dir, GGUF_SPARSE)  # budgets 34 / 104, threshold 0, last_q 16
    tokens = random_tokens(N_TOKENS, seed=1)
    by_keywords = llama_logits(
        python_site,
        plain,
        tokens,
        {"small": {**CONTEXT, **SMALL}, "dense": CONTEXT},
        tmp_path / "plain",
    )
    from_gguf = llama_logits(
        python_site,
        gguf,
        tokens,
        {
            "defaults": {**CONTEXT, "sparse_prefill": True},
            "wide": {
                **CONTEXT,
                "sparse_prefill": True,
                "sparse_vertical": 4096,
                "sparse_slash": 4096,
            },
        },
        tmp_path / "gguf",
    )
    assert np.array_equal(from_gguf["defaults"], by_keywords["small"])
    assert np.array_equal(from_gguf["wide"], by_keywords["dense"])
    src = "GGUF qwen2.attention.dca.config"
    _report, log = construct(
        python_site, gguf, {**CONTEXT, "sparse_prefill": True, "sparse_slash": 200, "verbose": True}
    )
    want = (
        f"Llama: sparse prefill: sparse_vertical {VERTICAL} ({src}), sparse_slash 200 (keyword), "
        f"sparse_threshold 0 ({src}), sparse_last_q {LAST_Q} ({src})"
    )
    assert want in log, log[-3000:]
    # llama.cpp's own line: the values reached the context
    assert f"sparse prefill on: vertical = {VERTICAL}, slash = 200, threshold = 0" in log
    # no config: the library's defaults, said so
    _report, log = construct(
        python_site, plain, {**CONTEXT, "sparse_prefill": True, "verbose": True}
    )
    assert (
        "sparse_vertical 1000 (default), sparse_slash 6096 (default), "
        "sparse_threshold 32768 (default), sparse_last_q 64 (default)" in log
    ), log[-3000:]


@pytest.mark.parametrize(
    ("config", "names"),
    [
        ({"sparse_attention_threshold": -1}, "sparse_attention_threshold must be an integer"),
        (
            {"sparse_attention_last_q": "64"},
            'sparse_attention_last_q must be an integer from 1 to 2^31-1, got "64"',
        ),
        ({"sparse_attention_config": {"0": 1}}, "sparse_attention_config must be a list"),
        ({"sparse_attention_config": [{"0": ["a_shape", 1, 2, 0.5]}]}, "[0][0] must be"),
        (
            {"sparse_attention_config": [{"3": ["vertical_and_slash", 0, 2, 0.5]}]},
            "[0][3] vertical must be an integer from 1",
        ),
        ([1, 2], "not a JSON object"),
    ],
)
def test_a_malformed_gguf_config_names_the_entry(
    config: object, names: str, python_site: Path, models_dir: TinyModels
) -> None:
    model = _gguf_model(models_dir, config)
    report, _log = construct(
        python_site, model, {**CONTEXT, "sparse_prefill": True, "verbose": False}
    )
    assert report.get("error") == "ValueError", report
    message = str(report["message"])
    assert message.startswith("GGUF qwen2.attention.dca.config: "), message
    assert names in message and "give every sparse_* keyword" in message, message
    # off, the config is not read
    report, _log = construct(python_site, model, {**CONTEXT, "verbose": False})
    assert report.get("ok") is True, report


NOT_BOOL = ['"yes"', '"false"', "0", "1", "None"]


@pytest.mark.parametrize("keyword", ["sparse_prefill", "sparse_per_head"])
@pytest.mark.parametrize("value", NOT_BOOL)
def test_the_switches_take_a_bool_only(
    keyword: str, value: str, python_site: Path, models_dir: TinyModels
) -> None:
    model = model_path(models_dir, "qwen2")
    kwargs = {**CONTEXT, keyword: value, "verbose": False}
    report, _log = construct(python_site, model, kwargs, literal=[keyword])
    assert report.get("error") == "ValueError", report
    assert str(report["message"]).startswith(f"{keyword} must be True or False (got ")


LEAST = {"sparse_vertical": 1, "sparse_slash": 1, "sparse_threshold": 0, "sparse_last_q": 1}
BAD_KNOBS = {
    "below": None,  # LEAST - 1
    "2**31": "2**31",
    "2**32+64": "2**32 + 64",  # ctypes would keep 64, a valid value
    "float": "64.0",
    "bool": "True",
    "str": '"64"',
}


@pytest.mark.parametrize("knob", list(LEAST))
@pytest.mark.parametrize("bad", list(BAD_KNOBS))
def test_a_bad_knob_is_refused_before_the_model_loads(
    knob: str, bad: str, python_site: Path, tmp_path: Path
) -> None:
    """On the sparse side and off: the check needs no model (the path does not exist)."""
    value = BAD_KNOBS[bad] or str(LEAST[knob] - 1)
    kwargs = {**CONTEXT, **SMALL, knob: value, "verbose": False}
    report, _log = construct(python_site, tmp_path / "absent.gguf", kwargs, literal=[knob])
    assert report.get("error") == "ValueError", report
    want = f"{knob} must be an integer from {LEAST[knob]} to 2**31 - 1 or None (got "
    assert str(report["message"]).startswith(want), report


def test_sparse_prefill_without_flash_attention_is_refused(
    python_site: Path, tmp_path: Path
) -> None:
    kwargs = {**CONTEXT, **SMALL, "flash_attn": False, "verbose": False}
    report, _log = construct(python_site, tmp_path / "absent.gguf", kwargs)
    assert report.get("error") == "ValueError", report
    assert str(report["message"]).startswith("sparse_prefill=True needs flash_attn=True"), report


BY_VALUE = r"""
import json, sys
import llama_cpp
from llama_cpp import Llama, _logger
cfg = json.loads(sys.argv[1])
d = llama_cpp.llama_sparse_prefill_default_params()
out = {"defaults": [d.enabled, d.vertical, d.slash, d.threshold, d.last_q, d.per_head],
       "refused": {}}
llm = Llama(model_path=cfg["model"], verbose=False, **cfg["kwargs"])
for field in ("vertical", "slash", "threshold", "last_q"):
    p = llama_cpp.llama_sparse_prefill_params(True, 1, 1, 0, 1)
    setattr(p, field, -5)
    _logger.clear_errors()
    rc = llama_cpp.llama_set_sparse_prefill(llm._ctx.ctx, p)
    out["refused"][field] = [rc, _logger.failure("x")]
llm._sparse_given["sparse_last_q"] = 0  # past Python's check: llama.cpp's reason, in Python names
try:
    llm._set_sparse_prefill()
except ValueError as exc:
    out["error"] = str(exc)
print(json.dumps(out))
"""


def test_the_struct_reaches_llama_cpp_by_value_and_its_reason_the_python_error(
    python_site: Path, models_dir: TinyModels
) -> None:
    model = model_path(models_dir, "qwen2")
    config = {"model": str(model), "kwargs": {**CONTEXT, **SMALL}}
    proc = run_python(python_site, "-c", BY_VALUE, json.dumps(config))
    assert proc.returncode == 0, proc.stderr[-4000:]
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["defaults"] == [False, 1000, 6096, 32768, 64, False]
    for field, (rc, reason) in out["refused"].items():
        least = 0 if field == "threshold" else 1
        assert rc == -1
        assert reason == f"x: sparse prefill: {field} must be >= {least} (got -5)", reason
    assert out["error"] == ("Failed to set sparse prefill: sparse_last_q must be >= 1 (got 0)")


def test_verbose_says_what_it_ignores_and_quiet_says_nothing(
    python_site: Path, models_dir: TinyModels
) -> None:
    model = model_path(models_dir, "qwen2")
    knobs = {**CONTEXT, "sparse_vertical": 34, "sparse_last_q": 16}
    report, log = construct(python_site, model, {**knobs, "verbose": True})
    assert report.get("ok") is True, report
    assert "Llama: sparse_vertical, sparse_last_q ignored without sparse_prefill=True" in log
    assert "sparse prefill on" not in log
    report, log = construct(python_site, model, {**knobs, **SMALL, "verbose": False})
    assert report.get("ok") is True, report
    assert "sparse" not in log, log[-2000:]


PICKLED = r"""
import json, pickle, sys
from llama_cpp import Llama
cfg = json.loads(sys.argv[1])
llm = Llama(model_path=cfg["model"], verbose=False, **cfg["kwargs"])
copy = pickle.loads(pickle.dumps(llm))
p = copy.sparse_prefill_params
state = llm.__getstate__()
print(json.dumps({"copy": [p.enabled, p.vertical, p.slash, p.threshold, p.last_q, p.per_head],
                  "state": {k: state[k] for k in state if k.startswith("sparse")}}))
"""


def test_a_pickled_llama_keeps_its_sparse_keywords(
    python_site: Path, models_dir: TinyModels
) -> None:
    """The keywords as given: a None takes the model's default again."""
    model = _gguf_model(models_dir, GGUF_SPARSE)
    kwargs = {**CONTEXT, "sparse_prefill": True, "sparse_slash": 200, "sparse_per_head": True}
    proc = run_python(
        python_site, "-c", PICKLED, json.dumps({"model": str(model), "kwargs": kwargs})
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["copy"] == [True, VERTICAL, 200, 0, LAST_Q, True]
    assert out["state"] == {
        "sparse_prefill": True,
        "sparse_vertical": None,
        "sparse_slash": 200,
        "sparse_threshold": None,
        "sparse_last_q": None,
        "sparse_per_head": True,
    }


# ---------------------------------------------------------------------------------------------
# the server

PROMPT = " ".join(f"word{i}" for i in range(120))  # ~170 test-tokenizer tokens: above last_q
SERVER_SETTINGS = {
    "n_ctx": 512,
    "n_batch": 512,
    "n_ubatch": UBATCH,
    "n_threads": 2,
    "n_threads_batch": 2,
    "flash_attn": True,
    "verbose": True,
}
# the server's knobs: the small budgets, selected per query head
SERVER_SPARSE = {**SMALL, "sparse_per_head": True}
C_LINE = (
    f"sparse prefill on: vertical = {VERTICAL}, slash = {SLASH}, threshold = 0, last_q = {LAST_Q}"
    ", per query head"
)


def _complete(port: int) -> dict[str, object]:
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 4, "temperature": 0.0, "seed": 1}
    return _request(port, "/v1/completions", body)


def _arg(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


@pytest.mark.parametrize("configured_by", ["command-line", "environment"])
def test_the_server_takes_the_sparse_settings(
    configured_by: str,
    python_site: Path,
    models_dir: TinyModels,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = model_path(models_dir, "qwen2")
    port = _free_port()
    args = ["--host", HOST, "--port", str(port), "--model", str(model), "--model_alias", "tiny"]
    for key, value in SERVER_SETTINGS.items():
        args += [f"--{key}", _arg(value)]
    for key, knob in SERVER_SPARSE.items():
        if configured_by == "command-line":
            args += [f"--{key}", _arg(knob)]
        else:
            monkeypatch.setenv(key.upper(), _arg(knob))
    log = tmp_path / "server.log"
    with server(python_site, args, log, port):
        answer = _complete(port)
    usage = answer["usage"]
    assert isinstance(usage, dict) and usage["prompt_tokens"] > LAST_Q
    text = log.read_text()
    assert text.count(C_LINE) == 1, text[-3000:]
    assert f"sparse_vertical {VERTICAL} (keyword)" in text


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("sparse_vertical", "0", "greater than or equal to 1"),
        ("sparse_threshold", "-1", "greater than or equal to 0"),
        ("sparse_last_q", str(2**31), "less than 2147483648"),
    ],
)
def test_the_server_refuses_a_bad_setting_at_start(
    key: str, value: str, reason: str, python_site: Path, tmp_path: Path
) -> None:
    model = tmp_path / "never-loaded.gguf"
    args = ["--model", str(model), "--port", str(_free_port()), "--host", HOST, f"--{key}", value]
    proc = subprocess.run(
        [sys.executable, "-m", "llama_cpp.server", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(python_site)},
    )
    assert proc.returncode != 0
    assert key in proc.stderr and reason in proc.stderr, proc.stderr[-3000:]
