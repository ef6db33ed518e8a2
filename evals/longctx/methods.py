"""Context-extension methods: named llama-server flag sets, with the length they are run at.

Built in (``{factor}`` = length / trained length, at least 1; ``{n_train}`` = trained length):

| name | flags | run at lengths <= trained |
|---|---|---|
| naive | (none: plain RoPE) | yes |
| linear | ``--rope-scaling linear --rope-scale {factor}`` | no (factor 1 is naive) |
| yarn | ``--rope-scaling yarn --rope-scale {factor} --yarn-orig-ctx {n_train}`` | no |
| dca | ``--dca on`` (mscale: the build's default, auto) | yes |
| dca-mscale | ``--dca on --dca-mscale on`` | no (the factor is 1 up to the trained length) |
| dca-q8 | ``--dca on -ctk q8_0 -ctv q8_0`` (q8_0 KV cache; not in the default list) | yes |
| naive-sparse | ``--sparse-prefill on`` (published defaults; not in the default list) | yes |
| dca-sparse | ``--dca on --sparse-prefill on`` (not in the default list) | yes |

The sparse methods engage only on prefill ubatches whose KV length exceeds ``--sparse-threshold``
(32768 by default): for shorter haystacks add your own, e.g.
``dca-sparse-4k=--dca on --sparse-prefill on --sparse-threshold 4096``.

A run may add its own: ``NAME=FLAGS`` (e.g. ``dca-q8=--dca on -ctk q8_0 -ctv q8_0``), run at every
length. Flags a server build lacks are found before it starts (server.check_flags), so a method
that needs a newer build is reported as unsupported instead of failing the run.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from .errors import ConfigError

NAME = re.compile(r"[a-z][a-z0-9_.-]{0,39}")
PLACEHOLDERS = ("{factor}", "{n_train}", "{length}")


@dataclass(frozen=True)
class Method:
    name: str
    args: tuple[str, ...]
    in_range: bool = True  # False: identical to a method already run (naive, dca) at
    # lengths <= the trained length

    @property
    def per_length(self) -> bool:
        """True when the flags depend on the length (one server per length)."""
        return any(p in a for a in self.args for p in PLACEHOLDERS)

    def runs_at(self, length: int, n_train: int) -> bool:
        return self.in_range or length > n_train

    def render(self, length: int, n_train: int) -> tuple[str, ...]:
        factor = f"{max(1.0, length / n_train):g}"
        values = {"{factor}": factor, "{n_train}": str(n_train), "{length}": str(length)}
        out = []
        for arg in self.args:
            for key, value in values.items():
                arg = arg.replace(key, value)
            out.append(arg)
        return tuple(out)


BUILTIN: dict[str, Method] = {
    m.name: m
    for m in (
        Method("naive", ()),
        Method("linear", ("--rope-scaling", "linear", "--rope-scale", "{factor}"), False),
        Method(
            "yarn",
            ("--rope-scaling", "yarn", "--rope-scale", "{factor}", "--yarn-orig-ctx", "{n_train}"),
            False,
        ),
        Method("dca", ("--dca", "on")),
        Method("dca-mscale", ("--dca", "on", "--dca-mscale", "on"), False),
        Method("dca-q8", ("--dca", "on", "-ctk", "q8_0", "-ctv", "q8_0")),
        Method("naive-sparse", ("--sparse-prefill", "on")),
        Method("dca-sparse", ("--dca", "on", "--sparse-prefill", "on")),
    )
}
DEFAULT_METHODS = ("naive", "linear", "yarn", "dca", "dca-mscale")


def parse_method(spec: str) -> Method:
    """A built-in name, or ``NAME=FLAGS`` (shell words); ConfigError names a bad spec."""
    name, sep, flags = spec.partition("=")
    name = name.strip()
    if not NAME.fullmatch(name):
        raise ConfigError(
            f"bad method name {name!r}", key="--methods", hint="lower-case letters, digits, -_."
        )
    if not sep:
        if name not in BUILTIN:
            raise ConfigError(
                f"unknown method {name!r}",
                key="--methods",
                hint=f"use one of {', '.join(BUILTIN)} or NAME=FLAGS",
            )
        return BUILTIN[name]
    try:
        args = tuple(shlex.split(flags))
    except ValueError as exc:
        raise ConfigError(f"method {name}: {exc}", key="--methods") from None
    return Method(name, args)


def parse_methods(specs: list[str]) -> tuple[Method, ...]:
    """Methods from comma-separated lists (a ``NAME=FLAGS`` item is one whole argument)."""
    out: list[Method] = []
    for spec in specs:
        items = [spec] if "=" in spec else [s for s in spec.split(",") if s.strip()]
        out += [parse_method(item) for item in items]
    names = [m.name for m in out]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ConfigError(f"method(s) named twice: {', '.join(sorted(dup))}", key="--methods")
    return tuple(out)
