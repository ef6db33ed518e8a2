"""evals/device/gpu_mem.py: device memory of DCA off vs on, per process."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import pytest
from script_module import load_script

gm = load_script("device/gpu_mem.py")

# a llama-completion that logs llama.cpp's memory breakdown (DCA on: +10 or +500 MiB of compute)
FAKE_COMPLETION = r'''#!{python}
import sys
on = sys.argv[sys.argv.index("--dca") + 1] == "on"
compute = 140 + ({extra} if on else 0)
for i in range({noise}):  # a -v run logs far more than a pipe buffer holds before it ends
    print(f"llama_context: verbose line {{i:06d}} " + "x" * 60)
print("load_tensors:        CUDA0 model buffer size =    92.17 MiB")
print(f"common_memory_breakdown_print: |   - CUDA0 (H200)       | 143155 = 139445 + "
      f"({{92 + 2880 + compute}} =    92 +    2880 +     {{compute}}) +         598 |")
'''
# an nvidia-smi that reports no per-process numbers and a fixed device use (as in some containers)
FAKE_SMI = "#!/bin/sh\ncase \"$1\" in --query-gpu*) echo 1000 ;; *) : ;; esac\n"


def _bin(tmp_path: Path, extra: int, noise: int = 0) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("llama-completion", FAKE_COMPLETION.format(python=sys.executable,
                                                                   extra=extra, noise=noise)),
                       ("nvidia-smi", FAKE_SMI)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return bin_dir


@pytest.mark.parametrize(("extra", "rc"), [(10, 0), (500, 1)])
def test_rows_from_the_breakdown_and_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               extra: int, rc: int) -> None:
    bin_dir = _bin(tmp_path, extra)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    out = tmp_path / "mem.json"
    assert gm.main([str(out), "--bin", str(bin_dir), "--model", "m.gguf", "--ctx", "4096"]) == rc
    doc = json.loads(out.read_text())
    row = doc["rows"][0]
    assert row["self_off_mib"] == 3112 and row["self_on_mib"] == 3112 + extra
    assert row["extra_mib"] == extra and row["source"].startswith("llama.cpp")
    run = doc["runs"][0]
    assert run["peak_process_mib"] is None and run["baseline_device_mib"] == 1000
    assert "-c 4096" in " ".join(run["command"]) and "--dca off" in " ".join(run["command"])


def test_a_verbose_process_is_not_blocked_by_its_own_log(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # 4000 lines (~300 kB) fill a pipe that is read only at the end: the process would block in
    # write() and the measurement would never end (the first device run of this script hung so)
    bin_dir = _bin(tmp_path, 10, noise=4000)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    done: list[dict[str, object]] = []
    worker = threading.Thread(target=lambda: done.append(
        gm.measure([str(bin_dir / "llama-completion"), "--dca", "on"])), daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert done, "gpu_mem.measure did not return: the process is blocked on its log"
    assert done[0]["rc"] == 0 and done[0]["llama_self_mib"] == 3112 + 10


def test_footprint_prefers_the_driver_numbers() -> None:
    run: dict[str, float | None] = {"peak_process_mib": 900.0, "llama_self_mib": 800.0,
                                    "peak_device_minus_baseline_mib": 950.0}
    assert gm.footprint(run) == (900.0, "nvidia-smi per process")
    run["peak_process_mib"] = None
    assert gm.footprint(run) == (950.0, "nvidia-smi device - baseline")
    run["peak_device_minus_baseline_mib"] = 0.0
    assert gm.footprint(run)[0] == 800.0


def test_extra_flags_reach_every_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = _bin(tmp_path, 0)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    out = tmp_path / "mem.json"
    extra = "--override-kv qwen35.context_length=int:262144"
    gm.main([str(out), "--bin", str(bin_dir), "--model", "m.gguf", "--ctx", "4096",
             "--extra", extra])
    doc = json.loads(out.read_text())
    assert doc["extra"] == extra
    assert all(r["command"][-2:] == extra.split() for r in doc["runs"]) and len(doc["runs"]) == 2
