"""The CPU self-check of a cmake build, and the flags that avoid a failing instruction path.

llama.cpp's CPU backend moves quantized weights into "extra" buffer types when it loads a
model (AMX tiles on Intel CPUs that report AMX, repacked Q4_0/IQ4_NL/Q8_0 layouts elsewhere).
On some machines one of those paths dies on the first decode: a native build on a Xeon with
AMX under a Firecracker kernel gets SIGILL / a general-protection fault in
`ggml_backend_amx_mul_mat` for every quantized model, the unpatched upstream too. A build
that crashes on its own host is not a build, so after a CPU-capable cmake build patchctl
compiles `cpucheck.c` against the tree's ggml, runs a quantized matmul through each extra
buffer type (and a plain CPU buffer as the reference), and:

- every case agrees: the build is reported with the check's record;
- a case crashes or computes garbage in a path with a known switch (AMX, CPU_REPACK): the
  build is redone with that path compiled out (`fallback_defines`), and the record says why;
- anything else fails the build (exit 13) naming the case.

docs/build.md has the repro and the fallbacks.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from patchctl.ops.build.model import BuildPlan, OutputCheck

PROBE_SOURCE = Path(__file__).with_name("cpucheck.c")
TIMEOUT_S = 300
FAIL_ENV = "PATCHCTL_CPUCHECK_FAIL"
"""Set to an extra buffer type's name (e.g. CPU_REPACK) to make the probe die with SIGILL in
that path: how the fallback is exercised on machines whose CPU has no failing path."""

AVX512_MACROS = ("__AVX512F__", "__AVX512CD__", "__AVX512VL__", "__AVX512DQ__", "__AVX512BW__")
CASE = re.compile(r"^(start|ok|wrong|skip) (\S+) (\S+) m=(\d+)(?: err=(\S+))?$")

# ggml's x86 feature options and the compiler macro each one stands for: a native build
# without AMX, spelled as upstream's own non-native options (only ggml-cpu is rebuilt).
X86_OPTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("GGML_SSE42", ("__SSE4_2__",)),
    ("GGML_AVX", ("__AVX__",)),
    ("GGML_AVX2", ("__AVX2__",)),
    ("GGML_BMI2", ("__BMI2__",)),
    ("GGML_FMA", ("__FMA__",)),
    ("GGML_F16C", ("__F16C__",)),
    ("GGML_AVX_VNNI", ("__AVXVNNI__",)),
    ("GGML_AVX512", AVX512_MACROS),
    ("GGML_AVX512_VBMI", ("__AVX512VBMI__",)),
    ("GGML_AVX512_VNNI", ("__AVX512VNNI__",)),
    ("GGML_AVX512_BF16", ("__AVX512BF16__",)),
)
AMX_OFF = ("GGML_AMX_TILE=OFF", "GGML_AMX_INT8=OFF", "GGML_AMX_BF16=OFF")


@dataclass(frozen=True)
class Case:
    """One matmul of the probe: an extra buffer type, a weight type, a row count."""

    buft: str
    wtype: str
    rows: int

    def describe(self) -> str:
        return f"the {self.buft} path ({self.wtype} weights, {self.rows}-row matmul)"


@dataclass
class ProbeReport:
    """What the probe printed: the CPU features it saw, the buffer types, each case's result."""

    features: dict[str, str] = field(default_factory=dict)
    bufts: list[str] = field(default_factory=list)
    results: dict[Case, tuple[str, float]] = field(default_factory=dict)
    started: Case | None = None  # the last case announced and not finished
    done: bool = False


def parse_probe(text: str) -> ProbeReport:
    """Read the probe's line protocol (see cpucheck.c); unknown lines are ignored."""
    report = ProbeReport()
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["cpu"]:
            report.features = dict(w.partition("=")[::2] for w in words[1:])
        elif words[:1] == ["buft"] and len(words) == 2:
            report.bufts.append(words[1])
        elif words == ["done"]:
            report.done = True
        elif (match := CASE.match(line)) is not None:
            case = Case(match[2], match[3], int(match[4]))
            if match[1] == "start":
                report.started = case
            else:
                report.results[case] = (match[1], float(match[5] or 0.0))
                report.started = None
    return report


@dataclass(frozen=True)
class ProbeRun:
    """The probe's process: how it ended, and its output."""

    returncode: int | None  # None: killed by the timeout
    output: str
    log: Path

    def failure(self, report: ProbeReport) -> tuple[Case | None, str] | None:
        """(the failing case, why) when the run or a case failed; None when all is well."""
        wrong = [(c, e) for c, (verdict, e) in report.results.items() if verdict == "wrong"]
        if self.returncode is None:
            return report.started, f"hung for {TIMEOUT_S} s"
        if self.returncode < 0:
            return report.started, f"died with {signal_name(-self.returncode)}"
        if self.returncode != 0 or not report.done:
            return report.started, f"exited with code {self.returncode}"
        if wrong:
            case, err = wrong[0]
            return case, f"computed a result {err:.3g} (relative) away from the plain CPU path"
        return None


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def probe_command(plan: BuildPlan, cc: Path, exe: Path) -> list[str] | None:
    """How to compile the probe against the build's ggml (None: this build has no CPU lib)."""
    bin_dir = plan.build_dir / "bin"
    include = plan.layout.source_dir / "ggml" / "include"
    libs = ("ggml", "ggml-base", "ggml-cpu")
    if not include.is_dir() or not all(_has_lib(bin_dir, lib) for lib in libs):
        return None
    return [
        str(cc), "-O1", "-std=c11", str(PROBE_SOURCE), "-o", str(exe), f"-I{include}",
        f"-L{bin_dir}", *(f"-l{lib}" for lib in libs), "-lm", f"-Wl,-rpath,{bin_dir}",
    ]  # fmt: skip


