"""The retrieval tasks: what is hidden in a haystack, what is asked, and how an answer is scored.

Tasks (the wording follows RULER, NVIDIA/RULER ``scripts/data/synthetic``):

- ``passkey``: one needle "The pass key is 48213. Remember it. 48213 is the pass key." (5 digits).
- ``mk_niah``: ``mk_keys`` needles "One of the special magic numbers for wise-lamp is: 4817263."
  with distinct keys (adjective-noun) and distinct 7-digit values; each key is asked in turn, so
  every question has ``mk_keys - 1`` (default 3) distractor needles of the same form.
- ``mv_niah``: ``mv_keys`` keys with ``mv_values`` needles each (same form); each key is asked for
  all of its values; the other keys' values (and in a combined haystack the mk_niah values) are
  distractors.
- ``vt``: ``vt_chains`` chains "VAR QZXKT = 52841." then ``vt_hops`` times "VAR HWPLD = VAR
  QZXKT." in increasing depth; a question gives the value and asks for every variable of its
  chain; the other chains' variables are distractors.

Scoring (``score``) reads the greedy continuation (at most ``n_predict`` tokens):

- passkey, mk_niah: correct iff its first maximal run of digits is the expected number (what
  follows, often the model going on with more text, is not read);
- mv_niah: read up to the point where every expected value has appeared; correct iff they all
  appear and no distractor value appears in that span;
- vt: the same with the chain's variables (5-capital-letter words) and the other chains' names.

``recall`` (the fraction of expected items anywhere in the continuation) and ``distractors``
(distractor items in the span read) are recorded beside the exact verdict, and ``answer`` is the
span read.

Every number and name in one sample is distinct, and corpus.prose keeps numbers of 5 or more
digits and the needles' wording out of the haystack, so a found item can only come from a needle.
"""

from __future__ import annotations

import itertools
import random
import re
import string
from collections.abc import Callable
from dataclasses import dataclass, field

TASKS = ("passkey", "mk_niah", "mv_niah", "vt")
LAYOUTS = ("combined", "separate")

INSTRUCTIONS = {
    "passkey": "There is an important piece of information hidden inside a lot of irrelevant text. "
    "Find it and memorize it. I will quiz you about the important information there.\n",
    "mk_niah": "Some special magic numbers are hidden within the following text. Make sure to "
    "memorize them. I will quiz you about the numbers afterwards.\n",
    "vt": "Memorize and track the chain(s) of variable assignment hidden in the following text.\n",
    "combined": "Hidden within the following text are a pass key, some special magic numbers and "
    "chains of variable assignment. Memorize them all. I will quiz you about them afterwards.\n",
}
INSTRUCTIONS["mv_niah"] = INSTRUCTIONS["mk_niah"]


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


ADJECTIVES = _words(
    "amber brave calm dusty eager fancy gentle hollow icy jolly keen lively mellow noble odd "
    "proud quiet rapid silver tidy upbeat vivid wary young zesty bold crisp damp early faint "
    "grand humble idle jagged kind lucky misty narrow oval plain rosy shiny tall urban velvet "
    "wild bitter cosmic dim fluffy golden hasty ivory loyal modern nimble polite rustic sleepy"
)
NOUNS = _words(
    "anchor basket candle dragon engine falcon garden harbor island jacket kettle ladder meadow "
    "needle orchard pepper quarry rocket saddle tunnel umbrella valley wagon yarn zipper bridge "
    "cabinet dolphin feather glacier hammer lantern mirror nugget oyster pillow ribbon shovel "
    "teapot violin walrus beacon castle desert forest goblet helmet jungle kayak lemon marble"
)


@dataclass(frozen=True)
class TaskParams:
    """How many needles each task hides (see the module docstring)."""

    mk_keys: int = 4
    mv_keys: int = 1
    mv_values: int = 4
    vt_chains: int = 1
    vt_hops: int = 4

    def __post_init__(self) -> None:
        if self.mk_keys < 4:
            raise ValueError("mk_keys must be >= 4 (the asked key and >= 3 distractors)")
        if min(self.mv_keys, self.mv_values, self.vt_chains, self.vt_hops) < 1:
            raise ValueError("mv_keys, mv_values, vt_chains and vt_hops must be >= 1")


@dataclass(frozen=True)
class Needle:
    """One sentence hidden in the haystack at a target depth (0 = first, 1 = last)."""

    text: str
    depth: float


