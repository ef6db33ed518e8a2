"""Test doubles for the long-context harness: tokenizers that need no model, a tiny model
published as pinned wheels."""

from __future__ import annotations

import hashlib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from evals.longctx.corpus import Corpus
from evals.longctx.models import ModelSpec, Wheel

BOS = 1


@dataclass
class CharTokenizer:
    """One token per character (its code point + 2); BOS first with add_special. `calls`
    counts requests, like the server's /tokenize."""

    calls: int = 0

    def tokenize(self, text: str, *, add_special: bool = False) -> list[int]:
        self.calls += 1
        return ([BOS] if add_special else []) + [ord(c) + 2 for c in text]


@dataclass
class PairTokenizer:
    """One token per two characters (a different count than CharTokenizer for the same text)."""

    seen: dict[str, int] = field(default_factory=dict)

    def tokenize(self, text: str, *, add_special: bool = False) -> list[int]:
        ids = [self.seen.setdefault(text[i : i + 2], len(self.seen) + 2)
               for i in range(0, len(text), 2)]  # fmt: skip
        return ([BOS] if add_special else []) + ids


def corpus(n: int = 200, words: int = 30) -> Corpus:
    """n distinct prose paragraphs of `words` words each."""
    vocab = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
             "juliet", "kilo", "lima")  # fmt: skip
    paras = tuple(
        f"Paragraph {chr(65 + i % 26)}{chr(97 + i // 26 % 26)} says "
        + " ".join(vocab[(i * 7 + j) % len(vocab)] for j in range(words)) + "."
        for i in range(n)
    )  # fmt: skip
    return Corpus(paras, (("test", n),))


def trial(task: str = "passkey", method: str = "dca", length: int = 2048, correct: bool = True,
          haystack: int = 0, question: int = 0, **extra: object) -> dict[str, object]:  # fmt: skip
    """One well-formed trial record."""
    row: dict[str, object] = {
        "task": task, "method": method, "length": length, "multiple": length / 1024,
        "depth": 0.25, "depths": [0.25], "seed": 99, "haystack": haystack, "question": question,
        "group": "combined", "slot": 0, "expected": ["12345"], "got": " 12345.",
        "answer": "12345.", "correct": correct, "recall": 1.0 if correct else 0.0,
        "distractors": 0, "tokens": length, "cached_tokens": 0, "prompt_ms": 10.0,
        "gen_ms": 5.0, "wall_s": 0.1, "peak_device_mib": None, "peak_host_mib": 300.0,
    }  # fmt: skip
    row.update(extra)
    return row


def document(trials: list[dict[str, object]], label: str = "cpu") -> dict[str, object]:
    """A minimal well-formed results document around `trials` (cells left empty)."""
    job = {"method": "dca", "lengths": [2048], "haystacks": 1, "slots": 1, "status": "ok",
           "wall_s": 1.0, "n_ctx": 2304, "args": ["--dca", "on", "-ctk", "q8_0"],
           "memory": {"device_mib": 900.0, "device_total_mib": 1000.0, "host_mib": 300.0,
                      "buffers": {"CUDA0": {"model": 373.7, "KV": 12.0, "compute": 300.0}}}}
    return {
        "schema": "patchctl-longctx/1", "label": label, "device": {}, "server": {},
        "model": {"name": "tiny", "sha256": "ab" * 32, "n_ctx_train": 1024, "arch": "llama",
                  "file": "tiny.gguf"},
        "corpus": {}, "params": {}, "plan": {"layout": "combined"}, "seed": 1, "command": [],
        "methods": {}, "jobs": [job], "trials": trials, "cells": [],
    }  # fmt: skip


WHEEL_PAYLOAD = [bytes(range(256)) * 5000, b"second part" * 1000]  # 1.29 MB: two 1 MiB parts


def model_wheels(tmp_path: Path) -> tuple[ModelSpec, Path]:
    """A tiny model published as two pinned wheels (one part each) in tmp_path/wheels."""
    folder = tmp_path / "wheels"
    folder.mkdir()
    wheels = []
    for i, data in enumerate(WHEEL_PAYLOAD, 1):
        name = f"tiny_part{i}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(folder / name, "w") as zf:
            zf.writestr(f"tiny_part{i}/data/m.{i:02d}", data)
            zf.writestr(f"tiny_part{i}/__init__.py", "")
        sha = hashlib.sha256((folder / name).read_bytes()).hexdigest()
        wheels.append(Wheel(f"tiny-part{i}", "1.0", name, sha, f"tiny_part{i}/data/m.{i:02d}"))
    joined = b"".join(WHEEL_PAYLOAD)
    spec = ModelSpec("tiny", "tiny.gguf", "llama", 1024, len(joined),
                     hashlib.sha256(joined).hexdigest(), tuple(wheels))  # fmt: skip
    return spec, folder
