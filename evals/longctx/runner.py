"""Run a plan: servers per job, haystacks per slot, questions per haystack, trials into JSON.

For each job a llama-server is started with the method's flags; `slots` worker threads take
haystacks (units) from the job's queue, one slot each. A unit's prompts share one context:
its first question prefills it, the others reuse the slot's cache and process only their own
suffix. Haystacks depend on (seed, group, length, index) only, never on the method, so every
method sees the same haystacks (paired comparisons). A separate small tokenizer server (the
same model, no GPU, ``-c 512``) tokenizes everything, so measuring servers do nothing else.

Memory probes (jobs without haystacks) run first, one at a time, before the lanes start, so the
all-GPUs peak during a probe is that server's own. The budget: a unit starts only when its
expected time, scaled by measured / expected so far, still ends before the deadline; a job that
cannot fit its first unit is skipped ("budget"). In a queue plan the workers take the jobs in
order, and a job starts only when all its missing haystacks fit (so cells are whole or absent).
A haystack is claimed by the job that runs it, so a later job of the same cell (more haystacks)
runs only the ones still missing. The document (and the summary, when asked for) is rewritten
after every unit, so a run stopped from outside keeps its trials.
"""

from __future__ import annotations

import hashlib
import itertools
import shutil
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import SCHEMA, results
from .corpus import Corpus
from .errors import HarnessError, ServerFailed, UnsupportedFlags
from .haystack import Built, TokenPool, build, load_token_cache, save_token_cache
from .memory import MemoryMonitor, device_info, device_used, parse_breakdown, parse_buffers
from .methods import Method
from .plan import CostModel, Job, Plan, questions_per_group
from .server import REQUEST_TIMEOUT_S, Server, check_flags, parse_dca, server_version
from .stats import cells
from .tasks import Sample, TaskParams, make_sample, score


@dataclass(frozen=True)
class ModelRef:
    """The model file a run uses, and what the harness needs to know about it."""

    name: str
    path: Path
    sha256: str
    arch: str
    n_ctx_train: int
    server_args: tuple[str, ...] = ()  # e.g. --swa-full for models with sliding-window layers

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name, "file": self.path.name, "sha256": self.sha256, "arch": self.arch,
            "n_ctx_train": self.n_ctx_train, "server_args": list(self.server_args),
        }  # fmt: skip


@dataclass(frozen=True)
class RunConfig:
    binary: Path
    model: ModelRef
    corpus: Corpus
    plan: Plan
    methods: Mapping[str, Method]
    params: TaskParams
    cost: CostModel
    out: Path
    work: Path
    label: str
    seed: int = 1234
    server_args: tuple[str, ...] = ()
    tokenizer_args: tuple[str, ...] = ("-ngl", "0",)
    token_cache: Path | None = None
    resume: tuple[dict[str, Any], ...] = ()
    command: tuple[str, ...] = ()
    say: Callable[[str], None] = print
    summary: Path | None = None  # also write results.summary() here
    budget_from: float | None = None  # time.monotonic() the budget counts from (default: now)
    request_timeout_s: float = REQUEST_TIMEOUT_S  # one request to a server (ServerFailed after)


@dataclass(frozen=True)
class Unit:
    """One haystack of a job: its length, the tasks it holds, its index and seed."""

    length: int
    group: tuple[str, ...]
    index: int
    seed: int

    @property
    def group_name(self) -> str:
        return self.group[0] if len(self.group) == 1 else "combined"


def unit_seed(base: int, group: str, length: int, index: int) -> int:
    """The haystack's seed: the same for every method (paired trials)."""
    text = f"{base}/{group}/{length}/{index}".encode()
    return int(hashlib.sha256(text).hexdigest()[:12], 16)


TRUST_S = 30.0
RATIO_MIN = 0.5


