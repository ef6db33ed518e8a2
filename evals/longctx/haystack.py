"""Token-exact prompts: a sample's needles hidden in corpus paragraphs, `length` tokens long.

Everything is counted in the model's own tokens (the server's ``/tokenize``), never in characters:

- the instruction is tokenized with the model's special tokens (BOS where the model adds one),
  each corpus paragraph, needle and question without, each paragraph and needle followed by "\\n";
- the filler is the corpus in an order shuffled by the haystack's seed (the whole corpus again, in
  a new order, when one pass is not enough: ``passes`` > 1), cut to exactly the number of tokens
  left once the instruction, the needles and the longest question are counted;
- each needle goes at the paragraph start nearest its target depth; its recorded depth is the
  fraction of the filler before it (0 = right after the instruction; below 1, since the last,
  possibly cut, paragraph is never followed by a needle).

So the longest question's prompt is exactly `length` tokens and every other question's prompt is
shorter by the difference of the question lengths (a few tokens). The prompt is sent as token ids,
so the model sees exactly these tokens. A paragraph is tokenized alone, so at a paragraph joint
the ids may differ from tokenizing the joined text (both decode to the same text).
"""

from __future__ import annotations

import bisect
import json
import lzma
import random
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from threading import Lock
from typing import Protocol

from evals.fsio import write_atomic

from .corpus import Corpus
from .errors import BadInput, HarnessError
from .tasks import Sample

Tokens = tuple[int, ...]
TOKENS_SCHEMA = "patchctl-longctx-tokens/1"


class Tokenizer(Protocol):
    """Text to the model's token ids (llama-server's /tokenize)."""

    def tokenize(self, text: str, *, add_special: bool = False) -> list[int]: ...


@dataclass
class TokenPool:
    """The corpus paragraphs as token ids, tokenized on first use and kept (thread-safe)."""

    corpus: Corpus
    tokenizer: Tokenizer
    jobs: int = 8
    cache: dict[int, Tokens] = field(default_factory=dict)
    lock: Lock = field(default_factory=Lock)

    def paragraph(self, i: int) -> Tokens:
        with self.lock:
            hit = self.cache.get(i)
        if hit is not None:
            return hit
        toks = tuple(self.tokenizer.tokenize(self.corpus.paragraphs[i] + "\n"))
        with self.lock:
            self.cache[i] = toks
        return toks

    def prefetch(self, indices: Sequence[int]) -> None:
        """Tokenize `indices` not yet cached, `jobs` requests at a time."""
        missing = [i for i in indices if i not in self.cache]
        if missing:
            with ThreadPoolExecutor(max_workers=self.jobs) as pool:
                list(pool.map(self.paragraph, missing))

    def text(self, text: str, *, add_special: bool = False) -> Tokens:
        return tuple(self.tokenizer.tokenize(text, add_special=add_special))


@dataclass(frozen=True)
class Built:
    """One haystack's tokens: the shared context and each question's suffix."""

    shared: Tokens
    questions: tuple[Tokens, ...]
    needle_pos: tuple[int, ...]  # token offset of each needle (Sample order) in `shared`
    depths: tuple[float, ...]  # fraction of the filler before each needle (Sample order)
    filler: int  # filler tokens
    passes: int  # corpus passes the filler used

    def prompt(self, q: int) -> list[int]:
        return [*self.shared, *self.questions[q]]

    @property
    def length(self) -> int:
        """The longest prompt: the asked length."""
        return len(self.shared) + max(len(q) for q in self.questions)


