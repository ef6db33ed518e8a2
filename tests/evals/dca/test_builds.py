"""tests/evals/dca/builds.py: the developer override of the DCA tests' trees (both variables or
neither, checked usable, the builder never called) and the failure message of an unusable tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from .builds import LlamaBuild, env_build, provide
from .trees import TreeBuilder, dca_room

LIBS = ("ggml", "ggml-base", "ggml-cpu")


def _tree(root: Path, libs: tuple[str, ...] = LIBS) -> tuple[Path, Path]:
    """A source dir with ggml/include/ggml.h and a build dir with bin/lib<lib>.so for `libs`."""
    src, build = root / "src", root / "build"
    (src / "ggml" / "include").mkdir(parents=True)
    (src / "ggml" / "include" / "ggml.h").write_bytes(b"")
    (build / "bin").mkdir(parents=True)
    for lib in libs:
        (build / "bin" / f"lib{lib}.so").write_bytes(b"")
    return src, build


def _no_builder() -> TreeBuilder:
    raise AssertionError("the override must not build anything")


def test_env_override_needs_both_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATCHCTL_UPSTREAM_SRC", "/somewhere")
    monkeypatch.delenv("PATCHCTL_UPSTREAM_BUILD", raising=False)
    with pytest.raises(pytest.fail.Exception, match="set both"):
        env_build("UPSTREAM")
    monkeypatch.setenv("PATCHCTL_UPSTREAM_BUILD", "/somewhere/build")
    tree = env_build("UPSTREAM")
    assert tree is not None and tree.bin == Path("/somewhere/build/bin")
    monkeypatch.delenv("PATCHCTL_DCA_SRC", raising=False)
    monkeypatch.delenv("PATCHCTL_DCA_BUILD", raising=False)
    assert env_build("DCA") is None


def test_provide_takes_a_usable_override_without_building(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, build = _tree(tmp_path)
    monkeypatch.setenv("PATCHCTL_DCA_SRC", str(src))
    monkeypatch.setenv("PATCHCTL_DCA_BUILD", str(build))
    tree = provide("DCA", dca_room, _no_builder)
    assert tree == LlamaBuild(src=src, build=build, bin=build / "bin")
    assert tree.include_dirs == (src / "ggml" / "include",)


def test_provide_fails_on_an_unusable_override(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, build = _tree(tmp_path, libs=("ggml",))
    monkeypatch.setenv("PATCHCTL_UPSTREAM_SRC", str(src))
    monkeypatch.setenv("PATCHCTL_UPSTREAM_BUILD", str(build))
    with pytest.raises(pytest.fail.Exception) as failed:
        provide("UPSTREAM", dca_room, _no_builder)
    message = str(failed.value)
    assert message.startswith("UPSTREAM llama.cpp build unusable")
    assert "no libggml-base.so" in message and "no libggml-cpu.so" in message
    assert "no libggml.so" not in message
