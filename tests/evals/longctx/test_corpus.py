"""evals/longctx/corpus.py: prose from the machine's own text, saved and loaded exactly."""

from __future__ import annotations

import json
import lzma
import sysconfig
from pathlib import Path

import pytest

from evals.longctx.corpus import (
    Corpus,
    apt_catalog,
    build_corpus,
    dpkg_descriptions,
    load_corpus,
    prose,
    python_docstrings,
    save_corpus,
)
from evals.longctx.errors import BadInput

LONG = "This sentence is plain prose about files and folders, long enough to be kept as text. "


def test_prose_keeps_text_and_drops_code_numbers_and_needle_words() -> None:
    assert prose(LONG + "\n  Second line.") == LONG.strip() + " Second line."
    assert prose("short") is None
    assert prose(LONG + "\n>>> print(1)") is None
    assert prose(LONG + " Call 555-12345 now.") is None  # 5+ digits would look like an answer
    assert prose(LONG + " Version 3.11 from 2024.") is not None
    for words in ("the pass key", "a passkey", "special magic number", "VAR x"):
        assert prose(f"{LONG} {words}") is None
    assert prose("{}[]()<>=+-*/" * 10) is None


def test_dpkg_descriptions(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text(
        "Package: a\nStatus: install ok installed\nDescription: tool for things\n"
        f" {LONG}\n more words on the second line.\n .\n {LONG}\n\n"
        "Package: b\nDescription: no long text\n\nPackage: c\nVersion: 1\n"
    )
    got = list(dpkg_descriptions(status))
    assert got == [f"tool for things. {LONG.strip()} more words on the second line.",
                   LONG.strip()]  # fmt: skip
    assert list(dpkg_descriptions(tmp_path / "missing")) == []


def test_apt_catalog_groups_synopses_sorted_by_name() -> None:
    dump = "\n\n".join(
        f"Package: pkg{chr(122 - i)}\nVersion: 1\nDescription: utility number {chr(97 + i)} "
        "for handling text files"
        for i in range(10)
    )
    got = list(apt_catalog(dump))
    assert len(got) == 2  # 8 to a paragraph
    assert got[0].startswith("pkgq: utility number j for handling text files. pkgr:")
    assert got[1] == "pkgy: utility number b for handling text files. pkgz: utility number a for " \
        "handling text files."
    assert list(apt_catalog("Package: a\nDescription: x\n")) == []  # too short for prose


def test_python_docstrings_reads_sources_without_importing(tmp_path: Path) -> None:
    (tmp_path / "mod.py").write_text(f'"""{LONG}\n\n>>> code()\n"""\nraise SystemExit(1)\n')
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "t.py").write_text(f'"""{LONG} test"""\n')
    (tmp_path / "bad.py").write_text("def (:\n")
    assert list(python_docstrings(tmp_path)) == [LONG.strip()]


def test_this_machine_has_a_corpus() -> None:
    json_pkg = Path(sysconfig.get_paths()["stdlib"]) / "json"
    assert len(list(python_docstrings(json_pkg))) > 5
    corpus = build_corpus(["python-topics"])
    assert len(corpus.paragraphs) > 300
    assert corpus.sources == (("python-topics", len(corpus.paragraphs)),)
    assert len(set(corpus.paragraphs)) == len(corpus.paragraphs)
    with pytest.raises(BadInput, match="unknown corpus source"):
        build_corpus(["nope"])


@pytest.mark.parametrize("name", ["c.json", "c.json.xz"])
def test_save_and_load_round_trip(tmp_path: Path, name: str) -> None:
    corpus = Corpus(("first paragraph", "second paragraph"), (("x", 2),))
    save_corpus(corpus, tmp_path / name)
    assert load_corpus(tmp_path / name) == corpus


def test_load_refuses_a_changed_or_foreign_file(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    save_corpus(Corpus(("first", "second"), (("x", 2),)), path)
    doc = json.loads(path.read_text())
    doc["paragraphs"][0] = "changed"
    path.write_text(json.dumps(doc))
    with pytest.raises(BadInput, match="sha256"):
        load_corpus(path)
    doc["paragraphs"][0] = "two\nlines"
    path.write_text(json.dumps(doc))
    with pytest.raises(BadInput, match="one-line"):
        load_corpus(path)
    path.write_text(json.dumps({"schema": "other"}))
    with pytest.raises(BadInput, match="not a corpus"):
        load_corpus(path)
    bad = tmp_path / "c.json.xz"
    bad.write_bytes(lzma.compress(b"{")[:-3])
    with pytest.raises(BadInput, match="cannot read"):
        load_corpus(bad)
