"""The llama.cpp builds the DCA (0078-dca) native tests run against, and the native programs
compiled against them (helpers; the fixtures that use them are in tests/evals/dca/conftest.py).

A build is either the developer override (``PATCHCTL_DCA_SRC`` + ``PATCHCTL_DCA_BUILD``,
``PATCHCTL_UPSTREAM_SRC`` + ``PATCHCTL_UPSTREAM_BUILD``: an existing source tree and its cmake
build dir) or a clean room that patchctl produces and builds (tests/evals/dca/trees.py). A
build that is unusable or cannot be produced fails the test with the reason, never skips it.

`compile_native` compiles a program of tests/evals/dca/native/ against a build's ggml shared
libraries, cached under the build directory.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from patchctl.errors import BuildStepFailed, PatchctlError
from patchctl.room.cleanroom import Cleanroom
from patchctl.series.model import Series, load_series

from .trees import Say, TreeBuilder

NATIVE_DIR = Path(__file__).resolve().parent / "native"
"""Where the C/C++ sources compiled by the tests live (tests/evals/dca/native/)."""

PROJECT = Path(__file__).resolve().parents[3]
DEFAULT_SERIES = PROJECT / "patches" / "llamafile"
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


def env_build(kind: str) -> LlamaBuild | None:
    """The developer override for `kind` ("DCA" or "UPSTREAM"), or None when it is not set."""
    src = os.environ.get(f"PATCHCTL_{kind}_SRC")
    build = os.environ.get(f"PATCHCTL_{kind}_BUILD")
    if src is None and build is None:
        return None
    if not src or not build:
        pytest.fail(
            f"set both PATCHCTL_{kind}_SRC and PATCHCTL_{kind}_BUILD (or neither, and the tests "
            "build the tree through patchctl)",
            pytrace=False,
        )
    return LlamaBuild(src=Path(src), build=Path(build), bin=Path(build) / "bin")


def require_usable(kind: str, tree: LlamaBuild) -> LlamaBuild:
    """`tree` itself; fail the test (never skip) when it is unusable."""
    problems = _problems(tree)
    if problems:
        pytest.fail(
            f"{kind} llama.cpp build unusable: " + "; ".join(problems),
            pytrace=False,
        )
    return tree


def terminal_say(config: pytest.Config) -> Say:
    """A line writer to the real terminal, even while pytest captures output (no -s needed)."""
    capman = config.pluginmanager.getplugin("capturemanager")

    def say(line: str) -> None:
        if capman is None:
            print(f"[dca trees] {line}", file=sys.stderr, flush=True)
            return
        with capman.global_and_fixture_disabled():
            print(f"[dca trees] {line}", file=sys.stderr, flush=True)

    return say


def _failure(kind: str, exc: PatchctlError) -> str:
    """The fixture's failure message: what failed, and for a build the compiler's error tail."""
    text = f"{kind} llama.cpp tree could not be produced through patchctl: {exc}"
    if exc.hint:
        text += f"\nhint: {exc.hint}"
    if isinstance(exc, BuildStepFailed):
        text += f"\n{exc.excerpt}"
    return text + f"\n(or set PATCHCTL_{kind}_SRC and PATCHCTL_{kind}_BUILD to a built tree)"


def series_dir() -> Path:
    """The shipped series (``$PATCHCTL_DCA_SERIES`` overrides the directory)."""
    return Path(os.environ.get("PATCHCTL_DCA_SERIES", str(DEFAULT_SERIES)))


def produce(
    kind: str, make_room: Callable[[Series, Say], Cleanroom], builder: TreeBuilder
) -> LlamaBuild:
    """Load the series, bring the clean room `make_room` picks to its state, build it."""
    try:
        room = make_room(load_series(series_dir()), builder.say)
        tree = builder.build(room, kind)
    except PatchctlError as exc:
        pytest.fail(_failure(kind, exc), pytrace=False)
    result = tree.build
    return require_usable(
        kind, LlamaBuild(src=room.path, build=result.build_dir, bin=result.bin_dir)
    )


def provide(
    kind: str,
    make_room: Callable[[Series, Say], Cleanroom],
    builder: Callable[[], TreeBuilder],
) -> LlamaBuild:
    """The tree for `kind` ("DCA" or "UPSTREAM"): the env override when set (checked usable),
    else the room `make_room` picks, produced and built through patchctl (`builder` is only
    called then)."""
    override = env_build(kind)
    if override is not None:
        return require_usable(kind, override)
    return produce(kind, make_room, builder())


def _native_source(name: str) -> Path:
    """tests/evals/dca/native/<name>; `name` is a file name (``fa_lse_probe.c``) or a stem."""
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
    for local in sorted(source.parent.glob("*.h")):  # the tools' own shared headers (dca_tool.h)
        digest.update(local.name.encode() + b"\0" + local.read_bytes())
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
    """Compile tests/evals/dca/native/`name` against `build` and return the executable.

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