@dataclass(frozen=True)
class Question:
    """Asked after the shared context; `text` starts with a newline and ends with the answer
    prefix the model continues."""

    task: str
    text: str
    expected: tuple[str, ...]
    distractors: tuple[str, ...]
    needles: tuple[int, ...]  # indices into Sample.needles that hold the answer
    n_predict: int


@dataclass(frozen=True)
class Sample:
    """What one haystack carries: instruction, needles, and the questions asked about it."""

    instruction: str
    needles: tuple[Needle, ...]
    questions: tuple[Question, ...]


@dataclass(frozen=True)
class Score:
    correct: bool
    recall: float
    distractors: int
    answer: str


# ----------------------------------------------------------------------------- generation


@dataclass
class _Draw:
    """Random items that never repeat within one sample."""

    rng: random.Random
    used: set[str] = field(default_factory=set)

    def unique(self, make: Callable[[], str]) -> str:
        for _ in range(10_000):
            item = make()
            if item not in self.used:
                self.used.add(item)
                return item
        raise RuntimeError("could not draw a distinct item")

    def number(self, digits: int) -> str:
        return self.unique(lambda: str(self.rng.randrange(10 ** (digits - 1), 10**digits)))

    def key(self) -> str:
        return self.unique(lambda: f"{self.rng.choice(ADJECTIVES)}-{self.rng.choice(NOUNS)}")

    def name(self) -> str:
        return self.unique(lambda: "".join(self.rng.choices(string.ascii_uppercase, k=5)))


@dataclass(frozen=True)
class _Part:
    """One task's needles (texts, in the order they must appear) and questions, before depths."""

    needles: tuple[str, ...]
    questions: tuple[Question, ...]
    ordered: tuple[tuple[int, ...], ...] = ()  # needle groups that must keep increasing depth


def _passkey(draw: _Draw, params: TaskParams) -> _Part:
    key = draw.number(5)
    text = f"The pass key is {key}. Remember it. {key} is the pass key."
    q = Question("passkey", "\nWhat is the pass key? The pass key is", (key,), (), (0,), 12)
    return _Part((text,), (q,))


def _magic(key: str, value: str) -> str:
    return f"One of the special magic numbers for {key} is: {value}."


def _mk_niah(draw: _Draw, params: TaskParams) -> _Part:
    pairs = [(draw.key(), draw.number(7)) for _ in range(params.mk_keys)]
    questions = []
    for i, (key, value) in enumerate(pairs):
        others = tuple(v for j, (_, v) in enumerate(pairs) if j != i)
        text = (
            f"\nWhat is the special magic number for {key} mentioned in the provided text? "
            f"The special magic number for {key} mentioned in the provided text is"
        )
        questions.append(Question("mk_niah", text, (value,), others, (i,), 16))
    return _Part(tuple(_magic(k, v) for k, v in pairs), tuple(questions))


def _mv_niah(draw: _Draw, params: TaskParams) -> _Part:
    keys = [draw.key() for _ in range(params.mv_keys)]
    values = [[draw.number(7) for _ in range(params.mv_values)] for _ in keys]
    needles = [_magic(k, v) for k, vs in zip(keys, values, strict=True) for v in vs]
    questions = []
    for i, key in enumerate(keys):
        others = tuple(v for j, vs in enumerate(values) if j != i for v in vs)
        idx = tuple(range(i * params.mv_values, (i + 1) * params.mv_values))
        text = (
            f"\nWhat are all the special magic numbers for {key} mentioned in the provided text? "
            f"The special magic numbers for {key} mentioned in the provided text are"
        )
        n_predict = 12 * params.mv_values + 8
        questions.append(Question("mv_niah", text, tuple(values[i]), others, idx, n_predict))
    return _Part(tuple(needles), tuple(questions))


