"""evals/dca/sparse_cpu_table.py: plan, commands, JSON and table (with a fake llama-bench)."""

from __future__ import annotations

import json
import stat
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from script_module import load_script

st = load_script("dca/sparse_cpu_table.py")
sm = load_script("dca/shape_matrix.py")


def test_the_shape_is_smollm2_135m_per_layer_with_its_trained_context() -> None:
    s = sm.SHAPES[st.SHAPE]
    assert (s.arch, s.n_embd, s.n_head, s.n_head_kv, s.head_dim, s.n_ff) == (
        "llama", 576, 9, 3, 64, 1536)
    assert s.n_ctx_train == 8192 and s.rope_freq_base == 100000.0
    assert 0 < s.layers < s.real_layers == 30
    # the matrices' shapes keep Qwen2.5's trained context (their chunks did not move)
    assert {sm.SHAPES[c.shape].n_ctx_train for c in sm.GPU_CELLS + sm.CPU_CELLS} == {32768}


def test_the_plan_is_balanced_per_context_and_ascending() -> None:
    arms = [st.ARM_BY_NAME[a] for a in ("dense-plain", "sparse-plain", "sparse-plain-low")]
    steps = st.plan([65536, 16384], 3, arms)
    assert [s.context for s in steps] == [16384] * 9 + [65536] * 9
    assert [s.arm for s in steps[:6]] == ["dense-plain", "sparse-plain", "sparse-plain-low",
                                          "sparse-plain-low", "sparse-plain", "dense-plain"]
    assert [s.rep for s in steps[:9]] == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_each_arm_is_one_prefill_of_n_tokens(tmp_path: Path) -> None:
    cmd = st.bench_command(tmp_path, tmp_path / "m.gguf", 32768, st.ARM_BY_NAME["sparse-dca-low"],
                           2, 4096)
    joined = " ".join(cmd)
    assert cmd[0] == str(tmp_path / "llama-bench")
    assert "-p 32768 -n 0 -r 1 --no-warmup -dca 1 -sparse 1 --sparse-threshold 4096" in joined
    assert "--sparse-per-head" not in joined
    head = " ".join(st.bench_command(tmp_path, tmp_path / "m.gguf", 32768,
                                     st.ARM_BY_NAME["sparse-dca-low-head"], 2, 4096))
    assert "-dca 1 -sparse 1 --sparse-threshold 4096 --sparse-per-head 1 -o json" in head
    dense = " ".join(st.bench_command(tmp_path, tmp_path / "m.gguf", 16384,
                                      st.ARM_BY_NAME["dense-plain"], 2, 4096))
    assert "-dca 0 -sparse 0 -o json" in dense and "--sparse-threshold" not in dense
    # the default-threshold arm passes no threshold: it measures the library's default
    default = " ".join(st.bench_command(tmp_path, tmp_path / "m.gguf", 16384,
                                        st.ARM_BY_NAME["sparse-plain"], 2, 4096))
    assert "-sparse 1 -o json" in default and "--sparse-threshold" not in default


FAKE_BENCH = r'''#!{python}
import json, sys
a = sys.argv
n = int(a[a.index("-p") + 1])
dca = a[a.index("-dca") + 1] == "1"
sparse = a[a.index("-sparse") + 1] == "1"
thr = int(a[a.index("--sparse-threshold") + 1]) if "--sparse-threshold" in a else 32768
with open({log!r}, "a") as f:
    f.write(" ".join(a[1:]) + "\n")
secs = n / 1000.0 * (1.1 if dca else 1.0)
if sparse and n > thr:
    secs *= {sparse_factor}
print(json.dumps([dict(n_prompt=n, n_gen=0, n_depth=0, dca=dca, sparse=sparse,
                       avg_ns=int(secs * 1e9), avg_ts=n / secs)]))
'''


