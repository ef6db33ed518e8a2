"""The CPU self-check of cmake builds: the probe's protocol, the verdicts, the fallbacks, and
the build being redone with a fallback (on the tiny CMake project; the probe itself runs on
real llama.cpp builds in tests/evals/dca/test_builds.py)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from support import paths
from support.files import Files
from support.repos import Repo

from patchctl.errors import BuildFailed
from patchctl.ops.build import cpucheck
from patchctl.ops.build.config import BuildConfig
from patchctl.ops.build.model import BuildPlan, OutputCheck
from patchctl.ops.build.plan import BACKEND_OPS
from patchctl.ops.build.run import build_tree

needs_cmake = pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake not installed")
REPO_ROOT = paths.REPO

CRASHED = """cpu avx2=1 avx512=1 avx512_vnni=1 avx512_bf16=1 amx_int8=1
buft AMX
buft CPU_REPACK
start AMX q4_0 m=1
ok AMX q4_0 m=1 err=1e-07
start AMX q4_1 m=32
"""
FINISHED = """cpu avx2=1 avx512=0 avx512_vnni=0 avx512_bf16=0 amx_int8=0
buft CPU_REPACK
start CPU_REPACK q4_0 m=1
ok CPU_REPACK q4_0 m=1 err=1.09e-07
start CPU_REPACK q4_1 m=1
skip CPU_REPACK q4_1 m=1 err=0
start CPU_REPACK q4_K m=32
wrong CPU_REPACK q4_K m=32 err=0.9
done
"""


def run(code: int | None, text: str) -> tuple[cpucheck.ProbeRun, cpucheck.ProbeReport]:
    return cpucheck.ProbeRun(code, text, Path("log")), cpucheck.parse_probe(text)


def test_parse_reads_features_bufts_cases_and_the_case_in_flight() -> None:
    report = cpucheck.parse_probe(CRASHED)
    assert report.features["amx_int8"] == "1" and report.bufts == ["AMX", "CPU_REPACK"]
    assert report.results == {cpucheck.Case("AMX", "q4_0", 1): ("ok", 1e-07)}
    assert report.started == cpucheck.Case("AMX", "q4_1", 32) and not report.done


def test_a_signal_names_the_case_that_was_running() -> None:
    probe, report = run(-4, CRASHED)
    failed = probe.failure(report)
    assert failed is not None
    case, why = failed
    assert case == cpucheck.Case("AMX", "q4_1", 32) and why == "died with SIGILL"
    assert case.describe() == "the AMX path (q4_1 weights, 32-row matmul)"


def test_a_wrong_result_fails_and_skips_do_not() -> None:
    probe, report = run(0, FINISHED)
    failed = probe.failure(report)
    assert failed is not None and failed[0] == cpucheck.Case("CPU_REPACK", "q4_K", 32)
    assert "0.9" in failed[1]
    clean = FINISHED.replace("wrong CPU_REPACK q4_K m=32 err=0.9", "ok CPU_REPACK q4_K m=32 err=0")
    assert run(0, clean)[0].failure(run(0, clean)[1]) is None


@pytest.mark.parametrize(
    ("code", "text", "why"),
    [(None, CRASHED, "hung"), (2, "cpu avx2=1\n", "exited with code 2"), (0, CRASHED, "code 0")],
)
def test_a_hang_an_error_exit_or_a_missing_done_fails(
    code: int | None, text: str, why: str
) -> None:
    probe, report = run(code, text)
    failed = probe.failure(report)
    assert failed is not None and why in failed[1]


def test_fallbacks_compile_out_the_failing_path() -> None:
    cc = Path("/nonexistent/cc")
    assert cpucheck.fallback_defines("CPU_REPACK", [], cc) == ("GGML_CPU_REPACK=OFF",)
    assert cpucheck.fallback_defines("AMX", ["GGML_NATIVE=OFF"], cc) == cpucheck.AMX_OFF
    assert cpucheck.fallback_defines("CPU_KLEIDIAI", [], cc) is None


def test_native_without_amx_keeps_the_other_native_features() -> None:
    macros = {"__SSE4_2__", "__AVX__", "__AVX2__", "__FMA__", "__F16C__", "__BMI2__",
              "__AVX512F__", "__AVX512CD__", "__AVX512VL__", "__AVX512DQ__", "__AVX512BW__",
              "__AVX512VNNI__", "__AMX_TILE__", "__AMX_INT8__"}  # fmt: skip
    defines = cpucheck.native_without_amx(macros)
    assert defines[0] == "GGML_NATIVE=OFF"
    on = {d.split("=")[0] for d in defines if d.endswith("=ON")}
    assert on == {"GGML_SSE42", "GGML_AVX", "GGML_AVX2", "GGML_BMI2", "GGML_FMA", "GGML_F16C",
                  "GGML_AVX512", "GGML_AVX512_VNNI"}  # fmt: skip
    assert set(cpucheck.AMX_OFF) <= set(defines)
    assert "GGML_AVX512_BF16=OFF" in defines
    partial = cpucheck.native_without_amx(macros - {"__AVX512BW__"})
    assert "GGML_AVX512=OFF" in partial  # all five AVX-512 subsets or none


def test_native_macros_come_from_the_compiler() -> None:
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    macros = cpucheck.native_macros(Path(cc))
    assert "__x86_64__" in macros or "__aarch64__" in macros


def test_the_amx_repro_builds_and_runs(tmp_path: Path) -> None:
    """scripts/amx_repro.c (docs/build.md) compiles; on this CPU it tests AMX or says why not."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    exe = tmp_path / "amx_repro"
    src = REPO_ROOT / "scripts" / "amx_repro.c"
    flags = ["-O1", "-Wall", "-Werror", "-mamx-tile", "-mamx-int8"]
    built = subprocess.run([cc, *flags, str(src), "-o", str(exe)], capture_output=True, text=True)
    if "unrecognized" in built.stderr or "unknown" in built.stderr:
        pytest.skip(f"this compiler has no AMX intrinsics: {built.stderr.strip()[:200]}")
    assert built.returncode == 0, built.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert out.stdout.startswith("cpuid.7: amx-tile=")
    if "amx-tile=1 amx-int8=1" in out.stdout:
        assert "int8 tile product: correct" in out.stdout, out.stdout
    else:
        assert "does not report AMX" in out.stdout and out.returncode == 0


