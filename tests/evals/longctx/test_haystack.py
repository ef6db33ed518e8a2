"""evals/longctx/haystack.py: token-exact prompts with needles at their depths."""

from __future__ import annotations

import json
import lzma
from pathlib import Path

import pytest

from evals.longctx.errors import BadInput, HarnessError
from evals.longctx.haystack import (
    TOKENS_SCHEMA,
    TokenPool,
    build,
    load_token_cache,
    save_token_cache,
)
from evals.longctx.tasks import TASKS, TaskParams, make_sample

from .fakes import BOS, CharTokenizer, PairTokenizer, corpus

SAMPLE = make_sample(TASKS, 5, 3, TaskParams())


@pytest.mark.parametrize("tokenizer", [CharTokenizer(), PairTokenizer()], ids=["char", "pair"])
@pytest.mark.parametrize("length", [2_000, 7_777, 40_000])
def test_longest_prompt_has_exactly_the_asked_tokens(
    tokenizer: CharTokenizer | PairTokenizer, length: int
) -> None:
    pool = TokenPool(corpus(), tokenizer, jobs=2)
    built = build(SAMPLE, pool, length, seed=1)
    sizes = [len(built.prompt(q)) for q in range(len(SAMPLE.questions))]
    assert max(sizes) == length == built.length
    spread = max(len(tokenizer.tokenize(q.text)) for q in SAMPLE.questions)
    assert min(sizes) > length - spread
    assert built.shared[0] == BOS  # the instruction carries the model's special tokens


def test_needles_sit_whole_at_paragraph_starts_near_their_depths() -> None:
    tok = CharTokenizer()
    pool = TokenPool(corpus(), tok)
    built = build(SAMPLE, pool, 30_000, seed=2)
    longest_paragraph = max(len(p) + 1 for p in pool.corpus.paragraphs)
    for i, needle in enumerate(SAMPLE.needles):
        want = tok.tokenize(needle.text + "\n")
        pos = built.needle_pos[i]
        assert list(built.shared[pos : pos + len(want)]) == want
        assert built.shared[pos - 1] == ord("\n") + 2  # a paragraph or needle ended right before
        assert abs(built.depths[i] - needle.depth) <= longest_paragraph / built.filler
    # depths are the fraction of filler before each needle, in needle order of position
    order = sorted(range(len(SAMPLE.needles)), key=lambda i: built.needle_pos[i])
    assert [built.depths[i] for i in order] == sorted(built.depths)


def test_filler_is_the_corpus_text_and_depends_on_the_seed() -> None:
    tok = CharTokenizer()
    a = build(SAMPLE, TokenPool(corpus(), tok), 20_000, seed=1)
    b = build(SAMPLE, TokenPool(corpus(), tok), 20_000, seed=1)
    c = build(SAMPLE, TokenPool(corpus(), tok), 20_000, seed=9)
    assert a == b and a.shared != c.shared
    text = "".join(chr(t - 2) for t in a.shared[1:])
    assert sum(p in text for p in corpus().paragraphs) > 50


def test_a_short_corpus_is_reused_in_new_orders() -> None:
    small = corpus(n=10, words=10)
    built = build(SAMPLE, TokenPool(small, CharTokenizer()), 12_000, seed=3)
    assert built.passes > 1 and built.length == 12_000


def test_tokenizes_only_what_it_needs_and_once() -> None:
    tok = CharTokenizer()
    pool = TokenPool(corpus(n=2000), tok)
    build(SAMPLE, pool, 3_000, seed=4)
    first = tok.calls
    assert len(pool.cache) < 200  # not the whole corpus for a short haystack
    build(SAMPLE, pool, 3_000, seed=4)
    assert tok.calls - first == 1 + len(SAMPLE.needles) + len(SAMPLE.questions)


def test_too_short_a_length_is_refused() -> None:
    with pytest.raises(HarnessError, match="cannot hold"):
        build(SAMPLE, TokenPool(corpus(), CharTokenizer()), 300, seed=1)


def test_token_cache_round_trip_and_refusals(tmp_path: Path) -> None:
    path = tmp_path / "t.json.xz"
    assert load_token_cache(path, "m", "c") == {}  # absent: nothing cached yet
    save_token_cache(path, "m", "c", {3: (5, 6), 1: (7,)})
    assert load_token_cache(path, "m", "c") == {1: (7,), 3: (5, 6)}
    with pytest.raises(BadInput, match="another model or corpus"):
        load_token_cache(path, "m", "other corpus")
    path.write_bytes(lzma.compress(json.dumps({
        "schema": TOKENS_SCHEMA, "model_sha256": "m", "corpus_sha256": "c",
        "paragraphs": {"1": [1, "2"]}}).encode()))  # fmt: skip
    with pytest.raises(BadInput, match="non-integer"):
        load_token_cache(path, "m", "c")
    path.write_bytes(b"not xz")
    with pytest.raises(BadInput, match="cannot read"):
        load_token_cache(path, "m", "c")
