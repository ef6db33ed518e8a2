"""What the backends share: the compiler launcher (ccache, sccache) and its cache environment."""

from __future__ import annotations

from pathlib import Path

from patchctl.ops.build import toolchain
from patchctl.ops.build.config import BuildConfig


def find_launcher(config: BuildConfig) -> Path | None:
    """The launcher `--launcher` asks for, located on PATH (ToolchainMissing when absent)."""
    if config.launcher is None:
        return None
    return toolchain.require_tool(
        config.launcher,
        f"install {config.launcher} (apt install {config.launcher}) or drop --launcher",
    )


def cache_env(config: BuildConfig, base: Path) -> tuple[tuple[str, str], ...]:
    """ccache: paths under `base` hashed relative, so caches are shared across clean rooms."""
    if config.launcher != "ccache":
        return ()
    return (("CCACHE_BASEDIR", str(base)), ("CCACHE_NOHASHDIR", "1"))