def _fake_bin(tmp_path: Path, sparse_factor: float = 0.5) -> tuple[Path, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    bench = bin_dir / "llama-bench"
    bench.write_text(FAKE_BENCH.format(python=sys.executable, log=str(log),
                                       sparse_factor=sparse_factor))
    bench.chmod(bench.stat().st_mode | stat.S_IEXEC)
    return bin_dir, log


def _fake_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    model = tmp_path / "work" / "m.gguf"
    monkeypatch.setattr(st, "write_model", lambda work, gguf_py: model)
    # every measurement takes 1.5 s of CPU (the fake's real CPU time is Python's start-up noise)
    clock = iter(float(i) * 1.5 for i in range(1000))
    monkeypatch.setattr(st, "children_cpu_s", lambda: next(clock))


def test_run_writes_every_measurement_and_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_model(monkeypatch, tmp_path)
    bin_dir, log = _fake_bin(tmp_path, 0.5)
    out = tmp_path / "out.json"
    argv = ["run", "--bin", str(bin_dir), "--work", str(tmp_path / "work"), "--out", str(out),
            "--contexts", "16384,65536", "--reps", "2", "--tree", "abc"]
    assert st.main(argv) == 0
    doc = json.loads(out.read_text())
    assert doc["complete"] and doc["not_run"] == [] and doc["tree"] == "abc"
    assert doc["command_template"].endswith("-t 2 -fa 1 -p N -n 0 -r 1 --no-warmup ARM -o json")
    arms = {a["name"]: a["args"] for a in doc["arms"]}
    assert arms["sparse-dca-low"] == ["-dca", "1", "-sparse", "1", "--sparse-threshold", "4096"]
    ms = doc["measurements"]
    assert len(ms) == 2 * 2 * len(st.ARMS) == len(log.read_text().splitlines())
    assert all(m["rc"] == 0 and isinstance(m["load_before"], float) and m["cpu_s"] == 1.5
               for m in ms)
    by = {(m["context"], m["arm"], m["rep"]): m for m in ms}
    assert by[(16384, "dense-plain", 0)]["prefill_s"] == pytest.approx(16.384)
    assert by[(65536, "sparse-dca", 1)]["prefill_s"] == pytest.approx(65.536 * 1.1 * 0.5, rel=1e-3)
    assert by[(16384, "sparse-plain-low", 0)]["threshold"] == 4096
    assert by[(16384, "sparse-plain", 0)]["threshold"] == 32768
    assert by[(16384, "dense-dca", 0)]["threshold"] is None

    ratios = {(r["context"], r["arm"]): r for r in st.ratios(st.summarize([doc]))}
    # below the default threshold the sparse path does not engage: equal to dense
    assert ratios[(16384, "sparse-plain")]["ratio"] == pytest.approx(1.0)
    assert ratios[(16384, "sparse-plain")]["below_threshold_equal"] is True
    assert ratios[(16384, "sparse-dca-low")]["ratio"] == pytest.approx(0.5, rel=1e-3)
    assert "below_threshold_equal" not in ratios[(65536, "sparse-plain")]
    assert ratios[(65536, "sparse-plain")]["ratio"] == pytest.approx(0.5, rel=1e-3)

    assert st.main(["table", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| 16k | off | sparse (threshold 32768) | 2 | 16.4 s |" in text
    assert "| 64k | on | sparse (threshold 4096) | 2 |" in text
    ratio_16k = next(line for line in text.splitlines()
                     if line.startswith("| 16k | off | sparse (threshold 32768) |"))
    assert "| 1.00 (1.00-1.00), equal |" in ratio_16k  # the CPU column: 1.5 s each
    assert ratio_16k.count(", equal") == 1  # judged once, on CPU time
    rows = st.summarize([doc])
    assert all(r["n_cpu"] == 2 and r["mean_cpu_s"] > 0 for r in rows)


def _doc(context: int, times: Mapping[str, tuple[float, ...]],
         cpu: Mapping[str, tuple[float, ...]] | None = None) -> dict[str, Any]:
    return {"low_threshold": 4096, "measurements": [
        {"context": context, "arm": arm, "rep": r, "rc": 0, "prefill_s": t, "load_before": 6.0,
         "load_after": 6.0, "cpu_s": (cpu or {}).get(arm, (0.0,) * len(ts))[r]}
        for arm, ts in times.items() for r, t in enumerate(ts)]}


def test_at_the_threshold_the_check_uses_cpu_time_where_recorded() -> None:
    # 32768 tokens never attend to MORE than 32768 cells: the sparse path does not engage there
    times = {"dense-plain": (60.0, 85.0), "sparse-plain": (64.0, 70.0)}
    (row,) = st.ratios(st.summarize([_doc(32768, times, {"dense-plain": (45.0, 51.0),
                                                          "sparse-plain": (50.0, 52.0)})]))
    assert row["equal_judged_on"] == "cpu" and row["below_threshold_equal"] is True
    assert row["cpu_ratio"] == pytest.approx(51.0 / 48.0, rel=1e-3)
    assert (row["cpu_ratio_lo"], row["cpu_ratio_hi"]) == pytest.approx((50 / 51, 52 / 45), rel=1e-3)
    # a CPU-time slowdown is reported even where the wall times overlap
    slow = {"dense-plain": (45.0, 46.0), "sparse-plain": (60.0, 61.0)}
    (row,) = st.ratios(st.summarize([_doc(32768, times, slow)]))
    assert row["below_threshold_equal"] is False and row["equal_judged_on"] == "cpu"
    text = st.table([_doc(32768, times, slow)])
    assert "| 1.33 (1.30-1.36), NOT equal |" in text
    # above the threshold no check: the sparse path engages there
    (row,) = st.ratios(st.summarize([_doc(65536, times)]))
    assert "below_threshold_equal" not in row and row["cpu_ratio"] is None


def test_a_sparse_slowdown_below_the_threshold_is_not_equal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc: dict[str, Any] = {"low_threshold": 4096, "measurements": [
        {"context": 16384, "arm": arm, "rep": r, "rc": 0, "prefill_s": s, "load_before": 1.0,
         "load_after": 1.0, "cpu_s": 2 * s}
        for arm, times in (("dense-plain", (10.0, 10.2)), ("sparse-plain", (12.0, 12.1)))
        for r, s in enumerate(times)]}
    (row,) = st.ratios(st.summarize([doc]))
    assert row["ratio"] == pytest.approx(12.05 / 10.1, rel=1e-3)
    assert row["below_threshold_equal"] is False and row["equal_judged_on"] == "cpu"
    assert row["cpu_ratio"] == pytest.approx(12.05 / 10.1, rel=1e-3)
    doc["measurements"][0]["cpu_s"] = 0.0  # an older run without CPU time: the mean skips it
    (dense, _) = st.summarize([doc])
    assert dense["n_cpu"] == 1 and dense["mean_cpu_s"] == pytest.approx(20.4)


def test_stop_at_keeps_what_was_measured_and_lists_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_model(monkeypatch, tmp_path)
    bin_dir, log = _fake_bin(tmp_path)
    out = tmp_path / "out.json"
    argv = ["run", "--bin", str(bin_dir), "--work", str(tmp_path / "work"), "--out", str(out),
            "--contexts", "16384", "--arms", "dense-plain,sparse-plain",
            "--stop-at", str(time.time() - 1)]
    assert st.main(argv) == 1
    doc = json.loads(out.read_text())
    assert not doc["complete"] and doc["measurements"] == [] and not log.exists()
    assert [(s["arm"], s["why"]) for s in doc["not_run"]] == [
        ("dense-plain", "stop-at reached"), ("sparse-plain", "stop-at reached"),
        ("sparse-plain", "stop-at reached"), ("dense-plain", "stop-at reached")]


def test_a_failed_or_foreign_bench_is_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_model(monkeypatch, tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    bench = bin_dir / "llama-bench"
    bench.write_text("#!/bin/sh\necho '[{\"n_prompt\": 512, \"n_gen\": 0}]'\n")
    bench.chmod(0o755)
    out = tmp_path / "out.json"
    argv = ["run", "--bin", str(bin_dir), "--work", str(tmp_path / "work"), "--out", str(out),
            "--contexts", "16384", "--arms", "dense-plain"]
    assert st.main(argv) == 2
    doc = json.loads(out.read_text())
    (m,) = doc["measurements"]  # the run stops at the first failure
    assert m["rc"] == 2 and "not one prefill row of 16384" in m["stderr_tail"]
    assert [s["why"] for s in doc["not_run"]] == ["not reached"]


@pytest.mark.parametrize("argv", [
    ["plan", "--arms", "dense-plain,nope"],
    ["plan", "--contexts", "16k"],
    ["plan", "--contexts", "100"],
    ["plan", "--reps", "0"],
])
def test_bad_arguments_exit_2_naming_the_input(argv: list[str],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        st.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert any(word in err for word in ("nope", "16k", "512", "--reps"))


def test_table_names_an_unreadable_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert st.main(["table", str(bad)]) == 2
    assert str(bad) in capsys.readouterr().err


def test_the_published_table_is_the_kept_json_rendered() -> None:
    """docs/dca.md's sparse-prefill CPU table and the results README's are `table` of the kept
    JSON, as it renders now."""
    root = Path(__file__).resolve().parents[3]
    kept = root / "results" / "sparse-cpu" / "2026-12-05-table"
    docs = [json.loads(p.read_text()) for p in sorted(kept.glob("table-*.json"))]
    assert docs and all(d["model_file"] and d["tree"] for d in docs)
    rendered = st.table(docs)
    assert rendered.count("\n") >= 10  # 16k, 32k and 64k rows
    assert rendered in (root / "docs" / "dca.md").read_text(encoding="utf-8")
    assert rendered in (kept / "README.md").read_text(encoding="utf-8")