@dataclass
class Budget:
    """The deadline, and how measured unit times compare with the cost model's."""

    deadline: float | None
    expected: float = 0.0
    measured: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def ratio(self) -> float:
        """measured / expected; at least 1 until TRUST_S of expected time is measured, then at
        least RATIO_MIN (a device faster than the cost model lets more in)."""
        with self.lock:
            if self.expected <= 0:
                return 1.0
            floor = RATIO_MIN if self.expected >= TRUST_S else 1.0
            return max(floor, self.measured / self.expected)

    def allows(self, expected_s: float) -> bool:
        if self.deadline is None:
            return True
        return time.monotonic() + expected_s * self.ratio <= self.deadline

    def record(self, expected_s: float, measured_s: float) -> None:
        with self.lock:
            self.expected += expected_s
            self.measured += measured_s

    def describe(self) -> dict[str, Any]:
        """Seconds left before the deadline (None: no budget) and the haystacks' expected and
        measured seconds so far (their ratio scales the next estimates)."""
        left = None if self.deadline is None else round(self.deadline - time.monotonic(), 1)
        ratio = self.ratio
        with self.lock:
            expected, measured = round(self.expected, 1), round(self.measured, 1)
        return {"left_s": left, "expected_s": expected, "measured_s": measured,
                "ratio": round(ratio, 3)}  # fmt: skip


def tokenizer_server(binary: Path, model: ModelRef, work: Path, extra: tuple[str, ...]) -> Server:
    """A small llama-server for /tokenize only: -c 512, one slot, kept off the GPU."""
    args = ("-t", "1", *model.server_args, *extra)
    log = work / f"tokenizer-{model.name}.log"
    return Server.launch(binary, model.path, 512, 1, args, log, env={"CUDA_VISIBLE_DEVICES": ""})


def tokenize_corpus(
    binary: Path, model: ModelRef, corpus: Corpus, out: Path, work: Path,
    say: Callable[[str], None] = print,
) -> int:  # fmt: skip
    """Tokenize every paragraph of `corpus` and save them as a token cache; the token count."""
    cache = load_token_cache(out, model.sha256, corpus.sha256)
    with tokenizer_server(binary, model, work, ("-ngl", "0")) as server:
        server.wait_ready()
        pool = TokenPool(corpus, server, cache=cache)
        step = 1000
        for start in range(0, len(corpus.paragraphs), step):
            pool.prefetch(range(start, min(start + step, len(corpus.paragraphs))))
            say(f"tokenized {min(start + step, len(corpus.paragraphs))}/{len(corpus.paragraphs)}")
    save_token_cache(out, model.sha256, corpus.sha256, pool.cache)
    return sum(len(t) for t in pool.cache.values())


# ----------------------------------------------------------------------------- the run


@dataclass
class _Serving:
    """The shared state of one job's slot workers."""

    done: int = 0
    error: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next(self, queue: deque[Unit]) -> Unit | None:
        with self.lock:
            return queue.popleft() if queue and self.error is None else None

    def fail(self, error: str) -> None:
        with self.lock:
            self.error = self.error or error

    def finish(self) -> None:
        with self.lock:
            self.done += 1


