"""evals/longctx/tasks.py: needles, questions and exact scoring."""

from __future__ import annotations

import itertools
import re

import pytest

from evals.longctx.tasks import (
    TASKS,
    Question,
    Sample,
    TaskParams,
    make_sample,
    score,
    van_der_corput,
)

PARAMS = TaskParams()


def _answers_from_needles(sample: Sample, q: Question) -> set[str]:
    """Derive a question's answer from the needle texts alone (an independent reading)."""
    texts = [n.text for n in sample.needles]
    if q.task == "passkey":
        return {m for t in texts for m in re.findall(r"The pass key is (\d+)\.", t)}
    if q.task in ("mk_niah", "mv_niah"):
        key = re.search(r"for (\S+) mentioned", q.text)
        assert key is not None
        return {v for t in texts for v in re.findall(rf"for {key.group(1)} is: (\d+)\.", t)}
    value = re.search(r"the value (\d+)", q.text)
    assert value is not None
    names = {m for t in texts for m in re.findall(rf"VAR ([A-Z]{{5}}) = {value.group(1)}\.", t)}
    grown = True
    while grown:  # follow the chain: VAR B = VAR A with A known
        new = {b for t in texts for b, a in re.findall(r"VAR ([A-Z]{5}) = VAR ([A-Z]{5})\.", t)
               if a in names}  # fmt: skip
        grown = not new <= names
        names |= new
    return names


@pytest.mark.parametrize("task", TASKS)
def test_each_task_answer_is_derivable_from_its_needles(task: str) -> None:
    for seed in range(20):
        sample = make_sample((task,), seed, seed, PARAMS)
        for q in sample.questions:
            assert set(q.expected) == _answers_from_needles(sample, q)
            assert all(i < len(sample.needles) for i in q.needles)
            assert q.text.startswith("\n")


def test_question_counts_and_distractors() -> None:
    sample = make_sample(TASKS, 7, 0, PARAMS)
    by_task = {t: [q for q in sample.questions if q.task == t] for t in TASKS}
    assert [len(by_task[t]) for t in TASKS] == [1, PARAMS.mk_keys, PARAMS.mv_keys, PARAMS.vt_chains]
    needles = 1 + PARAMS.mk_keys + PARAMS.mv_keys * PARAMS.mv_values
    needles += PARAMS.vt_chains * (PARAMS.vt_hops + 1)
    assert len(sample.needles) == needles
    for q in by_task["mk_niah"]:
        assert len(q.distractors) >= 3
        assert not set(q.distractors) & set(q.expected)
        # every distractor is a value of a needle of the same form
        assert all(any(f"is: {d}." in n.text for n in sample.needles) for d in q.distractors)
    two = TaskParams(mv_keys=2, vt_chains=2)
    for q in make_sample(TASKS, 7, 0, two).questions:
        if q.task == "vt":
            assert len(q.distractors) == two.vt_hops + 1  # the other chain's names
        if q.task == "mv_niah":
            assert len(q.distractors) == two.mv_values  # the other key's values


def test_items_are_distinct_within_a_sample() -> None:
    for seed in range(30):
        sample = make_sample(TASKS, seed, seed, PARAMS)
        items = [e for q in sample.questions for e in q.expected]
        assert len(items) == len(set(items))
        keys = set(re.findall(r"numbers for (\S+) is", " ".join(n.text for n in sample.needles)))
        assert len(keys) == PARAMS.mk_keys + PARAMS.mv_keys


def test_depths_are_stratified_and_spread_over_haystacks() -> None:
    sample = make_sample(TASKS, 3, 5, PARAMS)
    depths = sorted(n.depth for n in sample.needles)
    n = len(depths)
    assert all(0.0 <= d < 1.0 for d in depths)
    assert all(abs((b - a) - 1 / n) < 1e-9 for a, b in itertools.pairwise(depths))
    # the first needle (the passkey) sits at the index's van der Corput point
    firsts = [make_sample(("passkey",), 1, i, PARAMS).needles[0].depth for i in range(8)]
    assert firsts == [van_der_corput(i) for i in range(8)]
    assert sorted(firsts) == [i / 8 for i in range(8)]