def _filler(pool: TokenPool, n: int, rng: random.Random) -> tuple[list[Tokens], int]:
    """Corpus paragraphs in shuffled order until `n` tokens (the last one cut), and the passes.

    Paragraphs are tokenized in batches of about 1.4x what is still missing (at ~90 tokens a
    paragraph), so a short haystack tokenizes little more than it uses."""
    out: list[Tokens] = []
    total, passes = 0, 0
    while total < n:
        passes += 1
        before = total
        order = list(range(len(pool.corpus.paragraphs)))
        rng.shuffle(order)
        pos = 0
        while total < n and pos < len(order):
            batch = order[pos : pos + max(16, (n - total) // 64 + 1)]
            pool.prefetch(batch)
            for i in batch:
                out.append(pool.paragraph(i)[: n - total])
                total += len(out[-1])
                if total >= n:
                    break
            pos += len(batch)
        if total == before:
            raise HarnessError("the corpus tokenizes to nothing", hint="use another --corpus")
    return out, passes


def build(sample: Sample, pool: TokenPool, length: int, seed: int) -> Built:
    """The token-exact haystack of `sample` for prompts of `length` tokens (module docstring).

    HarnessError when `length` cannot hold the instruction, needles and questions.
    """
    prefix = pool.text(sample.instruction, add_special=True)
    needles = [pool.text(n.text + "\n") for n in sample.needles]
    questions = tuple(pool.text(q.text) for q in sample.questions)
    fixed = len(prefix) + sum(map(len, needles)) + max(map(len, questions))
    n_filler = length - fixed
    if n_filler < 1:
        raise HarnessError(
            f"{length} tokens cannot hold this sample ({fixed} tokens of instruction, needles and "
            "question)",
            hint="ask for a longer length or fewer needles",
        )
    paragraphs, passes = _filler(pool, n_filler, random.Random(seed))
    starts = [0]
    for p in paragraphs:
        starts.append(starts[-1] + len(p))
    return _insert(prefix, paragraphs, starts, needles, sample, questions, passes)


def _insert(
    prefix: Tokens,
    paragraphs: list[Tokens],
    starts: list[int],
    needles: list[Tokens],
    sample: Sample,
    questions: tuple[Tokens, ...],
    passes: int,
) -> Built:
    """Needles at the paragraph starts nearest their depths (ties keep sample order); never
    after the last paragraph, which the cut may have left unfinished."""
    n_filler = starts[-1]
    heads = starts[:-1]
    slot = []
    for needle in sample.needles:
        target = needle.depth * n_filler
        k = bisect.bisect_left(heads, target)
        if k == len(heads) or (k > 0 and target - heads[k - 1] <= heads[k] - target):
            k -= 1
        slot.append(k)
    at: dict[int, list[int]] = {}
    for i in sorted(range(len(needles)), key=lambda i: (slot[i], sample.needles[i].depth, i)):
        at.setdefault(slot[i], []).append(i)
    shared: list[int] = list(prefix)
    pos = [0] * len(needles)
    for k in range(len(paragraphs) + 1):
        for i in at.get(k, []):
            pos[i] = len(shared)
            shared += needles[i]
        if k < len(paragraphs):
            shared += paragraphs[k]
    depths = tuple(starts[s] / n_filler for s in slot)
    return Built(tuple(shared), questions, tuple(pos), depths, n_filler, passes)


# ----------------------------------------------------------------------------- token cache


def load_token_cache(path: Path, model_sha: str, corpus_sha: str) -> dict[int, tuple[int, ...]]:
    """Paragraph tokens saved by an earlier run of this model and corpus ({} when absent)."""
    if not path.is_file():
        return {}
    try:
        doc = json.loads(lzma.decompress(path.read_bytes()))
    except (OSError, lzma.LZMAError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read token cache {path}: {exc}") from None
    if not isinstance(doc, dict) or doc.get("schema") != TOKENS_SCHEMA:
        raise BadInput(f"{path} is not a token cache ({TOKENS_SCHEMA})")
    if doc.get("model_sha256") != model_sha or doc.get("corpus_sha256") != corpus_sha:
        raise BadInput(
            f"{path} was made for another model or corpus", hint="delete it or name another file"
        )
    paras = doc.get("paragraphs")
    if not isinstance(paras, dict):
        raise BadInput(f"{path}: paragraphs must be a mapping")
    out: dict[int, tuple[int, ...]] = {}
    for key, toks in paras.items():
        if not key.isdigit() or not isinstance(toks, list):
            raise BadInput(f"{path}: bad entry {key!r}")
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in toks):
            raise BadInput(f"{path}: entry {key} holds a non-integer token")
        out[int(key)] = tuple(toks)
    return out


def save_token_cache(
    path: Path, model_sha: str, corpus_sha: str, cache: Mapping[int, tuple[int, ...]]
) -> None:
    """Paragraph tokens for a later run (xz-compressed JSON, keyed by model and corpus)."""
    doc = {
        "schema": TOKENS_SCHEMA,
        "model_sha256": model_sha,
        "corpus_sha256": corpus_sha,
        "paragraphs": {str(k): list(v) for k, v in sorted(cache.items())},
    }
    write_atomic(path, lzma.compress(json.dumps(doc, separators=(",", ":")).encode()))
