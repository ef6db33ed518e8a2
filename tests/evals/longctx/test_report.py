"""evals/longctx/report.py: Markdown tables and the generated blocks of a doc."""

from __future__ import annotations

from pathlib import Path

import pytest

from evals.longctx import report, results
from evals.longctx.errors import BadInput

from .fakes import document, trial


def _doc() -> dict[str, object]:
    trials = [trial("passkey", "dca", 2048, c, h) for h, c in enumerate([True, True, False])]
    trials += [trial("mk_niah", "naive", 1024, False)]
    doc = document(trials)
    doc["cells"] = results.combine([doc])[("tiny", "cpu")]["cells"]
    return doc


def test_accuracy_table() -> None:
    table = report.accuracy_table(_doc())
    lines = table.splitlines()
    assert lines[0] == "| task | method | 1x (1024) | 2x (2048) |"
    assert "| passkey | dca |  | 2/3 [0.21, 0.94] |" in lines
    assert "| mk_niah | naive | 0/1 [0.00, 0.79] |  |" in lines
    assert lines.index("| passkey | dca |  | 2/3 [0.21, 0.94] |") < lines.index(
        "| mk_niah | naive | 0/1 [0.00, 0.79] |  |"
    )  # task order follows TASKS


def test_memory_table() -> None:
    table = report.memory_table(_doc())
    row = "| dca | 2304 | 1 | q8_0 | ok | 900 | 1000 | 300 | yes | 374 / 12 / 300 (CUDA0) |"
    assert row in table
    doc = _doc()
    jobs = doc["jobs"]
    assert isinstance(jobs, list)
    jobs[0]["memory"] = {"host_mib": 210.0, "device_mib": None, "device_total_mib": None,
                         "buffers": {"CPU_Mapped": {"model": 92.1},
                                     "CPU": {"KV": 56.25, "compute": 14.76}}}  # fmt: skip
    assert "| 210 |  | 92 / 56 / 15 (host) |" in report.memory_table(doc)  # no device peak
    jobs[0]["memory"] = {"device_mib": 24565.0, "buffers": {"CUDA0": {"KV": 20000.0}}}
    assert "| 24565 |  |  | no | 0 / 20000 / 0 (CUDA0) |" in report.memory_table(doc)


def test_blocks_are_regenerated_and_stale_ones_found(tmp_path: Path) -> None:
    data = tmp_path / "docs" / "r.json"
    data.parent.mkdir()
    results.write(_doc(), data)
    page = tmp_path / "page.md"
    page.write_text(
        "intro\n<!-- longctx:table accuracy docs/r.json -->\nold\n<!-- longctx:end -->\n"
        "<!-- longctx:table memory docs/r.json -->\n<!-- longctx:end -->\ntail\n"
    )
    assert report.stale_blocks(page, tmp_path) == ["accuracy docs/r.json", "memory docs/r.json"]
    assert report.update_doc(page, tmp_path) == ["accuracy docs/r.json", "memory docs/r.json"]
    text = page.read_text()
    assert text.startswith("intro\n") and text.endswith("<!-- longctx:end -->\ntail\n")
    assert "2/3 [0.21, 0.94]" in text and "old" not in text
    assert report.stale_blocks(page, tmp_path) == []
    page.write_text(text.replace("2/3", "3/3"))
    assert report.stale_blocks(page, tmp_path) == ["accuracy docs/r.json"]


def test_unknown_kind_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="unknown table kind"):
        report.render("speed", tmp_path / "r.json")
    with pytest.raises(BadInput, match="cannot read"):
        report.render("accuracy", tmp_path / "r.json")


def test_the_numbers_in_docs_dca_results_md_are_those_of_their_files() -> None:
    root = Path(__file__).resolve().parents[3]
    assert report.stale_blocks(root / "docs" / "dca-results.md", root) == []
