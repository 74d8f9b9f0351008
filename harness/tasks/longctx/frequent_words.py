"""Frequent-word extraction (RULER's ``fwe``): a context made only of coded words drawn with
Zipf-like frequencies; the question asks for the three most frequent, most frequent first.
There is no needle: ``depth`` is recorded as given and places nothing."""

from __future__ import annotations

from harness.tasks.longctx.base import WORDS, Counter, LongItem, budget, rng_for

NAME = "frequent_words"
VOCAB = 12  # coded words in one context
TOP = 3
QUESTION = f"\nQuestion: What are the {TOP} most frequent words in the text above?"
PREFIX = f"\nAnswer: The {TOP} most frequent words are"


def make(
    seed: int, context_tokens: int, depth: float, kind: str, source: str, count: Counter
) -> LongItem:
    rng = rng_for(NAME, seed, context_tokens)
    words = rng.sample(WORDS, VOCAB)
    per_word = max(1, sum(count(" " + w) for w in words) // VOCAB)
    total = max(VOCAB * 4, budget(context_tokens, count, QUESTION, PREFIX) // per_word)
    # Zipf-like shares 1/rank; the top TOP ranks get strictly more copies than any other word.
    shares = [1.0 / (rank + 1) for rank in range(VOCAB)]
    copies = [max(1, int(total * s / sum(shares))) for s in shares]
    sizes = [count(" " + w) for w in words]
    room = budget(context_tokens, count, QUESTION, PREFIX)
    spent = sum(n * size for n, size in zip(copies, sizes, strict=True))
    if spent > room:  # words of more tokens than the average: scale every count down
        copies = [max(1, n * room // spent) for n in copies]
    for rank in range(TOP - 1, -1, -1):  # the top ranks strictly above every later one
        copies[rank] = max(copies[rank], copies[rank + 1] + 1)
    stream = [w for w, n in zip(words, copies, strict=True) for _ in range(n)]
    rng.shuffle(stream)
    context = "".join(" " + w for w in stream) + "."
    gold = tuple(words[:TOP])
    return LongItem(NAME, seed, context_tokens, depth, context, QUESTION, PREFIX,
                    " " + " ".join(gold), gold)  # fmt: skip
