"""A long-context entry made into a task (``TaskSpec``): its items generated from evaluation
seeds, one category per context length (``ctx-4096``), so that the per-category figures of the
task machinery are the per-context ones the gate reads (``harness.results.context_gate``)."""

from __future__ import annotations

import functools
from typing import Any

from harness.tasks.longctx import FAMILIES
from harness.tasks.longctx.base import Counter, LongItem
from harness.tasks.longctx.entry import LongContextEntry
from harness.tasks.spec import TaskItem, TaskSpec

KIND = "longctx"
PROMPT = "{context}{question}{prefix}"
CATEGORY_PREFIX = "ctx-"
EXTRA_TOKENS = 2  # generated past the answer's own tokens (a space, a full stop)


def context_label(tokens: int) -> str:
    """The category of a context length: ``ctx-4096``."""
    return f"{CATEGORY_PREFIX}{tokens}"


def context_of(category: str) -> int | None:
    """The context length a category names, None for a category that names none."""
    if not category.startswith(CATEGORY_PREFIX):
        return None
    digits = category[len(CATEGORY_PREFIX) :]
    return int(digits) if digits.isdigit() else None


@functools.cache
def token_counter(tokenizer_dir: str) -> Counter:
    """Token counting by a model's ``tokenizer.json`` (the ``tokenizers`` library: no engine)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(f"{tokenizer_dir}/tokenizer.json")

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    return count


def depths(n: int) -> list[float]:
    """``n`` needle depths spread evenly from 0 (the start) to 1 (the end)."""
    return [i / (n - 1) for i in range(n)] if n > 1 else [0.5]


def generate(entry: LongContextEntry) -> list[LongItem]:
    """Every item of ``entry``: per context, ``items`` items from seeds ``seed…``."""
    make = FAMILIES[entry.longctx]
    count = token_counter(entry.tokenizer)
    return [
        make(entry.seed + i, tokens, depth, entry.haystack, "eval", count)
        for tokens in entry.contexts
        for i, depth in enumerate(depths(entry.items))
    ]


def task_item(item: LongItem) -> TaskItem:
    values = {"context": item.context, "question": item.question, "prefix": item.prefix}
    return TaskItem(
        id=f"{item.family}-{item.context_tokens}-{item.seed}",
        category=context_label(item.context_tokens),
        values=values,
        label=item.answer,
    )


def longctx_task(entry: LongContextEntry) -> TaskSpec:
    """The task of ``entry``: generated items, the question variant and the seeds in ``extra``."""
    items = generate(entry)
    count = token_counter(entry.tokenizer)
    longest_answer = max(count(i.answer) for i in items)
    extra: dict[str, Any] = {
        "question": entry.question,
        "family": entry.longctx,
        "seeds": [entry.seed, entry.seed + entry.items],
        "gold_words": {task_item(i).id: list(i.gold) for i in items},
    }
    return TaskSpec(
        name=entry.task_name, kind=KIND, prompt=PROMPT,
        scored=tuple(task_item(i) for i in items),
        max_new_tokens=longest_answer + EXTRA_TOKENS,
        source=f"generated: {entry.longctx}, contexts {entry.contexts}, {entry.haystack} haystack",
        extra=extra,
    )  # fmt: skip
