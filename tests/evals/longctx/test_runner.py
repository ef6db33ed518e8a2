"""evals/longctx/runner.py against a stand-in server (fake_server.py): the whole run loop."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from evals.longctx import results
from evals.longctx.haystack import load_token_cache
from evals.longctx.methods import BUILTIN, Method
from evals.longctx.plan import COSTS, Job, Plan, assign_lanes, grid_jobs, lengths_of
from evals.longctx.runner import RATIO_MIN, Budget, ModelRef, Run, RunConfig, run, unit_seed
from evals.longctx.tasks import TaskParams

from .fakes import corpus

N = 4096  # the stand-in counts characters: a combined haystack needs ~1.4k
PARAMS = TaskParams()
QUESTIONS = 1 + PARAMS.mk_keys + PARAMS.mv_keys + PARAMS.vt_chains


def _config(tmp_path: Path, binary: Path, methods: list[Method], plan: Plan,
            **kw: Any) -> RunConfig:  # fmt: skip
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF")
    ref = ModelRef("tiny", model, "ab" * 32, "llama", N)
    return RunConfig(
        binary=binary, model=ref, corpus=corpus(), plan=plan,
        methods={m.name: m for m in methods}, params=PARAMS, cost=COSTS["h200-0.5b"],
        out=tmp_path / "out" / "r.json", work=tmp_path / "logs", label="test",
        say=lambda line: None, **kw,
    )  # fmt: skip


def _grid(methods: list[Method], mults: tuple[float, ...], haystacks: int, slots: int = 2,
          lanes: int = 2, budget: float | None = None) -> Plan:  # fmt: skip
    jobs = grid_jobs(methods, lengths_of(mults, N), N, haystacks, slots)
    base = Plan("grid", ((),), budget_s=budget)
    return Plan("grid", assign_lanes(jobs, lanes, N, COSTS["h200-0.5b"], base, PARAMS),
                budget_s=budget)  # fmt: skip


def test_a_grid_run_end_to_end(tmp_path: Path, fake_bin: Path) -> None:
    methods = [BUILTIN[m] for m in ("naive", "linear", "dca", "dca-mscale")]
    cfg = _config(tmp_path, fake_bin, methods, _grid(methods, (0.5, 1, 2), 2),
                  token_cache=tmp_path / "tokens.json.xz")  # fmt: skip
    doc = run(cfg)
    assert results.load(cfg.out)["trials"] == doc["trials"]  # written, and valid
    status = {(j["method"], tuple(j["lengths"])): j["status"] for j in doc["jobs"]}
    assert status[("dca-mscale", (2 * N,))] == "unsupported"  # the factor is 1 up to N
    assert status[("linear", (2 * N,))] == "ok" and ("linear", (N,)) not in status
    counts = Counter((t["method"], t["length"]) for t in doc["trials"])
    want = {(m, n): 2 * QUESTIONS for m in ("naive", "dca") for n in (N // 2, N, 2 * N)}
    assert counts == {**want, ("linear", 2 * N): 2 * QUESTIONS}
    # exact scoring: the stand-in reads perfectly, except with --rope-scaling
    assert all(t["correct"] for t in doc["trials"] if t["method"] != "linear")
    assert not any(t["correct"] for t in doc["trials"] if t["method"] == "linear")
    # token-exact prompts: the longest question of every haystack is exactly the length
    longest: dict[tuple[Any, ...], int] = {}
    for t in doc["trials"]:
        key = (t["method"], t["length"], t["haystack"])
        longest[key] = max(longest.get(key, 0), t["tokens"])
    assert all(v == k[1] for k, v in longest.items())
    # a haystack's later questions reuse its shared context from the slot's cache
    later = [t for t in doc["trials"] if t["question"] > 0]
    assert all(t["cached_tokens"] >= t["tokens"] - 300 for t in later)  # questions < 300 chars
    assert all(t["cached_tokens"] < t["length"] // 2 for t in doc["trials"] if t["question"] == 0)
    # every method sees the same haystacks: same seeds and expected answers
    answers = {m: sorted((t["length"], t["haystack"], t["question"], tuple(t["expected"]))
                         for t in doc["trials"] if t["method"] == m)
               for m in ("naive", "dca")}  # fmt: skip
    assert answers["naive"] == answers["dca"]
    assert {t["seed"] for t in doc["trials"]} == {
        unit_seed(1234, "combined", n, h) for n in (N // 2, N, 2 * N) for h in range(2)
    }
    ok = [j for j in doc["jobs"] if j["status"] == "ok"]
    # past the trained length, every method but DCA raises llama-server's slot cap (the GGUF's
    # context_length) to the slot size; DCA needs no override (patch 0078 lifts the cap)
    for j in ok:
        override = [a for a in j["args"] if a.startswith("llama.context_length=int:")]
        per_slot = j["n_ctx"] // j["slots"]
        past = per_slot > N and not j["method"].startswith("dca")
        assert override == ([f"llama.context_length=int:{per_slot}"] if past else []), j
    dca = {j["method"]: j["dca"] for j in ok}
    assert dca["naive"] is None
    assert dca["dca"] == {"chunk_size": 3072, "local_window": 512, "chunk_len": 2560}
    assert all(j["memory"]["buffers"]["CPU"]["compute"] == 8.0 for j in ok)
    assert all(j["memory"]["host_mib"] > 0 for j in ok)
    assert len(load_token_cache(tmp_path / "tokens.json.xz", "ab" * 32, cfg.corpus.sha256)) > 10


def test_resume_runs_only_the_missing_haystacks(tmp_path: Path, fake_bin: Path) -> None:
    methods = [BUILTIN["naive"]]
    first = run(_config(tmp_path, fake_bin, methods, _grid(methods, (1,), 1, lanes=1)))
    second = run(_config(tmp_path, fake_bin, methods, _grid(methods, (1,), 3, lanes=1),
                         resume=(first,)))  # fmt: skip
    assert len(first["trials"]) == QUESTIONS
    assert len(second["trials"]) == 3 * QUESTIONS, [j["reason"] for j in second["jobs"]]
    assert sorted({t["haystack"] for t in second["trials"]}) == [0, 1, 2]
    assert second["jobs"][-1]["units_planned"] == 2
    # both runs stay on record: the first's command and start, its jobs tagged run 0
    assert [r["started"] for r in second["runs"]] == [first["started"], second["started"]]
    assert second["runs"][0]["command"] == first["command"]
    assert [j["run"] for j in second["jobs"]] == [0] * len(first["jobs"]) + [1] * (
        len(second["jobs"]) - len(first["jobs"]))
    assert second["repeats"] == {"trials": 0, "disagree": 0}


def test_resume_from_overlapping_documents_keeps_each_record_once(tmp_path: Path,
                                                                  fake_bin: Path) -> None:
    """A loop that adds one haystack per round and resumes every earlier round passes
    documents that carry each other's records; the new document holds each trial, run and job
    once (before, each round doubled the trials of the ones before it)."""
    methods = [BUILTIN["naive"]]
    docs: list[dict[str, Any]] = []
    for k in (1, 2, 3):
        docs.append(run(_config(tmp_path, fake_bin, methods, _grid(methods, (1,), k, lanes=1),
                                resume=tuple(docs))))  # fmt: skip
    last = docs[-1]
    assert len(last["trials"]) == 3 * QUESTIONS
    keys = [results.trial_key(t) for t in last["trials"]]
    assert len(keys) == len(set(keys))
    assert [r["started"] for r in last["runs"]] == [d["started"] for d in docs]
    # each run's jobs once: the first run's as the first document has them, and so on
    assert [j for j in last["jobs"] if j["run"] == 0] == docs[0]["jobs"]
    assert [j for j in last["jobs"] if j["run"] <= 1] == docs[1]["jobs"]
    merged = results.combine(docs)[("tiny", "test")]
    assert len(merged["trials"]) == 3 * QUESTIONS


def test_resume_with_another_corpus_runs_the_haystacks_again(tmp_path: Path,
                                                             fake_bin: Path) -> None:
    methods = [BUILTIN["naive"]]
    first = run(_config(tmp_path, fake_bin, methods, _grid(methods, (1,), 1, lanes=1)))
    other = dataclasses.replace(_config(tmp_path, fake_bin, methods,
                                        _grid(methods, (1,), 1, lanes=1), resume=(first,)),
                                corpus=corpus(n=150))  # fmt: skip
    second = run(other)
    corpora = [t["corpus"] for t in second["trials"]]
    assert corpora == [first["corpus"]["sha256"]] * QUESTIONS + [other.corpus.sha256] * QUESTIONS
    assert first["corpus"]["sha256"] != other.corpus.sha256
    merged = results.combine([first, second])[("tiny", "test")]
    assert len(merged["trials"]) == 2 * QUESTIONS  # both haystacks; neither is a repeat
    assert merged["repeats"] == {"trials": 0, "disagree": 0}


def test_budget_skips_jobs_that_cannot_fit(tmp_path: Path, fake_bin: Path) -> None:
    methods = [BUILTIN["naive"]]
    plan = Plan("p", ((Job("naive", (N,), 1), Job("naive", (64 * N,), 1)),), budget_s=30)
    doc = run(_config(tmp_path, fake_bin, methods, plan))
    assert [j["status"] for j in doc["jobs"]] == ["ok", "budget"]  # 256k is ~41 s on the H200
    assert {t["length"] for t in doc["trials"]} == {N}


def test_a_server_that_dies_fails_its_job_only(tmp_path: Path, fake_bin: Path) -> None:
    methods = [Method("crash", ("--crash",)), BUILTIN["dca"]]
    plan = Plan("p", ((Job("crash", (N,), 1), Job("dca", (N,), 1)),))
    doc = run(_config(tmp_path, fake_bin, methods, plan))
    jobs = {j["method"]: j for j in doc["jobs"]}
    assert jobs["crash"]["status"] == "failed" and "exited with code 1" in jobs["crash"]["reason"]
    assert jobs["dca"]["status"] == "ok" and len(doc["trials"]) == QUESTIONS


def test_a_memory_probe_runs_no_haystack(tmp_path: Path, fake_bin: Path) -> None:
    methods = [BUILTIN["dca"]]
    doc = run(_config(tmp_path, fake_bin, methods, Plan("p", ((Job("dca", (16 * N,), 0),),))))
    assert doc["trials"] == [] and doc["jobs"][0]["status"] == "probe"
    assert doc["jobs"][0]["memory"]["buffers"]["CPU"]["KV"] > 64


def test_a_queue_plan_runs_whole_cells_in_order_and_tops_them_up(
    tmp_path: Path, fake_bin: Path
) -> None:
    methods = [BUILTIN["naive"], BUILTIN["dca"]]
    jobs = (Job("naive", (N,), 1), Job("dca", (N,), 1), Job("dca", (64 * N,), 2),
            Job("naive", (N,), 3), Job("dca", (N,), 1), Job("naive", (2 * N,), 1))  # fmt: skip
    plan = Plan("q", (jobs,), budget_s=60, queue=True, workers=2)
    summary = tmp_path / "out" / "s.json"
    doc = run(_config(tmp_path, fake_bin, methods, plan, summary=summary))
    by = [(j["method"], j["lengths"][0], j["haystacks"], j["status"]) for j in doc["jobs"]]
    assert sorted(by) == sorted([
        ("naive", N, 1, "ok"), ("dca", N, 1, "ok"), ("dca", 64 * N, 2, "budget"),
        ("naive", N, 3, "ok"), ("dca", N, 1, "ok"), ("naive", 2 * N, 1, "ok"),
    ])  # fmt: skip  # 2 x 256k (~90 s on the H200) never fits 60 s: skipped, the rest goes on
    naive = sorted((t["haystack"], t["question"]) for t in doc["trials"]
                   if (t["method"], t["length"]) == ("naive", N))  # fmt: skip
    assert naive == [(h, q) for h in range(3) for q in range(QUESTIONS)]  # each haystack once
    again = [j for j in doc["jobs"] if (j["method"], j["haystacks"]) == ("dca", 1)
             and j["lengths"] == [N]]  # fmt: skip
    assert sorted(j["units_planned"] for j in again) == [0, 1]  # the second one had nothing left
    s = json.loads(summary.read_text())
    assert s["schema"] == "patchctl-longctx-summary/1" and "trials" not in s
    assert s["cells"] == doc["cells"] and s["budget"]["left_s"] < 60
    assert {(r["method"], r["length"]) for r in s["prefill"]} == {
        ("naive", N), ("dca", N), ("naive", 2 * N)}  # fmt: skip


def test_budget_ratio_trusts_a_faster_device_only_after_enough_time() -> None:
    budget = Budget(None)
    assert budget.ratio == 1.0
    budget.record(10.0, 2.0)  # 10 s expected so far: too little to believe the device is fast
    assert budget.ratio == 1.0
    budget.record(30.0, 8.0)
    assert budget.ratio == RATIO_MIN  # 10 / 40 measured / expected, floored
    budget.record(10.0, 90.0)
    assert budget.ratio == pytest.approx(100 / 50)


def test_a_request_that_hangs_fails_its_job_after_the_timeout(
    tmp_path: Path, fake_bin: Path
) -> None:
    methods = [Method("hang", ("--hang",)), BUILTIN["naive"]]
    plan = Plan("p", ((Job("hang", (N,), 1), Job("naive", (N,), 1)),))
    doc = run(_config(tmp_path, fake_bin, methods, plan, request_timeout_s=2.0))
    jobs = {j["method"]: j for j in doc["jobs"]}
    assert jobs["hang"]["status"] == "failed" and "timed out" in jobs["hang"]["reason"]
    assert jobs["naive"]["status"] == "ok" and len(doc["trials"]) == QUESTIONS


def test_scaled_rope_covers_the_whole_slot(tmp_path: Path, fake_bin: Path) -> None:
    # llama-server caps a YaRN slot at n_train x factor: a factor of length / n_train refused a
    # prompt of exactly that length (HTTP 400 at 262144 tokens on the H200); the factor now
    # covers the slot (prompt + question + answer), as served-context YaRN configs do
    methods = [BUILTIN["yarn"], BUILTIN["linear"]]
    cfg = _config(tmp_path, fake_bin, methods, _grid(methods, (2,), 1))
    runner = Run(cfg)
    for name in ("yarn", "linear"):
        job = Job(name, (2 * N,), 1, slots=2)
        args = runner.job_args(job)
        factor = float(args[args.index("--rope-scale") + 1])
        slot = runner.n_ctx(job) // job.slots
        assert slot > 2 * N and factor * N >= slot and factor < 2.2
