"""The results document: every trial, every server job, and the cells computed from the trials.

A document (schema ``patchctl-longctx/1``) is written after every finished haystack, atomically,
so a run stopped from outside still leaves all finished trials. ``validate`` checks a document
read from disk before anything uses it; ``combine`` merges documents of one model and device
(several calls of one plan, ``--resume``) into one list of trials and jobs.

Trial fields (see docs/dca.md for their meaning): task, method, length, multiple, depth, depths,
seed, haystack, question, group, slot, expected, got, answer, correct, recall, distractors,
tokens, cached_tokens, prompt_ms, gen_ms, wall_s, peak_device_mib, peak_host_mib.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from evals.fsio import write_atomic

from . import SCHEMA
from .errors import BadInput
from .stats import cells

NUM = (int, float)
TOP: dict[str, tuple[type, ...]] = {
    "schema": (str,), "label": (str,), "device": (dict,), "model": (dict,), "server": (dict,),
    "corpus": (dict,), "params": (dict,), "plan": (dict,), "seed": (int,), "command": (list,),
    "methods": (dict,), "jobs": (list,), "trials": (list,), "cells": (list,),
}  # fmt: skip
MODEL: dict[str, tuple[type, ...]] = {
    "name": (str,), "sha256": (str,), "n_ctx_train": (int,), "arch": (str,), "file": (str,)
}
JOB: dict[str, tuple[type, ...]] = {
    "method": (str,), "lengths": (list,), "haystacks": (int,), "slots": (int,),
    "status": (str,), "memory": (dict,), "wall_s": NUM,
}  # fmt: skip
TRIAL: dict[str, tuple[type, ...]] = {
    "task": (str,), "method": (str,), "length": (int,), "multiple": NUM, "depth": NUM,
    "depths": (list,), "seed": (int,), "haystack": (int,), "question": (int,), "group": (str,),
    "expected": (list,), "got": (str,), "answer": (str,), "correct": (bool,), "recall": NUM,
    "distractors": (int,), "tokens": (int,), "cached_tokens": (int,), "prompt_ms": NUM,
    "gen_ms": NUM, "wall_s": NUM, "peak_device_mib": (*NUM, type(None)),
    "peak_host_mib": (*NUM, type(None)),
}  # fmt: skip
JOB_STATUS = ("ok", "partial", "budget", "unsupported", "failed", "probe")


def _check(obj: Any, spec: Mapping[str, tuple[type, ...]], where: str) -> None:
    if not isinstance(obj, dict):
        raise BadInput(f"{where} is not an object")
    for key, types in spec.items():
        if key not in obj:
            raise BadInput(f"{where} lacks {key!r}")
        value = obj[key]
        if isinstance(value, bool) and bool not in types:
            raise BadInput(f"{where}.{key} is a boolean, expected {types[0].__name__}")
        if not isinstance(value, types):
            raise BadInput(f"{where}.{key} is {type(value).__name__}, expected {types[0].__name__}")


def validate(doc: Any, source: str = "document") -> dict[str, Any]:
    """`doc` itself when it is a well-formed results document; BadInput naming the first flaw."""
    _check(doc, TOP, source)
    if doc["schema"] != SCHEMA:
        raise BadInput(f"{source}: schema {doc['schema']!r}, expected {SCHEMA!r}")
    _check(doc["model"], MODEL, f"{source}: model")
    if doc["model"]["n_ctx_train"] < 1:
        raise BadInput(f"{source}: model.n_ctx_train must be >= 1")
    for i, job in enumerate(doc["jobs"]):
        _check(job, JOB, f"{source}: jobs[{i}]")
        if job["status"] not in JOB_STATUS:
            raise BadInput(f"{source}: jobs[{i}].status {job['status']!r} not in {JOB_STATUS}")
    for i, trial in enumerate(doc["trials"]):
        _check(trial, TRIAL, f"{source}: trials[{i}]")
        if not 0.0 <= trial["depth"] <= 1.0 or not 0.0 <= trial["recall"] <= 1.0:
            raise BadInput(f"{source}: trials[{i}] depth and recall must lie in [0, 1]")
        if trial["length"] < 1 or trial["tokens"] > trial["length"] or trial["tokens"] < 1:
            raise BadInput(f"{source}: trials[{i}] tokens must lie in [1, length]")
    checked: dict[str, Any] = doc
    return checked


def load(path: Path) -> dict[str, Any]:
    """A results document from disk, validated."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(f"cannot read results {path}: {exc}") from None
    return validate(doc, str(path))


def write(doc: Mapping[str, Any], path: Path) -> None:
    """Write `doc` (cells recomputed from its trials) atomically as indented JSON."""
    out = dict(doc)
    out["cells"] = cells(out["trials"], int(out["model"]["n_ctx_train"]))
    write_atomic(path, (json.dumps(out, indent=1, ensure_ascii=False) + "\n").encode("utf-8"))


