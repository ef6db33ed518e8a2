"""`patchctl build`: build the clean room (cmake CPU/CUDA or llamafile cosmocc + cuda.sh)."""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from patchctl import build, cleanroom, toolchain
from patchctl.console import RichProgress, out, print_json
from patchctl.errors import NotFound
from patchctl.options import DEFAULT_SERIES, JsonOpt, SeriesOpt, WorkdirOpt

CudaOpt = Annotated[
    str | None,
    typer.Option(
        "--cuda",
        metavar="sm_XY[,sm_XY...]",
        help="Build the CUDA backend for these GPU archs (sm_86: RTX 30xx; sm_90: H100/H200). "
        "No GPU is needed on the build host.",
    ),
]


class Backend(StrEnum):
    """--backend choices."""

    auto = "auto"
    cmake = "cmake"
    llamafile = "llamafile"


class Part(StrEnum):
    """--only choices."""

    cuda = "cuda"


class Launcher(StrEnum):
    """--launcher choices."""

    ccache = "ccache"
    sccache = "sccache"


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
        + ", ".join(build.DEFAULT_CMAKE_TARGETS)
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
DryRunOpt = Annotated[
    bool, typer.Option("--dry-run", help="Print the exact commands; run nothing.")
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
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Build the clean room; the build dir is keyed by its git tree id and the config."""
    tree = cleanroom_path(series, workdir)
    config = build.BuildConfig(
        backend=backend.value,
        cuda=toolchain.parse_cuda_archs(cuda) if cuda else (),
        targets=tuple(target or ()),
        jobs=jobs,
        launcher=None if launcher is None else launcher.value,
        cosmocc=cosmocc,
        defines=tuple(define or ()),
        only=None if only is None else only.value,
    )
    plan = build.plan_build(tree, config, builds_root(tree), build_dir)
    if dry_run:
        show_plan(plan, json_out)
        return
    try:
        with RichProgress() as progress:
            result = build.execute_plan(plan, progress)
    except build.BuildStepFailed as exc:
        sys.stderr.write(exc.excerpt.rstrip("\n") + "\n")
        raise
    show_result(result, json_out)


def cleanroom_path(series: Path, workdir: Path | None) -> Path:
    """The clean room to build: --workdir, else cleanroom/<series name>; it must exist."""
    tree = workdir if workdir is not None else cleanroom.default_workdir(series)
    if not tree.is_dir():
        raise NotFound(
            f"no clean room at {tree}",
            hint=f"create it with `patchctl cleanroom apply --series {series}`"
            + ("" if workdir is None else f" --workdir {workdir}"),
        )
    return tree.absolute()


def builds_root(tree: Path) -> Path:
    """`cleanroom/<series>.builds/` beside the clean room (docs/architecture.md)."""
    return tree.parent / f"{tree.name}.builds"


def show_plan(plan: build.BuildPlan, json_out: bool) -> None:
    """`--dry-run`: the exact commands (shell lines), or the plan as JSON."""
    if json_out:
        print_json({"ok": True, "dry_run": True, **plan.to_json(), "shell": plan.commands()})
        return
    for line in plan.commands():
        sys.stdout.write(line + "\n")


def show_result(result: build.BuildResult, json_out: bool) -> None:
    """The manifest as JSON, or a short human summary."""
    if json_out:
        print_json({"ok": True, **build.read_manifest(result.build_dir)})
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
    for art in result.artifacts:
        out.print(f"  {art.path}  {art.size / 1e6:.1f} MB  sha256:{art.sha256[:16]}", markup=False)
