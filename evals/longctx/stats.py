"""Accuracy per cell with Wilson score intervals.

``wilson(k, n)`` is the 95% Wilson score interval (z = 1.959964) for k successes in n trials.

A cell is (model, task, method, length). Its questions are not all independent: in one haystack
they share the filler text and one another's needles (the combined layout asks every task's
questions about one haystack; mk_niah asks each of its keys). So a cell reports two intervals:

- ``wilson95``: over questions, as if independent (the usual RULER-style count; too narrow when
  questions of one haystack succeed or fail together);
- ``wilson95_haystacks``: the same accuracy with n = the number of haystacks the questions came
  from (as wide as if each haystack were one trial; too wide when they are independent).

The truth lies between them; plots draw the first as a band and the JSON keeps both.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

Z95 = 1.959963984540054


def wilson(k: float, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval for `k` successes (may be fractional) in `n` trials."""
    if n <= 0:
        return (0.0, 1.0)
    if not 0 <= k <= n:
        raise ValueError(f"successes {k} outside [0, {n}]")
    p = k / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


CELL_KEY = ("task", "method", "length")


def cells(trials: Iterable[Mapping[str, Any]], n_train: int) -> list[dict[str, Any]]:
    """One row per (task, method, length): n, correct, accuracy, both intervals, mean recall,
    haystacks, depth range, mean wall time per question; sorted by task, method, length."""
    groups: dict[tuple[str, str, int], list[Mapping[str, Any]]] = {}
    for t in trials:
        groups.setdefault((t["task"], t["method"], int(t["length"])), []).append(t)
    rows = []
    for (task, method, length), ts in sorted(groups.items()):
        n = len(ts)
        k = sum(1 for t in ts if t["correct"])
        haystacks = len({(t["seed"], t["haystack"]) for t in ts})
        lo, hi = wilson(k, n)
        hlo, hhi = wilson(k * haystacks / n, haystacks)
        rows.append({
            "task": task, "method": method, "length": length,
            "multiple": round(length / n_train, 4), "n": n, "correct": k,
            "accuracy": round(k / n, 4), "wilson95": [round(lo, 4), round(hi, 4)],
            "haystacks": haystacks, "wilson95_haystacks": [round(hlo, 4), round(hhi, 4)],
            "recall": round(sum(float(t["recall"]) for t in ts) / n, 4),
            "depth_min": round(min(float(t["depth"]) for t in ts), 4),
            "depth_max": round(max(float(t["depth"]) for t in ts), 4),
            "wall_s_mean": round(sum(float(t["wall_s"]) for t in ts) / n, 3),
        })  # fmt: skip
    return rows