SUMMARY_SCHEMA = "patchctl-longctx-summary/1"
JOB_SUMMARY = ("method", "lengths", "haystacks", "slots", "lane", "n_ctx", "status", "reason",
               "units_planned", "units_done", "wall_s", "start_s", "dca", "args")  # fmt: skip


def prefill_rates(trials: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per (method, length): the haystacks' first questions (the whole prefill) as mean seconds
    and tokens/s of llama-server's own prompt timing, to check a cost model against."""
    groups: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for t in trials:
        if t["question"] == 0 and t["prompt_ms"] > 0:
            groups.setdefault((t["method"], int(t["length"])), []).append(t)
    rows = []
    for (method, length), ts in sorted(groups.items()):
        seconds = sum(float(t["prompt_ms"]) for t in ts) / 1000 / len(ts)
        tokens = sum(int(t["tokens"]) - int(t["cached_tokens"]) for t in ts) / len(ts)
        rows.append({"method": method, "length": length, "haystacks": len(ts),
                     "prefill_s": round(seconds, 2),
                     "tokens_per_s": round(tokens / seconds) if seconds else None})  # fmt: skip
    return rows


def summary(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The document without its trials: header, command, budget, every job (its status,
    reason, wall time, DCA settings and memory peaks), the cells and the measured prefill
    rates. What a reader (or the next plan) needs at a glance."""
    jobs = []
    for j in doc["jobs"]:
        row = {k: j.get(k) for k in JOB_SUMMARY}
        mem = j.get("memory") or {}
        row["memory"] = {k: v for k, v in mem.items() if k not in ("buffers", "breakdown")}
        jobs.append(row)
    head = ("label", "device", "model", "server", "corpus", "params", "plan", "seed", "command",
            "methods", "started", "wall_s", "budget")  # fmt: skip
    return {
        "schema": SUMMARY_SCHEMA, **{k: doc.get(k) for k in head}, "jobs": jobs,
        "cells": cells(doc["trials"], int(doc["model"]["n_ctx_train"])),
        "prefill": prefill_rates(doc["trials"]),
    }  # fmt: skip


def write_summary(doc: Mapping[str, Any], path: Path) -> None:
    write_atomic(path, (json.dumps(summary(doc), indent=1) + "\n").encode("utf-8"))


def cell_name(method: str, multiple: float) -> str:
    """A cell file's stem: ``dca-2x``, ``naive-0.5x``."""
    return f"{method}-{multiple:g}x"


def split_cells(doc: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """One document per (method, length): its trials, its cells (one per task) and the jobs
    that served it, under ``cell_name``."""
    n_train = int(doc["model"]["n_ctx_train"])
    keys = sorted({(t["method"], int(t["length"])) for t in doc["trials"]})
    out = {}
    for method, length in keys:
        trials = [t for t in doc["trials"] if (t["method"], t["length"]) == (method, length)]
        jobs = [j for j in doc["jobs"] if j["method"] == method and length in j["lengths"]]
        out[cell_name(method, length / n_train)] = {
            "schema": SCHEMA, "label": doc["label"], "model": doc["model"],
            "method": method, "length": length, "multiple": round(length / n_train, 4),
            "args": doc["methods"].get(method, {}).get("args"), "jobs": jobs,
            "cells": cells(trials, n_train), "trials": trials,
        }  # fmt: skip
    return out


def trial_key(t: Mapping[str, Any]) -> tuple[Any, ...]:
    """What makes a trial unique within one model and device."""
    return (t["method"], t["length"], t["group"], t["seed"], t["haystack"], t["question"])


def corpus_of(t: Mapping[str, Any], doc: Mapping[str, Any]) -> str:
    """The sha256 of the corpus a trial's haystack was cut from: the trial's own `corpus` (runs
    record it from 2026-12-01 on), else its document's."""
    return str(t.get("corpus") or (doc.get("corpus") or {}).get("sha256") or "")


def with_corpus(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The trials of `doc`, each naming its corpus."""
    return [{**t, "corpus": corpus_of(t, doc)} for t in doc["trials"]]


def runs_of(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The runs (harness calls) one document stands for: those a merged document lists, else its
    own header."""
    if doc.get("runs"):
        return [dict(r) for r in doc["runs"]]
    server = doc.get("server") or {}
    return [{"started": doc.get("started"), "wall_s": doc.get("wall_s"),
             "command": doc.get("command"), "server": server.get("version"),
             "budget": doc.get("budget")}]


def _content(record: Mapping[str, Any], drop: tuple[str, ...] = ("run",)) -> str:
    """A job or trial record as text, without its run index (a record --resume carried over
    compares equal to the original)."""
    return json.dumps({k: v for k, v in record.items() if k not in drop}, sort_keys=True)


def combine(docs: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Documents grouped by (model name, label): the first document's header, the runs of all of
    them (`runs`), every job (tagged with its run's index), and the trials of all of them, each
    naming its corpus. Records a `--resume` run carried over (a started server's job, a trial equal
    to one already merged) are kept once. A trial run again (same corpus, method, length, haystack
    and question; another record) is kept once, the earlier one; `repeats` counts such trials and
    those whose repeat scored differently. A run already merged (same id, or start, command and
    wall time) is not merged again, nor a document all of whose runs are. Give resumed documents
    before the runs that resumed them: a carried trial then keeps the corpus of the run that made
    it."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    kept: dict[tuple[str, str], dict[tuple[Any, ...], Mapping[str, Any]]] = {}
    contents: dict[tuple[str, str], set[str]] = {}
    jobs_seen: dict[tuple[str, str], set[str]] = {}
    for doc in docs:
        key = (str(doc["model"]["name"]), str(doc["label"]))
        merged = out.setdefault(key, {**doc, "runs": [], "jobs": [], "trials": [],
                                      "repeats": {"trials": 0, "disagree": 0}})
        if merged["model"]["sha256"] != doc["model"]["sha256"]:
            raise BadInput(f"two files label {key} with different model files")
        index = add_runs(merged["runs"], runs_of(doc))  # merged's own list
        if all(i is None for i in index):
            continue  # every run of this document is merged already (the same file twice)
        seen_jobs = jobs_seen.setdefault(key, set())
        for j in doc["jobs"]:
            run = index[min(int(j.get("run", 0)), len(index) - 1)]
            text = _content(j)
            if run is None or (j.get("log") and text in seen_jobs):
                continue  # a job of a run merged before, or a server's record carried over by
                # --resume (one that never started, e.g. skipped for the budget, is the same
                # record in every run that skipped it)
            seen_jobs.add(text)
            merged["jobs"] = [*merged["jobs"], {**j, "run": run}]
        prior = doc.get("repeats") or {}
        merged["repeats"] = {k: merged["repeats"][k] + int(prior.get(k, 0))
                             for k in ("trials", "disagree")}
        _merge_trials(merged, doc, kept.setdefault(key, {}),
                      contents.setdefault(key, set()))
    for merged in out.values():
        merged["cells"] = cells(merged["trials"], int(merged["model"]["n_ctx_train"]))
    return out


def _run_key(run: Mapping[str, Any]) -> str | None:
    """What tells one run from another: its id (runs from 2026-12-01 on), else its start, command
    and wall time; None (never equal) for a document that records none of them."""
    if run.get("id"):
        return str(run["id"])
    if not run.get("started"):
        return None
    return json.dumps([run.get("started"), run.get("command"), run.get("wall_s")])


def add_runs(have: list[dict[str, Any]], runs: list[dict[str, Any]]) -> list[int | None]:
    """Append to `have` the runs it lacks (see `_run_key`); for each of `runs`, its index in
    `have`, or None when it was there before (also earlier in `runs`)."""
    keys = {_run_key(r) for r in have} - {None}
    index: list[int | None] = []
    for r in runs:
        key = _run_key(r)
        if key is not None and key in keys:
            index.append(None)
        else:
            index.append(len(have))
            have.append(r)
            keys.add(key)
    return index


def unique_records(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Records in order, each equal content (its run index aside) kept once."""
    seen: set[str] = set()
    out = []
    for r in records:
        text = _content(r)
        if text not in seen:
            seen.add(text)
            out.append(dict(r))
    return out


def _merge_trials(merged: dict[str, Any], doc: Mapping[str, Any],
                  seen: dict[tuple[Any, ...], Mapping[str, Any]], contents: set[str]) -> None:
    """Add one document's trials to `merged` (see combine). `seen` holds the earlier documents'
    trials by identity, `contents` their records as text, each with and without its corpus.
    A trial that names its own corpus (runs from 2026-12-01 on) is carried over when its record,
    corpus included, was merged before; an older trial only has its document's corpus, which
    is not the one it was cut from when a run resumed a document of another corpus, so it is
    compared without it."""
    fresh = []
    here: set[str] = set()  # this document's records: one that carried a record twice (runs
    # resumed from overlapping documents did) keeps it once
    for t in doc["trials"]:
        own = bool(t.get("corpus"))
        t = {**t, "corpus": corpus_of(t, doc)}
        text = _content(t, ("run",) if own else ("run", "corpus"))
        if text in contents or text in here:
            continue  # carried over by --resume
        here.add(text)
        earlier = seen.get((t["corpus"], *trial_key(t)))
        if earlier is None:
            fresh.append(t)
        else:
            merged["repeats"]["trials"] += 1
            merged["repeats"]["disagree"] += int(bool(earlier["correct"]) != bool(t["correct"]))
    seen.update(((t["corpus"], *trial_key(t)), t) for t in fresh)
    contents.update(_content(t, drop) for t in fresh for drop in (("run",), ("run", "corpus")))
    merged["trials"] = [*merged["trials"], *fresh]


def done_units(trials: Iterable[Mapping[str, Any]]) -> set[tuple[Any, ...]]:
    """(method, length, group, seed, haystack) of haystacks with trials (for --resume)."""
    return {trial_key(t)[:5] for t in trials}
