"""The one planning skeleton: the tree id, the backend, the keyed build dir, the backend's
layout. Nothing runs here but git (the tree id) and tool lookups."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

from patchctl.errors import NotFound, PatchctlError
from patchctl.gitlayer.git import Git
from patchctl.ops.build import cmake, llamafile, toolchain
from patchctl.ops.build.config import BuildConfig
from patchctl.ops.build.model import BackendOps, BuildPlan

SCHEMA = 1  # of the settings and the manifest; part of the config hash
BACKEND_OPS: dict[str, BackendOps] = {"cmake": cmake.BACKEND, "llamafile": llamafile.BACKEND}


def worktree_id(tree: Path) -> tuple[str, bool]:
    """(tree id of the work tree, dirty?): dirty means the snapshot differs from HEAD's tree.

    The id always comes from `Git.snapshot_worktree` (racy-git safe, the index untouched),
    never from a status check that could call a same-second edit clean.
    """
    git = Git(tree)
    if not git.is_repo():
        raise NotFound(
            f"{tree} is not a git work tree",
            hint="build a clean room made by `patchctl cleanroom apply`",
        )
    snapshot = git.snapshot_worktree()
    return snapshot, snapshot != git.maybe_rev("HEAD^{tree}")


def config_hash(settings: Mapping[str, object]) -> str:
    """The first 12 hex digits of the sha256 of the canonical JSON of `settings`."""
    blob = json.dumps(settings, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def plan_build(
    tree: Path, config: BuildConfig, build_root: Path, build_dir: Path | None = None
) -> BuildPlan:
    """Resolve backend and toolchain and compute every command; runs nothing but git.

    The build dir is `<build_root>/<tree id>-<config hash>` unless `build_dir` is given.
    """
    tree = tree.absolute()
    tree_id, dirty = worktree_id(tree)
    backend = toolchain.detect_backend(tree) if config.backend == "auto" else config.backend
    if config.only is not None and backend != "llamafile":
        raise PatchctlError(
            f"--only {config.only} is for the llamafile backend (its llamafile/cuda.sh); "
            f"{tree} builds with {backend}",
            hint="drop --only: the cmake backend builds CUDA with --cuda alone",
        )
    planner = BACKEND_OPS[backend].planner(tree, config)
    settings = {"schema": SCHEMA, "backend": backend, **planner.settings()}
    digest = config_hash(settings)
    chosen = build_dir if build_dir is not None else build_root / f"{tree_id}-{digest}"
    bdir = chosen.absolute()
    layout = planner.layout(bdir)
    return BuildPlan(tree, tree_id, dirty, backend, config, settings, digest, bdir, layout)


def backend_ops(plan: BuildPlan) -> BackendOps:
    """The backend module that planned `plan`."""
    return BACKEND_OPS[plan.backend]
