"""pyproject.toml against the code: the runtime dependencies are exactly what patchctl/ imports,
and the evaluations (evals/) stay apart from patchctl's internals.

Read with ast, so a module imported only inside a function counts too.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# import name -> distribution name, where they differ
DISTRIBUTION = {"yaml": "pyyaml"}


def _imports(folder: Path) -> dict[str, set[str]]:
    """Top-level module -> the files importing it (absolute imports only)."""
    found: dict[str, set[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(ROOT)))
    return found


def _requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower() for r in requirements}


def test_runtime_dependencies_are_what_patchctl_imports() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    third_party = set(_imports(ROOT / "patchctl")) - set(sys.stdlib_module_names) - {"patchctl"}
    imported = {DISTRIBUTION.get(name, name).lower() for name in third_party}
    assert _requirement_names(project["dependencies"]) == imported
    extras = project["optional-dependencies"]
    assert set(extras) == {"test", "dca", "longctx"}
    assert "unidiff" in _requirement_names(extras["test"])  # only a test imports it


def test_evals_do_not_import_patchctl() -> None:
    users = _imports(ROOT / "evals").get("patchctl", set())
    assert users == set(), "evals/ uses patchctl as a tool, never its internals"
