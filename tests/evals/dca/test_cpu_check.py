"""The CPU self-check (patchctl/ops/build/cpucheck.py) on real llama.cpp builds.

- the test trees' builds passed it: every extra buffer type of their CPU backend ran the
  quantized matmuls it supports and agreed with the plain CPU path;
- a path that dies is compiled out: with the probe told to die in CPU_REPACK (the way the AMX
  path dies on some Xeon hosts), `build_tree` builds ggml again with GGML_CPU_REPACK=OFF, and
  that build has no repack buffer type left and passes.
"""

from __future__ import annotations

import json
import shutil

import pytest

from patchctl.ops.build import cpucheck
from patchctl.ops.build.run import build_tree, builds_root

from .builds import LlamaBuild
from .trees import build_config

MANIFEST = "patchctl-build.json"


def _cpu_check(build: LlamaBuild) -> dict[str, object]:
    manifest = build.build / MANIFEST
    if not manifest.is_file():
        pytest.skip(f"{build.build} was not built by patchctl (PATCHCTL_*_BUILD): no manifest")
    record = json.loads(manifest.read_text())["cpu_check"]
    assert isinstance(record, dict), record
    return record


@pytest.mark.parametrize("which", ["dca_build", "upstream_build"])
def test_the_test_builds_passed_the_cpu_self_check(
    which: str, request: pytest.FixtureRequest
) -> None:
    record = _cpu_check(request.getfixturevalue(which))
    assert "problem" not in record and record["exit"] == 0
    cases = record["cases"]
    assert isinstance(cases, list) and isinstance(record["extra_bufts"], list)
    for buft in record["extra_bufts"]:
        ran = [c for c in cases if c["buft"] == buft and c["result"] == "ok"]
        assert ran, f"{buft}: no quantized matmul ran through it"
    assert not [c for c in cases if c["result"] == "wrong"]


def test_a_path_that_dies_is_built_out_and_the_build_passes(
    upstream_build: LlamaBuild, monkeypatch: pytest.MonkeyPatch
) -> None:
    bufts = _cpu_check(upstream_build)["extra_bufts"]
    if not isinstance(bufts, list) or "CPU_REPACK" not in bufts:
        pytest.skip("this build's CPU backend has no CPU_REPACK buffer type to make die")
    room = upstream_build.src  # the pristine upstream's clean room
    build_dir = builds_root(room) / "cpucheck-fallback-test"  # test-owned; ccache-friendly depth
    shutil.rmtree(build_dir, ignore_errors=True)
    monkeypatch.setenv(cpucheck.FAIL_ENV, "CPU_REPACK")
    notes: list[str] = []
    monkeypatch.setattr("patchctl.progress.notice_sink", notes.append)
    config = build_config(targets=("ggml",))
    result = build_tree(room, config, builds_root(room), build_dir=build_dir)
    assert result.plan.config.defines[-1:] == ("GGML_CPU_REPACK=OFF",)
    assert result.build_dir == build_dir
    record = json.loads(result.manifest_path.read_text())["cpu_check"]
    assert record["extra_bufts"] == [] and record["exit"] == 0
    assert len(notes) == 1
    assert "the CPU_REPACK path (q4_0 weights, 1-row matmul) died with SIGILL" in notes[0]
    assert notes[0].endswith("building again with -DGGML_CPU_REPACK=OFF")
    shutil.rmtree(build_dir)

