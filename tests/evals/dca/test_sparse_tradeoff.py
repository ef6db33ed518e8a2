"""evals/dca/sparse_tradeoff.py: paired rows, sign test, depth, prefill and the plot."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from longctx.fakes import document, trial
from script_module import load_script

from evals.longctx import results

st = load_script("dca/sparse_tradeoff.py")


def _trial(
    method: str,
    hay: int,
    q: int,
    correct: bool,
    depth: float,
    *,
    length: int = 65536,
    got: str = "x",
    distractors: int = 0,
    prompt_ms: float = 30.0,
) -> dict[str, Any]:
    """A well-formed mk_niah trial (the harness's test double) with what the comparison reads."""
    return trial(
        "mk_niah", method, length, correct, hay, q, seed=7, depth=depth, got=got,
        distractors=distractors, prompt_ms=prompt_ms,
    )  # fmt: skip


def _doc(trials: list[dict[str, Any]]) -> dict[str, Any]:
    doc: dict[str, Any] = document(trials, label="t")
    doc["model"] = {**doc["model"], "name": "m", "n_ctx_train": 32768}
    return doc


def _cell() -> list[dict[str, Any]]:
    """Two haystacks of 4 questions: dense right on 6, sparse on 3 of those and 1 dense missed."""
    out = []
    verdicts = [
        (True, True),
        (True, False),
        (True, False),
        (False, True),
        (True, True),
        (True, False),
        (True, True),
        (False, False),
    ]
    for i, (d, s) in enumerate(verdicts):
        hay, q = divmod(i, 4)
        depth = (i % 4) / 4 + 0.1
        ms_d = 4000.0 if q == 0 else 30.0
        ms_s = 2000.0 if q == 0 else 30.0
        out.append(_trial("dca", hay, q, d, depth, got=f"d{i}", prompt_ms=ms_d))
        out.append(
            _trial(
                "dca-sparse",
                hay,
                q,
                s,
                depth,
                got=f"d{i}" if d == s else f"s{i}",
                distractors=0 if s else 1,
                prompt_ms=ms_s,
            )
        )
    return out


def test_a_cell_is_compared_question_by_question() -> None:
    (r,) = st.rows(_doc(_cell()), [("dca", "dca-sparse")])
    assert (r["n"], r["haystacks"], r["multiple"]) == (8, 2, 2.0)
    assert (r["dense_correct"], r["sparse_correct"]) == (6, 4)
    assert (r["both"], r["dense_only"], r["sparse_only"], r["neither"]) == (3, 3, 1, 1)
    assert r["same_text"] == 4  # the four questions with the same verdict kept the same text
    assert r["sparse_distractors"] == 4 and r["dense_distractors"] == 0
    lo, hi = r["dense_wilson95"]
    assert r["sparse_in_dense_interval"] == (lo <= 4 / 8 <= hi)
    # per depth quarter: question i of each haystack lies in quarter i
    assert [(q["n"], q["dense"], q["sparse"]) for q in r["depth_quarters"]] == [
        (2, 2, 2),
        (2, 2, 0),
        (2, 2, 1),
        (2, 0, 1),
    ]
    # the first question of each haystack paid the prefill: 4 s dense, 2 s sparse
    assert (r["dense_prefill_s"], r["sparse_prefill_s"], r["speedup"]) == (4.0, 2.0, 2.0)


def test_sign_test_is_the_exact_two_sided_binomial() -> None:
    assert st.sign_test_p(0, 0) == 1.0
    assert st.sign_test_p(3, 3) == 1.0
    assert st.sign_test_p(5, 0) == pytest.approx(2 / 32)
    assert st.sign_test_p(17, 4) == pytest.approx(
        2 * sum(math.comb(21, i) for i in range(5)) / 2**21
    )
    assert st.sign_test_p(4, 17) == st.sign_test_p(17, 4)


def test_default_pairs_take_every_sparse_form_beside_its_dense_method() -> None:
    methods = {"dca", "dca-sparse", "dca-sparse-4k", "naive", "naive-sparse-4k", "yarn-sparse"}
    assert st.default_pairs(methods) == [
        ("dca", "dca-sparse"),
        ("dca", "dca-sparse-4k"),
        ("naive", "naive-sparse-4k"),
    ]


def test_unknown_methods_and_summaries_are_refused(tmp_path: Path) -> None:
    with pytest.raises(st.InputError, match="'yarn' is not in the document"):
        st.rows(_doc(_cell()), [("yarn", "dca-sparse")])
    summary = tmp_path / "s.json"
    summary.write_text(json.dumps({"cells": []}))
    assert st.main([str(summary)]) == 2
    assert st.main([str(tmp_path / "missing.json")]) == 2


def test_main_writes_markdown_json_and_a_plot(tmp_path: Path) -> None:
    src = tmp_path / "r.json"
    src.write_text(json.dumps(_doc(_cell())))
    out_j, out_m, out_p = tmp_path / "t.json", tmp_path / "t.md", tmp_path / "t.png"
    assert (
        st.main(
            [
                str(src),
                "dca=dca-sparse",
                "--json",
                str(out_j),
                "--md",
                str(out_m),
                "--plot",
                str(out_p),
            ]
        )
        == 0
    )
    rows = json.loads(out_j.read_text())["rows"]
    assert len(rows) == 1 and rows[0]["speedup"] == 2.0
    assert "| dca / dca-sparse | mk_niah | 2x (65536) | 8 (2) | 6/8" in out_m.read_text()
    assert out_p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _split_runs() -> tuple[dict[str, Any], dict[str, Any]]:
    """The cell as two runs: dense in the first, sparse and a rerun of dense in the second."""
    cell = _cell()
    first = _doc([t for t in cell if t["method"] == "dca"])
    second = _doc(
        [t for t in cell if t["method"] == "dca-sparse"]
        + [{**t, "prompt_ms": 1.0} for t in cell if t["method"] == "dca"][:3]
    )
    return first, second


def test_documents_of_two_runs_pair_and_a_rerun_must_reproduce() -> None:
    first, second = _split_runs()
    doc, repeated = st.merge([("a.json", first), ("b.json", second)])
    assert repeated == {"dca@65536": 3}
    (r,) = st.rows(doc, [("dca", "dca-sparse")])
    (one,) = st.rows(_doc(_cell()), [("dca", "dca-sparse")])
    same = {k: v for k, v in one.items() if "prefill" not in k and k != "speedup"}
    assert {k: r[k] for k in same} == same  # the same pairs, question by question
    # times of two runs are not compared
    assert (r["dense_prefill_s"], r["sparse_prefill_s"], r["speedup"]) == (None, None, None)
    # a rerun that answers otherwise breaks the pairing
    changed = {**second, "trials": [dict(t) for t in second["trials"]]}
    changed["trials"][-1]["got"] = "other"
    with pytest.raises(st.InputError, match="do not reproduce"):
        st.merge([("a.json", first), ("b.json", changed)])
    other_model = {**second, "model": {"name": "n", "n_ctx_train": 32768}}
    with pytest.raises(st.InputError, match="one model"):
        st.merge([("a.json", first), ("b.json", other_model)])


def test_main_reads_several_documents_then_the_pairs(tmp_path: Path) -> None:
    first, second = _split_runs()
    a, b, out_j = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "t.json"
    a.write_text(json.dumps(first))
    b.write_text(json.dumps(second))
    assert st.main([str(a), str(b), "dca=dca-sparse", "--json", str(out_j)]) == 0
    kept = json.loads(out_j.read_text())
    assert kept["source"] == [str(a), str(b)] and kept["repeated"] == {"dca@65536": 3}
    assert kept["rows"][0]["dense_correct"] == 6 and kept["rows"][0]["speedup"] is None
    assert st.main([str(a), "dca=dca-sparse", str(b)]) == 2  # documents come first
    assert st.main([str(a), "dca"]) == 2  # not a file, not a pair


@pytest.mark.parametrize(
    ("folder", "results_file"),
    [
        ("2026-12-05-sparse-gpu", "qwen2.5-coder-0.5b-h100.json"),
        ("2026-12-05-sparse-cpu-3x4x", "smollm2-135m-cpu-2core.json"),
    ],
)
def test_the_published_tables_come_from_their_results(folder: str, results_file: str) -> None:
    """results/longctx/FOLDER: tradeoff.json is what the tool computes from the kept trials, and
    docs/dca.md's table is its summary."""
    root = Path(__file__).resolve().parents[3]
    here = root / "results" / "longctx" / folder
    doc = results.load(here / results_file)
    kept = json.loads((here / "tradeoff.json").read_text())["rows"]
    assert st.rows(doc, st.default_pairs({t["method"] for t in doc["trials"]})) == kept
    assert st.summary_table(kept) in (root / "docs" / "dca.md").read_text(encoding="utf-8")


def test_the_per_head_table_pairs_two_runs_as_published() -> None:
    """results/longctx/2026-12-05-sparse-per-head-gpu: the per-head run paired with the earlier
    dense and per-group run; tradeoff.json is what the tool computes from both kept documents, the
    dense rerun reproduced the earlier run, and docs/dca.md's table is its summary."""
    root = Path(__file__).resolve().parents[3]
    longctx = root / "results" / "longctx"
    kept = json.loads((longctx / "2026-12-05-sparse-per-head-gpu" / "tradeoff.json").read_text())
    paths = [root / p for p in kept["source"]]
    assert [p.parent.name for p in paths] == [
        "2026-12-05-sparse-gpu",
        "2026-12-05-sparse-per-head-gpu",
    ]
    doc, repeated = st.merge([(str(p), results.load(p)) for p in paths])
    assert repeated == kept["repeated"] == {"dca@32768": 180}
    pairs = list(dict.fromkeys((r["dense"], r["sparse"]) for r in kept["rows"]))
    assert st.rows(doc, pairs) == kept["rows"]
    assert st.summary_table(kept["rows"]) in (root / "docs" / "dca.md").read_text(encoding="utf-8")


def test_pairs_sharing_a_sparse_method_keep_one_order() -> None:
    """Rows of two dense methods against one sparse method are ordered by the dense one's name
    too, so the table (which docs quote) is the same in every process, whatever the hash seed."""
    cell = _cell()
    dense = [t for t in cell if t["method"] == "dca"]
    trials = cell + [{**t, "method": m} for m in ("zeta", "naive") for t in dense]
    pairs = [("zeta", "dca-sparse"), ("naive", "dca-sparse"), ("dca", "dca-sparse")]
    table = st.summary_table(st.rows(_doc(trials), pairs), tasks=("mk_niah", "mk_niah"))
    order = [line.split(" | ")[0].lstrip("| ") for line in table.splitlines()[2:]]
    assert order == ["dca / dca-sparse", "naive / dca-sparse", "zeta / dca-sparse"]
