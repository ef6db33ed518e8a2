"""errors.py: the exit-code contract of docs/architecture.md."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from pathlib import Path

import pytest
from support.paths import REPO

import patchctl
from patchctl import errors
from patchctl.errors import (
    ALL_ERRORS,
    BuildStepFailed,
    ConfigError,
    ConflictsLeft,
    DocsOutOfDate,
    GitFailed,
    PatchctlError,
    PatchDoesNotApply,
    PatchDrift,
    PrefixFailed,
    RebaseStopped,
    RoundTripFailed,
)

ARCHITECTURE_CODES = {
    "PatchctlError": 1,
    "PatchDoesNotApply": 3,
    "ConfigError": 5,
    "ChecksumMismatch": 6,
    "UnsafeArchive": 7,
    "DirtyTree": 8,
    "GitFailed": 9,
    "PatchDrift": 10,
    "AlreadyApplied": 11,
    "VerifyFailed": 12,
    "BuildFailed": 13,
    "ToolchainMissing": 14,
    "NotFound": 15,
    "StaleDocs": 16,
}


def test_exit_codes_match_architecture() -> None:
    assert {cls.__name__: cls.exit_code for cls in ALL_ERRORS} == ARCHITECTURE_CODES


def test_exit_codes_are_distinct_and_avoid_reserved_ones() -> None:
    codes = [cls.exit_code for cls in ALL_ERRORS]
    assert len(set(codes)) == len(codes)
    reserved = {0, errors.EXIT_USAGE, errors.EXIT_INTERNAL, errors.EXIT_INTERRUPTED}
    assert not reserved & set(codes)


def test_architecture_doc_lists_every_class() -> None:
    doc = (REPO / "docs" / "architecture.md").read_text()
    for name, code in ARCHITECTURE_CODES.items():
        assert f"| {code} | `{name}` |" in doc


def test_one_line_folds_newlines_and_appends_hint() -> None:
    exc = PatchctlError("first\nsecond", hint="do\nthis")
    assert exc.one_line() == "first second (hint: do this)"
    assert str(exc) == "first\nsecond"


def test_config_error_names_file_and_key(tmp_path: Path) -> None:
    exc = ConfigError("unknown key", path=tmp_path / "series.yaml", key="upstream.foo")
    assert str(exc) == f"{tmp_path / 'series.yaml'}: upstream.foo: unknown key"
    assert exc.to_json()["key"] == "upstream.foo"


def test_git_failed_keeps_bytes_and_shows_first_stderr_line() -> None:
    exc = GitFailed(["git", "apply"], 128, b"fatal: bad \xff thing\nmore\n")
    assert exc.stderr == b"fatal: bad \xff thing\nmore\n"
    assert exc.returncode == 128
    assert str(exc) == "`git apply` failed with exit code 128: fatal: bad \\xff thing"


def test_drift_is_a_kind_of_conflict_with_its_own_code() -> None:
    exc = PatchDrift("drift", patch="0001-x", file="a.c", hunk=2, why="offset 3")
    assert isinstance(exc, PatchDoesNotApply)
    assert exc.exit_code == 10
    assert exc.to_json() == {
        "error": "PatchDrift",
        "exit_code": 10,
        "message": "drift",
        "hint": None,
        "patch": "0001-x",
        "file": "a.c",
        "hunk": 2,
        "why": "offset 3",
    }


@pytest.mark.parametrize("cls", ALL_ERRORS)
def test_every_error_is_constructible_with_message_and_hint(cls: type[PatchctlError]) -> None:
    if cls is GitFailed:
        exc: PatchctlError = GitFailed(["git", "x"], 1, b"", hint="h")
    else:
        exc = cls("message", hint="h")
    assert exc.hint == "h"
    assert exc.to_json()["exit_code"] == cls.exit_code


# ----------------------------------------------------------------------------- every class


def every_error_class() -> list[type[PatchctlError]]:
    """PatchctlError and every subclass any patchctl module defines (all modules imported)."""
    for info in pkgutil.walk_packages(patchctl.__path__, "patchctl."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
    found: list[type[PatchctlError]] = []
    todo: list[type[PatchctlError]] = [PatchctlError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo += cls.__subclasses__()
    # other code may build on the hierarchy: only patchctl's own classes are its contract
    return [cls for cls in found if cls.__module__.split(".")[0] == "patchctl"]


# The classes whose constructor takes more than a message: one example each.
SAMPLES: dict[str, Callable[[], PatchctlError]] = {
    "GitFailed": lambda: GitFailed(["git", "x"], 1, b"", hint="h"),
    "BuildStepFailed": lambda: BuildStepFailed(
        "m", step="build", returncode=2, log=Path("l"), excerpt="e", hint="h"
    ),
    "RoundTripFailed": lambda: RoundTripFailed("m", report=_Report(), hint="h"),
    "PrefixFailed": lambda: PrefixFailed("m", report=_Report(), hint="h"),
    "RebaseStopped": lambda: RebaseStopped("m", report=_Report(), patch="0001-x", hint="h"),
    "DocsOutOfDate": lambda: DocsOutOfDate([Path("README.md")]),
    "ConflictsLeft": lambda: ConflictsLeft(
        "m", patch="0001-x", left=[{"file": "a.c", "lines": [3], "blocks": [[3, 7]]}], hint="h"
    ),
}


class _Report:
    def to_json(self) -> dict[str, object]:
        return {"ok": False}


@pytest.mark.parametrize("cls", every_error_class(), ids=lambda c: c.__name__)
def test_every_error_class_is_in_errors_py_with_its_documented_code(
    cls: type[PatchctlError],
) -> None:
    assert cls.__module__ == "patchctl.errors"
    documented = next(c for c in cls.__mro__ if c.__name__ in ARCHITECTURE_CODES)
    assert cls.exit_code == ARCHITECTURE_CODES[documented.__name__]
    exc = SAMPLES[cls.__name__]() if cls.__name__ in SAMPLES else cls("message", hint="h")
    data = exc.to_json()
    assert data["error"] == cls.__name__ and data["exit_code"] == cls.exit_code
    doc = (REPO / "docs" / "architecture.md").read_text()
    assert f"`{cls.__name__}`" in doc
