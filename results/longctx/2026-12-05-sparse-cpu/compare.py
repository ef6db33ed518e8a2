"""Sparse prefill against its dense method, from one merged longctx results document.

    python3 results/longctx/2026-12-05-sparse-cpu/compare.py FILE.json [DENSE=SPARSE ...]

Pairs default to naive=naive-sparse-4k and dca=dca-sparse-4k. Per (pair, task, length): each
method's correct/n with the Wilson 95% interval over questions (as the harness's tables), whether
the sparse accuracy lies inside the dense interval, and the paired view the harness's seeds allow
(every method answers the same haystacks and questions): questions both got right, only dense,
only sparse, both wrong, and how many continuations were the same text. Prints Markdown; --json
prints the rows. Standard library only; reads the harness's own Wilson function.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from evals.longctx.stats import wilson  # noqa: E402

PAIRS = (("naive", "naive-sparse-4k"), ("dca", "dca-sparse-4k"))


def rows(doc: dict, pairs: tuple[tuple[str, str], ...]) -> list[dict]:
    by = {}
    for t in doc["trials"]:
        by[(t["method"], t["task"], int(t["length"]), t["seed"], t["haystack"], t["question"])] = t
    out = []
    for dense, sparse in pairs:
        keys = sorted({k[1:] for k in by if k[0] == dense} & {k[1:] for k in by if k[0] == sparse})
        cells: dict[tuple[str, int], list] = {}
        for k in keys:
            cells.setdefault((k[0], k[1]), []).append((by[(dense, *k)], by[(sparse, *k)]))
        for (task, length), pairs_ in sorted(cells.items(), key=lambda c: (c[0][1], c[0][0])):
            n = len(pairs_)
            kd = sum(d["correct"] for d, _ in pairs_)
            ks = sum(s["correct"] for _, s in pairs_)
            lo, hi = wilson(kd, n)
            slo, shi = wilson(ks, n)
            out.append({
                "dense": dense, "sparse": sparse, "task": task, "length": length,
                "multiple": round(length / doc["model"]["n_ctx_train"], 4), "n": n,
                "haystacks": len({(d["seed"], d["haystack"]) for d, _ in pairs_}),
                "dense_correct": kd, "dense_wilson95": [round(lo, 4), round(hi, 4)],
                "sparse_correct": ks, "sparse_wilson95": [round(slo, 4), round(shi, 4)],
                "sparse_in_dense_interval": lo <= ks / n <= hi,
                "both": sum(d["correct"] and s["correct"] for d, s in pairs_),
                "dense_only": sum(d["correct"] and not s["correct"] for d, s in pairs_),
                "sparse_only": sum(s["correct"] and not d["correct"] for d, s in pairs_),
                "neither": sum(not d["correct"] and not s["correct"] for d, s in pairs_),
                "same_text": sum(d["got"] == s["got"] for d, s in pairs_),
            })  # fmt: skip
    return out


def markdown(rs: list[dict]) -> str:
    lines = [
        "| dense / sparse | task | length | questions (haystacks) | dense | sparse "
        "| sparse in dense interval | both / dense only / sparse only / neither | same text |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rs:
        d, s = r["dense_wilson95"], r["sparse_wilson95"]
        lines.append(
            f"| {r['dense']} / {r['sparse']} | {r['task']} | {r['multiple']:g}x ({r['length']}) | "
            f"{r['n']} ({r['haystacks']}) | "
            f"{r['dense_correct']}/{r['n']} [{d[0]:.2f}, {d[1]:.2f}] | "
            f"{r['sparse_correct']}/{r['n']} [{s[0]:.2f}, {s[1]:.2f}] | "
            f"{'yes' if r['sparse_in_dense_interval'] else 'NO'} | "
            f"{r['both']} / {r['dense_only']} / {r['sparse_only']} / {r['neither']} | "
            f"{r['same_text']}/{r['n']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    as_json = "--json" in argv
    args = [a for a in argv if a != "--json"]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    doc = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    pairs = tuple(tuple(p.split("=", 1)) for p in args[1:]) or PAIRS
    rs = rows(doc, pairs)  # type: ignore[arg-type]
    print(json.dumps(rs, indent=1) if as_json else markdown(rs), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
