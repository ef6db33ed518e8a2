"""evals/device/mem_project.py: the real weights put in place of a stand-in's, per gpu_mem run."""

from __future__ import annotations

import json
from pathlib import Path

from script_module import load_script

mp = load_script("device/mem_project.py")

ROW = "| - CUDA0 (H200) | 143155 = {free} + (45170 = 10894 +   32818 +    1457) +   {unacc} |"
LOADED = ROW.format(free=97385, unacc="      600")
PROBE = ROW.format(free=142575, unacc="   -44589")


def _doc(rc: int = 0) -> dict[str, object]:
    return {"kv": "f16", "runs": [{"ctx": 1048576, "dca": "on", "rc": rc,
                                   "log": [PROBE, LOADED]}]}


def test_the_loaded_breakdown_is_read_not_the_probe() -> None:
    b = mp.breakdown(_doc()["runs"][0])  # type: ignore[index]
    assert b == {"total": 143155, "free": 97385, "self": 45170, "model": 10894,
                 "context": 32818, "compute": 1457, "unaccounted": 600}


def test_projection_swaps_the_weights_and_says_whether_it_fits() -> None:
    rows = mp.project(_doc(), weights_mib=5000.0, card_mib=24576.0)
    assert rows[0]["projected_mib"] == 5000 + 32818 + 1457 + 600
    assert rows[0]["fits"] is False and rows[0]["left_mib"] == 24576 - 39875
    small = mp.project(_doc(), weights_mib=0.0, card_mib=40000.0)
    assert small[0]["fits"] is True


def test_a_failed_run_is_an_error_row_and_exit_1(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps(_doc(rc=1)))
    assert mp.main([str(path), "--weights-bytes", "1"]) == 1
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps(_doc()))
    out = tmp_path / "p.json"
    assert mp.main([str(ok), "--weights-bytes", str(5 * 2**30), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["rows"][0]["fits"] is False
