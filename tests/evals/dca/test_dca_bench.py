"""llama-bench with the DCA patch: without -dca its output has upstream's columns in every format
(a CSV/JSON/SQL consumer of upstream's llama-bench, e.g. an SQL insert into an upstream database,
sees no new column); with -dca it gains a dca column."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from .builds import LlamaBuild
from .model_runs import model_path
from .tiny_models import TinyModels

FORMATS = ("csv", "json", "jsonl", "sql", "md")
BENCH = ("-p", "16", "-n", "0", "-r", "1", "-t", "2", "-fa", "1")


def bench(build: LlamaBuild, model: Path, fmt: str, extra: Sequence[str] = ()) -> str:
    exe = build.bin / "llama-bench"
    assert exe.is_file(), f"no llama-bench in {build.bin} (tests/evals/dca/trees.py TARGETS)"
    cmd = [str(exe), "-m", str(model), *BENCH, "-o", fmt, *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.stdout


def columns(fmt: str, out: str) -> list[str]:
    """The field names of a llama-bench output, in order."""
    if fmt == "csv":
        return out.splitlines()[0].split(",")
    if fmt == "json":
        rows = json.loads(out)
        return list(rows[0])
    if fmt == "jsonl":
        return list(json.loads(out.splitlines()[0]))
    if fmt == "sql":
        create = re.search(r"CREATE TABLE IF NOT EXISTS llama_bench \((.*?)\);", out, re.S)
        insert = re.search(r"INSERT INTO llama_bench \(([^)]*)\)", out)
        assert create is not None and insert is not None, out
        names = [line.split()[0] for line in create[1].strip().splitlines()]
        assert names == [c.strip() for c in insert[1].split(",")]
        return names
    header = next(line for line in out.splitlines() if line.startswith("|"))
    return [c.strip() for c in header.strip("|").split("|")]


@pytest.mark.parametrize("fmt", FORMATS)
def test_bench_columns_without_dca_equal_upstream(
    fmt: str, dca_build: LlamaBuild, upstream_build: LlamaBuild, models_dir: TinyModels
) -> None:
    model = model_path(models_dir, "llama")
    want = columns(fmt, bench(upstream_build, model, fmt))
    assert columns(fmt, bench(dca_build, model, fmt)) == want
    assert "dca" not in want


@pytest.mark.parametrize("fmt", FORMATS)
def test_bench_gains_a_dca_column_with_dca(
    fmt: str, dca_build: LlamaBuild, upstream_build: LlamaBuild, models_dir: TinyModels
) -> None:
    model = model_path(models_dir, "llama")
    plain = columns(fmt, bench(upstream_build, model, fmt))
    dca = ("-dca", "0,1", "--dca-chunk-size", "64", "--dca-local-window", "8")
    got = columns(fmt, bench(dca_build, model, fmt, dca))
    assert "dca" in got
    assert [c for c in got if c != "dca"] == plain
