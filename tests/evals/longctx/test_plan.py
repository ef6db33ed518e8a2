"""evals/longctx/plan.py: cost model, jobs, lanes and the named tiers."""

from __future__ import annotations

import pytest

from evals.longctx.errors import ConfigError
from evals.longctx.methods import BUILTIN, DEFAULT_METHODS
from evals.longctx.plan import (
    COSTS,
    Job,
    Plan,
    assign_lanes,
    describe,
    grid_jobs,
    job_cost,
    lengths_of,
    questions_per_group,
    tier_plan,
)
from evals.longctx.tasks import TASKS, TaskParams

H200 = COSTS["h200-0.5b"]
PARAMS = TaskParams()
METHODS = [BUILTIN[m] for m in DEFAULT_METHODS]
N = 32768


def test_cost_model_passes_its_points_and_grows() -> None:
    for length, seconds in H200.points:
        assert H200.prefill_s(length) == pytest.approx(seconds)
    lengths = [1024 * 2**i for i in range(12)]
    times = [H200.prefill_s(n) for n in lengths]
    assert times == sorted(times) and times[0] == pytest.approx(1024 / H200.tokens_per_s)
    assert H200.prefill_s(2 * 1_048_576) > 260.0


def test_lengths_and_grid_jobs() -> None:
    assert lengths_of((4, 0.5, 1, 1.0), 8192) == (4096, 8192, 32768)
    with pytest.raises(ConfigError):
        lengths_of((0,), 8192)
    jobs = grid_jobs(METHODS, (N // 2, N, 2 * N), N, 3, 2)
    by = {j.method: j for j in jobs if j.method in ("naive", "dca")}
    assert by["naive"].lengths == (N // 2, N, 2 * N)  # one server for all its lengths
    assert [j.lengths for j in jobs if j.method == "yarn"] == [(2 * N,)]  # per length, > n
    per = grid_jobs(METHODS[:1], (N, 2 * N), N, 1, 1, server_per_length=True)
    assert [j.lengths for j in per] == [(N,), (2 * N,)]


def test_lanes_balance_and_put_in_range_first() -> None:
    base = Plan("t", ((),))
    jobs = [Job("dca", (32 * N,), 1), Job("dca", (16 * N,), 1), Job("naive", (N,), 4),
            Job("dca", (4 * N,), 2), Job("naive", (N // 2,), 4)]  # fmt: skip
    lanes = assign_lanes(jobs, 2, N, H200, base, PARAMS)
    loads = [sum(job_cost(j, base, H200, PARAMS) for j in lane) for lane in lanes]
    assert sorted(map(repr, (j for lane in lanes for j in lane))) == sorted(map(repr, jobs))
    assert max(loads) < 1.3 * min(loads)
    for lane in lanes:
        in_range = [max(j.lengths) <= N for j in lane]
        assert in_range == sorted(in_range, reverse=True)


def test_core_tier_covers_every_method_to_4x_and_dca_to_32x() -> None:
    plan = tier_plan("core", METHODS, N, H200, PARAMS, probes=[("dca-q8", 32)])
    cells = {(j.method, n) for j in plan.jobs for n in j.lengths}
    for m in DEFAULT_METHODS:
        for mult in (2, 4):
            assert (m, mult * N) in cells
    assert ("naive", N // 2) in cells and ("linear", N) not in cells
    assert {("dca", 8 * N), ("dca", 16 * N), ("dca", 32 * N)} <= cells
    assert Job("dca-q8", (32 * N,), 0, 1) in plan.jobs  # the memory probe
    assert len(plan.lanes) == 2
    assert "lane 0" in "\n".join(describe(plan, H200, PARAMS))


def test_tiers_without_dca_mscale_still_plan() -> None:
    plan = tier_plan("smoke", [BUILTIN["naive"], BUILTIN["dca"]], N, H200, PARAMS, lanes=1)
    assert {j.method for j in plan.jobs} == {"naive", "dca"}
    with pytest.raises(ConfigError, match="unknown tier"):
        tier_plan("huge", METHODS, N, H200, PARAMS)


def test_plan_validation_and_groups() -> None:
    assert Plan("t", ((),)).groups() == (TASKS,)
    assert Plan("t", ((),), "separate", ("passkey", "vt")).groups() == (("passkey",), ("vt",))
    with pytest.raises(ConfigError):
        Plan("t", ((),), "sideways")
    with pytest.raises(ConfigError):
        Plan("t", ((),), tasks=("passkey", "nope"))
    with pytest.raises(ConfigError):
        Job("dca", (), 1)


def test_questions_per_group_counts_every_question() -> None:
    assert len(questions_per_group(TASKS, PARAMS)) == 1 + 4 + 1 + 1


def test_onecall_tier_is_a_priority_queue_of_whole_cells() -> None:
    plan = tier_plan("onecall", METHODS, N, H200, PARAMS, lanes=2, budget_s=420,
                     probes=[("dca", 32)])  # fmt: skip
    assert plan.queue and plan.workers == 2 and len(plan.lanes) == 1
    cells = [(j.method, j.lengths[0] // N, j.haystacks) for j in plan.jobs]
    assert cells[:2] == [("naive", 1, 8), ("dca", 1, 8)]  # the in-range ceiling first
    first = {(m, x) for m, x, _ in cells[:14]}  # every method at 1x-8x before anything else
    assert first == {(m, x) for m in ("naive", "dca") for x in (1, 2, 4, 8)} | {
        (m, x) for m in ("linear", "yarn") for x in (2, 4, 8)}  # fmt: skip
    assert not any(m == "dca-mscale" and x <= 1 for m, x, _ in cells)  # same as dca there
    assert cells.index(("dca", 32, 1)) == len(cells) - 2 and cells[-1] == ("dca", 32, 0)
    assert all(len(j.lengths) == 1 and j.slots == 1 for j in plan.jobs)
    lines = describe(plan, H200, PARAMS)
    assert "one queue, 2 worker(s)" in lines[0]
    sums = [float(line.rsplit("~", 1)[1].split()[0]) for line in lines[1:]]
    assert sums == sorted(sums)  # a cell named again adds only its missing haystacks
    assert 380 < sums[11] < 450  # 1x-4x every method and DCA + YaRN at 8x: about the budget
    with pytest.raises(ConfigError, match="queue plan"):
        Plan("q", ((), ()), queue=True)


def test_the_h200_cost_model_follows_a_quadratic_law_to_256k() -> None:
    a, c = 35e-6, 0.455e-9  # s per token, s per token^2 (see plan.COSTS)
    for n in (32_768, 65_536, 131_072, 262_144):
        assert H200.prefill_s(n) == pytest.approx(a * n + c * n * n, rel=0.05)


def test_fill_tier_completes_the_grid_ends_before_adding_haystacks() -> None:
    plan = tier_plan("fill", METHODS, N, H200, PARAMS, lanes=2, budget_s=800)
    assert plan.queue and plan.workers == 2
    cells = [(j.method, j.lengths[0] / N, j.haystacks) for j in plan.jobs]
    assert cells[:3] == [("naive", 0.5, 8), ("dca", 0.5, 8), ("dca", 32, 1)]
    at_16 = {m for m, x, _ in cells[3:8] if x == 16}
    assert at_16 == {"naive", "linear", "yarn", "dca", "dca-mscale"}  # every method at 16x next
    assert not any(m in ("linear", "yarn", "dca-mscale") and x <= 1 for m, x, _ in cells)
    at_2 = {m: h for m, x, h in cells if x == 2}
    assert set(at_2) == set(at_16) and min(at_2.values()) >= 20  # 20 trials a cell at least
