"""evals/longctx/results.py: the document's schema, writing and combining."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from evals.longctx import results
from evals.longctx.errors import BadInput

from .fakes import document, trial


def test_write_then_load_computes_cells(tmp_path: Path) -> None:
    doc = document([trial(correct=True), trial(correct=False, question=1)])
    path = tmp_path / "r.json"
    results.write(doc, path)
    back = results.load(path)
    assert back["trials"] == doc["trials"]
    assert [(c["n"], c["correct"]) for c in back["cells"]] == [(2, 1)]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("trials"), "lacks 'trials'"),
        (lambda d: d.update(schema="other/1"), "schema"),
        (lambda d: d["model"].update(n_ctx_train="8k"), "n_ctx_train is str"),
        (lambda d: d["trials"][0].update(correct=1), "correct is int"),
        (lambda d: d["trials"][0].update(tokens=True), "tokens is a boolean"),
        (lambda d: d["trials"][0].update(tokens=4096), r"tokens must lie in \[1, length\]"),
        (lambda d: d["trials"][0].update(depth=1.5), "depth and recall"),
        (lambda d: d["jobs"][0].update(status="great"), "status"),
        (lambda d: d["jobs"][0].pop("memory"), "lacks 'memory'"),
    ],
)
def test_validate_names_the_first_flaw(mutate: Any, message: str) -> None:
    doc = copy.deepcopy(document([trial()]))
    mutate(doc)
    with pytest.raises(BadInput, match=message):
        results.validate(doc, "x.json")


def test_load_refuses_broken_json(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text("{")
    with pytest.raises(BadInput, match="cannot read"):
        results.load(path)
    path.write_text(json.dumps([1]))
    with pytest.raises(BadInput, match="not an object"):
        results.load(path)


def test_combine_merges_calls_and_drops_repeated_trials() -> None:
    a = document([trial(question=0), trial(question=1)])
    b = document([trial(question=1), trial(question=2, correct=False)])
    other = document([trial()], label="h200")
    merged = results.combine([a, b, other])
    assert sorted(merged) == [("tiny", "cpu"), ("tiny", "h200")]
    cpu = merged[("tiny", "cpu")]
    assert [t["question"] for t in cpu["trials"]] == [0, 1, 2]
    assert cpu["cells"][0]["n"] == 3 and len(cpu["jobs"]) == 2
    bad = document([trial()])
    bad["model"] = {**bad["model"], "sha256": "cd" * 32}  # type: ignore[dict-item]
    with pytest.raises(BadInput, match="different model"):
        results.combine([a, bad])


def test_combine_keeps_a_record_one_document_carries_twice_once() -> None:
    doc: dict[str, Any] = dict(document([trial(question=0), trial(question=1)]))
    doc["trials"] = doc["trials"] + [dict(t) for t in doc["trials"]]
    merged = results.combine([doc])[(doc["model"]["name"], doc["label"])]
    assert [t["question"] for t in merged["trials"]] == [0, 1]
    assert merged["repeats"] == {"trials": 0, "disagree": 0}
    assert [(c["n"], c["correct"]) for c in merged["cells"]] == [(2, 2)]


def test_combine_keeps_every_run_and_counts_repeats_that_disagree() -> None:
    a = document([trial(question=0), trial(question=1)])
    a["started"], a["command"] = "t1", ["run", "1"]
    b = document([trial(question=1, correct=False), trial(question=0, wall_s=0.2),
                  trial(question=2)])  # fmt: skip
    b["started"], b["command"] = "t2", ["run", "2"]
    merged = results.combine([a, b])[("tiny", "cpu")]
    assert [r["started"] for r in merged["runs"]] == ["t1", "t2"]
    assert [r["command"] for r in merged["runs"]] == [["run", "1"], ["run", "2"]]
    assert [j["run"] for j in merged["jobs"]] == [0, 1]
    assert merged["repeats"] == {"trials": 2, "disagree": 1}  # question 1 scored differently
    assert [t["correct"] for t in merged["trials"] if t["question"] == 1] == [True]  # the first
    carried = document([trial(question=0), trial(question=3)])  # q0: a's record, via --resume
    again = results.combine([merged, carried])[("tiny", "cpu")]
    assert len(again["runs"]) == 3 and [j["run"] for j in again["jobs"]] == [0, 1, 2]
    assert again["repeats"] == {"trials": 2, "disagree": 1}  # carried over, q0 not a repeat
    assert [t["question"] for t in again["trials"]] == [0, 1, 2, 3]


def test_done_units_are_per_haystack() -> None:
    done = results.done_units([trial(haystack=3, question=q) for q in range(4)])
    assert done == {("dca", 2048, "combined", 99, 3)}


def test_a_started_servers_job_carried_by_resume_is_kept_once() -> None:
    first = document([trial(question=0)])
    job: dict[str, object] = {**first["jobs"][0], "log": "h200-dca-2048-x1-lane0.log"}  # type: ignore[index]
    first["jobs"] = [job]
    resumed = document([trial(question=0), trial(question=1)])
    resumed["jobs"] = [job, {**job, "log": "other.log"}]
    merged = results.combine([first, resumed])[("tiny", "cpu")]
    assert [j["log"] for j in merged["jobs"]] == ["h200-dca-2048-x1-lane0.log", "other.log"]
    assert merged["repeats"] == {"trials": 0, "disagree": 0}


def test_trials_of_two_corpora_are_two_trials() -> None:
    a = document([trial(question=0)])
    a["corpus"] = {"sha256": "11" * 32}
    b = document([trial(question=0, correct=False, depth=0.5)])
    b["corpus"] = {"sha256": "22" * 32}
    merged = results.combine([a, b])[("tiny", "cpu")]
    assert [t["corpus"] for t in merged["trials"]] == ["11" * 32, "22" * 32]
    assert merged["repeats"] == {"trials": 0, "disagree": 0}
    assert merged["cells"][0]["n"] == 2


def test_equal_records_of_two_corpora_are_two_trials() -> None:
    # runs from 2026-12-01 on name each trial's corpus: a haystack of another corpus whose record
    # happens to equal an earlier one (the fake server's timings) is not a carried-over copy
    a = document([trial(question=0, corpus="11" * 32)])
    b = document([trial(question=0, corpus="11" * 32), trial(question=0, corpus="22" * 32)])
    merged = results.combine([a, b])[("tiny", "cpu")]
    assert [t["corpus"] for t in merged["trials"]] == ["11" * 32, "22" * 32]
    assert merged["repeats"] == {"trials": 0, "disagree": 0}  # b's first is a's, carried


def test_merging_a_merged_document_again_changes_nothing() -> None:
    a = document([trial(question=0)])
    a["started"], a["command"], a["wall_s"] = "t1", ["run", "1"], 5.0
    b = document([trial(question=0, wall_s=0.2), trial(question=1)])  # q0 run again
    b["started"], b["command"], b["wall_s"] = "t2", ["run", "2"], 6.0
    once = results.combine([a, b])[("tiny", "cpu")]
    assert once["repeats"] == {"trials": 1, "disagree": 0} and len(once["runs"]) == 2
    again = results.combine([once, b])[("tiny", "cpu")]  # b is in `once` already
    assert again["repeats"] == once["repeats"] and again["runs"] == once["runs"]
    assert len(again["trials"]) == len(once["trials"]) and len(again["jobs"]) == len(once["jobs"])
