"""Accuracy vs length plots (matplotlib, PNG): one figure per task and model, one line per method.

x: the prompt length as a multiple of the trained length (log2 axis, ticks labelled with the
multiple and the token count); y: accuracy; the band is the Wilson 95% interval over questions;
the bars too (a lone point has no band); the number beside each point is its question count n;
methods are drawn slightly apart along x so that equal points stay visible; the dotted line marks
the trained length.
matplotlib is a test/dev extra (pyproject ``[test]``), imported only here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .errors import HarnessError
from .tasks import TASKS

COLORS = {
    "naive": "#7f7f7f", "linear": "#1f77b4", "yarn": "#2ca02c", "dca": "#d62728",
    "dca-mscale": "#9467bd", "dca-q8": "#ff7f0e",
}  # fmt: skip


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise HarnessError(
            "plots need matplotlib", hint="pip install matplotlib (the [test] extra has it)"
        ) from None
    return plt


def _tokens(n: int) -> str:
    return f"{n // 1024}k" if n % 1024 == 0 and n >= 1024 else str(n)


def plot_task(doc: Mapping[str, Any], task: str, out: Path) -> Path | None:
    """The figure of `task` for one (model, label) document, or None when it has no cell."""
    rows = [c for c in doc["cells"] if c["task"] == task]
    if not rows:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=110)
    methods = sorted({c["method"] for c in rows}, key=lambda m: (m not in COLORS, m))
    for i, m in enumerate(methods):
        cs = sorted((c for c in rows if c["method"] == m), key=lambda c: c["length"])
        shift = 2 ** (0.025 * (i - (len(methods) - 1) / 2))  # methods side by side at one x
        x = [c["multiple"] * shift for c in cs]
        y = [c["accuracy"] for c in cs]
        lo = [c["accuracy"] - c["wilson95"][0] for c in cs]
        hi = [c["wilson95"][1] - c["accuracy"] for c in cs]
        color = COLORS.get(m)
        ax.plot(x, y, marker="o", label=m, color=color)
        ax.errorbar(x, y, yerr=[lo, hi], fmt="none", ecolor=color, capsize=3, linewidth=0.8)
        ax.fill_between(
            x, [c["wilson95"][0] for c in cs], [c["wilson95"][1] for c in cs],
            alpha=0.12, color=color, linewidth=0,
        )  # fmt: skip
        for xi, c in zip(x, cs, strict=True):
            ax.annotate(f"{c['n']}", (xi, c["accuracy"]), textcoords="offset points",
                        xytext=(4, 4), fontsize=7, color=color)  # fmt: skip
    _axes(ax, rows, doc)
    ax.set_title(f"{doc['model']['name']}: {task} ({doc['label']})", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out


def _axes(ax: Any, rows: Sequence[Mapping[str, Any]], doc: Mapping[str, Any]) -> None:
    ticks = sorted({(c["multiple"], c["length"]) for c in rows})
    ax.set_xscale("log", base=2)
    ax.set_xticks([m for m, _ in ticks])
    ax.set_xticklabels([f"{m:g}x\n{_tokens(n)}" for m, n in ticks], fontsize=8)
    ax.minorticks_off()
    ax.axvline(1.0, linestyle=":", color="black", linewidth=0.8)
    ax.set_ylim(-0.03, 1.03)
    ax.set_ylabel("accuracy (band: Wilson 95%)")
    layout = doc["plan"].get("layout", "")
    ax.set_xlabel(f"prompt length / trained length {doc['model']['n_ctx_train']} "
                  f"({layout} layout; numbers: questions)", fontsize=8)  # fmt: skip
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")


def plot_all(doc: Mapping[str, Any], out_dir: Path) -> list[Path]:
    """Every task's figure: `<out_dir>/<model>-<label>-<task>.png`."""
    paths = []
    for task in TASKS:
        name = f"{doc['model']['name']}-{doc['label']}-{task}.png"
        made = plot_task(doc, task, out_dir / name)
        if made is not None:
            paths.append(made)
    return paths
