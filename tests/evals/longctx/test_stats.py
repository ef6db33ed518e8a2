"""evals/longctx/stats.py: Wilson intervals and cells."""

from __future__ import annotations

import math

import pytest

from evals.longctx.stats import cells, wilson


@pytest.mark.parametrize(
    ("k", "n", "lo", "hi"),
    [  # R: binom::binom.confint(k, n, methods = "wilson")
        (0, 10, 0.0, 0.2775328),
        (1, 10, 0.01787621, 0.4041500),
        (5, 10, 0.2365931, 0.7634069),
        (10, 10, 0.7224672, 1.0),
    ],
)
def test_wilson_matches_published_values(k: int, n: int, lo: float, hi: float) -> None:
    got = wilson(k, n)
    assert got[0] == pytest.approx(lo, abs=2e-6) and got[1] == pytest.approx(hi, abs=2e-6)


def test_wilson_solves_its_defining_equation() -> None:
    """The bounds are the p with |k/n - p| = z sqrt(p(1-p)/n) (the score test's edge)."""
    z = 1.959963984540054
    for k, n in [(3, 7), (12, 40), (200, 263)]:
        for p in wilson(k, n):
            assert abs(k / n - p) == pytest.approx(z * math.sqrt(p * (1 - p) / n), rel=1e-9)


def test_wilson_edges() -> None:
    assert wilson(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson(3, 2)


def _trial(task: str, method: str, length: int, correct: bool, haystack: int) -> dict[str, object]:
    return {"task": task, "method": method, "length": length, "correct": correct, "seed": 7,
            "haystack": haystack, "recall": 1.0 if correct else 0.0, "depth": 0.5,
            "wall_s": 2.0}  # fmt: skip


def test_cells_count_questions_and_haystacks() -> None:
    trials = [_trial("mk_niah", "dca", 2048, i % 4 != 0, i // 4) for i in range(16)]
    trials += [_trial("passkey", "dca", 2048, True, 0)]
    rows = cells(trials, 1024)
    mk = next(r for r in rows if r["task"] == "mk_niah")
    assert (mk["n"], mk["correct"], mk["haystacks"], mk["multiple"]) == (16, 12, 4, 2.0)
    assert mk["accuracy"] == 0.75 and mk["recall"] == 0.75
    lo, hi = mk["wilson95"]
    hlo, hhi = mk["wilson95_haystacks"]
    assert hlo < lo < 0.75 < hi < hhi  # the haystack-level interval is the wider one
    assert [round(x, 4) for x in wilson(12, 16)] == mk["wilson95"]
    assert [r["task"] for r in rows] == ["mk_niah", "passkey"]
