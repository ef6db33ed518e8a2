"""evals/longctx/publish.py: results into a dated folder and the generated blocks of a doc."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evals.longctx import publish, report, results
from evals.longctx.errors import BadInput

from .fakes import document, trial


def _doc(label: str = "h200") -> dict[str, object]:
    trials = [trial("passkey", "dca", 2048, c, h) for h, c in enumerate([True, False])]
    trials += [trial("passkey", "naive", 1024, True, 0), trial("mk_niah", "naive", 1024, False)]
    doc = document(trials, label)
    return results.validate(results.combine([doc])[("tiny", label)])


def test_publish_writes_data_cells_plots_page_and_doc_blocks(tmp_path: Path) -> None:
    md = tmp_path / "docs" / "dca.md"
    md.parent.mkdir()
    md.write_text(f"# DCA\n\n## Results\n\n{publish.MARKER}\n\n## Later\n")
    out = tmp_path / "results" / "longctx" / "2026-12-01"
    made = publish.publish([_doc(), _doc()], out, md, tmp_path)  # a repeated file merges
    names = sorted(p.relative_to(out).as_posix() for p in made)
    assert names == sorted([
        "tiny-h200.json", "tiny-h200-summary.json", "tiny-h200.md",
        "cells/tiny-h200-dca-2x.json", "cells/tiny-h200-naive-1x.json",
        "tiny-h200-passkey.png", "tiny-h200-mk_niah.png",
    ])  # fmt: skip
    merged = results.load(out / "tiny-h200.json")
    assert len(merged["trials"]) == 4  # the second copy's trials kept once
    cell = json.loads((out / "cells" / "tiny-h200-dca-2x.json").read_text())
    assert [c["n"] for c in cell["cells"]] == [2] and len(cell["trials"]) == 2
    assert cell["jobs"][0]["method"] == "dca"
    summary = json.loads((out / "tiny-h200-summary.json").read_text())
    assert "trials" not in summary and summary["cells"] == merged["cells"]
    page = (out / "tiny-h200.md").read_text()
    assert "| passkey | dca |  | 1/2 [0.09, 0.91] |" in page
    text = md.read_text()
    assert text.index("### tiny (h200, 2026-12-01)") < text.index(publish.MARKER)
    assert "[passkey](../results/longctx/2026-12-01/tiny-h200-passkey.png)" in text
    assert "| passkey | dca |  | 1/2 [0.09, 0.91] |" in text  # the block, filled
    assert report.stale_blocks(md, tmp_path) == []
    publish.publish([_doc(), _doc()], out, md, tmp_path)  # again: nothing added twice
    assert md.read_text() == text


def test_publish_needs_the_marker(tmp_path: Path) -> None:
    md = tmp_path / "dca.md"
    md.write_text("# DCA\n")
    with pytest.raises(BadInput, match="longctx:published"):
        publish.publish([_doc()], tmp_path / "out", md, tmp_path)


def test_the_page_lists_every_run_and_each_skipped_job_once(tmp_path: Path) -> None:
    docs: list[dict[str, Any]] = []
    for i in (1, 2):
        trials = [trial("passkey", "dca", 2048, True, 0, question=i - 1)]
        if i == 2:  # question 0 again, scored differently
            trials.append(trial("passkey", "dca", 2048, False, 0, question=0))
        doc: dict[str, Any] = document(trials, "h200")
        doc["started"], doc["command"] = f"2026-12-0{i}T00:00:00+00:00", ["longctx", f"run{i}"]
        doc["jobs"] = [*doc["jobs"], {**doc["jobs"][0], "status": "budget", "lengths": [8192],
                                      "reason": "1 haystack(s) would overrun the budget"}]
        docs.append(doc)
    out = tmp_path / "out"
    publish.publish(docs, out, None, tmp_path)
    page = (out / "tiny-h200.md").read_text()
    assert "1. started 2026-12-01T00:00:00+00:00" in page and "longctx run1" in page
    assert "2. started 2026-12-02T00:00:00+00:00" in page and "longctx run2" in page
    assert "1 trials ran in more than one run" in page and "1 of the repeats scored" in page
    skipped = [line for line in page.splitlines() if line.startswith("- dca@8192")]
    assert skipped == ["- dca@8192 x1: budget (1 haystack(s) would overrun the budget) (run 1, 2)"]
