"""How the CLI shows drifted hunks (import, refresh, rebase): one wording, one JSON shape."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    from patchctl.series.gitapply import Drift


def drift_kind(drift: Drift) -> str:
    """`fuzz`, `offset` or `mode`."""
    from patchctl.series.gitapply import is_fuzz

    if is_fuzz(drift):
        return "fuzz"
    return "mode" if drift.hunk is None else "offset"


def drift_json(drift: Sequence[Drift]) -> list[dict[str, Any]]:
    """Drifted hunks for --json: file, hunk number, kind and git's words."""
    return [{"file": d.file, "hunk": d.hunk, "kind": drift_kind(d), "why": d.why} for d in drift]


def drift_lines(drift: Sequence[Drift]) -> list[str]:
    """One line per drifted hunk, fuzz named as fuzz: `fuzz: hunk #2 in src/x.c: ...`."""
    lines = []
    for d in drift:
        at = f"hunk #{d.hunk} in " if d.hunk is not None else ""
        lines.append(f"{drift_kind(d)}: {at}{d.file}: {d.why}")
    return lines
