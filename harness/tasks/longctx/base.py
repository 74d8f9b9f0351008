"""What every long-context task family shares: the item it generates, the seed streams (train
and evaluation kept apart), the haystack it hides its facts in, and how facts are spread through
a context of a stated length.

A family (one file in this package, one line in ``FAMILIES``) turns (seed, context tokens, depth)
into a ``LongItem``: a context, a question, an answer prefix and the gold answer. The same
arguments give the same item on any machine (``random.Random(seed)`` only, no global state).
Lengths are counted by the caller's tokenizer (``Counter``), so a context of 4,096 tokens is 4,096
of the model's tokens (at most: pieces are counted one by one, joined they may merge).
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harness import corpus

Counter = Callable[[str], int]  # text -> its token count
_SENTENCE_END = re.compile(r"(?<= \.) ")  # WikiText writes "word ." at a sentence's end

# Seeds: evaluation items use seeds below EVAL_SEED_END; training items use seeds from
# TRAIN_SEED_START on. The two ranges never meet (the leak report checks a task's seeds against
# the range a model's training.json records).
EVAL_SEED_END = 1_000_000_000
TRAIN_SEED_START = 1_000_000_000
HAYSTACKS = ("text", "noise")

# A filler that carries no fact (the haystack RULER calls noise; our own sentences).
NOISE = (
    " The hills are quiet today. A small boat drifts on the lake. The wind moves the tall grass."
    " Somewhere a bell rings twice. The road goes on past the old mill."
)
# Key words for needles and coded words; short, common, one to three tokens each.
WORDS = (
    "apple", "river", "stone", "candle", "garden", "silver", "window", "forest", "harbor",
    "pencil", "violet", "marble", "rocket", "meadow", "copper", "lantern", "falcon", "island",
    "pepper", "tiger", "velvet", "anchor", "bridge", "castle", "desert", "engine", "feather",
    "glacier", "hammer", "jungle", "kettle", "ladder", "mirror", "needle", "orange", "parrot",
    "quartz", "saddle", "thunder", "umbrella", "valley", "wagon", "yellow", "zebra", "button",
    "cherry", "dragon", "ember", "fabric", "guitar", "helmet", "insect", "jacket", "kitten",
    "lemon", "magnet", "nickel", "oyster", "pillow", "rabbit", "sugar", "tunnel", "walnut",
    "basket", "cotton", "dolphin", "planet", "spider", "summer", "winter", "circle", "mountain",
)  # fmt: skip


@dataclass(frozen=True)
class LongItem:
    """One generated item. ``context`` is what the cache holds before the question; ``question``
    asks for the fact; ``prefix`` starts the answer (the scored continuation follows it);
    ``answer`` is the gold continuation (leading space included) and ``gold`` the answer's words
    as exact match compares them. ``depth``: where the (first) fact sits, 0 = start, 1 = end."""

    family: str
    seed: int
    context_tokens: int
    depth: float
    context: str
    question: str
    prefix: str
    answer: str
    gold: tuple[str, ...]

    def prompt(self, question_first: bool = False) -> str:
        """The prompt as the engine reads it: the context, then the question and the answer
        prefix (``question_first``: the question also stated before the context)."""
        head = self.question.strip() + "\n" if question_first else ""
        return head + self.context + self.question + self.prefix


def rng_for(family: str, seed: int, context_tokens: int) -> random.Random:
    """The generator of one item: one stream per (family, seed, length), stable across runs."""
    return random.Random(f"{family}/{seed}/{context_tokens}")


@functools.cache
def _text_sentences(source: str) -> tuple[str, ...]:
    """The sentences of a corpus file (``eval``: wiki.test.raw, ``train``: wiki.valid.raw),
    headings and blank lines left out, each with its leading space."""
    path = corpus.EVAL_FILE if source == "eval" else corpus.CALIBRATION_FILE
    out: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("="):
            continue
        out.extend(" " + part.strip() for part in _SENTENCE_END.split(line) if part.strip())
    return tuple(out)


def haystack(rng: random.Random, kind: str, source: str, tokens: int, count: Counter) -> list[str]:
    """Filler sentences of about ``tokens`` tokens in all: consecutive corpus sentences from a
    seeded offset (``text``) or the repeated noise sentences (``noise``)."""
    if kind == "noise":
        pieces = [" " + s.strip() + "." for s in NOISE.split(".") if s.strip()]
    else:
        sentences = _text_sentences(source)
        start = rng.randrange(len(sentences))
        pieces = [sentences[(start + i) % len(sentences)] for i in range(4096)]
    out: list[str] = []
    used = 0
    for i in range(10**6):
        piece = pieces[i % len(pieces)]
        n = _count(count, piece)
        if used + n > tokens:
            break
        out.append(piece)
        used += n
    return out


_COUNTS: dict[tuple[int, str], int] = {}


def _count(count: Counter, text: str) -> int:
    """``count(text)``, remembered (haystack sentences repeat)."""
    key = (id(count), text)
    hit = _COUNTS.get(key)
    if hit is None:
        hit = _COUNTS[key] = count(text)
    return hit


def insert_at_depths(sentences: list[str], facts: Sequence[str], depths: Sequence[float]) -> str:
    """The sentences with each fact inserted between sentences at its depth (0 = before the
    first, 1 = after the last), joined."""
    out = list(sentences)
    order = sorted(range(len(facts)), key=lambda i: depths[i], reverse=True)
    for i in order:
        at = round(depths[i] * len(sentences))
        out.insert(at, facts[i])
    return "".join(out)


def value(rng: random.Random) -> str:
    """A fact's value: a 4-digit number."""
    return str(rng.randrange(1000, 10000))


def budget(context_tokens: int, count: Counter, *fixed: str) -> int:
    """The haystack's share of the context: the length less the facts' tokens and a margin of
    1 % + 8 tokens (pieces counted apart may tokenize longer once joined)."""
    margin = context_tokens // 100 + 8
    return max(0, context_tokens - margin - sum(count(text) for text in fixed))
