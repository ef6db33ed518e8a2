"""CI (CPU): the patched llama-server with Dual Chunk Attention, through its HTTP API on loopback.

- Slots: the default 4 slots (unified KV, cells of the slots interleaved) and 4 slots with one KV
  stream each get 8 concurrent OpenAI-style ``/v1/completions`` requests whose prompts and
  generations cross chunk boundaries (chunk_size 320, local_window 64: chunk_len 256). Every
  request succeeds and its greedy text equals the same request run one at a time, both on the same
  server afterwards (prompt cache reuse) and on a fresh one-slot server without a prompt cache.
- ``/slots`` save/restore: a slot saved with DCA settings X restores on a server with X (and
  then completes as the original slot did); a server with other settings or DCA off refuses it,
  its log naming both settings, and keeps serving.
- Speculative decoding: ``-md DRAFT --dca on`` starts when the draft model's own training context
  is shorter than the target's --dca-chunk-size (the draft gets DCA off by default) and gives the
  greedy text of the server without a draft; ``--spec-draft-dca on`` resolves the draft's chunk
  parameters for the draft model; values the draft model cannot take fail at start, naming the
  draft's flag.
- Other model shapes (head size 112 / GQA 7; Gemma 4's 512 / 256 heads; Qwen3.5's 256 head with
  M-RoPE, and the hybrid qwen35): two slots decode two multi-chunk prompts at once; greedy tokens
  and log-probabilities equal the dump tool's run.
- Sparse prefill: the --sparse-* flags reach the server's context (its log shows the values, their
  source and llama.cpp's context line); a prompt longer than the tiny threshold under budgets
  covering every key gives exactly the dense server's tokens and log-probabilities, under small
  budgets the dump tool's run with the same flags (and not the dense one).

The exact attention path (f32 KV, flash attention off) is used where texts are compared, so that
batching cannot move a greedy choice (its logits differ across batch layouts by ~1e-7 only).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from . import reference as ref
from .builds import LlamaBuild
from .llama_server import LlamaServer, Reply, ServerFailed
from .model_runs import Plan, model_path, run_tool
from .test_dca_model_shapes import CHUNK, SHAPES, dca_flags
from .test_sparse_prefill import LAST_Q, SLASH, VERTICAL, unambiguous_prompt
from .tiny_models import TinyModels, TinySpec, tokenizer_for, write_tiny_gguf

DCA = ("--dca", "on", "--dca-chunk-size", "320", "--dca-local-window", "64")  # chunk_len 256
EXACT = ("-ctk", "f32", "-ctv", "f32", "-fa", "off")
COMMON = ("-t", "2", "-c", "4096", "-b", "256", "-ub", "128", "--no-warmup", "--no-webui")
CONTEXT_LOG = ("-lv", "4")  # the log shows llama.cpp's context lines (each context's DCA settings)
PROMPT_LENGTHS = (250, 500, 700, 96, 300, 610, 180, 420)  # 250/500 decode across 256/512
N_PREDICT = 24
LAYOUTS: dict[str, tuple[str, ...]] = {
    "default-slots-unified-kv": (),  # llama-server's default: 4 slots, one unified KV stream
    "4-slots-split-kv": ("-np", "4", "--no-kv-unified"),
}


@pytest.fixture(scope="session")
def server_bin(dca_build: LlamaBuild) -> Path:
    path = dca_build.bin / "llama-server"
    if not path.is_file():
        pytest.fail(
            f"no llama-server in {dca_build.bin}: build the llama-server target "
            "(tests/evals/dca/trees.py TARGETS does when the tests build the tree)",
            pytrace=False,
        )
    return path


@pytest.fixture(scope="session")
def server_models(
    tmp_path_factory: pytest.TempPathFactory, dca_build: LlamaBuild
) -> dict[str, Path]:
    """The target (trained context 8192) and a draft with the same weights and vocabulary but a
    trained context of 256, shorter than the target's --dca-chunk-size 320."""
    root = tmp_path_factory.mktemp("server-models")
    target = TinySpec("qwen2", tokenizer=tokenizer_for(dca_build.src))
    return {
        "target": write_tiny_gguf(target, root / "target"),
        "draft": write_tiny_gguf(replace(target, n_ctx_train=256), root / "draft"),
    }


