"""Multiple keys with decoys (RULER's ``niah_multikey``): several needles of the same form with
different keys and numbers; the question asks for one key's number, the others are decoys."""

from __future__ import annotations

from harness.tasks.longctx.base import (
    WORDS,
    Counter,
    LongItem,
    budget,
    haystack,
    insert_at_depths,
    rng_for,
    value,
)  # fmt: skip
from harness.tasks.longctx.single_needle import ask, needle

NAME = "multi_key"
KEYS = 4  # needles per context: the asked one and three decoys


def make(
    seed: int, context_tokens: int, depth: float, kind: str, source: str, count: Counter,
    keys: int = KEYS,
) -> LongItem:  # fmt: skip
    rng = rng_for(NAME, seed, context_tokens)
    names = rng.sample(WORDS, keys)
    numbers = [value(rng) for _ in names]
    facts = [needle(k, n) for k, n in zip(names, numbers, strict=True)]
    depths = [depth] + [rng.random() for _ in names[1:]]
    question, prefix = ask(names[0])
    filler = haystack(rng, kind, source, budget(context_tokens, count, *facts, question, prefix),
                      count)  # fmt: skip
    context = insert_at_depths(filler, facts, depths)
    return LongItem(NAME, seed, context_tokens, depth, context, question, prefix,
                    f" {numbers[0]}", (numbers[0],))  # fmt: skip


def decoy_questions(item: LongItem, keys: int = KEYS) -> list[tuple[str, str, str]]:
    """The (question, prefix, answer) of every key in ``item``'s context, the asked one first:
    more answers from one context (training uses them)."""
    rng = rng_for(NAME, item.seed, item.context_tokens)
    names = rng.sample(WORDS, keys)
    numbers = [value(rng) for _ in names]
    return [(*ask(k), f" {n}") for k, n in zip(names, numbers, strict=True)]
