"""Haystack text: natural-language paragraphs shipped with Python and the OS, never downloaded.

Sources, in this order (each optional; a missing one contributes nothing):

- ``python-docstrings``: the docstrings of the standard library's own ``.py`` files, read with
  ``ast`` (nothing is imported, so no module's import side effects run);
- ``python-topics``: ``pydoc_data.topics``, the language reference text behind ``help()``;
- ``dpkg``: the long descriptions of the installed Debian packages (``/var/lib/dpkg/status``);
- ``apt``: the one-line synopses of every package apt knows (``apt-cache dumpavail``), eight
  ``name: synopsis.`` sentences to a paragraph.

Only prose survives (``prose``): every whitespace run collapsed to one space, at least 80
characters, at least 80% letters and spaces, no doctest lines, no run of 5 or more digits (the
needles' numbers must be the only long numbers in a prompt) and none of the needles' wording.
Duplicates are dropped. The order is the sources' own (sorted files, sorted packages), so the same
machine gives the same corpus; haystacks shuffle it with their own seed (haystack.py). A corpus is
saved as JSON (xz-compressed when the name ends in ``.xz``) with its sha256, so that a run
elsewhere (the GPU machine) uses exactly the same text.
"""

from __future__ import annotations

import ast
import hashlib
import json
import lzma
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.fsio import write_atomic

from .errors import BadInput

SCHEMA = "patchctl-longctx-corpus/1"
DPKG_STATUS = Path("/var/lib/dpkg/status")
MIN_CHARS = 80
MIN_LETTER_RATIO = 0.8
APT_GROUP = 8
# Wording of the needles (tasks.py): a paragraph containing it would be a false needle.
NEEDLE_WORDS = re.compile(r"pass ?key|magic number|\bVAR\b", re.IGNORECASE)
LONG_NUMBER = re.compile(r"\d{5,}")
# Standard-library folders that are tests, vendored code or GUI demos rather than documentation.
SKIP_STDLIB_DIRS = frozenset(
    {"test", "tests", "site-packages", "dist-packages", "idlelib", "lib2to3", "turtledemo",
     "ensurepip", "__pycache__", "config-3"}
)  # fmt: skip


@dataclass(frozen=True)
class Corpus:
    """Paragraphs (one line each, no newline) and how many came from each source."""

    paragraphs: tuple[str, ...]
    sources: tuple[tuple[str, int], ...]

    @property
    def sha256(self) -> str:
        """Identifies the exact text: the sha256 of the paragraphs joined by newlines."""
        return hashlib.sha256("\n".join(self.paragraphs).encode("utf-8")).hexdigest()

    @property
    def chars(self) -> int:
        return sum(len(p) for p in self.paragraphs)

    def describe(self) -> dict[str, Any]:
        """The corpus as recorded in a results document (no text)."""
        return {
            "sha256": self.sha256,
            "paragraphs": len(self.paragraphs),
            "chars": self.chars,
            "sources": dict(self.sources),
        }


def prose(text: str) -> str | None:
    """`text` as one line of prose, or None when it is code, a table, a number list or too short."""
    lines = text.splitlines()
    if any(line.lstrip().startswith((">>>", "...", "$ ", "%")) for line in lines):
        return None
    flat = " ".join(text.split())
    if len(flat) < MIN_CHARS or LONG_NUMBER.search(flat) or NEEDLE_WORDS.search(flat):
        return None
    letters = sum(c.isalpha() or c == " " for c in flat)
    if letters < MIN_LETTER_RATIO * len(flat):
        return None
    return flat


def _paragraphs(doc: str) -> Iterator[str]:
    """The prose paragraphs (blank-line separated blocks) of a docstring or topic."""
    for block in re.split(r"\n[ \t]*\n", doc):
        text = prose(block)
        if text is not None:
            yield text


# ----------------------------------------------------------------------------- sources


def _stdlib_files(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).parts
        if not any(part in SKIP_STDLIB_DIRS or part.startswith("config-") for part in rel):
            yield path


def python_docstrings(root: Path | None = None) -> Iterator[str]:
    """Docstring paragraphs of the standard library at `root` (default: this Python's)."""
    base = root if root is not None else Path(sysconfig.get_paths()["stdlib"])
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    for path in _stdlib_files(base):
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError, OSError):
            continue  # a file this Python cannot parse (another version's syntax) is skipped
        for node in ast.walk(tree):
            doc = ast.get_docstring(node) if isinstance(node, kinds) else None
            if doc:
                yield from _paragraphs(doc)


def python_topics() -> Iterator[str]:
    """Paragraphs of the language reference text that ``help()`` shows (pydoc_data.topics)."""
    try:
        from pydoc_data.topics import topics
    except ImportError:
        return
    for name in sorted(topics):
        yield from _paragraphs(str(topics[name]))


