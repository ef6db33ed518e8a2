"""`patchctl build`: build the clean room (cmake CPU/CUDA or llamafile cosmocc + cuda.sh)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from patchctl.cli.options import DEFAULT_SERIES, JsonOpt, SeriesOpt, WorkdirOpt
from patchctl.ops.build import DEFAULT_CMAKE_TARGETS, Backend, CpuMode, Launcher, Part

if TYPE_CHECKING:
    from patchctl.ops.build.config import BuildConfig
    from patchctl.ops.build.model import BuildPlan, BuildResult

CudaOpt = Annotated[
    str | None,
    typer.Option(
        "--cuda",
        metavar="sm_XY[,sm_XY...]",
        help="Build the CUDA backend for these GPU archs (sm_86: RTX 30xx; sm_90: H100/H200). "
        "No GPU is needed on the build host.",
    ),
]
BackendOpt = Annotated[
    Backend,
    typer.Option(
        "--backend",
        help="cmake (llama.cpp), llamafile (cosmocc make), or auto: by the tree's layout.",
    ),
]
TargetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--target",
        "-t",
        help="Target to build, repeatable (default cmake: "
        + ", ".join(DEFAULT_CMAKE_TARGETS)
        + "; llamafile: make's default).",
    ),
]
JobsOpt = Annotated[
    int | None, typer.Option("--jobs", "-j", min=1, help="Parallel jobs (default: all CPUs).")
]
LauncherOpt = Annotated[
    Launcher | None,
    typer.Option(
        "--launcher",
        help="Compiler launcher for C, C++ and CUDA: a shared/distributed build cache.",
    ),
]
BuildDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--build-dir",
        help="Use this build dir instead of <clean room>.builds/<tree id>-<config hash>/.",
    ),
]
CosmoccOpt = Annotated[
    Path | None,
    typer.Option(
        "--cosmocc",
        help="llamafile: the cosmocc toolchain dir (default: $COSMOCC, "
        "then the tree's .cosmocc/<version>).",
    ),
]
DefineOpt = Annotated[
    list[str] | None,
    typer.Option("--define", "-D", metavar="KEY=VALUE", help="cmake: an extra -D (repeatable)."),
]
OnlyOpt = Annotated[
    Part | None,
    typer.Option(
        "--only",
        help="llamafile: build only this part. cuda: ggml-cuda.so through llamafile/cuda.sh "
        "for the --cuda archs, without make and without cosmocc.",
    ),
]
CpuOpt = Annotated[
    CpuMode,
    typer.Option(
        "--cpu",
        help="cmake: native uses this CPU's instructions (upstream's default); portable builds "
        "x86-64 AVX2 code without AVX-512 or AMX that runs, with the same results, on any "
        "AVX2 CPU.",
    ),
]
DryRunOpt = Annotated[
    bool, typer.Option("--dry-run", help="Print the exact commands; run nothing.")
]
UptoOpt = Annotated[
    str | None,
    typer.Option(
        "--upto",
        metavar="ID",
        help="First apply the series up to patch ID (as `cleanroom apply --upto`), then build.",
    ),
]


def register(app: typer.Typer) -> None:
    """Add `patchctl build` to the app."""
    app.command("build")(build_command)


def build_command(
    series: SeriesOpt = DEFAULT_SERIES,
    workdir: WorkdirOpt = None,
    cuda: CudaOpt = None,
    backend: BackendOpt = Backend.auto,
    target: TargetOpt = None,
    jobs: JobsOpt = None,
    launcher: LauncherOpt = None,
    build_dir: BuildDirOpt = None,
    cosmocc: CosmoccOpt = None,
    define: DefineOpt = None,
    only: OnlyOpt = None,
    cpu: CpuOpt = CpuMode.native,
    dry_run: DryRunOpt = False,
    upto: UptoOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Build the clean room; the build dir is keyed by its git tree id and the config."""
    from patchctl.cli.console import RichProgress
    from patchctl.errors import BuildStepFailed
    from patchctl.ops.build.run import BuildOutcome, build_cleanroom

    if upto is not None and dry_run:
        raise typer.BadParameter("--upto applies the series, --dry-run runs nothing: give one")
    config = build_config(backend, cuda, target, jobs, launcher, cosmocc, define, only, cpu)
    try:
        with RichProgress(enabled=False if as_json else None) as progress:
            outcome: BuildOutcome
            if upto is not None:
                from patchctl.ops.prefixes import build_upto

                outcome = build_upto(series, workdir, upto, config, build_dir, progress=progress)
            else:
                outcome = build_cleanroom(
                    series, workdir, config, build_dir, dry_run=dry_run, progress=progress
                )
    except BuildStepFailed as exc:
        sys.stderr.write(exc.excerpt.rstrip("\n") + "\n")
        raise
    if outcome.result is None:
        render_plan(outcome.plan, as_json)
    else:
        render_result(outcome.result, as_json)


