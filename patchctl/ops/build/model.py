"""The data of a build: its steps, its plan, and what a run produced (no logic that runs)."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from patchctl.errors import NotFound
from patchctl.ops.build.config import BuildConfig


@dataclass(frozen=True)
class Step:
    """One command of a build: argv run in `cwd` with `env` added to the environment."""

    name: str
    argv: tuple[str, ...]
    cwd: Path
    env: tuple[tuple[str, str], ...] = ()

    def shell(self) -> str:
        """The step as one copy-pasteable shell line."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env)
        prefix = f"cd {shlex.quote(str(self.cwd))} && " + (f"env {env} " if env else "")
        return prefix + shlex.join(self.argv)

    def to_json(self) -> dict[str, object]:
        """JSON form for the manifest."""
        return {
            "step": self.name,
            "argv": list(self.argv),
            "cwd": str(self.cwd),
            "env": dict(self.env),
        }


@dataclass(frozen=True)
class NvccShim:
    """A CUDA_PATH whose bin/nvcc forces the requested archs (llamafile's cuda.sh).

    A script that runs an absolute nvcc path (cuda.sh: /usr/local/cuda/bin/nvcc) is run as
    `script_copy`: its bytes with each such path (`rewrites`) replaced by the shim.
    """

    cuda_path: Path
    script: str
    script_copy: Path | None = None
    rewrites: tuple[str, ...] = ()

    @property
    def nvcc(self) -> Path:
        """The shim's nvcc."""
        return self.cuda_path / "bin" / "nvcc"

    @property
    def log(self) -> Path:
        """One line per nvcc call that came through the shim."""
        return self.cuda_path / "calls.log"


@dataclass(frozen=True)
class Layout:
    """What a backend contributes to a plan once the build dir is known."""

    source_dir: Path
    steps: tuple[Step, ...]
    targets: tuple[str, ...]  # what is built (the backend's defaults filled in)
    export_source: bool = False  # source_dir is an export of the tree id (built out of tree)
    shim: NvccShim | None = None


@dataclass(frozen=True)
class BuildPlan:
    """Everything a build will do, computed before anything runs (`--dry-run` prints it)."""

    tree: Path
    tree_id: str
    dirty: bool
    backend: str
    config: BuildConfig
    settings: dict[str, object]
    config_hash: str
    build_dir: Path
    layout: Layout

    @property
    def source_dir(self) -> Path:
        """Where the build reads its sources (the tree, or an export of its tree id)."""
        return self.layout.source_dir

    @property
    def steps(self) -> tuple[Step, ...]:
        """The commands, in order."""
        return self.layout.steps

    @property
    def targets(self) -> tuple[str, ...]:
        """The targets built (the backend's defaults when none were asked for)."""
        return self.layout.targets

    def commands(self) -> list[str]:
        """The exact commands, as shell lines, with the preparation steps as comments."""
        lines = [
            f"# tree {self.tree_id} ({'dirty' if self.dirty else 'clean'}) of {self.tree}",
            f"# backend {self.backend}, build dir {self.build_dir}",
        ]
        if self.layout.export_source:
            lines.append(
                f"# export tree {self.tree_id} to {self.source_dir} "
                "(git read-tree + checkout-index into a temporary index)"
            )
        shim = self.layout.shim
        if shim is not None:
            lines.append(f"# write {shim.nvcc}:")
            lines += ["#   " + line for line in shim.script.splitlines()]
            if shim.script_copy is not None:
                lines.append(
                    f"# write {shim.script_copy}: llamafile/cuda.sh with "
                    + ", ".join(shim.rewrites)
                    + f" replaced by {shim.nvcc}"
                )
        return lines + [step.shell() for step in self.steps]

    def to_json(self) -> dict[str, object]:
        """JSON form (`--dry-run --json` and the manifest)."""
        return {
            "tree": str(self.tree),
            "tree_id": self.tree_id,
            "dirty": self.dirty,
            "backend": self.backend,
            "settings": self.settings,
            "config_hash": self.config_hash,
            "build_dir": str(self.build_dir),
            "source_dir": str(self.source_dir),
            "targets": list(self.targets),
            "jobs": self.config.parallel,
            "commands": [s.to_json() for s in self.steps],
        }


@dataclass(frozen=True)
class Artifact:
    """A built file: path relative to the build dir, its sha256 and size."""

    path: str
    sha256: str
    size: int


@dataclass(frozen=True)
class StepRun:
    """How one step went."""

    step: Step
    returncode: int
    wall_s: float
    log: Path


@dataclass(frozen=True)
class BuildResult:
    """A finished build: where its outputs are and what was recorded."""

    plan: BuildPlan
    build_dir: Path
    bin_dir: Path
    lib_dir: Path
    artifacts: tuple[Artifact, ...]
    manifest_path: Path
    wall_s: float
    runs: tuple[StepRun, ...] = field(default=())

    def artifact(self, name: str) -> Path:
        """The absolute path of the artifact whose file name is `name`."""
        for art in self.artifacts:
            if Path(art.path).name == name:
                return self.build_dir / art.path
        raise NotFound(f"no artifact named {name!r} in {self.build_dir}")


class Planner(Protocol):
    """A backend's plan for one tree and config, its tools already located."""

    def settings(self) -> dict[str, object]:
        """What, besides the tree id, keys the build dir (hashed into its name)."""
        ...

    def layout(self, build_dir: Path) -> Layout:
        """The sources, steps and preparations of the build in `build_dir`."""
        ...


@dataclass(frozen=True)
class OutputCheck:
    """A backend's check of what its steps produced: a record for the manifest, and the
    problem (with the manifest status) when the outputs must not be reported built."""

    record: Mapping[str, object]
    problem: str | None = None
    status: str = "ok"
    hint: str | None = None
    fallback: tuple[str, ...] = ()  # cmake defines that avoid the problem: build again with them


def _nothing(plan: BuildPlan) -> None:
    """No preparation beyond the export."""


def _no_check(plan: BuildPlan) -> OutputCheck | None:
    """Nothing to check beyond the artifacts."""
    return None


@dataclass(frozen=True)
class BackendOps:
    """One backend (a module of this package): how it plans, where its outputs land, and the
    tools the manifest records beyond those its steps run; optionally what it writes before
    its steps run and how it checks their outputs."""

    planner: Callable[[Path, BuildConfig], Planner]
    output_dirs: Callable[[BuildPlan], tuple[Path, Path]]  # (bin dir, lib dir)
    artifact_candidates: Callable[[BuildPlan], list[Path]]
    tools: Callable[[BuildPlan], dict[str, Path]]
    prepare: Callable[[BuildPlan], None] = _nothing
    check: Callable[[BuildPlan], OutputCheck | None] = _no_check