class Run:
    """One execution of a plan (create, then `execute`)."""

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.lock = threading.Lock()
        # resumed trials keep the corpus they were cut from; only those of this run's corpus
        # count as done (a haystack of another corpus is another haystack)
        # --resume documents may overlap (a run resumed from several earlier ones carries their
        # records): each run, its jobs and each trial record are taken once
        self.trials: list[dict[str, Any]] = results.unique_records(
            t for d in cfg.resume for t in results.with_corpus(d))
        self.prior_runs: list[dict[str, Any]] = []  # the runs of the --resume documents
        self.jobs: list[dict[str, Any]] = []
        for d in cfg.resume:
            index = results.add_runs(self.prior_runs, results.runs_of(d))
            for j in d["jobs"]:
                run = index[min(int(j.get("run", 0)), len(index) - 1)]
                if run is not None:  # None: a run taken from an earlier document, jobs and all
                    self.jobs.append({**j, "run": run})
        # the resumed documents' own repeat counts stay with them: `publish` merges this run with
        # them (a count carried here would be counted twice there)
        self.repeats = {"trials": 0, "disagree": 0}
        self.done = results.done_units(t for t in self.trials if t["corpus"] == cfg.corpus.sha256)
        self.claimed: set[tuple[Any, ...]] = set(self.done)  # done, or taken by a running job
        self.started = time.monotonic()
        self.started_at = datetime.now(UTC).isoformat(timespec="seconds")
        self.run_id = uuid.uuid4().hex  # tells this run from another started the same second
        budget = cfg.plan.budget_s
        start = self.started if cfg.budget_from is None else cfg.budget_from
        self.budget = Budget(None if budget is None else start + budget)
        self.samples: dict[Unit, tuple[Sample, Built]] = {}
        self.building: dict[Unit, threading.Lock] = {}
        self.pool: TokenPool | None = None
        self.version = server_version(cfg.binary)
        self.device = device_info()

    # -- document

    def document(self) -> dict[str, Any]:
        cfg = self.cfg
        plan = cfg.plan
        return {
            "schema": SCHEMA,
            "label": cfg.label,
            "device": self.device,
            "model": cfg.model.describe(),
            "server": {"binary": str(cfg.binary), "version": self.version,
                       "args": list(cfg.server_args)},
            "corpus": cfg.corpus.describe(),
            "params": asdict(cfg.params),
            "plan": {"name": plan.name, "layout": plan.layout, "tasks": list(plan.tasks),
                     "budget_s": plan.budget_s, "cost_model": cfg.cost.name,
                     "lanes": [[asdict(j) for j in lane] for lane in plan.lanes]},
            "seed": cfg.seed,
            "command": list(cfg.command),
            "methods": {n: {"args": list(m.args), "in_range": m.in_range}
                        for n, m in cfg.methods.items()},
            "started": self.started_at,
            "wall_s": round(time.monotonic() - self.started, 1),
            "budget": self.budget.describe(),
            "runs": [*self.prior_runs, {
                "id": self.run_id, "started": self.started_at,
                "wall_s": round(time.monotonic() - self.started, 1),
                "command": list(cfg.command), "server": self.version,
                "budget": self.budget.describe()}],
            "repeats": dict(self.repeats),
            "jobs": [{**j, "run": j.get("run", len(self.prior_runs))} for j in self.jobs],
            "trials": self.trials,
            "cells": cells(self.trials, cfg.model.n_ctx_train),
        }  # fmt: skip

    def save(self) -> None:
        with self.lock:
            doc = self.document()
            results.write(doc, self.cfg.out)
            if self.cfg.summary is not None:
                results.write_summary(doc, self.cfg.summary)

    # -- haystacks

    def unit_key(self, method: str, unit: Unit) -> tuple[Any, ...]:
        return (method, unit.length, unit.group_name, unit.seed, unit.index)

    def claim(self, job: Job) -> list[Unit]:
        """The job's haystacks neither done (--resume, or an earlier job of the cell) nor taken
        by a running job, now taken; index-major so that a budget cut leaves every length and
        group with about as many haystacks."""
        out = []
        with self.lock:
            for index in range(job.haystacks):
                for length in job.lengths:
                    for group in self.cfg.plan.groups():
                        name = group[0] if len(group) == 1 else "combined"
                        unit = Unit(length, group, index, unit_seed(self.cfg.seed, name, length,
                                                                    index))  # fmt: skip
                        key = self.unit_key(job.method, unit)
                        if key not in self.claimed:
                            self.claimed.add(key)
                            out.append(unit)
        return out

    def release(self, job: Job, units: list[Unit]) -> None:
        """Give back the claims of `units` that did not finish (a later job may run them)."""
        with self.lock:
            keys = {self.unit_key(job.method, u) for u in units}
            self.claimed -= keys - self.done

    def haystack(self, unit: Unit) -> tuple[Sample, Built]:
        """The unit's sample and tokens, built once and shared by every method's job."""
        assert self.pool is not None
        with self.lock:
            lock = self.building.setdefault(unit, threading.Lock())
        with lock:
            if unit not in self.samples:
                sample = make_sample(unit.group, unit.seed, unit.index, self.cfg.params)
                built = build(sample, self.pool, unit.length, unit.seed)
                with self.lock:
                    self.samples[unit] = (sample, built)
            return self.samples[unit]

    def expected_s(self, unit: Unit) -> float:
        sample, _ = self.samples.get(unit, (None, None))
        n_predicts = [q.n_predict for q in sample.questions] if sample else [16] * 4
        return self.cfg.cost.unit_s(unit.length, n_predicts)

    # -- jobs

    def job_args(self, job: Job) -> tuple[str, ...]:
        method = self.cfg.methods[job.method]
        model = self.cfg.model
        # the scale factor covers the whole slot (prompt + question + answer), as published YaRN and
        # linear configs size it by the served context: llama-server caps a slot at n_train x factor
        # for YaRN, so a factor of length / n_train would refuse a prompt of exactly that length
        rendered = method.render(self.n_ctx(job) // job.slots, model.n_ctx_train)
        return (*rendered, *self.slot_cap_args(job, rendered), *model.server_args,
                *self.cfg.server_args)  # fmt: skip

    def slot_cap_args(self, job: Job, rendered: tuple[str, ...]) -> tuple[str, ...]:
        """llama-server caps every slot at the model's trained context (GGUF context_length);
        patch 0078 lifts that cap with --dca on only. The other methods run past the trained
        length by declaring a context_length as large as the slot (it changes nothing else for
        plain, linear or YaRN rope: YaRN's original length comes from --yarn-orig-ctx)."""
        per_slot = self.n_ctx(job) // job.slots
        dca_on = any(a == "--dca" and b == "on" for a, b in itertools.pairwise(rendered))
        if dca_on or per_slot <= self.cfg.model.n_ctx_train:
            return ()
        return ("--override-kv", f"{self.cfg.model.arch}.context_length=int:{per_slot}")

    def n_ctx(self, job: Job) -> int:
        """Slots x (the longest prompt + the longest generation + 64), in multiples of 256."""
        generation = max(n for g in self.cfg.plan.groups()
                         for n in questions_per_group(g, self.cfg.params))  # fmt: skip
        per_slot = -(-(max(job.lengths) + generation + 64) // 256) * 256
        return per_slot * job.slots

    def run_unit(self, job: Job, server: Server, unit: Unit, slot: int,
                 mon: MemoryMonitor) -> int:  # fmt: skip
        """Ask every question of `unit` on `slot`; returns how many were answered correctly."""
        t0 = time.monotonic()
        sample, built = self.haystack(unit)
        rows = []
        for qi, q in enumerate(sample.questions):
            start = time.monotonic()
            got = server.complete(built.prompt(qi), q.n_predict, slot)
            wall = time.monotonic() - start
            verdict = score(q, got.content)
            depths = [round(built.depths[i], 4) for i in q.needles]
            peak = mon.peak()
            rows.append({
                "task": q.task, "method": job.method, "length": unit.length,
                "multiple": round(unit.length / self.cfg.model.n_ctx_train, 4),
                "depth": min(depths), "depths": depths, "seed": unit.seed,
                "haystack": unit.index, "question": qi, "group": unit.group_name, "slot": slot,
                "expected": list(q.expected), "got": got.content, "answer": verdict.answer,
                "correct": verdict.correct, "recall": round(verdict.recall, 4),
                "distractors": verdict.distractors, "tokens": len(built.prompt(qi)),
                "cached_tokens": got.cached_n, "prompt_ms": round(got.prompt_ms, 1),
                "gen_ms": round(got.predicted_ms, 1), "wall_s": round(wall, 3),
                "peak_device_mib": peak["device_mib"], "peak_host_mib": peak["host_mib"],
                "corpus": self.cfg.corpus.sha256,
            })  # fmt: skip
        self.budget.record(self.expected_s(unit), time.monotonic() - t0)
        with self.lock:
            self.trials += rows
            self.done.add(self.unit_key(job.method, unit))
        self.save()
        return sum(r["correct"] for r in rows)

    def serve(self, job: Job, server: Server, mon: MemoryMonitor, units: list[Unit],
              lane: int) -> tuple[int, str | None]:  # fmt: skip
        """Run `units` on `job.slots` slots; (units done, the first error or None)."""
        queue = deque(units)
        state = _Serving()

        def worker(slot: int) -> None:
            while (unit := state.next(queue)) is not None:
                if not self.budget.allows(self.expected_s(unit)):
                    return
                try:
                    ok = self.run_unit(job, server, unit, slot, mon)
                except HarnessError as exc:
                    state.fail(exc.one_line())
                    return
                except Exception as exc:  # a bug: fail the job, keep the run and its data
                    state.fail(f"internal error: {type(exc).__name__}: {exc}")
                    return
                state.finish()
                n = len(self.samples[unit][0].questions)
                self.cfg.say(
                    f"[lane {lane}] {job.label}: {unit.group_name} @{unit.length} "
                    f"#{unit.index}: {ok}/{n} correct"
                )

        threads = [threading.Thread(target=worker, args=(s,)) for s in range(job.slots)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return state.done, state.error

    def probe(self, server: Server) -> None:
        """One short request (64 corpus tokens) so the compute graph runs once."""
        assert self.pool is not None
        prompt = list(self.pool.paragraph(0))[:64] or [0]
        server.complete(prompt, 4, 0)

    def run_job(self, job: Job, lane: int) -> None:
        args = self.job_args(job)
        record: dict[str, Any] = {
            **asdict(job), "lengths": list(job.lengths), "lane": lane, "args": list(args),
            "n_ctx": self.n_ctx(job), "status": "ok", "reason": None, "wall_s": 0.0,
            "memory": {}, "dca": None, "units_planned": 0, "units_done": 0, "log": None,
        }  # fmt: skip
        units = self.claim(job)
        record["units_planned"] = len(units)
        t0 = time.monotonic()
        try:
            record.update(self._run_job(job, lane, args, units))
        except UnsupportedFlags as exc:
            record.update(status="unsupported", reason=exc.one_line())
        except HarnessError as exc:
            record.update(status="failed", reason=exc.one_line())
            if isinstance(exc, ServerFailed):
                record["log_tail"] = exc.log_tail[-2000:]
        finally:
            self.release(job, units)
        record["wall_s"] = round(time.monotonic() - t0, 1)
        self.cfg.say(f"[lane {lane}] {job.label}: {record['status']}"
                     + (f" ({record['reason']})" if record["reason"] else ""))  # fmt: skip
        with self.lock:
            self.jobs.append(record)
        self.save()

    def _run_job(self, job: Job, lane: int, args: tuple[str, ...],
                 units: list[Unit]) -> dict[str, Any]:  # fmt: skip
        cfg = self.cfg
        check_flags(cfg.binary, args, f"method {job.method}")
        if job.haystacks and not units:
            return {"status": "ok", "reason": "already done (an earlier job, or --resume)"}
        need = [self.expected_s(u) for u in units]
        if cfg.plan.queue:  # the whole cell, or nothing
            if not self.budget.allows(cfg.cost.start_s + sum(need) / job.slots):
                return {"status": "budget", "reason": f"{len(units)} haystack(s) would overrun "
                        "the budget"}  # fmt: skip
        elif not self.budget.allows(cfg.cost.start_s + (need[0] if need else 0.0)):
            return {"status": "budget", "reason": "the first haystack would overrun the budget"}
        name = f"{cfg.label}-{job.method}-{max(job.lengths)}-x{job.haystacks}-lane{lane}"
        log = cfg.work / f"{name}.log"
        before = device_used(shutil.which("nvidia-smi"))[1]
        server = Server.launch(cfg.binary, cfg.model.path, self.n_ctx(job), job.slots, args, log)
        server.request_timeout_s = cfg.request_timeout_s
        mon = MemoryMonitor(server.pid).start()
        out: dict[str, Any] = {"log": log.name}
        try:
            t_start = time.monotonic()
            server.wait_ready()
            out["start_s"] = round(time.monotonic() - t_start, 1)
            self.budget.record(cfg.cost.start_s, out["start_s"])  # starts count in the ratio too
            if job.haystacks == 0:
                self.probe(server)
                out["status"] = "probe"
            else:
                done, error = self.serve(job, server, mon, units, lane)
                out["units_done"] = done
                if error:
                    out.update(status="failed", reason=error)
                elif done < len(units):
                    out.update(status="budget" if done == 0 else "partial",
                               reason=f"budget: {done} of {len(units)} haystacks")  # fmt: skip
        finally:
            mon.sample()
            mon.stop()
            server.stop()
            log_text = server.log_ends()
            out["memory"] = {**mon.peak(), "device_before_mib": before,
                             "buffers": parse_buffers(log_text),
                             "breakdown": parse_breakdown(log_text)}  # fmt: skip
            out["dca"] = parse_dca(log_text)
            if out.get("status") == "failed":
                out["log_tail"] = log_text[-2000:]
        return out

    def lane(self, jobs: tuple[Job, ...], index: int) -> None:
        for job in jobs:
            self.run_job(job, index)

    def worker(self, queue: deque[Job], index: int) -> None:
        """A queue plan's lane: the next job in order until none is left."""
        while True:
            with self.lock:
                job = queue.popleft() if queue else None
            if job is None:
                return
            self.run_job(job, index)

    def execute(self) -> dict[str, Any]:
        """Run every lane to its end or the budget; the final document (also written)."""
        cfg = self.cfg
        cfg.work.mkdir(parents=True, exist_ok=True)
        with tokenizer_server(cfg.binary, cfg.model, cfg.work, cfg.tokenizer_args) as tokenizer:
            tokenizer.request_timeout_s = cfg.request_timeout_s
            tokenizer.wait_ready()
            cache: dict[int, tuple[int, ...]] = {}
            if cfg.token_cache is not None:
                cache = load_token_cache(cfg.token_cache, cfg.model.sha256, cfg.corpus.sha256)
            self.pool = TokenPool(cfg.corpus, tokenizer, cache=cache)
            probes = [j for lane in cfg.plan.lanes for j in lane if j.haystacks == 0]
            self.lane(tuple(probes), -1)  # alone: the all-GPUs peak is then this process's own
            if cfg.plan.queue:
                queue = deque(j for j in cfg.plan.jobs if j.haystacks)
                threads = [threading.Thread(target=self.worker, args=(queue, i))
                           for i in range(cfg.plan.workers)]  # fmt: skip
            else:
                threads = [
                    threading.Thread(target=self.lane,
                                     args=(tuple(j for j in jobs if j.haystacks), i))
                    for i, jobs in enumerate(cfg.plan.lanes)
                ]  # fmt: skip
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if cfg.token_cache is not None:
                save_token_cache(cfg.token_cache, cfg.model.sha256, cfg.corpus.sha256,
                                 self.pool.cache)  # fmt: skip
        self.save()
        return self.document()


def run(cfg: RunConfig) -> dict[str, Any]:
    """Execute `cfg` (see the module docstring); ServerFailed when the tokenizer server fails."""
    return Run(cfg).execute()
