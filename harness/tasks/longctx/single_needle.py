"""Single needle (RULER's ``niah_single``): one sentence stating a key's number, hidden at a depth
of a haystack; the question asks for the number."""

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

NAME = "single_needle"


def needle(key: str, number: str) -> str:
    return f" The special magic number for {key} is {number}."


def ask(key: str) -> tuple[str, str]:
    """(question, answer prefix) for ``key``."""
    return (
        f"\nQuestion: What is the special magic number for {key}?",
        f"\nAnswer: The special magic number for {key} is",
    )


def make(
    seed: int, context_tokens: int, depth: float, kind: str, source: str, count: Counter
) -> LongItem:
    rng = rng_for(NAME, seed, context_tokens)
    key, number = rng.choice(WORDS), value(rng)
    fact = needle(key, number)
    question, prefix = ask(key)
    filler = haystack(rng, kind, source, budget(context_tokens, count, fact, question, prefix),
                      count)  # fmt: skip
    context = insert_at_depths(filler, [fact], [depth])
    return LongItem(NAME, seed, context_tokens, depth, context, question, prefix,
                    f" {number}", (number,))  # fmt: skip
