"""Run plans: which (method, lengths) servers run, how many haystacks each, in which lane.

A job is one llama-server process: one method, one or more lengths (a method whose flags do not
depend on the length serves all its lengths from one process unless memory is being measured
per length), ``haystacks`` haystacks per length (per task in the ``separate`` layout) and
``slots`` parallel slots. Lanes run side by side (one server process per lane at a time, all on
the same device); a lane runs its jobs in order: cheap in-range jobs first (they give the
ceiling), then the longest first, so that an all-or-nothing million-token job starts while the
budget is fresh. Jobs are spread over lanes longest-first onto the least loaded lane (LPT).

Costs come from a CostModel, used to spread jobs, to show a plan's expected time, and to decide
whether the next haystack still fits the budget (scaled by how the measured times compare to it).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .errors import ConfigError
from .methods import DEFAULT_METHODS, Method
from .tasks import LAYOUTS, TASKS, TaskParams, make_sample


@dataclass(frozen=True)
class CostModel:
    """Expected seconds on one device for one model (planning only, never a result).

    Prefill of L tokens: linear interpolation between `points` (measured (L, seconds) pairs);
    outside them a power law (`exponent`) through the nearest point, at least L / tokens_per_s.
    """

    name: str
    tokens_per_s: float
    points: tuple[tuple[int, float], ...]
    exponent: float = 1.8
    decode_s: float = 0.004  # per generated token at a short context
    decode_s_per_mtok: float = 0.02  # extra per generated token per million context tokens
    start_s: float = 4.0

    def prefill_s(self, length: int) -> float:
        linear = length / self.tokens_per_s
        first, last = self.points[0], self.points[-1]
        if length <= first[0]:
            return max(linear, first[1] * math.pow(length / first[0], self.exponent))
        for (la, sa), (lb, sb) in itertools.pairwise(self.points):
            if length <= lb:
                return sa + (sb - sa) * (length - la) / (lb - la)
        return max(linear, last[1] * math.pow(length / last[0], self.exponent))

    def question_s(self, length: int, n_predict: int) -> float:
        per_token = self.decode_s + self.decode_s_per_mtok * length / 1e6
        return (n_predict + 1) * per_token

    def unit_s(self, length: int, n_predicts: Sequence[int]) -> float:
        """One haystack: its prefill plus its questions (each a short suffix and a generation)."""
        return self.prefill_s(length) + sum(self.question_s(length, n) for n in n_predicts)


COSTS = {
    # Qwen2.5-0.5B with -fa on -ub 1024 on one H200: 41 s at 256k, 150 s at 512k and 260 s at 1M
    # (the device's timing guide). 32k-128k: a*L + c*L^2 with a = 35 us/token and c = 0.455 ns,
    # from SmolLM2-135M's pp512 at depth 32k and 128k on the H200 (18.6k and 8.0k tokens/s,
    # results/dca-cuda/2026-11-29-no-zero-masks) scaled by the attention heads (14 vs 9): 1.6 s,
    # 4.2 s and 12.4 s (6-20k tokens/s, the conservative side; that law also gives the 41 s at
    # 256k); below 32k an L^1.8 law, at least 25k tokens/s.
    "h200-0.5b": CostModel("h200-0.5b", 25_000, ((32_768, 1.6), (65_536, 4.2), (131_072, 12.4),
                                                 (262_144, 41.0), (524_288, 150.0),
                                                 (1_048_576, 260.0))),
    # SmolLM2-135M on 2 busy CPU cores of the build machine (measured here, see docs/dca.md).
    "cpu-135m": CostModel("cpu-135m", 300, ((32_768, 400.0),), exponent=1.5, decode_s=0.05,
                          decode_s_per_mtok=2.0, start_s=2.0),
}  # fmt: skip


@dataclass(frozen=True)
class Job:
    """One server process; ``haystacks == 0`` makes it a memory probe (start, one short request,
    stop: the buffers llama.cpp reserves for the whole context, without a long prefill)."""

    method: str
    lengths: tuple[int, ...]
    haystacks: int
    slots: int = 1

    def __post_init__(self) -> None:
        if not self.lengths or min(self.lengths) < 1 or self.haystacks < 0 or self.slots < 1:
            raise ConfigError(f"bad job {self}: lengths and slots >= 1, haystacks >= 0")

    @property
    def label(self) -> str:
        return f"{self.method}@{','.join(str(n) for n in self.lengths)}"


@dataclass(frozen=True)
class Plan:
    """Lanes of jobs. ``queue``: `lanes` holds one tuple of jobs in priority order, which
    `workers` lanes take one at a time; a job then starts only when all of its haystacks are
    expected to end before the budget runs out (else it is skipped and the next one tried)."""

    name: str
    lanes: tuple[tuple[Job, ...], ...]
    layout: str = "combined"
    tasks: tuple[str, ...] = TASKS
    budget_s: float | None = None
    queue: bool = False
    workers: int = 1

    def __post_init__(self) -> None:
        if self.workers < 1 or (self.queue and len(self.lanes) != 1):
            raise ConfigError("a queue plan has one list of jobs and at least one worker")
        if self.layout not in LAYOUTS:
            raise ConfigError(f"unknown layout {self.layout!r}", hint=f"use {', '.join(LAYOUTS)}")
        unknown = [t for t in self.tasks if t not in TASKS]
        if unknown or not self.tasks:
            raise ConfigError(f"unknown task(s) {unknown}", hint=f"use {', '.join(TASKS)}")

    @property
    def jobs(self) -> tuple[Job, ...]:
        return tuple(j for lane in self.lanes for j in lane)

    def groups(self) -> tuple[tuple[str, ...], ...]:
        """The task sets of one haystack: all tasks together, or one task each."""
        return (self.tasks,) if self.layout == "combined" else tuple((t,) for t in self.tasks)


def questions_per_group(tasks: tuple[str, ...], params: TaskParams) -> list[int]:
    """n_predict of every question a haystack holding `tasks` asks (for cost estimates)."""
    return [q.n_predict for q in make_sample(tasks, 0, 0, params).questions]


def job_cost(job: Job, plan: Plan, cost: CostModel, params: TaskParams) -> float:
    """Expected seconds of `job` (server start + every unit; slots overlap the generations)."""
    total = cost.start_s
    if job.haystacks == 0:
        return total + cost.prefill_s(64)
    for length in job.lengths:
        for group in plan.groups():
            n_predicts = questions_per_group(group, params)
            prefill = cost.prefill_s(length)
            questions = sum(cost.question_s(length, n) for n in n_predicts)
            total += job.haystacks * (prefill + questions / job.slots)
    return total


def assign_lanes(
    jobs: Sequence[Job], n_lanes: int, n_train: int, cost: CostModel, plan: Plan,
    params: TaskParams,
) -> tuple[tuple[Job, ...], ...]:  # fmt: skip
    """LPT: longest job first onto the least loaded lane; in a lane, in-range jobs (all lengths
    <= n_train) first, then longest first."""
    est = {j: job_cost(j, plan, cost, params) for j in jobs}
    lanes: list[list[Job]] = [[] for _ in range(max(1, n_lanes))]
    load = [0.0] * len(lanes)
    for job in sorted(jobs, key=lambda j: -est[j]):
        k = load.index(min(load))
        lanes[k].append(job)
        load[k] += est[job]
    key = lambda j: (max(j.lengths) > n_train, -est[j])  # noqa: E731
    return tuple(tuple(sorted(lane, key=key)) for lane in lanes if lane)


def grid_jobs(
    methods: Sequence[Method], lengths: Sequence[int], n_train: int, haystacks: int,
    slots: int, server_per_length: bool = False,
) -> list[Job]:  # fmt: skip
    """One job per method (per method and length when its flags depend on the length, or when
    `server_per_length`), skipping lengths where a method equals naive."""
    jobs: list[Job] = []
    for m in methods:
        run = tuple(n for n in lengths if m.runs_at(n, n_train))
        if not run:
            continue
        if m.per_length or server_per_length:
            jobs += [Job(m.name, (n,), haystacks, slots) for n in run]
        else:
            jobs.append(Job(m.name, run, haystacks, slots))
    return jobs


def lengths_of(multiples: Sequence[float], n_train: int) -> tuple[int, ...]:
    """Token lengths for multiples of the trained length (0.5 -> n_train/2), ascending, unique."""
    out = sorted({round(m * n_train) for m in multiples})
    if not out or out[0] < 1:
        raise ConfigError("lengths must be positive", key="--multiples")
    return tuple(out)


# ----------------------------------------------------------------------------- tiers


TIERS = ("smoke", "core", "full", "onecall", "fill")

# The one-call plan (~7 min of one H200 for a 0.5B model trained at 32k): cells (method,
# multiple of the trained length, haystacks) in priority order. First every method at 1x-4x and
# DCA and YaRN at 8x (the comparison; ~400 s of device work under h200-0.5b), then linear and
# naive at 8x, DCA with mscale on, then more haystacks for the same cells (a cell named again runs
# only the haystacks it lacks), then DCA at 16x and 32x. A queue plan skips the cells that would
# overrun the budget, so what fits is the most useful part, and a faster device gets further.
ONECALL: tuple[tuple[str, float, int], ...] = (
    ("naive", 1, 8), ("dca", 1, 8),
    ("dca", 2, 6), ("yarn", 2, 6), ("linear", 2, 6), ("naive", 2, 6),
    ("dca", 4, 2), ("yarn", 4, 2), ("linear", 4, 2), ("naive", 4, 2),
    ("dca", 8, 1), ("yarn", 8, 1), ("linear", 8, 1), ("naive", 8, 1),
    ("dca-mscale", 2, 6), ("dca-mscale", 4, 2), ("dca-mscale", 8, 1),
    ("dca", 4, 4), ("yarn", 4, 4), ("linear", 4, 4), ("naive", 4, 4), ("dca-mscale", 4, 4),
    ("dca", 8, 2), ("yarn", 8, 2), ("dca-mscale", 8, 2),
    ("naive", 1, 16), ("dca", 1, 16),
    ("dca", 2, 12), ("yarn", 2, 12), ("linear", 2, 12), ("naive", 2, 12), ("dca-mscale", 2, 12),
    ("dca", 4, 8), ("yarn", 4, 8), ("linear", 4, 8), ("naive", 4, 8), ("dca-mscale", 4, 8),
    ("linear", 8, 2), ("naive", 8, 2), ("dca", 8, 4), ("yarn", 8, 4),
    ("dca", 16, 1), ("dca-mscale", 16, 1), ("dca", 32, 1),
)  # fmt: skip


# The fill plan: the cells `onecall` leaves out or short, meant to resume (--resume) a document
# that onecall runs already hold. First the grid's ends: 0.5x (cheap), DCA at 32x (all or nothing,
# so it starts while the budget is fresh) and every method at 16x; then haystacks up to 20 per cell
# at 0.5x-2x, where most questions are one per haystack (passkey, mv_niah, vt), then 4x and 8x.
FILL: tuple[tuple[str, float, int], ...] = (
    ("naive", 0.5, 8), ("dca", 0.5, 8),
    ("dca", 32, 1),
    ("naive", 16, 1), ("yarn", 16, 1), ("dca", 16, 1), ("linear", 16, 1), ("dca-mscale", 16, 1),
    ("naive", 2, 20), ("linear", 2, 20), ("yarn", 2, 20), ("dca", 2, 20), ("dca-mscale", 2, 20),
    ("naive", 0.5, 20), ("dca", 0.5, 20), ("naive", 1, 20), ("dca", 1, 24),
    ("dca", 4, 12), ("yarn", 4, 12), ("linear", 4, 8), ("naive", 4, 8), ("dca-mscale", 4, 12),
    ("dca", 8, 6), ("yarn", 8, 4), ("dca-mscale", 8, 4), ("linear", 8, 3), ("naive", 8, 3),
    ("dca", 16, 2), ("dca-mscale", 32, 1),
)  # fmt: skip


def _queue_jobs(cells: Sequence[tuple[str, float, int]], methods: dict[str, Method], n: int,
                ) -> list[Job]:  # fmt: skip
    """A queue's cells for the given methods, one server each (memory per length)."""
    return [
        Job(name, (round(mult * n),), haystacks, 1)
        for name, mult, haystacks in cells
        if name in methods and methods[name].runs_at(round(mult * n), n)
    ]