def prompt(n: int, seed: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(0, 256, n)]


PROMPTS = [prompt(n, seed) for seed, n in enumerate(PROMPT_LENGTHS)]


def completion(server: LlamaServer, tokens: Sequence[int], **extra: Any) -> Reply:
    body = {
        "prompt": list(tokens),
        "max_tokens": N_PREDICT,
        "temperature": 0.0,
        "ignore_eos": True,
        **extra,
    }
    return server.post("/v1/completions", body)


def text_of(reply: Reply) -> str:
    assert reply.status == 200, f"HTTP {reply.status}: {reply.body}"
    text: str = reply.body["choices"][0]["text"]
    assert text, f"empty completion: {reply.body}"
    return text


def run_all(server: LlamaServer, prompts: Sequence[Sequence[int]], concurrent: bool) -> list[str]:
    if not concurrent:
        return [text_of(completion(server, p)) for p in prompts]
    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        replies = list(pool.map(lambda p: completion(server, p), prompts))
    return [text_of(r) for r in replies]


def dca_settings(log: str) -> list[tuple[int, int]]:
    """(chunk_size, local_window) of every context the log shows created with DCA on, in order (a
    context that logs its settings on more than one line counts once)."""
    found: list[tuple[int, int]] = []
    for line in log.splitlines():
        if not re.search(r"\bdca\b", line, re.IGNORECASE):
            continue
        cs = re.search(r"chunk_size\s*=\s*(\d+)", line)
        w = re.search(r"local_window\s*=\s*(\d+)", line)
        if cs and w and (not found or found[-1] != (int(cs.group(1)), int(w.group(1)))):
            found.append((int(cs.group(1)), int(w.group(1))))
    return found


class Servers:
    """Starts llama-server processes under `work` and stops every one of them at the end."""

    def __init__(self, binary: Path, work: Path) -> None:
        self.binary, self.work = binary, work
        self.started: list[LlamaServer] = []
        self.count = itertools.count()

    def start(self, *args: str) -> LlamaServer:
        server = LlamaServer(self.binary, args, self.work / f"server-{next(self.count)}.log")
        self.started.append(server)
        return server.start()

    def stop_all(self) -> None:
        for server in self.started:
            server.stop()


@pytest.fixture
def servers(server_bin: Path, tmp_path: Path) -> Iterator[Servers]:
    s = Servers(server_bin, tmp_path)
    yield s
    s.stop_all()


# ---------------------------------------------------------------------------------------------
# slots: concurrent requests