def dpkg_descriptions(status: Path = DPKG_STATUS) -> Iterator[str]:
    """Long descriptions of the installed Debian packages (synopsis + extended text)."""
    try:
        text = status.read_text(encoding="utf-8", errors="strict")
    except (OSError, UnicodeDecodeError):
        return
    for stanza in text.split("\n\n"):
        match = re.search(r"^Description: (.*(?:\n[ \t].*)*)", stanza, re.MULTILINE)
        if match is None:
            continue
        synopsis, _, rest = match.group(1).partition("\n")
        blocks = re.split(r"\n[ \t]\.[ \t]*(?=\n|$)", rest)
        joined = [f"{synopsis.strip()}. {blocks[0]}", *blocks[1:]]
        for block in joined:
            para = prose(block)
            if para is not None:
                yield para


def _apt_synopses(dump: str) -> Iterator[tuple[str, str]]:
    seen: set[str] = set()
    for stanza in dump.split("\n\n"):
        name = re.search(r"^Package: (\S+)", stanza, re.MULTILINE)
        desc = re.search(r"^Description: (.+)", stanza, re.MULTILINE)
        if name and desc and name.group(1) not in seen:
            seen.add(name.group(1))
            yield name.group(1), desc.group(1).strip().rstrip(".")


def apt_catalog(dump: str | None = None) -> Iterator[str]:
    """Package synopses as paragraphs of APT_GROUP `name: synopsis.` sentences, sorted by name.

    `dump` is ``apt-cache dumpavail`` output; None runs it (nothing when apt-cache is missing).
    """
    if dump is None:
        exe = shutil.which("apt-cache")
        if exe is None:
            return
        proc = subprocess.run([exe, "dumpavail"], capture_output=True, check=False)
        if proc.returncode != 0:
            return
        dump = proc.stdout.decode("utf-8", errors="replace")
    entries = sorted(_apt_synopses(dump))
    for i in range(0, len(entries), APT_GROUP):
        group = entries[i : i + APT_GROUP]
        para = prose(" ".join(f"{name}: {synopsis}." for name, synopsis in group))
        if para is not None:
            yield para


SOURCES = ("python-docstrings", "python-topics", "dpkg", "apt")


def build_corpus(sources: Iterable[str] = SOURCES) -> Corpus:
    """The corpus of this machine from the named sources (deduplicated, in source order)."""
    readers = {
        "python-docstrings": python_docstrings,
        "python-topics": python_topics,
        "dpkg": dpkg_descriptions,
        "apt": apt_catalog,
    }
    seen: set[str] = set()
    paragraphs: list[str] = []
    counts: list[tuple[str, int]] = []
    for source in sources:
        if source not in readers:
            raise BadInput(f"unknown corpus source {source!r}", hint=f"use {', '.join(SOURCES)}")
        before = len(paragraphs)
        for para in readers[source]():
            if para not in seen:
                seen.add(para)
                paragraphs.append(para)
        counts.append((source, len(paragraphs) - before))
    if not paragraphs:
        raise BadInput("no haystack text found on this machine", hint="name a --corpus file")
    return Corpus(tuple(paragraphs), tuple(counts))


# ----------------------------------------------------------------------------- files


def save_corpus(corpus: Corpus, path: Path) -> None:
    """Write `corpus` as JSON (xz-compressed when `path` ends in .xz), atomically."""
    doc = {
        "schema": SCHEMA,
        "sha256": corpus.sha256,
        "python": sys.version.split()[0],
        "sources": dict(corpus.sources),
        "paragraphs": list(corpus.paragraphs),
    }
    data = json.dumps(doc, ensure_ascii=False).encode("utf-8")
    write_atomic(path, lzma.compress(data) if path.suffix == ".xz" else data)


def _read_json(path: Path) -> Any:
    try:
        raw = path.read_bytes()
        data = lzma.decompress(raw) if path.suffix == ".xz" else raw
        return json.loads(data.decode("utf-8"))
    except (OSError, lzma.LZMAError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(f"cannot read corpus {path}: {exc}", hint="rebuild it: corpus OUT") from None


def load_corpus(path: Path) -> Corpus:
    """A corpus written by save_corpus, validated (schema, types, one-line paragraphs, sha256)."""
    doc = _read_json(path)
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise BadInput(f"{path} is not a corpus file (schema {SCHEMA})")
    paras, sources = doc.get("paragraphs"), doc.get("sources")
    if not isinstance(paras, list) or not paras or not isinstance(sources, dict):
        raise BadInput(f"{path}: paragraphs must be a non-empty list and sources a mapping")
    if not all(isinstance(p, str) and p and "\n" not in p for p in paras):
        raise BadInput(f"{path}: every paragraph must be a non-empty one-line string")
    if not all(isinstance(k, str) and isinstance(v, int) for k, v in sources.items()):
        raise BadInput(f"{path}: sources must map names to counts")
    corpus = Corpus(tuple(paras), tuple(sources.items()))
    if doc.get("sha256") != corpus.sha256:
        raise BadInput(f"{path}: sha256 {doc.get('sha256')} does not match its text")
    return corpus
