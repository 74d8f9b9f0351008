"""``longctx``: long-context items generated from a seed (``harness.tasks.longctx``: single
needle, multiple keys with decoys, variable tracking, frequent words), one category per context
length. Each item is scored twice on the group's engine:

- **exact match**: a greedy generation after the prompt; its first words (full stops and commas
  dropped) are the gold words (frequent words: the same words in any order);
- **the gold answer's teacher-forced log-probability** (``answer_nll``: −Σ log p, nats, over the
  answer's ``answer_tokens``), a paired, continuous signal even where a weak model rarely gets
  the words right.

Where the engine makes a cache of the group's KV dtype (``_new_cache``: the transformers
backend; ``harness.tasks.longctx.engine`` reads items through it), the cache holds the context
and, in the ``after`` variant, the question;
the rest (``agnostic``: the question and the answer prefix; ``after``: the prefix) is read from
it, so a quantized or degraded KV cache shows in both scores. Other engines get the whole prompt
(their KV dtype applies throughout). Not a kind for task files: list it as ``{longctx: ...}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from harness.tasks.kinds.base import Engine, Generate, Gold, item_outcome
from harness.tasks.metrics import Outcome
from harness.tasks.spec import OUTPUT_CHARS, TaskFile, TaskItem, TaskSpec, Where

ORDERLESS = frozenset({"frequent_words"})  # families whose gold words may come in any order


def answer_words(text: str, n: int) -> tuple[str, ...]:
    """The first ``n`` words of a generated text, full stops and commas dropped."""
    return tuple(text.replace(".", " ").replace(",", " ").split()[:n])


def is_match(output: str, gold: Sequence[str], orderless: bool) -> bool:
    words = answer_words(output, len(gold))
    return sorted(words) == sorted(gold) if orderless else words == tuple(gold)


def split_prompt(task: TaskSpec, item: TaskItem) -> tuple[str, str]:
    """(what the cache holds, what is read after it) for the task's question variant."""
    v = item.values
    if task.extra.get("question") == "agnostic":
        return v["context"], v["question"] + v["prefix"]
    return v["context"] + v["question"], v["prefix"]


class LongContext(Generate):
    name = "longctx"
    gold_keys = ("answer",)
    figures = ("answer_nll",)

    def check_entry(self, entry: TaskFile) -> str | None:
        return "a longctx task is generated, not read from a file: list it as {longctx: ...}"

    def read_gold(self, entry: TaskFile, data: dict[str, Any], where: Where) -> Gold:
        raise where.error("kind", "a longctx task is generated, not read from a file")

    def target(self, task: TaskSpec, item: TaskItem) -> str:
        return str(item.label)

    def work(self, task: TaskSpec) -> tuple[int, int]:
        return len(task.scored), len(task.scored) * task.max_new_tokens

    def score(self, engine: Engine, task: TaskSpec, prompts: list[str]) -> Outcome:
        items = task.scored
        answers = [self.target(task, item) for item in items]
        if hasattr(engine, "_new_cache"):
            from harness.tasks.longctx import engine as cached

            parts = [split_prompt(task, item) for item in items]
            triples = [(c, r, a) for (c, r), a in zip(parts, answers, strict=True)]
            nll_tokens = cached.score_cached(engine, triples)
            outputs = cached.generate_cached(engine, parts, task.max_new_tokens)
        else:
            pairs = list(zip(prompts, answers, strict=True))
            logliks = engine.score_continuations(pairs)
            nll_tokens = [(-ll, 0) for ll in logliks]
            outputs = engine.generate_text(prompts, task.max_new_tokens)
        made = self.outcome(task, outputs)
        nll = np.array([n for n, _ in nll_tokens], dtype=np.float64)
        tokens = np.array([t for _, t in nll_tokens], dtype=np.int64)
        return with_answer_nll(made, nll, tokens)

    def outcome(self, task: TaskSpec, raw: Sequence[Any]) -> Outcome:
        items = task.scored
        if len(raw) != len(items):
            raise ValueError(f"{len(raw)} outputs for {len(items)} items")
        golds = [task.extra["gold_words"][item.id] for item in items]
        orderless = task.extra.get("family") in ORDERLESS
        correct = [is_match(str(o), g, orderless) for o, g in zip(raw, golds, strict=True)]
        predicted = [str(o)[:OUTPUT_CHARS] for o in raw]
        return item_outcome(self.name, task, correct, predicted, [" ".join(g) for g in golds])


def with_answer_nll(outcome: Outcome, nll: Any, tokens: Any) -> Outcome:
    """``outcome`` with each item's answer NLL (nats) and answer tokens."""
    from dataclasses import replace

    return replace(outcome, answer_nll=nll, answer_tokens=tokens)