@pytest.fixture(scope="module")
def one_at_a_time(
    server_bin: Path, server_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> list[str]:
    """The texts of PROMPTS run one at a time on a fresh one-slot server without prompt cache."""
    s = Servers(server_bin, tmp_path_factory.mktemp("one-at-a-time"))
    try:
        args = ("-np", "1", "--cache-ram", "0")
        alone = s.start("-m", str(server_models["target"]), *COMMON, *EXACT, *DCA, *args)
        return [text_of(completion(alone, p, cache_prompt=False)) for p in PROMPTS]
    finally:
        s.stop_all()


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_concurrent_requests_equal_one_at_a_time_runs(
    layout: str, servers: Servers, server_models: dict[str, Path], one_at_a_time: list[str]
) -> None:
    model = str(server_models["target"])
    busy = servers.start("-m", model, *COMMON, *CONTEXT_LOG, *EXACT, *DCA, *LAYOUTS[layout])
    assert dca_settings(busy.log_text()) == [(320, 64)], "the server context did not log dca = on"
    slots = busy.get("/slots")
    assert slots.status == 200 and len(slots.body.get("value", [])) == 4

    concurrent = run_all(busy, PROMPTS, concurrent=True)
    assert busy.alive()
    again = run_all(busy, PROMPTS, concurrent=False)  # one at a time, with the prompt cache
    reference = one_at_a_time

    for i, n in enumerate(PROMPT_LENGTHS):
        assert concurrent[i] == reference[i], (
            f"prompt {i} ({n} tokens): concurrent != one at a time"
        )
        assert again[i] == reference[i], f"prompt {i} ({n} tokens): cached rerun != one at a time"


def test_concurrent_requests_with_flash_attention_complete(
    servers: Servers, server_models: dict[str, Path]
) -> None:
    """The default attention path (flash attention, f16 KV) under the same concurrent load: every
    request completes and the server stays up (texts are compared on the exact path above)."""
    server = servers.start("-m", str(server_models["target"]), *COMMON, "-fa", "on", *DCA)
    texts = run_all(server, PROMPTS + PROMPTS[::-1], concurrent=True)
    assert len(texts) == 2 * len(PROMPTS)
    assert server.alive()


# ---------------------------------------------------------------------------------------------
# slots past the training context


def test_dca_slots_are_not_capped_at_the_training_context(
    servers: Servers, dca_build: LlamaBuild, tmp_path: Path
) -> None:
    """Upstream's llama-server caps every slot at the model's training context; with --dca on it
    must not (running past it is DCA's purpose). Found on the H200: a 32k-trained model refused a
    64k prompt with DCA on. Without DCA the cap stays (upstream's behaviour)."""
    spec = TinySpec("qwen2", n_ctx_train=512, tokenizer=tokenizer_for(dca_build.src))
    model = write_tiny_gguf(spec, tmp_path / "model")
    long_prompt = prompt(900, seed=11)  # past the 512 trained positions
    args = ("-m", str(model), *COMMON, "-np", "1", *EXACT)
    with_dca = servers.start(*args, *DCA)
    assert text_of(completion(with_dca, long_prompt))
    without = servers.start(*args, "--dca", "off")
    reply = completion(without, long_prompt)
    assert reply.status == 400, f"HTTP {reply.status}: {reply.body}"
    assert "exceeds the available context size" in str(reply.body)


# ---------------------------------------------------------------------------------------------
# slots: save / restore


def save_slot(server: LlamaServer, slot: int, name: str) -> Reply:
    return server.post(f"/slots/{slot}?action=save", {"filename": name})


def restore_slot(server: LlamaServer, slot: int, name: str) -> Reply:
    return server.post(f"/slots/{slot}?action=restore", {"filename": name})


def test_slot_save_restore_records_the_dca_settings(
    servers: Servers, server_models: dict[str, Path], tmp_path: Path
) -> None:
    model = str(server_models["target"])
    slots_dir = tmp_path / "slots"
    slots_dir.mkdir()
    base = ("-m", model, *COMMON, *EXACT, "--slot-save-path", str(slots_dir), "-np", "2")
    p = PROMPTS[2]  # 700 tokens: three chunks

    origin = servers.start(*base, *DCA)
    first = text_of(completion(origin, p, id_slot=0))
    saved = save_slot(origin, 0, "slot0.bin")
    assert saved.status == 200, saved.body
    restored = restore_slot(origin, 1, "slot0.bin")
    assert restored.status == 200, restored.body
    assert text_of(completion(origin, p, id_slot=1)) == first

    refusals = {
        "chunk_size 256": ("--dca", "on", "--dca-chunk-size", "256", "--dca-local-window", "32"),
        "dca off": ("--dca", "off"),
    }
    for what, settings in refusals.items():
        other = servers.start(*base, *settings)
        reply = restore_slot(other, 0, "slot0.bin")
        assert reply.status != 200, f"a slot saved with {' '.join(DCA)} restored with {what}"
        assert "Unable to restore slot" in str(reply.body)
        log = other.log_text()
        assert "chunk_size = 320" in log and "local_window = 64" in log, (
            f"{what}: the log does not name the saved DCA settings:\n{log[-3000:]}"
        )
        assert other.alive()
        text_of(completion(other, PROMPTS[0]))  # still serving
        other.stop()


# ---------------------------------------------------------------------------------------------
# speculative decoding with a draft model


def test_draft_model_with_dca_target_gives_the_same_greedy_text(
    servers: Servers, server_models: dict[str, Path]
) -> None:
    target, draft = str(server_models["target"]), str(server_models["draft"])
    base = ("-m", target, *COMMON, *CONTEXT_LOG, *EXACT, *DCA, "-np", "1")
    prompts = PROMPTS[:4]

    plain = servers.start(*base)
    want = [text_of(completion(plain, p)) for p in prompts]
    plain.stop()

    spec = servers.start(*base, "-md", draft, "--spec-type", "draft-simple")
    log = spec.log_text()
    assert dca_settings(log) == [(320, 64)], "the draft context must have DCA off by default"
    replies = [completion(spec, p) for p in prompts]
    assert [text_of(r) for r in replies] == want
    drafted = sum(r.body.get("timings", {}).get("draft_n", 0) for r in replies)
    accepted = sum(r.body.get("timings", {}).get("draft_n_accepted", 0) for r in replies)
    assert drafted > 0 and accepted > 0, "the draft model was not used"


def test_draft_dca_is_resolved_for_the_draft_model(
    servers: Servers, server_models: dict[str, Path]
) -> None:
    target, draft = str(server_models["target"]), str(server_models["draft"])
    spec = ("-md", draft, "--spec-type", "draft-simple")
    base = ("-m", target, *COMMON, *CONTEXT_LOG, *EXACT, *DCA, "-np", "1", *spec)

    own = servers.start(*base, "--spec-draft-dca", "on")
    settings = dca_settings(own.log_text())
    assert len(settings) == 2, f"expected DCA on in the target and in the draft context: {settings}"
    assert settings[0] == (320, 64)
    assert settings[1][0] <= 256, (
        f"the draft's chunk_size {settings[1]} exceeds its training context 256"
    )
    text_of(completion(own, PROMPTS[1]))
    own.stop()

    explicit = servers.start(
        *base,
        "--spec-draft-dca",
        "on",
        "--spec-draft-dca-chunk-size",
        "128",
        "--spec-draft-dca-local-window",
        "16",
    )
    assert dca_settings(explicit.log_text()) == [(320, 64), (128, 16)]
    explicit.stop()

    with pytest.raises(ServerFailed, match="--spec-draft-dca"):
        servers.start(*base, "--spec-draft-dca", "on", "--spec-draft-dca-chunk-size", "320")


# ---------------------------------------------------------------------------------------------
# other model shapes through the HTTP API

# test_dca_model_shapes.SHAPES, and the hybrid qwen35 (its Gated DeltaNet layers keep a state per
# slot); the native run is the reference for both
SHAPE_CASES = ("qwen3-d112-gqa7", "gemma4-d512-swa256", "qwen35-d256-rot64-gqa4", "qwen35-hybrid")
SERVER_SPECS = {**SHAPES, "qwen35-hybrid": TinySpec("qwen35-hybrid")}
SHAPE_PROMPTS = (prompt(130, seed=21), prompt(95, seed=22))  # chunk_len 40: 4 and 3 chunks
SHAPE_N_PREDICT = 8
SHAPE_ARGS = ("-c", "1024", "-b", "256", "-ub", "13")  # the ubatch crosses chunk boundaries
N_PROBS = 4
LOGPROB_TOL = 1e-4  # measured 4.6e-6 .. 2.2e-5 (batch layouts differ: two slots vs one sequence)


@dataclass(frozen=True)
class Served:
    """Per generated token: its id, and the server's top N_PROBS candidates (ids, logprobs)."""

    ids: list[int]
    candidates: npt.NDArray[np.int64]  # (n_generated, N_PROBS)
    logprobs: npt.NDArray[np.float64]  # (n_generated, N_PROBS)


def served_logprobs(reply: Reply) -> Served:
    assert reply.status == 200, f"HTTP {reply.status}: {reply.body}"
    steps = reply.body["completion_probabilities"]
    tops = [step["top_logprobs"] for step in steps]
    return Served(
        ids=[int(step["id"]) for step in steps],
        candidates=np.asarray([[int(c["id"]) for c in top] for top in tops], dtype=np.int64),
        logprobs=np.asarray([[float(c["logprob"]) for c in top] for top in tops]),
    )


def native_logprobs(
    tool: Path,
    model: Path,
    tokens: Sequence[int],
    args: Sequence[str],
    work: Path,
    n_predict: int = SHAPE_N_PREDICT,
    base: Sequence[str] = (*SHAPE_ARGS, *EXACT),
) -> tuple[list[int], npt.NDArray[np.float64]]:
    """The same prompt and greedy steps through the dump tool: generated ids and the full
    log-softmax rows that chose them (n_generated, n_vocab)."""
    plan = Plan(seqs=(tuple(tokens),), steps=(f"call 0:{len(tokens)}", f"gen 0 {n_predict}"))
    dump = run_tool(tool, plan, model, (*base, *args), work)
    logits = dump.logits()[0].astype(np.float64)[len(tokens) - 1 : -1]
    top = logits.max(axis=1, keepdims=True)
    logsm = logits - top - np.log(np.exp(logits - top).sum(axis=1, keepdims=True))
    return list(dump.tokens[0][len(tokens) :]), logsm


def logprob_gap(served: Served, native: npt.NDArray[np.float64]) -> float:
    """max |server logprob - native logprob| over each step's N_PROBS candidates (by id)."""
    want = np.take_along_axis(native, served.candidates, axis=1)
    return float(np.max(np.abs(served.logprobs - want)))


@pytest.mark.parametrize("shape", SHAPE_CASES)
def test_other_shapes_through_the_server_equal_the_native_run(
    shape: str,
    servers: Servers,
    dca_tool: Path,
    models_dir: TinyModels,
    tmp_path: Path,
) -> None:
    """Two slots decode two multi-chunk prompts of a shape test_dca_model_shapes.py checks against
    the float64 reference (head size 112 / GQA 7; Gemma 4's 512 / 256 heads, proportional rope,
    V = K), at once: each request's greedy tokens equal the dump tool's run of it alone, and its
    log-probabilities are within LOGPROB_TOL; a native run with the local window one larger is
    >= 10x further away (a server that dropped a setting or moved a position cannot pass)."""
    model = models_dir.write(SERVER_SPECS[shape])
    flags = dca_flags(CHUNK)
    server = servers.start(
        "-m", str(model), "-t", "2", "--no-warmup", "--no-webui", "-np", "2",
        *SHAPE_ARGS, *EXACT, *flags,
    )  # fmt: skip
    body = {"n_predict": SHAPE_N_PREDICT, "temperature": 0.0, "ignore_eos": True}
    body |= {"n_probs": N_PROBS, "cache_prompt": False}
    with ThreadPoolExecutor(max_workers=len(SHAPE_PROMPTS)) as pool:
        replies = list(
            pool.map(lambda p: server.post("/completion", {**body, "prompt": p}), SHAPE_PROMPTS)
        )
    assert server.alive()
    moved = (*flags[:-1], str(CHUNK.local_window + 1))
    for i, (tokens, reply) in enumerate(zip(SHAPE_PROMPTS, replies, strict=True)):
        served = served_logprobs(reply)
        want_ids, want = native_logprobs(dca_tool, model, tokens, flags, tmp_path / f"n{i}")
        assert served.ids == want_ids, f"prompt {i}: greedy tokens differ from the native run"
        gap = logprob_gap(served, want)
        assert gap <= LOGPROB_TOL, f"prompt {i}: log-probabilities {gap:.3g} from the native run"
        _, other = native_logprobs(dca_tool, model, tokens, moved, tmp_path / f"m{i}")
        far = logprob_gap(served, other)
        assert far >= 10 * LOGPROB_TOL, f"prompt {i}: local window + 1 only {far:.3g} away"


# ---------------------------------------------------------------------------------------------
# sparse prefill through the server

SPARSE_CONTEXT = ("-c", "1024", "-b", "512", "-ub", "64", "-fa", "on")
SPARSE_SERVER = ("-t", "2", "--no-warmup", "--no-webui", "-np", "1", *SPARSE_CONTEXT, *CONTEXT_LOG)
SPARSE_N_PREDICT = 4


def _sparse_flags(vertical: int, slash: int) -> tuple[str, ...]:
    return (
        *("--sparse-prefill", "on", "--sparse-threshold", "0", "--sparse-last-q", str(LAST_Q)),
        *("--sparse-vertical", str(vertical), "--sparse-slash", str(slash)),
    )


def test_sparse_prefill_flags_reach_the_server_context(
    servers: Servers, dca_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    model = model_path(models_dir, "qwen2")
    sparse = ref.SparseConfig(vertical=VERTICAL, slash=SLASH, last_q=LAST_Q, ubatch=64)
    tokens = unambiguous_prompt(model, ref.RunConfig(sparse=sparse))
    small_flags = _sparse_flags(VERTICAL, SLASH)
    started = {
        "dense": servers.start("-m", str(model), *SPARSE_SERVER),
        "full": servers.start("-m", str(model), *SPARSE_SERVER, *_sparse_flags(4096, 4096)),
        "small": servers.start("-m", str(model), *SPARSE_SERVER, *small_flags),
    }
    body: dict[str, Any] = {"n_predict": SPARSE_N_PREDICT, "temperature": 0.0, "ignore_eos": True}
    body |= {"n_probs": N_PROBS, "cache_prompt": False, "prompt": list(tokens)}
    served = {name: served_logprobs(s.post("/completion", body)) for name, s in started.items()}

    logs = {name: s.log_text() for name, s in started.items()}
    assert "sparse prefill on" not in logs["dense"]
    for name, (vertical, slash) in {"full": (4096, 4096), "small": (VERTICAL, SLASH)}.items():
        chosen = (
            f"sparse prefill: vertical {vertical} (flag), slash {slash} (flag), "
            f"threshold 0 (flag), last_q {LAST_Q} (flag)"
        )
        context = f"sparse prefill on: vertical = {vertical}, slash = {slash}, threshold = 0"
        assert chosen in logs[name] and context in logs[name], logs[name][-3000:]

    # budgets covering every key: the dense computation, bit for bit
    assert served["full"].ids == served["dense"].ids
    assert np.array_equal(served["full"].logprobs, served["dense"].logprobs)
    # small budgets: the dump tool's run with the same flags, far from its dense run
    want_ids, want = native_logprobs(
        dca_tool, model, tokens, small_flags, tmp_path / "n", SPARSE_N_PREDICT, SPARSE_CONTEXT
    )
    _ids, dense = native_logprobs(
        dca_tool, model, tokens, (), tmp_path / "d", SPARSE_N_PREDICT, SPARSE_CONTEXT
    )
    assert served["small"].ids == want_ids
    gap = logprob_gap(served["small"], want)
    assert gap <= LOGPROB_TOL, f"sparse server {gap:.3g} from the native sparse run"
    far = logprob_gap(served["small"], dense)
    assert far >= 10 * LOGPROB_TOL, f"sparse server only {far:.3g} from the dense run"
