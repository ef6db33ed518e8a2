"""Fixtures for the DCA (0078-dca) native tests: llama.cpp trees and the tools built in them
(the helpers they use are in tests/evals/dca/builds.py).

By default the trees are produced through patchctl itself (tests/evals/dca/trees.py), so `make test`
works on a fresh machine with no configuration:

- ``dca_build``: the clean room of the shipped series (``patches/llamafile``, or
  ``$PATCHCTL_DCA_SERIES``) with all its patches applied, built with the cmake backend;
- ``upstream_build``: a clean room of the same upstream with no patch applied, built alike;
  ``upstream_rpc_build`` the same tree with only its ggml libraries and ggml-rpc-server built;
- ``python_wheel`` / ``python_site``: the llama-cpp-python series exported as an sdist, built
  into a wheel by pip and installed into a temporary directory (tests/evals/dca/wheel.py).

The first run downloads the upstream sdist into patchctl's cache and builds both trees (about
ten minutes on two cores; ccache makes later cold builds fast); later runs reuse the builds.
Developer override: ``PATCHCTL_DCA_SRC`` + ``PATCHCTL_DCA_BUILD`` and ``PATCHCTL_UPSTREAM_SRC`` +
``PATCHCTL_UPSTREAM_BUILD`` name an existing source tree and its cmake build dir instead.

A tree that cannot be produced (download, apply or build failure) is a test FAILURE carrying the
reason (for a build, the compiler's first errors and the log tail), never a skip: an acceptance
test that silently skips would count as passed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from patchctl.errors import PatchctlError

from . import wheel as python_wheel_build
from .builds import LlamaBuild, provide, terminal_say
from .model_runs import build_tool
from .tiny_models import TinyModels, tokenizer_for
from .trees import RPC_TARGETS, TreeBuilder, build_config, dca_room, upstream_room


@pytest.fixture(scope="session")
def tree_builder(pytestconfig: pytest.Config) -> TreeBuilder:
    """One builder per session: rooms with the same tree id are built once."""
    return TreeBuilder(terminal_say(pytestconfig))


def _builder(request: pytest.FixtureRequest) -> Callable[[], TreeBuilder]:
    """The session's `tree_builder`, made only when a tree is built (not with the override)."""
    return lambda: request.getfixturevalue("tree_builder")


@pytest.fixture(scope="session")
def dca_build(request: pytest.FixtureRequest) -> LlamaBuild:
    """The patched (DCA) llama.cpp tree: the env override, else the series built by patchctl."""
    return provide("DCA", dca_room, _builder(request))


@pytest.fixture(scope="session")
def upstream_build(request: pytest.FixtureRequest) -> LlamaBuild:
    """The unpatched upstream tree: the env override, else the bare upstream built by patchctl."""
    return provide("UPSTREAM", upstream_room, _builder(request))


@pytest.fixture(scope="session")
def upstream_rpc_build(request: pytest.FixtureRequest) -> LlamaBuild:
    """The unpatched upstream's ggml libraries and ggml-rpc-server (test_dca_rpc.py): the same
    tree, build dir and override as ``upstream_build``, building only those targets (when
    ``upstream_build`` was built, ninja has nothing to do)."""

    def builder() -> TreeBuilder:
        say = request.getfixturevalue("tree_builder").say
        return TreeBuilder(say, build_config(RPC_TARGETS))

    return provide("UPSTREAM", upstream_room, builder)


@pytest.fixture(scope="session")
def python_wheel(pytestconfig: pytest.Config) -> python_wheel_build.Wheel:
    """The patched llama-cpp-python wheel: the Python series exported by patchctl as an sdist
    and built by pip (both cached; tests/evals/dca/wheel.py). A failure fails the test, never
    skips."""
    try:
        return python_wheel_build.wheel(terminal_say(pytestconfig))
    except (PatchctlError, RuntimeError) as exc:
        pytest.fail(f"the llama-cpp-python wheel could not be produced: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def python_site(
    python_wheel: python_wheel_build.Wheel, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The wheel installed (`pip install --no-deps --target`) into a temporary directory: put it
    first on PYTHONPATH to import the patched `llama_cpp`."""
    try:
        return python_wheel_build.install(python_wheel, tmp_path_factory.mktemp("site"))
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def dca_tool(dca_build: LlamaBuild) -> Path:
    """tests/evals/dca/native/dca_logits.cpp built against the DCA tree."""
    return build_tool(dca_build)


@pytest.fixture(scope="session")
def upstream_tool(upstream_build: LlamaBuild) -> Path:
    """tests/evals/dca/native/dca_logits.cpp built against the bare upstream."""
    return build_tool(upstream_build)


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory, dca_build: LlamaBuild) -> TinyModels:
    """Where the tiny GGUF models of a session are written, with the tokenizer the DCA tree
    loads (tiny_models.tokenizer_for: "llama" on a llama.cpp older than the "test" one)."""
    return TinyModels(tmp_path_factory.mktemp("tiny-models"), tokenizer_for(dca_build.src))
