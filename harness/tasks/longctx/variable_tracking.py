"""Variable tracking (RULER's ``vt``): a chain of assignments ``VAR B = VAR A`` starting from a
number, spread through the haystack beside a decoy chain from another number; the question asks
for every variable that holds the first chain's number, in chain order."""

from __future__ import annotations

import itertools
import random

from harness.tasks.longctx.base import (
    Counter,
    LongItem,
    budget,
    haystack,
    insert_at_depths,
    rng_for,
    value,
)  # fmt: skip

NAME = "variable_tracking"
HOPS = 3  # variables per chain
LETTERS = "ABCDEFGHJKLMNPQRSTUVWXYZ"


def names(rng: random.Random, n: int) -> list[str]:
    """``n`` distinct three-letter variable names."""
    out: list[str] = []
    while len(out) < n:
        name = "".join(rng.choice(LETTERS) for _ in range(3))
        if name not in out:
            out.append(name)
    return out


def chain(variables: list[str], number: str) -> list[str]:
    """The assignment sentences of one chain: the first variable gets the number, each next one
    the previous variable."""
    first = [f" VAR {variables[0]} = {number}."]
    return [*first, *(f" VAR {b} = VAR {a}." for a, b in itertools.pairwise(variables))]


def make(
    seed: int, context_tokens: int, depth: float, kind: str, source: str, count: Counter,
    hops: int = HOPS,
) -> LongItem:  # fmt: skip
    rng = rng_for(NAME, seed, context_tokens)
    variables = names(rng, 2 * hops)
    gold, decoy = variables[:hops], variables[hops:]
    number = value(rng)
    other = value(rng)
    while other == number:
        other = value(rng)
    facts = chain(gold, number) + chain(decoy, other)
    later = sorted(depth + (1 - depth) * rng.random() for _ in gold[1:])
    depths = [depth, *later, *sorted(rng.random() for _ in decoy)]
    question = f"\nQuestion: Which variables are assigned the value {number}?"
    prefix = f"\nAnswer: The variables assigned the value {number} are"
    filler = haystack(rng, kind, source, budget(context_tokens, count, *facts, question, prefix),
                      count)  # fmt: skip
    context = insert_at_depths(filler, facts, depths)
    return LongItem(NAME, seed, context_tokens, depth, context, question, prefix,
                    " " + " ".join(gold), tuple(gold))  # fmt: skip
