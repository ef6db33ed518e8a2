"""Load a script under evals/ as a module, for the tests of scripts that are not a package."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[2] / "evals"


def load_script(relpath: str) -> ModuleType:
    """evals/<relpath> as a module named after the file (registered, as dataclasses need)."""
    path = SCRIPTS / relpath
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