def _vt(draw: _Draw, params: TaskParams) -> _Part:
    chains = [[draw.name() for _ in range(params.vt_hops + 1)] for _ in range(params.vt_chains)]
    values = [draw.number(5) for _ in chains]
    needles: list[str] = []
    ordered: list[tuple[int, ...]] = []
    for names, value in zip(chains, values, strict=True):
        start = len(needles)
        needles.append(f"VAR {names[0]} = {value}.")
        needles += [f"VAR {b} = VAR {a}." for a, b in itertools.pairwise(names)]
        ordered.append(tuple(range(start, len(needles))))
    questions = []
    for i, (names, value) in enumerate(zip(chains, values, strict=True)):
        others = tuple(n for j, c in enumerate(chains) if j != i for n in c)
        text = (
            f"\nQuestion: Find all variables that are assigned the value {value} in the text "
            "above. Answer: According to the chain(s) of variable assignment in the text above, "
            f"{len(names)} variables are assigned the value {value}, they are:"
        )
        n_predict = 4 * len(names) + 8
        questions.append(Question("vt", text, tuple(names), others, ordered[i], n_predict))
    return _Part(tuple(needles), tuple(questions), tuple(ordered))


GENERATORS: dict[str, Callable[[_Draw, TaskParams], _Part]] = {
    "passkey": _passkey,
    "mk_niah": _mk_niah,
    "mv_niah": _mv_niah,
    "vt": _vt,
}


def van_der_corput(n: int) -> float:
    """The n-th point (n >= 0) of the base-2 van der Corput sequence in [0, 1): 0, .5, .25, .75"""
    x, denom = 0.0, 1.0
    while n:
        n, bit = divmod(n, 2)
        denom *= 2
        x += bit / denom
    return x


def _depths(n: int, index: int) -> tuple[list[float], int]:
    """n stratified depths in [0, 1) (slot i in [i/n, (i+1)/n)) and the slot at depth v, the
    haystack index's van der Corput point, so that over the first k haystacks of a cell the
    first needle's depth spreads evenly over the context."""
    v = van_der_corput(index)
    offset = v * n - int(v * n)
    return [(i + offset) / n for i in range(n)], int(v * n)


def make_sample(tasks: tuple[str, ...], seed: int, index: int, params: TaskParams) -> Sample:
    """The needles and questions of one haystack holding `tasks` (one task: its own instruction;
    several: the combined instruction). `seed` fixes every random choice; `index` (the haystack's
    number within its cell) rotates the depth grid so that depths spread across haystacks.

    The first needle of the first task takes the slot at the index's van der Corput point; the
    others take the rest in random order, and each VT chain's depths are then sorted so that its
    assignments keep their order.
    """
    rng = random.Random(seed)
    draw = _Draw(rng)
    parts = [GENERATORS[t](draw, params) for t in tasks]
    texts = [t for p in parts for t in p.needles]
    slots, first = _depths(len(texts), index)
    rest = [i for i in range(len(texts)) if i != first]
    order = [first, *rng.sample(rest, len(rest))]
    depth = [slots[order[i]] for i in range(len(texts))]
    questions: list[Question] = []
    base = 0
    for part in parts:
        for group in part.ordered:
            ranked = sorted(depth[base + i] for i in group)
            for i, d in zip(group, ranked, strict=True):
                depth[base + i] = d
        for q in part.questions:
            shifted = tuple(base + i for i in q.needles)
            questions.append(
                Question(q.task, q.text, q.expected, q.distractors, shifted, q.n_predict)
            )
        base += len(part.needles)
    instruction = INSTRUCTIONS[tasks[0] if len(tasks) == 1 else "combined"]
    needles = tuple(Needle(t, d) for t, d in zip(texts, depth, strict=True))
    return Sample(instruction, needles, tuple(questions))


# ----------------------------------------------------------------------------- scoring


NUMBER = re.compile(r"\d+")
NAME = re.compile(r"\b[A-Z]{5}\b")


def score(question: Question, got: str) -> Score:
    """The exact verdict on the continuation `got` (see the module docstring), with the span it
    was read from (`answer`), recall over the whole continuation and distractor hits in the span."""
    pattern = NAME if question.task == "vt" else NUMBER
    items = [(m.group(), m.end()) for m in pattern.finditer(got)]
    expected = set(question.expected)
    end = len(got)
    if question.task in ("passkey", "mk_niah"):
        end = items[0][1] if items else end
    else:
        seen: set[str] = set()
        for item, pos in items:
            seen |= {item} & expected
            if seen == expected:
                end = pos
                break
    span = {item for item, pos in items if pos <= end}
    recall = len(expected & {item for item, _ in items}) / len(expected)
    distractors = sum(d in span for d in question.distractors)
    if question.task in ("passkey", "mk_niah"):
        correct = bool(items) and items[0][0] == question.expected[0]
    else:
        correct = expected <= span and distractors == 0
    return Score(correct, recall, distractors, got[:end].strip())
