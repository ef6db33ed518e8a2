"""evals/longctx/methods.py: method flag sets, their lengths, and parsing."""

from __future__ import annotations

import pytest

from evals.longctx.errors import ConfigError
from evals.longctx.methods import BUILTIN, DEFAULT_METHODS, Method, parse_methods


def test_builtins_render_their_scale_factor() -> None:
    assert BUILTIN["yarn"].render(65536, 32768) == (
        "--rope-scaling", "yarn", "--rope-scale", "2", "--yarn-orig-ctx", "32768",
    )  # fmt: skip
    assert BUILTIN["linear"].render(12288, 8192)[-1] == "1.5"
    assert BUILTIN["linear"].render(4096, 8192)[-1] == "1"  # never below 1
    assert BUILTIN["dca"].render(10**6, 32768) == ("--dca", "on")
    assert BUILTIN["dca-mscale"].args == ("--dca", "on", "--dca-mscale", "on")
    # the sparse-prefill methods: the published budgets and threshold, at every length
    assert BUILTIN["naive-sparse"].render(10**6, 32768) == ("--sparse-prefill", "on")
    assert BUILTIN["dca-sparse"].render(10**6, 32768) == ("--dca", "on", "--sparse-prefill", "on")
    assert BUILTIN["dca-sparse"].runs_at(16384, 32768)
    assert "dca-sparse" not in DEFAULT_METHODS


def test_which_lengths_a_method_runs_at() -> None:
    assert not BUILTIN["linear"].runs_at(32768, 32768) and BUILTIN["linear"].runs_at(32769, 32768)
    assert BUILTIN["naive"].runs_at(16384, 32768) and BUILTIN["dca"].runs_at(16384, 32768)
    assert BUILTIN["yarn"].per_length and not BUILTIN["dca"].per_length


def test_parse_lists_and_custom_methods() -> None:
    got = parse_methods(["naive,dca", "dca-small=--dca on --dca-chunk-size 512", "yarn"])
    assert [m.name for m in got] == ["naive", "dca", "dca-small", "yarn"]
    assert got[2] == Method("dca-small", ("--dca", "on", "--dca-chunk-size", "512"))
    assert [m.name for m in parse_methods([",".join(DEFAULT_METHODS)])] == list(DEFAULT_METHODS)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nope", "unknown method"),
        ("Bad Name=--dca on", "bad method name"),
        ("x=--dca 'on", "method x"),
    ],
)
def test_parse_errors_name_the_problem(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_methods([spec])


def test_a_method_named_twice_is_refused() -> None:
    with pytest.raises(ConfigError, match="named twice"):
        parse_methods(["dca", "dca=--dca on"])
