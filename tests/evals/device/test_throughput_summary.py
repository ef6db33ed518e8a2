"""evals/device/throughput_summary.py: DCA on/off ratios from llama-bench JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from script_module import load_script

ts = load_script("device/throughput_summary.py")


def _row(n_prompt: int, n_gen: int, depth: int, dca: bool, avg: float) -> dict[str, object]:
    return {
        "n_prompt": n_prompt,
        "n_gen": n_gen,
        "n_depth": depth,
        "dca": dca,
        "avg_ts": avg,
        "stddev_ts": 1.0,
        "samples_ts": [avg] * 4,
    }


def _bench(tmp_path: Path, rows: list[dict[str, object]]) -> Path:
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(rows))
    return path


def test_ratio_per_test_and_depth(tmp_path: Path) -> None:
    bench = _bench(
        tmp_path,
        [
            _row(512, 0, 32768, False, 100.0),
            _row(0, 64, 32768, False, 50.0),
            _row(512, 0, 32768, True, 120.0),
            _row(0, 64, 32768, True, 47.0),
        ],
    )
    rows = {(r["test"], r["depth"]): r for r in ts.summarize("m", bench, "cmd", 0.95)}
    assert rows[("pp512", 32768)]["ratio"] == 1.2 and rows[("pp512", 32768)]["met"]
    assert rows[("tg64", 32768)]["ratio"] == 0.94 and not rows[("tg64", 32768)]["met"]
    assert rows[("tg64", 32768)]["reps"] == 4 and rows[("tg64", 32768)]["command"] == "cmd"


def test_missing_half_of_a_pair_is_an_error(tmp_path: Path) -> None:
    bench = _bench(tmp_path, [_row(0, 64, 131072, False, 50.0)])
    with pytest.raises(ValueError, match="tg64 at depth 131072 lacks DCA on"):
        ts.summarize("m", bench, None, 0.95)


def test_main_writes_rows_and_fails_on_a_miss(tmp_path: Path) -> None:
    bench = _bench(tmp_path, [_row(0, 64, 32768, False, 100.0), _row(0, 64, 32768, True, 90.0)])
    out = tmp_path / "summary.json"
    assert ts.main([str(out), f"m={bench}:llama-bench -dca 0,1", "--tree", "abc"]) == 1
    summary = json.loads(out.read_text())
    assert summary["tree"] == "abc" and summary["rows"][0]["ratio"] == 0.9
    assert summary["rows"][0]["command"] == "llama-bench -dca 0,1"
    assert ts.main([str(out), f"m={bench}", "--target", "0.9"]) == 0


def test_contexts_of_one_arm_pool_and_pair_in_run_order(tmp_path: Path) -> None:
    plain_a, plain_b = _row(0, 64, 32768, False, 100.0), _row(0, 64, 32768, False, 110.0)
    plain_b["samples_ts"] = [105.0, 115.0]
    bench = _bench(tmp_path, [plain_a, _row(0, 64, 32768, True, 99.0),
                              _row(0, 64, 32768, True, 104.0), plain_b])
    (row,) = ts.summarize("m", bench, None, 0.95)
    assert row["ratio"] == pytest.approx(101.5 / 105.0, abs=1e-3) and row["met"]
    assert row["instances"] == 2 and row["instance_ratios"] == [0.99, 0.945]
    assert row["reps"] == 6 and row["plain_ts"] == 105.0
    # the pooled spread of 100 x4, 105 and 115: larger than either context's own
    assert row["plain_sd"] == pytest.approx(6.06, abs=0.05)


def test_one_context_per_arm_keeps_its_own_spread(tmp_path: Path) -> None:
    bench = _bench(tmp_path, [_row(0, 64, 32768, False, 100.0), _row(0, 64, 32768, True, 96.0)])
    (row,) = ts.summarize("m", bench, None, 0.95)
    assert row["plain_sd"] == 1.0 and "instances" not in row and row["reps"] == 4