def _has_lib(bin_dir: Path, name: str) -> bool:
    return any(bin_dir.glob(f"lib{name}.so*")) or any(bin_dir.glob(f"lib{name}.dylib"))


def run_probe(plan: BuildPlan, cc: Path) -> ProbeRun | None:
    """Compile and run the probe (logs in `<build dir>/logs/cpucheck.log`); None when the
    build has no shared CPU backend to check or the probe does not compile against it."""
    work = plan.build_dir / "cpucheck"
    work.mkdir(exist_ok=True)
    log = plan.build_dir / "logs" / "cpucheck.log"
    compile_argv = probe_command(plan, cc, work / "cpucheck")
    if compile_argv is None:
        return None
    built = subprocess.run(
        compile_argv, capture_output=True, text=True, errors="replace",
        stdin=subprocess.DEVNULL, timeout=TIMEOUT_S, check=False,
    )  # fmt: skip
    if built.returncode != 0:
        log.write_text(f"$ {' '.join(compile_argv)}\n{built.stdout}{built.stderr}")
        return None
    return _execute(work / "cpucheck", log)


def _execute(exe: Path, log: Path) -> ProbeRun:
    try:
        proc = subprocess.run(
            [str(exe)], capture_output=True, text=True, errors="replace",
            stdin=subprocess.DEVNULL, timeout=TIMEOUT_S, check=False,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )  # fmt: skip
        code: int | None = proc.returncode
        output = proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, output = None, _text(exc.stdout) + _text(exc.stderr)
    log.write_text(f"$ {exe}\n{output}\n[exit {code}]\n")
    return ProbeRun(code, output, log)


def _text(data: bytes | str | None) -> str:
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    return data or ""


def native_macros(cc: Path) -> set[str]:
    """The macros `cc -march=native` predefines (the CPU features a native build uses)."""
    proc = subprocess.run(
        [str(cc), "-march=native", "-dM", "-E", "-x", "c", os.devnull],
        capture_output=True, text=True, errors="replace", stdin=subprocess.DEVNULL,
        timeout=60, check=False,
    )  # fmt: skip
    return {line.split()[1] for line in proc.stdout.splitlines() if line.startswith("#define ")}


def native_without_amx(macros: set[str]) -> tuple[str, ...]:
    """This CPU's native x86 features as ggml's options, with AMX off."""
    options = [
        f"{option}={'ON' if all(m in macros for m in needs) else 'OFF'}"
        for option, needs in X86_OPTIONS
    ]
    return ("GGML_NATIVE=OFF", *options, *AMX_OFF)


def fallback_defines(buft: str, defines: list[str], cc: Path) -> tuple[str, ...] | None:
    """The cmake defines that compile out the extra buffer type `buft` (None: no switch)."""
    if buft == "AMX":
        native = "GGML_NATIVE=OFF" not in defines
        return native_without_amx(native_macros(cc)) if native else AMX_OFF
    if buft == "CPU_REPACK":
        return ("GGML_CPU_REPACK=OFF",)
    return None


def check(plan: BuildPlan, cc: Path | None) -> OutputCheck | None:
    """Run the probe on `plan`'s outputs; a failure comes with the defines that avoid it."""
    if cc is None:
        return None
    run = run_probe(plan, cc)
    if run is None:
        return OutputCheck({"cpu_check": "not run: no shared CPU backend to probe"})
    report = parse_probe(run.output)
    record = _record(report, run)
    failed = run.failure(report)
    if failed is None:
        return OutputCheck({"cpu_check": record})
    case, why = failed
    where = case.describe() if case is not None else "the CPU backend's setup"
    problem = f"the CPU self-check of this build failed: {where} {why}"
    record["problem"] = problem
    hint = f"probe log: {run.log}; docs/build.md (CPU self-check) has the repro"
    defines = plan.settings.get("defines")
    chosen = list(defines) if isinstance(defines, list) else []
    fallback = None if case is None else fallback_defines(case.buft, chosen, cc)
    if fallback is not None and not set(fallback) <= set(chosen):
        record["fallback"] = list(fallback)
        return OutputCheck({"cpu_check": record}, problem, "cpu-check-failed", hint, fallback)
    return OutputCheck({"cpu_check": record}, problem, "cpu-check-failed", hint)


def _record(report: ProbeReport, run: ProbeRun) -> dict[str, object]:
    results = [
        {"buft": c.buft, "type": c.wtype, "rows": c.rows, "result": verdict, "err": err}
        for c, (verdict, err) in report.results.items()
    ]
    return {
        "features": report.features,
        "extra_bufts": report.bufts,
        "cases": results,
        "exit": run.returncode,
        "log": str(run.log),
    }