def _tier_jobs(tier: str, methods: dict[str, Method], n: int) -> list[Job]:
    """The jobs of a tier for a model trained at n tokens (see docs/dca.md, device plans)."""
    names = [m for m in DEFAULT_METHODS if m in methods]
    dcas = [m for m in ("dca", "dca-mscale") if m in methods]
    ms = [methods[m] for m in names]
    if tier == "smoke":
        return grid_jobs(ms, (n, 2 * n), n, 1, 2)
    if tier == "core":
        jobs = grid_jobs(ms, (n // 2, n), n, 4, 4)
        jobs += grid_jobs(ms, (2 * n,), n, 3, 3, server_per_length=True)
        jobs += grid_jobs(ms, (4 * n,), n, 2, 2, server_per_length=True)
        jobs += [Job(d, (8 * n,), 1, 1) for d in dcas[:1]]
        jobs += [Job(d, (16 * n,), 1, 1) for d in dcas[:1]]
        jobs += [Job(d, (32 * n,), 1, 1) for d in dcas[:1]]
        return jobs
    if tier == "onecall":
        return _queue_jobs(ONECALL, methods, n)
    if tier == "fill":
        return _queue_jobs(FILL, methods, n)
    if tier == "full":
        jobs = grid_jobs(ms, (n // 2, n), n, 20, 4, server_per_length=True)
        jobs += grid_jobs(ms, (2 * n,), n, 20, 4, server_per_length=True)
        jobs += grid_jobs(ms, (4 * n,), n, 8, 4, server_per_length=True)
        jobs += grid_jobs(ms, (8 * n,), n, 3, 2, server_per_length=True)
        jobs += grid_jobs(ms, (16 * n,), n, 1, 1, server_per_length=True)
        jobs += [Job(d, (32 * n,), 2, 1) for d in dcas]
        return jobs
    raise ConfigError(f"unknown tier {tier!r}", key="--tier", hint=f"use {', '.join(TIERS)}")


def tier_plan(
    tier: str, methods: Sequence[Method], n_train: int, cost: CostModel, params: TaskParams,
    lanes: int = 2, budget_s: float | None = None, layout: str = "combined",
    probes: Sequence[tuple[str, float]] = (),
) -> Plan:  # fmt: skip
    """A named tier ("smoke", "core", "full") for a model trained at `n_train` tokens.

    smoke: 1x and 2x, every method, one haystack. core: 0.5x-4x every method (4/4/3/2
    haystacks), DCA alone at 8x, 16x and 32x (one haystack each). full: 0.5x-2x 20 haystacks,
    4x 8, 8x 3, 16x 1 per method, DCA and DCA+mscale at 32x 2; meant to be resumed (--resume)
    over several calls. onecall: the ONECALL cells as a queue plan for `lanes` workers (one
    device call under a budget). fill: the FILL cells, the same way (0.5x, 16x, DCA at 32x, then
    haystacks up to 20 per cell; resume onecall runs with it). `probes` adds memory probes
    (method name, multiple of n_train).
    """
    by_name = {m.name: m for m in methods}
    jobs = _tier_jobs(tier, by_name, n_train)
    jobs += [  # methods given beyond the built-in five run like naive at 0.5x-4x
        j
        for m in methods
        if m.name not in DEFAULT_METHODS
        for j in grid_jobs((m,), lengths_of((0.5, 1, 2, 4), n_train), n_train, 3, 3)
    ]
    jobs += [Job(name, (round(m * n_train),), 0, 1) for name, m in probes]
    if not jobs:
        raise ConfigError(f"tier {tier} has no job for methods {sorted(by_name)}")
    base = Plan(tier, ((),), layout, TASKS, budget_s)
    if tier in ("onecall", "fill"):
        return replace(base, lanes=(tuple(jobs),), queue=True, workers=max(1, lanes))
    return replace(base, lanes=assign_lanes(jobs, lanes, n_train, cost, base, params))


def describe(plan: Plan, cost: CostModel, params: TaskParams) -> list[str]:
    """Lines showing each lane's jobs and expected seconds under `cost` (a queue plan: its
    jobs in order with the expected time when each would end, shared by the workers)."""
    lines = [f"plan {plan.name} ({plan.layout} layout, cost model {cost.name})"]
    if plan.queue:
        lines[0] += (f": one queue, {plan.workers} worker(s) sharing the device, budget "
                     f"{plan.budget_s} s; device seconds per job and summed")  # fmt: skip
        total = 0.0
        have: dict[tuple[str, tuple[int, ...]], int] = {}
        for j in plan.jobs:
            key = (j.method, j.lengths)
            extra = j.haystacks - have.get(key, 0)
            est = job_cost(replace(j, haystacks=extra), plan, cost, params) if extra > 0 else 0.0
            have[key] = max(j.haystacks, have.get(key, 0))
            total += est
            lines.append(f"  {j.label} x{j.haystacks}: ~{est:.0f} s, sum ~{total:.0f} s")
        return lines
    for i, lane in enumerate(plan.lanes):
        total = sum(job_cost(j, plan, cost, params) for j in lane)
        lines.append(f"lane {i}: {len(lane)} job(s), ~{total:.0f} s")
        for j in lane:
            est = job_cost(j, plan, cost, params)
            lines.append(f"  {j.label} x{j.haystacks} slots {j.slots}: ~{est:.0f} s")
    return lines
