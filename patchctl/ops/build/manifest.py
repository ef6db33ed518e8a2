"""What a build produced and how: artifacts with sha256, tool versions, the JSON manifest."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from patchctl import __version__
from patchctl.errors import NotFound
from patchctl.ops.build import toolchain
from patchctl.ops.build.model import Artifact, BuildPlan, StepRun
from patchctl.ops.build.plan import SCHEMA, backend_ops

MANIFEST = "patchctl-build.json"


def output_dirs(plan: BuildPlan) -> tuple[Path, Path]:
    """(bin dir, lib dir) of a build, as its backend lays them out."""
    return backend_ops(plan).output_dirs(plan)


def _is_artifact(path: Path) -> bool:
    if path.is_symlink() or not path.is_file():
        return False
    name = path.name
    if ".so" in name or path.suffix in (".a", ".dylib", ".dll"):
        return path.suffix != ".o"
    return os.access(path, os.X_OK) and path.suffix not in (".o", ".sh", ".py", ".cmake")


def collect_artifacts(plan: BuildPlan) -> tuple[Artifact, ...]:
    """Every built executable and library, with sha256, sorted by path."""
    found = backend_ops(plan).artifact_candidates(plan)
    arts = [_artifact(plan.build_dir, p) for p in found if _is_artifact(p)]
    return tuple(sorted(arts, key=lambda a: a.path))


def _artifact(root: Path, path: Path) -> Artifact:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return Artifact(str(path.relative_to(root)), digest.hexdigest(), path.stat().st_size)


def write_manifest(
    plan: BuildPlan,
    runs: list[StepRun],
    status: str,
    wall: float,
    artifacts: tuple[Artifact, ...] = (),
    checks: Mapping[str, object] | None = None,
) -> Path:
    """Write `<build dir>/patchctl-build.json` atomically and return its path."""
    data = {
        "schema": SCHEMA,
        "status": status,
        "patchctl": __version__,
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        **plan.to_json(),
        "wall_s": round(wall, 3),
        "runs": [
            {
                "step": r.step.name,
                "returncode": r.returncode,
                "wall_s": round(r.wall_s, 3),
                "log": str(r.log),
            }
            for r in runs
        ],
        "tools": tool_versions(plan),
        "artifacts": [{"path": a.path, "sha256": a.sha256, "size": a.size} for a in artifacts],
    }
    if checks is not None:  # each check's record under its own key (cuda_check, cpu_check)
        data.update(checks)
    path = plan.build_dir / MANIFEST
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)
    return path


def read_manifest(build_dir: Path) -> dict[str, object]:
    """The manifest of a build dir (NotFound when there is none)."""
    path = build_dir / MANIFEST
    if not path.is_file():
        raise NotFound(f"no build manifest at {path}")
    data = json.loads(path.read_text())
    assert isinstance(data, dict)
    return data


def tool_versions(plan: BuildPlan) -> dict[str, str]:
    """Versions of the tools this plan used: build tools, compilers, nvcc, launcher."""
    tools: dict[str, Path] = {}
    for step in plan.steps:
        if step.name != "cuda":  # a script: `cuda.sh --version` would start a build
            tools.setdefault(Path(step.argv[0]).name, Path(step.argv[0]))
    tools.update(backend_ops(plan).tools(plan))
    if plan.config.cuda:
        tools["nvcc"] = toolchain.find_nvcc()
    if plan.config.launcher:
        launcher = toolchain.which(plan.config.launcher)
        if launcher is not None:
            tools[plan.config.launcher] = launcher
    return {name: version_of(path) for name, path in sorted(tools.items())}


def version_of(tool: Path) -> str:
    """The tool's own version line (`--version`), or why there is none."""
    try:
        proc = subprocess.run(
            [str(tool), "--version"],
            capture_output=True,
            timeout=60,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable ({exc})"
    lines = [ln.strip() for ln in proc.stdout.decode("utf-8", "replace").splitlines() if ln.strip()]
    release = [ln for ln in lines if "release" in ln]  # nvcc: "Cuda compilation tools, ..."
    return (release or lines or [f"no version output (exit {proc.returncode})"])[0]
