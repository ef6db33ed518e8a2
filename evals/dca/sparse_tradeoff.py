#!/usr/bin/env python3
"""Sparse prefill's trade-off: accuracy against its dense method, and the prefill time it bought.

    sparse_tradeoff.py RESULTS.json [RESULTS.json ...] [DENSE=SPARSE ...] [--json J] [--md M]
                       [--plot P.png]

RESULTS.json is a long-context harness results document (``python3 -m evals.longctx run`` or
``publish``: every trial). Every method of the harness answers the same haystacks and questions for
one seed, so a sparse method and its dense one are compared question by question. Several documents
of one model are read as one: a sparse method measured in a later run is paired with the dense
method of an earlier run on the same haystacks. A question that two documents both answered with
one method must have the same answer text in both (a method rerun in the later run shows that the
runs reproduce each other, so that pairing across them holds); it is counted once and reported as
repeated, and any other answer is an error. Per (pair, task, length) the rows give:

- each method's correct / n with the Wilson 95 % interval over questions (the harness's function)
  and whether the sparse accuracy lies inside the dense interval (the acceptance rule);
- the paired view: questions both got right, dense only, sparse only, neither; the exact two-sided
  sign test on the discordant questions (how likely a split at least that uneven is if sparse and
  dense were equally good), and how many continuations were the same text;
- where the answers went: per quarter of the needle's depth, dense and sparse correct; how many
  wrong answers were another needle's value (the harness's ``distractors``);
- the prefill each method measured in the same run (llama-server's prompt time of each haystack's
  first question, mean over haystacks) and dense / sparse, the speed-up. Lanes that share one
  device make these times noisy; both methods ran under the same sharing. Only for a pair whose
  two methods come from the same document: times of two runs (other devices, other sharing) are
  not compared.

Pairs default to every ``X``/``X-sparse*`` pair of methods present. ``--plot`` draws two panels:
accuracy against the prompt length (dense and sparse, Wilson intervals) per task, and accuracy
change against prefill speed-up, one point per cell (needs matplotlib, the ``longctx`` extra).
Exit 0; 2 on unreadable input or a pair that names a method the document lacks.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from evals.longctx import results
from evals.longctx.errors import BadInput
from evals.longctx.stats import wilson

Trial = dict[str, Any]
Key = tuple[str, int, int, int, int]  # task, length, seed, haystack, question


class InputError(Exception):
    """A pair the documents cannot answer, or documents that cannot be paired (exit 2)."""


def merge(docs: list[tuple[str, dict[str, Any]]]) -> tuple[dict[str, Any], dict[str, int]]:
    """One document from several of one model: the first one's fields, every trial once (tagged
    with its document's index as ``source``), and per method@length how many questions two
    documents both answered, with the same text. Another text, or another model, is InputError."""
    (first_name, first), *_ = docs
    model = first.get("model", {})
    trials: dict[tuple[str, Key], Trial] = {}
    repeated: dict[str, int] = {}
    for i, (name, doc) in enumerate(docs):
        other = doc.get("model", {})
        if (other.get("name"), other.get("n_ctx_train")) != (model.get("name"),
                                                             model.get("n_ctx_train")):
            raise InputError(f"{name}: model {other.get('name')!r} is not {first_name}'s "
                             f"{model.get('name')!r}: give documents of one model")
        for (method, key), t in _index(doc["trials"]).items():
            have = trials.get((method, key))
            if have is None:
                trials[(method, key)] = {**t, "source": i}
                continue
            if have.get("got") != t.get("got"):
                raise InputError(
                    f"{name}: {method} answered {key} with {t.get('got')!r}, "
                    f"{docs[have['source']][0]} with {have.get('got')!r}: the runs do not "
                    "reproduce each other, so their trials cannot be paired")
            cell = f"{method}@{key[1]}"
            repeated[cell] = repeated.get(cell, 0) + 1
    return {**first, "trials": list(trials.values())}, repeated


def default_pairs(methods: set[str]) -> list[tuple[str, str]]:
    """Every SPARSE method named ``DENSE-sparse...`` beside its DENSE method."""
    pairs = []
    for sparse in sorted(methods):
        head, sep, _ = sparse.partition("-sparse")
        if sep and head in methods:
            pairs.append((head, sparse))
    return pairs


def sign_test_p(a: int, b: int) -> float:
    """Exact two-sided binomial sign test of a split a / b of discordant pairs (p = 1/2)."""
    n = a + b
    if n == 0:
        return 1.0
    k = min(a, b)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def _index(trials: list[Trial]) -> dict[tuple[str, Key], Trial]:
    out = {}
    for t in trials:
        key = (t["task"], int(t["length"]), int(t["seed"]), int(t["haystack"]), int(t["question"]))
        out[(t["method"], key)] = t
    return out


def _prefills(trials: list[Trial]) -> dict[tuple[str, int], float]:
    """Per (method, length): mean prompt seconds of each haystack's first question (the one that
    paid the prefill)."""
    first: dict[tuple[str, int, int, int], Trial] = {}
    for t in trials:
        if t.get("prompt_ms") is None:
            continue
        hay = (t["method"], int(t["length"]), int(t["seed"]), int(t["haystack"]))
        if hay not in first or int(t["question"]) < int(first[hay]["question"]):
            first[hay] = t
    sums: dict[tuple[str, int], list[float]] = {}
    for (method, length, _, _), t in first.items():
        sums.setdefault((method, length), []).append(float(t["prompt_ms"]) / 1000.0)
    return {k: sum(v) / len(v) for k, v in sums.items()}


def _row(
    doc: dict[str, Any],
    prefills: dict[tuple[str, int], float],
    dense: str,
    sparse: str,
    task: str,
    length: int,
    pairs: list[tuple[Trial, Trial]],
) -> dict[str, Any]:
    n = len(pairs)
    kd = sum(bool(d["correct"]) for d, _ in pairs)
    ks = sum(bool(s["correct"]) for _, s in pairs)
    lo, hi = wilson(kd, n)
    slo, shi = wilson(ks, n)
    dense_only = sum(bool(d["correct"]) and not s["correct"] for d, s in pairs)
    sparse_only = sum(bool(s["correct"]) and not d["correct"] for d, s in pairs)
    depth = [[0, 0, 0] for _ in range(4)]
    for d, s in pairs:
        q = depth[min(int(float(d["depth"]) * 4), 3)]
        q[0] += 1
        q[1] += bool(d["correct"])
        q[2] += bool(s["correct"])
    pd, ps = prefills.get((dense, length)), prefills.get((sparse, length))
    if {d.get("source") for d, _ in pairs} != {s.get("source") for _, s in pairs}:
        pd = ps = None  # measured in different runs: not comparable
    return {
        "dense": dense,
        "sparse": sparse,
        "task": task,
        "length": length,
        "multiple": round(length / int(doc["model"]["n_ctx_train"]), 4),
        "n": n,
        "haystacks": len({(d["seed"], d["haystack"]) for d, _ in pairs}),
        "dense_correct": kd,
        "dense_wilson95": [round(lo, 4), round(hi, 4)],
        "sparse_correct": ks,
        "sparse_wilson95": [round(slo, 4), round(shi, 4)],
        "sparse_in_dense_interval": lo <= ks / n <= hi,
        "both": sum(bool(d["correct"]) and bool(s["correct"]) for d, s in pairs),
        "dense_only": dense_only,
        "sparse_only": sparse_only,
        "neither": sum(not d["correct"] and not s["correct"] for d, s in pairs),
        "sign_test_p": float(f"{sign_test_p(dense_only, sparse_only):.3g}"),
        "same_text": sum(d.get("got") == s.get("got") for d, s in pairs),
        "depth_quarters": [{"n": q[0], "dense": q[1], "sparse": q[2]} for q in depth],
        "dense_distractors": sum(bool(d.get("distractors")) for d, _ in pairs),
        "sparse_distractors": sum(bool(s.get("distractors")) for _, s in pairs),
        "dense_prefill_s": None if pd is None else round(pd, 3),
        "sparse_prefill_s": None if ps is None else round(ps, 3),
        "speedup": None if not pd or not ps else round(pd / ps, 3),
    }


def rows(doc: dict[str, Any], pairs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    methods = {t["method"] for t in doc["trials"]}
    for dense, sparse in pairs:
        for m in (dense, sparse):
            if m not in methods:
                raise InputError(f"method {m!r} is not in the document (it has {sorted(methods)})")
    by = _index(doc["trials"])
    prefills = _prefills(doc["trials"])
    out = []
    for dense, sparse in pairs:
        cells: dict[tuple[str, int], list[tuple[Trial, Trial]]] = {}
        for (method, key), t in sorted(by.items(), key=lambda kv: kv[0][1]):
            if method == dense and (sparse, key) in by:
                cells.setdefault((key[0], key[1]), []).append((t, by[(sparse, key)]))
        for (task, length), cell in sorted(cells.items(), key=lambda c: (c[0][1], c[0][0])):
            out.append(_row(doc, prefills, dense, sparse, task, length, cell))
    return out


def markdown(rs: list[dict[str, Any]]) -> str:
    lines = [
        "| dense / sparse | task | length | questions (haystacks) | dense | sparse "
        "| sparse in dense interval | both / dense only / sparse only / neither | sign test p "
        "| wrong answers that are another needle's (dense / sparse) "
        "| correct by depth quarter, dense / sparse | prefill s dense / sparse (speed-up) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rs:
        d, s = r["dense_wilson95"], r["sparse_wilson95"]
        quarters = " ".join(f"{q['dense']}/{q['sparse']}" for q in r["depth_quarters"])
        speed = "-"
        if r["speedup"] is not None:
            speed = (
                f"{r['dense_prefill_s']:.2f} / {r['sparse_prefill_s']:.2f} ({r['speedup']:.2f}x)"
            )
        lines.append(
            f"| {r['dense']} / {r['sparse']} | {r['task']} | {r['multiple']:g}x ({r['length']}) | "
            f"{r['n']} ({r['haystacks']}) | "
            f"{r['dense_correct']}/{r['n']} [{d[0]:.2f}, {d[1]:.2f}] | "
            f"{r['sparse_correct']}/{r['n']} [{s[0]:.2f}, {s[1]:.2f}] | "
            f"{'yes' if r['sparse_in_dense_interval'] else 'NO'} | "
            f"{r['both']} / {r['dense_only']} / {r['sparse_only']} / {r['neither']} | "
            f"{r['sign_test_p']:.3g} | {r['dense_distractors']} / {r['sparse_distractors']} | "
            f"{quarters} | {speed} |"
        )
    return "\n".join(lines) + "\n"


def summary_table(rs: list[dict[str, Any]], tasks: tuple[str, str] = ("passkey", "mk_niah")) -> str:
    """One line per (pair, length): the first task's counts, the second's with its intervals and the
    paired view, and the prefill (the condensed table docs/dca.md quotes)."""
    a, b = tasks
    by = {(r["dense"], r["sparse"], r["length"], r["task"]): r for r in rs}
    lines = [
        f"| pair | length | {a} dense / sparse | {b} dense | {b} sparse "
        "| dense only / sparse only (sign test p) | prefill s dense / sparse |",
        "|---|---|---|---|---|---|---|",
    ]
    # every field in the key: two pairs may share a sparse method (a set has no order of its own)
    keys = sorted({k[:3] for k in by}, key=lambda k: (k[2], k[0] != "dca", k[1], k[0]))
    for dense, sparse, length in keys:
        ra, rb = by.get((dense, sparse, length, a)), by.get((dense, sparse, length, b))
        if ra is None or rb is None:
            continue
        lo, hi = rb["dense_wilson95"]
        where = "inside" if rb["sparse_in_dense_interval"] else "outside"
        speed = "-"
        if rb["speedup"] is not None:
            speed = f"{rb['dense_prefill_s']:.2f} / {rb['sparse_prefill_s']:.2f}"
        lines.append(
            f"| {dense} / {sparse} | {rb['multiple']:g}x "
            f"| {ra['dense_correct']}/{ra['n']} / {ra['sparse_correct']}/{ra['n']} "
            f"| {rb['dense_correct']}/{rb['n']} [{lo:.2f}, {hi:.2f}] "
            f"| {rb['sparse_correct']}/{rb['n']} ({where}) "
            f"| {rb['dense_only']} / {rb['sparse_only']} ({rb['sign_test_p']:.2g}) | {speed} |"
        )
    return "\n".join(lines) + "\n"


def plot(rs: list[dict[str, Any]], out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted({r["task"] for r in rs})
    pairs = sorted({(r["dense"], r["sparse"]) for r in rs})
    colors = {pair: f"C{i}" for i, pair in enumerate(pairs)}
    fig, axes = plt.subplots(1, len(tasks) + 1, figsize=(5.2 * (len(tasks) + 1), 4.5))
    for ax, task in zip(axes, tasks, strict=False):
        for pair in pairs:
            cell = sorted(
                (r for r in rs if r["task"] == task and (r["dense"], r["sparse"]) == pair),
                key=lambda r: r["length"],
            )
            if not cell:
                continue
            for side, name, style, shift in (
                ("dense", pair[0], "-o", 0.97),
                ("sparse", pair[1], "--s", 1.03),
            ):
                xs = [r["multiple"] * shift for r in cell]
                ys = [r[f"{side}_correct"] / r["n"] for r in cell]
                err = [
                    [y - r[f"{side}_wilson95"][0] for y, r in zip(ys, cell, strict=True)],
                    [r[f"{side}_wilson95"][1] - y for y, r in zip(ys, cell, strict=True)],
                ]
                label = name if side == "sparse" else f"{name} (beside {pair[1]})"
                ax.errorbar(
                    xs,
                    ys,
                    yerr=err,
                    fmt=style,
                    capsize=3,
                    color=colors[pair],
                    label=label,
                    mfc="white" if side == "sparse" else colors[pair],
                )
        ax.set_xscale("log", base=2)
        ax.set_title(task)
        ax.set_xlabel("prompt length, x trained length")
        ax.set_ylabel("accuracy (Wilson 95 %)")
        ax.set_ylim(0, 1.05)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    ax = axes[-1]
    for task, marker in zip(tasks, "os^vD", strict=False):
        pts = [r for r in rs if r["task"] == task and r["speedup"] is not None]
        xs = [r["speedup"] for r in pts]
        ys = [(r["sparse_correct"] - r["dense_correct"]) / r["n"] for r in pts]
        ax.scatter(xs, ys, marker=marker, label=task)
        for r, x, y in zip(pts, xs, ys, strict=True):
            ax.annotate(
                f"{r['multiple']:g}x {r['sparse']}",
                (x, y),
                fontsize=6,
                xytext=(3, 3),
                textcoords="offset points",
            )
    ax.axhline(0, color="grey", lw=0.8)
    ax.axvline(1, color="grey", lw=0.8)
    ax.set_xlabel("prefill speed-up, dense time / sparse time (same run)")
    ax.set_ylabel("accuracy change, sparse - dense")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def _pair(text: str) -> tuple[str, str]:
    dense, sep, sparse = text.partition("=")
    if not sep or not dense or not sparse:
        raise InputError(f"a pair is DENSE=SPARSE, not {text!r}")
    return dense, sparse


def _inputs(items: list[str]) -> tuple[list[Path], list[tuple[str, str]]]:
    """The positional arguments: results documents first, then DENSE=SPARSE pairs (an argument
    with '=' that is not a file is a pair)."""
    paths: list[Path] = []
    pairs: list[tuple[str, str]] = []
    for item in items:
        if "=" in item and not Path(item).is_file():
            pairs.append(_pair(item))
        elif pairs:
            raise InputError(f"{item}: give the results documents before the pairs")
        else:
            paths.append(Path(item))
    if not paths:
        raise InputError("give at least one results document")
    return paths, pairs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "inputs", nargs="+", metavar="RESULTS.json... [DENSE=SPARSE...]",
        help="results documents of one model, then pairs (default: every X / X-sparse*)",
    )
    ap.add_argument("--json", type=Path)
    ap.add_argument("--md", type=Path)
    ap.add_argument("--plot", type=Path)
    args = ap.parse_args(argv)
    try:
        paths, pairs = _inputs(args.inputs)
        doc, repeated = merge([(str(p), results.load(p)) for p in paths])
        pairs = pairs or default_pairs({t["method"] for t in doc["trials"]})
        rs = rows(doc, pairs)
    except (InputError, BadInput, KeyError, TypeError, ValueError) as exc:
        print(f"sparse_tradeoff: {exc}", file=sys.stderr)
        return 2
    text = markdown(rs)
    if repeated:
        text += "\nRepeated questions, the same answer in two documents: " + ", ".join(
            f"{cell} {n}" for cell, n in sorted(repeated.items())) + "\n"
    print(text, end="")
    if args.md:
        args.md.write_text(text + "\n" + summary_table(rs))
    if args.json:
        source: Any = str(paths[0]) if len(paths) == 1 else [str(p) for p in paths]
        out = {"source": source, "rows": rs}
        if repeated:
            out["repeated"] = repeated
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    if args.plot:
        model = doc.get("model", {}).get("name", "model")
        plot(rs, args.plot, f"sparse prefill against dense: {model} ({doc.get('label', '')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
