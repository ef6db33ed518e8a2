"""evals/dca/shape_matrix.py: the shape matrix (plan, commands, the result JSON)."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest
from script_module import load_script

ds = load_script("dca/shape_matrix.py")


def test_the_gpu_matrix_covers_the_issue_and_fits_the_budget() -> None:
    cells = ds.GPU_CELLS
    shapes = [ds.SHAPES[c.shape] for c in cells]
    assert {s.gqa for s in shapes} >= {1, 2, 4, 7, 8}
    assert {s.head_dim for s in shapes} >= {64, 128, 256}
    assert {c.kv for c in cells} == {"f16", "q8_0", "q4_0"}
    assert any(524288 in c.depths for c in cells)
    assert all(c.depths == (32768, 131072) for c in cells if 524288 not in c.depths)
    assert cells[0].shape == "qwen2.5-0.5b" and ds.SHAPES["qwen2.5-0.5b"].layers == 24
    assert sum(ds.estimate_s(c, 4) for c in cells) < 8 * 60
    assert len({c.name for c in cells}) == len(cells)
    for s in shapes:  # real per-layer shapes: whole heads per KV head, fewer layers than the model
        assert s.n_head % s.n_head_kv == 0 and 0 < s.layers <= s.real_layers


def test_one_bench_command_per_cell_covers_dca_and_depths(tmp_path: Path) -> None:
    cell = ds.GPU_CELLS[0]
    cmd = ds.bench_command(tmp_path, tmp_path / "m.gguf", cell, 4, 99, None)
    assert cmd[0] == str(tmp_path / "llama-bench")
    joined = " ".join(cmd)
    assert "-d 32768,131072 -dca 0,1 -r 4 -ctk f16 -ctv f16 -o json" in joined
    assert "-fa 1 -ngl 99 -p 512 -n 64" in joined


FAKE_BENCH = r'''#!{python}
import json, sys
a = sys.argv
depths = [int(d) for d in a[a.index("-d") + 1].split(",")]
arms = [v == "1" for v in a[a.index("-dca") + 1].split(",")]
ratio = {ratio}
drift = {drift}  # the j-th DCA context's extra factor (a context-level difference)
rows = []
seen = {{False: 0, True: 0}}
for dca in arms:
    j = seen[dca]
    seen[dca] += 1
    for d in depths:
        for p, g in ((512, 0), (0, 64)):
            base = 100.0 if p else 50.0
            factors = (1.02, 0.98) if dca else (0.98, 1.02)  # rep i of DCA vs rep i of plain
            scale = ratio * drift[j] if dca else 1.0
            samples = [base * scale * f for f in factors]
            rows.append(dict(n_prompt=p, n_gen=g, n_depth=d, dca=dca, samples_ts=samples,
                             avg_ts=sum(samples) / 2, stddev_ts=abs(samples[1] - samples[0]) / 2))
print(json.dumps(rows))
'''


def _fake_bin(tmp_path: Path, ratio: float, drift: tuple[float, ...] = (1.0, 1.0)) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    bench = bin_dir / "llama-bench"
    bench.write_text(FAKE_BENCH.format(python=sys.executable, ratio=ratio, drift=list(drift)))
    bench.chmod(bench.stat().st_mode | stat.S_IEXEC)
    return bin_dir


def test_contexts_per_arm_run_in_balanced_order() -> None:
    assert ds.dca_order(1) == "0,1"
    assert ds.dca_order(2) == "0,1,1,0"
    assert ds.dca_order(3) == "0,1,1,0,0,1"


def test_two_contexts_per_arm_pool_into_one_ratio(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    argv = ["run", "--matrix", "cpu", "--cells", "qwen2.5-0.5b-l2/f16", "--bin",
            str(_fake_bin(tmp_path, 1.0, (0.9, 1.1))), "--work", str(tmp_path / "work"),
            "--out", str(out)]
    assert ds.main(argv) == 0  # defaults: -r 2 in 2 contexts per arm
    doc = json.loads(out.read_text())
    assert doc["reps"] == 2 and doc["instances"] == 2
    row = doc["rows"][0]
    assert "-dca 0,1,1,0 -r 2" in row["command"]
    assert row["ratio"] == pytest.approx(1.0) and row["instances"] == 2
    assert row["instance_ratios"] == pytest.approx([0.9, 1.1])
    assert row["reps"] == 4  # every repetition of both contexts
    assert row["ratio_min"] == pytest.approx(0.9 * 0.98 / 1.02, abs=1e-3)
    assert row["ratio_max"] == pytest.approx(1.1 * 1.02 / 0.98, abs=1e-3)


@pytest.mark.parametrize(("ratio", "rc"), [(1.05, 0), (0.9, 1)])
def test_run_writes_rows_spread_and_commands(tmp_path: Path, ratio: float, rc: int) -> None:
    out = tmp_path / "out.json"
    argv = ["run", "--matrix", "cpu", "--cells", "qwen2.5-0.5b-l2/f16", "--bin",
            str(_fake_bin(tmp_path, ratio)), "--work", str(tmp_path / "work"), "--out", str(out),
            "--reps", "2", "--instances", "1", "--tree", "abc"]
    assert ds.main(argv) == rc
    doc = json.loads(out.read_text())
    assert doc["complete"] and doc["tree"] == "abc" and doc["median_ratio"] == pytest.approx(ratio)
    assert [(r["test"], r["depth"]) for r in doc["rows"]] == [("pp512", 8192), ("tg64", 8192)]
    row = doc["rows"][0]
    assert row["ratio_min"] == pytest.approx(ratio * 0.98 / 1.02, abs=1e-3)
    assert row["ratio_max"] == pytest.approx(ratio * 1.02 / 0.98, abs=1e-3)
    assert row["ratio_sd"] > 0 and row["kv"] == "f16" and row["gqa"] == 7
    assert "-d 8192 -dca 0,1 " in row["command"] and "instances" not in row
    assert "--dca-chunk-size 6144" in row["command"]
    assert doc["runs"][0]["command"] == row["command"].split()
    assert (doc["cells_missing_target"] == []) == (ratio >= 0.95)


def test_budget_skips_cells_that_do_not_fit(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    argv = ["run", "--matrix", "gpu", "--bin", str(_fake_bin(tmp_path, 1.0)), "--work",
            str(tmp_path / "work"), "--out", str(out), "--budget-s", "1"]
    assert ds.main(argv) == 1  # nothing measured is not a pass
    doc = json.loads(out.read_text())
    assert doc["rows"] == [] and len(doc["skipped_for_budget"]) == len(ds.GPU_CELLS)


def test_a_failed_bench_is_exit_2(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    bench = bin_dir / "llama-bench"
    bench.write_text("#!/bin/sh\necho boom >&2\nexit 3\n")
    bench.chmod(0o755)
    out = tmp_path / "out.json"
    argv = ["run", "--matrix", "cpu", "--cells", "qwen2.5-0.5b-l2/f16", "--bin", str(bin_dir),
            "--work", str(tmp_path / "work"), "--out", str(out)]
    assert ds.main(argv) == 2
    assert "boom" in json.loads(out.read_text())["runs"][0]["stderr_tail"]


def test_a_missing_gguf_package_names_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "gguf", None)  # import gguf -> ImportError
    with pytest.raises(SystemExit) as exc:
        ds.import_gguf(tmp_path / "no-gguf-here")
    assert "--gguf-py TREE/gguf-py" in str(exc.value) and "no-gguf-here" in str(exc.value)


def test_the_qwen35_shape_keeps_the_hybrid_mix_and_the_memory_model_is_whole() -> None:
    s = ds.SHAPES["qwen3.5-9b"]
    assert s.arch == "qwen35" and s.attn_interval == 4 and s.dca_layers == s.layers // 4 == 2
    assert {c.shape for c in ds.GPU_CELLS} >= {"qwen3.5-9b"}
    full = ds.SHAPES["qwen3.5-9b-full"]
    assert full.layers == full.real_layers == 32 and full.n_vocab == 248320
    assert [c.shape for c in ds.MATRICES["memory"]] == ["qwen3.5-9b-full"]
    assert "qwen3.5-9b-full" not in {c.shape for c in ds.GPU_CELLS}