def build_config(
    backend: Backend,
    cuda: str | None,
    target: list[str] | None,
    jobs: int | None,
    launcher: Launcher | None,
    cosmocc: Path | None,
    define: list[str] | None,
    only: Part | None,
    cpu: CpuMode,
) -> BuildConfig:
    """The build options as a BuildConfig (shared with `check-prefixes`)."""
    from patchctl.ops.build.config import BuildConfig
    from patchctl.ops.build.toolchain import parse_cuda_archs

    return BuildConfig(
        backend=backend.value,
        cuda=parse_cuda_archs(cuda) if cuda else (),
        targets=tuple(target or ()),
        jobs=jobs,
        launcher=None if launcher is None else launcher.value,
        cosmocc=cosmocc,
        defines=tuple(define or ()),
        only=None if only is None else only.value,
        cpu=cpu.value,
    )


def render_plan(plan: BuildPlan, as_json: bool) -> None:
    """`--dry-run`: the exact commands (shell lines), or the plan as JSON."""
    from patchctl.cli.console import print_json

    if as_json:
        print_json({"ok": True, "dry_run": True, **plan.to_json(), "shell": plan.commands()})
        return
    for line in plan.commands():
        sys.stdout.write(line + "\n")


def render_result(result: BuildResult, as_json: bool) -> None:
    """The manifest as JSON, or a short human summary."""
    from patchctl.cli.console import out, print_json
    from patchctl.ops.build.manifest import read_manifest

    if as_json:
        print_json({"ok": True, **read_manifest(result.build_dir)})
        return
    plan = result.plan
    what = f"CUDA {','.join(plan.config.cuda)}" if plan.config.cuda else "CPU"
    out.print(
        f"built tree {plan.tree_id[:12]}{' (dirty)' if plan.dirty else ''} with {plan.backend} "
        f"({what}) in {result.wall_s:.1f} s"
    )
    out.print(f"  build dir: {result.build_dir}", markup=False)
    out.print(f"  bin dir:   {result.bin_dir}", markup=False)
    out.print(f"  manifest:  {result.manifest_path}", markup=False)
    check = read_manifest(result.build_dir).get("cpu_check")
    if check is not None:
        out.print(f"  cpu check: {cpu_check_summary(check)}", markup=False)
    for art in result.artifacts:
        out.print(f"  {art.path}  {art.size / 1e6:.1f} MB  sha256:{art.sha256[:16]}", markup=False)


def cpu_check_summary(record: object) -> str:
    """One line of the CPU self-check's manifest record."""
    if not isinstance(record, dict):
        return str(record)
    cases = record.get("cases") or []
    ran = [c for c in cases if isinstance(c, dict) and c.get("result") == "ok"]
    bufts = ", ".join(str(b) for b in record.get("extra_bufts") or []) or "none"
    return f"passed ({len(ran)} quantized matmuls agree; extra buffer types: {bufts})"
