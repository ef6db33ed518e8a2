"""Where patchctl keeps what it can fetch or compute again: downloads, git caches, marker greps.

`$PATCHCTL_CACHE_DIR`, else `$XDG_CACHE_HOME/patchctl`, else `~/.cache/patchctl`. Everything
under it is keyed by content (sha256, tree ids), so it can be deleted at any time.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """`$PATCHCTL_CACHE_DIR`, else `$XDG_CACHE_HOME/patchctl`, else `~/.cache/patchctl`."""
    explicit = os.environ.get("PATCHCTL_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "patchctl"
