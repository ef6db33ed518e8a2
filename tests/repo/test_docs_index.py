"""The documentation tree: one index reaches every document, raw results live under results/
with a README per folder, links resolve, and no page leans on a ticket or run number that
nothing here resolves.

Repository-level checks (not of patchctl's code): they fail when a document is added without an
index line, a results folder without its README, or a link points at a file that moved.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
RESULTS = ROOT / "results"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# "issue 12", "issues #3", "session 7", "s9" (a run's short name): words that stand alone instead.
NUMBERED = re.compile(r"issue[ s#]*[0-9]|session[ s#]*[0-9]|\bs[0-9]+\b", re.IGNORECASE)


def _prose() -> list[Path]:
    """The hand-written pages a reader navigates: README, CONTRIBUTING, docs/, results' READMEs."""
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted(DOCS.rglob("*.md"))]
    return pages + sorted(RESULTS.rglob("README.md"))


def _links(page: Path) -> list[str]:
    text = page.read_text(encoding="utf-8")
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:|#", t)]


def _result_folders() -> list[Path]:
    return sorted(d for topic in RESULTS.iterdir() if topic.is_dir() for d in topic.iterdir())


def test_docs_holds_documents_only() -> None:
    raw = [p.relative_to(ROOT) for p in DOCS.rglob("*") if p.is_file() and p.suffix != ".md"]
    assert raw == [], "raw measurement files belong under results/<topic>/<date>/"


def test_the_docs_index_links_every_document() -> None:
    index = DOCS / "README.md"
    linked = {(index.parent / t.split("#")[0]).resolve() for t in _links(index)}
    pages = {p.resolve() for p in DOCS.rglob("*.md")} - {index.resolve()}
    missing = sorted(str(p.relative_to(ROOT)) for p in pages - linked)
    assert missing == [], "add a line per document to docs/README.md"


def test_every_results_folder_has_a_readme_and_an_index_line() -> None:
    folders = _result_folders()
    assert len(folders) > 10  # the tree was found at all
    index = (RESULTS / "README.md").read_text(encoding="utf-8")
    for folder in folders:
        readme = folder / "README.md"
        assert readme.is_file(), f"{folder.relative_to(ROOT)}: what, how, command"
        assert readme.read_text(encoding="utf-8").startswith("# ")
        rel = folder.relative_to(RESULTS).as_posix()
        assert f"]({rel}/README.md)" in index, f"results/README.md does not list {rel}"


@pytest.mark.parametrize("page", _prose(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = [t for t in _links(page) if not (page.parent / t.split("#")[0]).exists()]
    assert broken == []


@pytest.mark.parametrize("page", _prose(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_ticket_or_run_numbers(page: Path) -> None:
    lines = page.read_text(encoding="utf-8").splitlines()
    hits = [f"{n}: {line.strip()}" for n, line in enumerate(lines, 1) if NUMBERED.search(line)]
    assert hits == [], "say what the ticket or run was, in words that stand alone"
