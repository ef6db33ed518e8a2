"""evals/dca/sparse_gpu_table.py: cells, speed-ups, targets, refusals of sparse_speed.sh lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from script_module import load_script

gt = load_script("dca/sparse_gpu_table.py")


def _row(n: int, arm: str, seconds: float | None, rc: int = 0, wall: float = 1.0) -> dict[str, Any]:
    return {
        "n": n,
        "arm": arm,
        "rc": rc,
        "wall_s": wall,
        "command": "llama-bench ...",
        "avg_ns": None if seconds is None else int(seconds * 1e9),
    }


def _write(tmp_path: Path, rows: list[dict[str, Any]]) -> Path:
    p = tmp_path / "speed.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def test_speedups_and_targets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        _row(32768, "dca-dense", 2.0),
        _row(32768, "dca-sparse", 2.2),
        _row(32768, "plain-dense", 2.0),
        _row(32768, "plain-sparse", 2.02),
        _row(131072, "dca-dense", 30.0),
        _row(131072, "dca-sparse", 15.0),
        _row(1048576, "dca-dense", 260.0),
        _row(1048576, "dca-sparse", 70.0),
    ]
    out = tmp_path / "t.json"
    assert gt.main([str(_write(tmp_path, rows)), "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    met = {t["target"].split(":")[0]: t["met"] for t in data["models"][gt.DEFAULT_CELL]["targets"]}
    assert met["1M prefill (sparse DCA) <= 60 s"] is False  # 70 s
    assert met["1M"] is False  # 260/70 = 3.7x < 4x
    assert met["128k"] is True  # 2x
    assert met["32k (dca)"] is False and met["32k (plain)"] is True  # 1.10 vs 1.01
    text = capsys.readouterr().out
    assert "| 131072 | 30.00 | 15.00 | - | - | 2.00x | - | - / -; - / - |" in text
    assert met["GPU memory"] is False  # nothing sampled: not met, and said so


def test_a_capped_run_is_a_lower_bound_and_a_rerun_replaces(tmp_path: Path) -> None:
    rows = [
        _row(1048576, "dca-sparse", None, rc=124, wall=300.0),
        _row(1048576, "dca-dense", 250.0),
    ]
    table = gt.cells(gt.read_rows([_write(tmp_path, rows)]))
    cell = table[1048576]["dca-sparse"]
    assert cell.seconds is None and cell.lower_bound == 300.0 and cell.text() == ">300 (rc 124)"
    assert gt.speedup(table[1048576]["dca-dense"], cell) is None
    rows.append(_row(1048576, "dca-sparse", 50.0))
    table = gt.cells(gt.read_rows([_write(tmp_path, rows)]))
    assert table[1048576]["dca-sparse"].seconds == 50.0
    assert gt.speedup(table[1048576]["dca-dense"], table[1048576]["dca-sparse"]) == 5.0


@pytest.mark.parametrize(
    "line",
    [
        "not json",
        json.dumps({"n": 1, "arm": "other"}),
        json.dumps({"n": "1", "arm": "dca-dense"}),
        json.dumps([1]),
    ],
)
def test_unreadable_lines_are_refused_with_their_place(
    tmp_path: Path, line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_text(json.dumps(_row(32768, "dca-dense", 1.0)) + "\n" + line + "\n")
    assert gt.main([str(p)]) == 2
    assert f"{p}:2:" in capsys.readouterr().err


def test_models_are_reported_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        _row(131072, "dca-dense", 30.0),
        _row(131072, "dca-sparse", 15.0),
        {**_row(131072, "dca-dense", 40.0), "cell": "qwen3-next-attn/f16"},
        {**_row(131072, "dca-sparse", 10.0), "cell": "qwen3-next-attn/f16"},
    ]
    out = tmp_path / "t.json"
    assert gt.main([str(_write(tmp_path, rows)), "--json", str(out)]) == 0
    data = json.loads(out.read_text())["models"]
    assert data[gt.DEFAULT_CELL]["table"]["131072"]["dca-sparse"]["seconds"] == 15.0
    assert data["qwen3-next-attn/f16"]["table"]["131072"]["dca-sparse"]["seconds"] == 10.0
    text = capsys.readouterr().out
    assert "### qwen3-next-attn/f16" in text and "4.00x" in text and "2.00x" in text


def test_memory_is_the_runs_own_and_held_to_five_percent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def mem(row: dict[str, Any], idle: int, peak: int) -> dict[str, Any]:
        return {**row, "gpu_mem_idle_mib": idle, "gpu_mem_peak_mib": peak}

    rows = [
        mem(_row(131072, "dca-dense", 30.0), 500, 10500),  # 10000 MiB
        mem(_row(131072, "dca-sparse", 15.0), 500, 10900),  # 10400: 1.04
        mem(_row(1048576, "plain-dense", 200.0), 0, 20000),
        mem(_row(1048576, "plain-sparse", 100.0), 0, 21500),  # 1.075: the worst
        mem(_row(32768, "dca-dense", 1.0), 900, 800),  # peak below idle: not a reading
        mem(_row(32768, "dca-sparse", 1.0), 0, 5000),
    ]
    out = tmp_path / "t.json"
    assert gt.main([str(_write(tmp_path, rows)), "--json", str(out)]) == 0
    targets = json.loads(out.read_text())["models"][gt.DEFAULT_CELL]["targets"]
    t = next(t for t in targets if t["target"].startswith("GPU memory"))
    assert t["met"] is False and t["measured"] == pytest.approx(21500 / 20000)
    assert t["where"] == "1048576 plain"
    text = capsys.readouterr().out
    assert "| 131072 | 30.00 | 15.00 | - | - | 2.00x | - | 10000 / 10400; - / - |" in text
    assert "| 32768 | 1.00 | 1.00 | - | - | 1.00x | - | - / 5000; - / - |" in text
    table = gt.cells(gt.read_rows([_write(tmp_path, rows[:2])]))
    assert gt.memory_ratio(table[131072]["dca-dense"], table[131072]["dca-sparse"]) == 1.04


def test_plot_writes_a_png_of_the_speed_ups(tmp_path: Path) -> None:
    rows = [
        _row(131072, "dca-dense", 6.0),
        _row(131072, "dca-sparse", 8.0),
        _row(1048576, "dca-dense", 260.0),
        _row(1048576, "dca-sparse", 200.0),
    ]
    png = tmp_path / "speed.png"
    assert gt.main([str(_write(tmp_path, rows)), "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