# ----------------------------------------------------------------------------- the build loop

TINY: Files = {
    "CMakeLists.txt": b"cmake_minimum_required(VERSION 3.14)\nproject(tiny C)\n"
    b"add_executable(hello main.c)\ntarget_compile_definitions(hello PRIVATE ${EXTRA})\n",
    "main.c": b'#include <stdio.h>\nint main(void) { printf("hi\\n"); }\n',
}


def fake_check(fallback: tuple[str, ...]) -> Callable[[BuildPlan], OutputCheck]:
    """A check that fails until the plan's defines hold `fallback`, as the probe would."""

    def check(plan: BuildPlan) -> OutputCheck:
        defines = plan.settings["defines"]
        assert isinstance(defines, list)
        if set(fallback) <= set(defines):
            return OutputCheck({"cpu_check": {"features": {}}})
        problem = "the CPU self-check of this build failed: the AMX path died with SIGILL"
        return OutputCheck({"cpu_check": {}}, problem, "cpu-check-failed", None, fallback)

    return check


@needs_cmake
def test_a_failed_check_with_a_fallback_builds_again_with_it(
    make_repo: Callable[..., Repo], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(TINY, name="tiny")
    fallback = ("EXTRA=NO_AMX",)
    cmake_ops = dataclasses.replace(BACKEND_OPS["cmake"], check=fake_check(fallback))
    monkeypatch.setitem(BACKEND_OPS, "cmake", cmake_ops)
    notes: list[str] = []
    monkeypatch.setattr("patchctl.progress.notice_sink", notes.append)
    root = tmp_path / "builds"
    result = build_tree(repo.path, BuildConfig(targets=("hello",)), root)
    assert result.plan.config.defines == fallback
    assert "-DEXTRA=NO_AMX" in result.plan.steps[0].argv
    first, second = sorted(root.iterdir(), key=lambda p: p != result.build_dir)[::-1]
    assert second == result.build_dir
    failed = json.loads((first / "patchctl-build.json").read_text())
    assert failed["status"] == "cpu-check-failed"
    assert json.loads(result.manifest_path.read_text())["status"] == "ok"
    assert len(notes) == 1 and "building again with -DEXTRA=NO_AMX" in notes[0]


@needs_cmake
def test_a_failed_check_without_a_new_fallback_fails_the_build(
    make_repo: Callable[..., Repo], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(TINY, name="tiny")

    def always(plan: BuildPlan) -> OutputCheck:
        return OutputCheck({}, "the CPU self-check of this build failed", "cpu-check-failed", "h")

    failing = dataclasses.replace(BACKEND_OPS["cmake"], check=always)
    monkeypatch.setitem(BACKEND_OPS, "cmake", failing)
    with pytest.raises(BuildFailed, match="CPU self-check") as info:
        build_tree(repo.path, BuildConfig(targets=("hello",)), tmp_path / "b")
    assert info.value.exit_code == 13


@needs_cmake
def test_the_real_check_on_a_tree_without_ggml_records_that_it_did_not_run(
    make_repo: Callable[..., Repo], tmp_path: Path
) -> None:
    repo = make_repo(TINY, name="tiny")
    result = build_tree(repo.path, BuildConfig(targets=("hello",)), tmp_path / "b")
    manifest = json.loads(result.manifest_path.read_text())
    assert manifest["cpu_check"] == "not run: no shared CPU backend to probe"
