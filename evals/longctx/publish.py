"""Results files into the repository: a dated folder of data, plots and tables, and the
generated blocks of docs/dca-results.md.

``publish(docs, out_dir, doc_md)`` writes, per (model, label) of the given results documents
(several calls of one plan are merged, repeated trials kept once):

- ``<model>-<label>.json``: the merged results document (every trial; what the tables read);
- ``<model>-<label>-summary.json``: results.summary (jobs, budget, cells, prefill rates);
- ``cells/<model>-<label>-<method>-<multiple>x.json``: each cell's raw trials and jobs;
- ``<model>-<label>-<task>.png``: accuracy vs length per task (plots.py);
- ``<model>-<label>.md``: the device, each run (command, server, budget), accuracy / memory /
  prefill tables, jobs not run;

and makes sure `doc_md` holds generated accuracy and memory blocks for the merged file (inserted
before the ``<!-- longctx:published -->`` marker when missing), then regenerates every block.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evals.fsio import write_atomic, write_if_changed

from . import plots, report, results
from .errors import BadInput

MARKER = "<!-- longctx:published -->"


def _write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, (json.dumps(obj, indent=1, ensure_ascii=False) + "\n").encode("utf-8"))


def _prefill_table(doc: Mapping[str, Any]) -> str:
    lines = ["| method | length | haystacks | prefill s (mean) | tokens/s |",
             "|---|---|---|---|---|"]
    for r in results.prefill_rates(doc["trials"]):
        lines.append(f"| {r['method']} | {r['length']} | {r['haystacks']} | {r['prefill_s']} | "
                     f"{r['tokens_per_s'] or ''} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _not_run(doc: Mapping[str, Any]) -> list[str]:
    """One line per job not run or cut short, the same job of several runs once (with its runs)."""
    lines: dict[str, list[int]] = {}
    for j in doc["jobs"]:
        if j["status"] in ("ok", "probe"):
            continue
        line = (f"- {j['method']}@{','.join(map(str, j['lengths']))} x{j['haystacks']}: "
                f"{j['status']}" + (f" ({j['reason']})" if j.get("reason") else ""))
        runs = lines.setdefault(line, [])
        if int(j.get("run", 0)) + 1 not in runs:
            runs.append(int(j.get("run", 0)) + 1)
    multi = len(doc.get("runs") or []) > 1
    return [line + (f" (run {', '.join(map(str, runs))})" if multi else "")
            for line, runs in lines.items()]


def _runs(doc: Mapping[str, Any]) -> list[str]:
    """The runs section: when, which server, how long, the budget and the command of each."""
    parts = ["## Runs\n"]
    for i, run in enumerate(results.runs_of(doc), 1):
        budget = run.get("budget") or {}
        parts += [
            f"{i}. started {run.get('started', '?')}, server `{run.get('server') or '?'}`, "
            f"{run.get('wall_s', '?')} s, budget left {budget.get('left_s')} s, "
            f"measured/expected {budget.get('ratio')}:\n",
            "```sh\n" + shlex.join(str(a) for a in run.get("command") or []) + "\n```\n",
        ]
    rep = doc.get("repeats") or {}
    if rep.get("trials"):
        why = (" (greedy answers are not bitwise reproducible between runs: llama-server "
               "batches the requests of its slots together)") if rep.get("disagree") else ""
        parts.append(
            f"{rep['trials']} trials ran in more than one run (same corpus, method, length, "
            f"haystack and question); the tables keep the first run's, and {rep['disagree']} of "
            f"the repeats scored differently{why}.\n")
    return parts


def page(doc: Mapping[str, Any], stem: str) -> str:
    """The Markdown page of one merged document."""
    model, device = doc["model"], doc["device"]
    gpus = ", ".join(str(g.get("name")) for g in device.get("gpus", [])) or (
        f"{device.get('cpu', '?')} (CPU)"
    )
    parts = [
        f"# {model['name']} ({doc['label']}): long-context retrieval\n",
        f"Model `{model['file']}` (sha256 {model['sha256'][:12]}…, {model['arch']}, trained "
        f"{model['n_ctx_train']}), {gpus}.\n",
        *_runs(doc),
        "## Accuracy (correct/n [Wilson 95% over questions])\n",
        report.accuracy_table(doc),
        "## Memory per server\n",
        report.memory_table(doc),
        "## Prefill (llama-server's prompt timing, first question of each haystack)\n",
        _prefill_table(doc),
        f"Plots: `{stem}-<task>.png`; per-cell trials: `cells/{stem}-<method>-<multiple>x.json`.\n",
    ]
    skipped = _not_run(doc)
    if skipped:
        parts += ["## Jobs not run or cut short\n", "\n".join(skipped) + "\n"]
    return "\n".join(parts)


def _block(kind: str, rel: str) -> str:
    return f"<!-- longctx:table {kind} {rel} -->\n<!-- longctx:end -->\n"


def link_doc(doc_md: Path, root: Path, merged: Path, pngs: Sequence[Path], title: str) -> None:
    """Insert the blocks of `merged` into `doc_md` before MARKER when it has none yet."""
    rel = merged.resolve().relative_to(root.resolve()).as_posix()
    text = doc_md.read_text(encoding="utf-8")
    if f"longctx:table accuracy {rel} -->" in text:
        return
    if MARKER not in text:
        raise BadInput(f"{doc_md} has no {MARKER} line", hint="add it where results belong")
    links = ", ".join(
        f"[{p.stem.rsplit('-', 1)[-1]}]({os.path.relpath(p, doc_md.parent)})" for p in pngs
    )
    section = (
        f"### {title}\n\nPlots: {links}. Data, per-cell trials and the command: "
        f"`{merged.parent.relative_to(root.resolve()).as_posix()}/`.\n\n"
        + _block("accuracy", rel) + "\n" + _block("memory", rel) + "\n"
    )
    write_if_changed(doc_md, text.replace(MARKER, section + MARKER, 1).encode("utf-8"))


def publish(docs: Sequence[Mapping[str, Any]], out_dir: Path, doc_md: Path | None,
            root: Path) -> list[Path]:  # fmt: skip
    """Write everything listed in the module docstring; the files written."""
    made: list[Path] = []
    out_dir = out_dir.resolve()
    for (model, label), doc in results.combine(docs).items():
        stem = f"{model}-{label}"
        merged = out_dir / f"{stem}.json"
        out_dir.mkdir(parents=True, exist_ok=True)
        results.write(doc, merged)
        results.write_summary(doc, out_dir / f"{stem}-summary.json")
        made += [merged, out_dir / f"{stem}-summary.json"]
        for name, cell in results.split_cells(doc).items():
            _write_json(out_dir / "cells" / f"{stem}-{name}.json", cell)
            made.append(out_dir / "cells" / f"{stem}-{name}.json")
        pngs = plots.plot_all(doc, out_dir)
        made += pngs
        write_if_changed(out_dir / f"{stem}.md", page(doc, stem).encode("utf-8"))
        made.append(out_dir / f"{stem}.md")
        if doc_md is not None:
            title = f"{model} ({label}, {out_dir.name.removeprefix('longctx-')})"
            link_doc(doc_md, root, merged, pngs, title)
    if doc_md is not None:
        report.update_doc(doc_md, root)
    return made