def test_vt_chain_keeps_assignment_order() -> None:
    for seed in range(20):
        sample = make_sample(TASKS, seed, seed, PARAMS)
        for q in (q for q in sample.questions if q.task == "vt"):
            depths = [sample.needles[i].depth for i in q.needles]
            assert depths == sorted(depths)
            value = re.search(r"the value (\d+)", q.text)
            assert value is not None
            assert sample.needles[q.needles[0]].text == f"VAR {q.expected[0]} = {value.group(1)}."


def test_same_seed_same_sample_other_seed_other_sample() -> None:
    assert make_sample(TASKS, 11, 2, PARAMS) == make_sample(TASKS, 11, 2, PARAMS)
    assert make_sample(TASKS, 11, 2, PARAMS) != make_sample(TASKS, 12, 2, PARAMS)


def test_van_der_corput() -> None:
    assert [van_der_corput(i) for i in range(5)] == [0.0, 0.5, 0.25, 0.75, 0.125]


def test_params_need_three_distractor_keys() -> None:
    with pytest.raises(ValueError, match="mk_keys"):
        TaskParams(mk_keys=3)
    with pytest.raises(ValueError):
        TaskParams(vt_hops=0)


def _q(task: str, expected: tuple[str, ...], distractors: tuple[str, ...] = ()) -> Question:
    return Question(task, "\nQ", expected, distractors, (0,), 8)


@pytest.mark.parametrize(
    ("task", "expected", "distractors", "got", "correct", "recall", "hits", "answer"),
    [
        ("passkey", ("48213",), (), " 48213. Remember it. 555", True, 1.0, 0, "48213"),
        ("passkey", ("48213",), (), "\n\n 48213\nmore 1", True, 1.0, 0, "48213"),
        ("passkey", ("48213",), (), " 148213.", False, 0.0, 0, "148213"),  # not a longer number
        ("passkey", ("48213",), (), " it is\n1. 48213", False, 1.0, 0, "it is\n1"),
        ("mk_niah", ("1234567",), ("7654321",), " 7654321 or 1234567", False, 1.0, 1, "7654321"),
        ("mk_niah", ("1234567",), ("7654321",), " 1234567, not 7654321", True, 1.0, 0,
         "1234567"),
        ("mv_niah", ("1111111", "2222222"), ("3333333",), " 2222222, 1111111.\nThe special "
         "magic number for x is 3333333", True, 1.0, 0, "2222222, 1111111"),
        ("mv_niah", ("1111111", "2222222"), ("3333333",), ":\n1. 1111111\n2. 2222222", True,
         1.0, 0, ":\n1. 1111111\n2. 2222222"),
        ("mv_niah", ("1111111", "2222222"), ("3333333",), " 1111111 and 3333333", False, 0.5, 1,
         "1111111 and 3333333"),
        ("mv_niah", ("1111111", "2222222"), ("3333333",), " 3333333, 2222222, 1111111", False,
         1.0, 1, "3333333, 2222222, 1111111"),
        ("vt", ("ABCDE", "FGHIJ"), ("KLMNO",), " ABCDE, FGHIJ\nVAR KLMNO", True, 1.0, 0,
         "ABCDE, FGHIJ"),
        ("vt", ("ABCDE", "FGHIJ"), ("KLMNO",), " ABCDE, KLMNO, FGHIJ", False, 1.0, 1,
         "ABCDE, KLMNO, FGHIJ"),
        ("vt", ("ABCDE", "FGHIJ"), ("KLMNO",), " ABCDEF, FGHIJ", False, 0.5, 0, "ABCDEF, FGHIJ"),
        ("passkey", ("48213",), (), "", False, 0.0, 0, ""),
    ],
)  # fmt: skip
def test_score(
    task: str, expected: tuple[str, ...], distractors: tuple[str, ...], got: str,
    correct: bool, recall: float, hits: int, answer: str,
) -> None:  # fmt: skip
    s = score(_q(task, expected, distractors), got)
    assert (s.correct, s.recall, s.distractors, s.answer) == (correct, recall, hits, answer)
