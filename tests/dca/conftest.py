"""Shared fixtures for the DCA (0078-dca) native tests: llama.cpp trees and a native compiler.

The trees come from the environment so CI can point them at builds made through patchctl:

- ``PATCHCTL_DCA_SRC`` / ``PATCHCTL_DCA_BUILD``: the patched (DCA) source and its cmake build dir.
- ``PATCHCTL_UPSTREAM_SRC`` / ``PATCHCTL_UPSTREAM_BUILD``: the unpatched source and build dir.

A missing tree is a test FAILURE with a message saying what to set, never a skip: an acceptance
test that silently skips would count as passed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

NATIVE_DIR = Path(__file__).resolve().parent.parent / "native"
"""Where the C/C++ sources compiled by the tests live (tests/native/)."""

_DEFAULTS = {
    "DCA": (Path("/work/dev/llama.cpp"), Path("/work/dev/build")),
    "UPSTREAM": (Path("/work/dev/upstream-src"), Path("/work/dev/build-upstream")),
}
_GGML_LIBS = ("ggml", "ggml-base", "ggml-cpu")


@dataclass(frozen=True)
class LlamaBuild:
    """A llama.cpp source tree and its cmake build (shared libraries under ``bin``)."""

    src: Path
    build: Path
    bin: Path

    @property
    def include_dirs(self) -> tuple[Path, ...]:
        """Public ggml headers (ggml.h, ggml-backend.h, ggml-cpu.h)."""
        return (self.src / "ggml" / "include",)


def _problems(tree: LlamaBuild) -> list[str]:
    """Everything that makes `tree` unusable, as human-readable lines (empty when usable)."""
    problems: list[str] = []
    if not (tree.src / "ggml" / "include" / "ggml.h").is_file():
        problems.append(f"no ggml/include/ggml.h under source tree {tree.src}")
    for lib in _GGML_LIBS:
        if not (tree.bin / f"lib{lib}.so").exists():
            problems.append(
                f"no lib{lib}.so in {tree.bin} (build the 'ggml' target with BUILD_SHARED_LIBS=ON)"
            )
    return problems


def resolve_build(kind: str) -> LlamaBuild:
    """Read the tree for `kind` ("DCA" or "UPSTREAM") from the environment, defaults otherwise."""
    default_src, default_build = _DEFAULTS[kind]
    src = Path(os.environ.get(f"PATCHCTL_{kind}_SRC", str(default_src)))
    build = Path(os.environ.get(f"PATCHCTL_{kind}_BUILD", str(default_build)))
    return LlamaBuild(src=src, build=build, bin=build / "bin")


def require_build(kind: str) -> LlamaBuild:
    """Like `resolve_build`, but fail the test (never skip) when the tree is unusable."""
    tree = resolve_build(kind)
    problems = _problems(tree)
    if problems:
        pytest.fail(
            f"{kind} llama.cpp build unavailable: "
            + "; ".join(problems)
            + f". Set PATCHCTL_{kind}_SRC and PATCHCTL_{kind}_BUILD to a built tree.",
            pytrace=False,
        )
    return tree


@pytest.fixture(scope="session")
def dca_build() -> LlamaBuild:
    """The patched (DCA) llama.cpp tree; fails if it is not built."""
    return require_build("DCA")


@pytest.fixture(scope="session")
def upstream_build() -> LlamaBuild:
    """The unpatched upstream llama.cpp tree; fails if it is not built."""
    return require_build("UPSTREAM")


def _native_source(name: str) -> Path:
    """tests/native/<name>; `name` is a file name (``fa_lse_probe.c``) or a stem."""
    direct = NATIVE_DIR / name
    if direct.is_file():
        return direct
    for suffix in (".c", ".cpp"):
        candidate = NATIVE_DIR / f"{name}{suffix}"
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"no native test source {name!r} in {NATIVE_DIR}")


def _compile_command(
    source: Path,
    build: LlamaBuild,
    extra_flags: Sequence[str],
    link_flags: Sequence[str],
    out: Path,
) -> list[str]:
    """The system compiler command for `source`, linked against `build`'s ggml shared libs."""
    is_cpp = source.suffix == ".cpp"
    compiler = os.environ.get("CXX", "c++") if is_cpp else os.environ.get("CC", "cc")
    std = "-std=c++17" if is_cpp else "-std=c11"
    includes = [f"-I{d}" for d in build.include_dirs]
    libs = [f"-l{lib}" for lib in _GGML_LIBS]
    return [
        compiler,
        std,
        "-O2",
        "-Wall",
        "-Werror=implicit-function-declaration",
        *includes,
        *extra_flags,
        str(source),
        "-o",
        str(out),
        f"-L{build.bin}",
        *link_flags,
        *libs,
        f"-Wl,-rpath,{build.bin}",
        "-lm",
    ]


def _cache_key(source: Path, build: LlamaBuild, flags: Sequence[str]) -> str:
    """Hash of what the binary depends on at compile time: source, flags, tree, headers."""
    digest = hashlib.sha256()
    digest.update(source.read_bytes())
    digest.update("\0".join([str(build.src), str(build.bin), *flags]).encode())
    for include_dir in build.include_dirs:
        for header in sorted(include_dir.glob("*.h")):
            digest.update(header.name.encode() + b"\0" + header.read_bytes())
    return digest.hexdigest()[:16]


def compile_native(
    name: str,
    build: LlamaBuild,
    extra_flags: Sequence[str] = (),
    *,
    link_flags: Sequence[str] = (),
) -> Path:
    """Compile tests/native/`name` against `build` and return the executable.

    `extra_flags` go before the source (defines, include dirs); `link_flags` go after it and
    before the ggml libraries (e.g. ``-lllama``), so ``--as-needed`` linkers keep them.

    Binaries are cached under ``<build>/patchctl-native/`` by a hash of source, flags and headers,
    written to a temporary name and renamed so concurrent test sessions never see half a binary.
    A compiler error fails the test with the compiler's output.
    """
    source = _native_source(name)
    cache_dir = build.build / "patchctl-native"
    cache_dir.mkdir(parents=True, exist_ok=True)
    key = _cache_key(source, build, [*extra_flags, "--link--", *link_flags])
    out = cache_dir / f"{source.stem}-{key}"
    if out.is_file():
        return out
    with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
        tmp_out = Path(tmp) / out.name
        cmd = _compile_command(source, build, extra_flags, link_flags, tmp_out)
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            pytest.fail(
                f"compiling {source.name} failed:\n{' '.join(cmd)}\n{proc.stderr}",
                pytrace=False,
            )
        shutil.move(str(tmp_out), str(out))
    return out
