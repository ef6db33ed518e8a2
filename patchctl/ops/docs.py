"""`patchctl docs`: regenerate a series' docs under the series lock, or check them.

The rendering itself (README, marker registry) is docs.py's; saving a series regenerates its
docs there too, so the command lives apart from the renderer the session uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from patchctl.series.docs import check_docs, doc_paths
from patchctl.series.model import load_series
from patchctl.txn.session import series_session


@dataclass(frozen=True)
class DocsResult:
    """What `patchctl docs` did: the generated docs and those whose bytes changed."""

    docs: tuple[Path, ...]
    changed: tuple[Path, ...]


def update_docs(series_path: Path, *, check: bool = False) -> DocsResult:
    """`patchctl docs`: regenerate the docs under the series lock; `check` writes nothing and
    raises DocsOutOfDate (exit 16) when one is stale."""
    if check:
        series = load_series(series_path)
        check_docs(series)
        return DocsResult(doc_paths(series), ())
    with series_session(series_path, op="docs") as session:
        changed = session.write_docs()
        return DocsResult(doc_paths(session.series), tuple(changed))
