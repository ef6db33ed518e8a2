"""The layer map of docs/architecture.md, read from the code: every import in patchctl/ (at the
top of a module or late, inside a function) points down the map, never up it.

    cli -> ops -> txn -> room -> upstream -> series -> gitlayer -> patchfmt -> base

A module may import its own layer and any layer below it. Inside ops/ one feature does not
import another (a feature is a module or a subpackage of ops/): only the composers (`ci`, the
gate over the others, and `prefixes`, apply + build per prefix) do. The base is the modules at
the top of the package (errors, fsio, limits, allowlists, progress, killpoint, cache) and the
package itself (its `__version__`); `python -m patchctl` (`__main__`) is part of the CLI.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

import patchctl

PACKAGE = Path(patchctl.__file__).parent
REPO = PACKAGE.parent
ARCHITECTURE = REPO / "docs" / "architecture.md"

# Top to bottom: a module's layer is its subpackage; the base is what lies at the top.
LAYERS = ("cli", "ops", "txn", "room", "upstream", "series", "gitlayer", "patchfmt", "base")
RANK = {name: rank for rank, name in enumerate(LAYERS)}
ENTRY = {"patchctl.__main__": "cli"}
OPS_COMPOSERS = frozenset({"ci", "prefixes"})
# The only code that starts processes: git in the git layer, compilers and the built programs
# in the build package (and the kill test's fault injection, which kills its own process).
PROCESS_HOMES = ("patchctl.gitlayer.", "patchctl.ops.build.", "patchctl.killpoint")


def module_name(path: Path) -> str:
    """`patchctl.series.model` for patchctl/series/model.py (a package: its directory)."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every module of the package by name."""
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported(source: str, name: str, is_package: bool, known: Iterable[str]) -> set[str]:
    """The patchctl modules that the module `name` imports anywhere in `source` (late imports
    inside functions included): for `from X import Y`, `X.Y` when that is a module, else `X`."""
    known = set(known)
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:
                child = f"{target}.{alias.name}"
                found.add(child if child in known else target)
    return {m for m in found if m == "patchctl" or m.startswith("patchctl.")} - {name}


def layer(name: str) -> str:
    """The layer of module `name` (KeyError for a subpackage the map does not know)."""
    if name in ENTRY:
        return ENTRY[name]
    parts = name.split(".")
    if len(parts) == 1 or (len(parts) == 2 and not (PACKAGE / parts[1]).is_dir()):
        return "base"
    if parts[1] not in RANK or parts[1] == "base":
        raise KeyError(f"{name}: subpackage {parts[1]!r} is in no layer of the map")
    return parts[1]


def feature(name: str) -> str | None:
    """The ops feature a module belongs to (`patchctl.ops.rebase.state` -> rebase)."""
    parts = name.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "ops" else None


def violations(graph: Mapping[str, Iterable[str]], layer_of=layer) -> list[str]:  # type: ignore[no-untyped-def]
    """Every import edge of `graph` (module -> modules it imports) against the map."""
    found = []
    for source, targets in sorted(graph.items()):
        for target in sorted(targets):
            src, dst = layer_of(source), layer_of(target)
            if RANK[src] > RANK[dst]:
                found.append(f"{source} ({src}) imports {target} ({dst}), a layer above it")
            elif src == dst == "ops":
                mine, theirs = feature(source), feature(target)
                if theirs is not None and mine != theirs and mine not in OPS_COMPOSERS:
                    found.append(f"{source} (ops feature {mine}) imports feature {theirs}")
    return found


def import_graph() -> dict[str, set[str]]:
    """The package's import graph, read from the sources."""
    known = modules()
    return {
        name: imported(path.read_text(), name, path.name == "__init__.py", known)
        for name, path in known.items()
    }


def test_every_module_is_in_a_layer() -> None:
    for name in modules():
        assert layer(name) in RANK


def test_no_import_runs_against_the_layer_order() -> None:
    assert violations(import_graph()) == []


def test_only_the_git_layer_and_the_build_package_start_processes() -> None:
    starters = {"subprocess", "multiprocessing", "pty"}
    for name, path in modules().items():
        tree = ast.parse(path.read_text())
        used = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        used |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        if used & starters:
            assert name.startswith(PROCESS_HOMES), f"{name} starts processes"


def test_the_architecture_doc_has_a_row_per_module() -> None:
    doc = ARCHITECTURE.read_text()
    for path in modules().values():
        if path.name == "__init__.py" and path.parent != PACKAGE:
            continue  # a subpackage is described by its modules' rows
        shown = path.relative_to(PACKAGE).as_posix()
        assert f"`{shown}`" in doc, f"docs/architecture.md has no row for {shown}"


# ----------------------------------------------------------------------------- the checker itself


def test_an_upward_import_is_a_violation() -> None:
    graph = {
        "patchctl.gitlayer.git": {"patchctl.series.model"},  # inverted: git layer -> series
        "patchctl.series.model": {"patchctl.errors", "patchctl.allowlists"},
        "patchctl.errors": set(),
        "patchctl.allowlists": set(),
    }
    assert violations(graph, layer_of=_synthetic) == [
        "patchctl.gitlayer.git (gitlayer) imports patchctl.series.model (series), a layer above it"
    ]


def test_a_feature_importing_a_feature_is_a_violation_unless_it_composes() -> None:
    graph = {
        "patchctl.ops.rebase.rebase": {"patchctl.ops.capture", "patchctl.ops.rebase.state"},
        "patchctl.ops.ci.gate": {"patchctl.ops.verify"},
    }
    assert violations(graph, layer_of=_synthetic) == [
        "patchctl.ops.rebase.rebase (ops feature rebase) imports feature capture"
    ]


def test_a_late_import_inside_a_function_is_an_edge() -> None:
    source = (
        "from patchctl.errors import NotFound\n"
        "def f() -> None:\n"
        "    from patchctl.ops import docs\n"
        "    import patchctl.txn.session\n"
    )
    known = {"patchctl.ops", "patchctl.ops.docs", "patchctl.txn.session", "patchctl.errors"}
    edges = imported(source, "patchctl.series.docs", False, known)
    assert edges == {"patchctl.errors", "patchctl.ops.docs", "patchctl.txn.session"}
    assert len(violations({"patchctl.series.docs": edges}, layer_of=_synthetic)) == 2


def test_a_relative_import_is_resolved() -> None:
    known = {"patchctl.series.model", "patchctl.series.stack"}
    assert imported("from .model import Series\n", "patchctl.series.stack", False, known) == {
        "patchctl.series.model"
    }
    assert imported("from ..ops import ci\n", "patchctl.series.stack", False, known) == {
        "patchctl.ops"
    }


def test_a_subpackage_outside_the_map_is_refused() -> None:
    with pytest.raises(KeyError, match="stray"):
        layer("patchctl.stray.thing")


def _synthetic(name: str) -> str:
    """The layer by name alone (the synthetic modules do not exist on disk)."""
    parts = name.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in RANK else "base"
