"""``exact``: each item has an ``answer`` (a non-empty string); the model generates greedily, at
most ``max_new_tokens`` tokens after the prompt, and the item is right when its normalised output
equals its normalised answer. Normalised (``normalise``): the text up to its first newline,
Unicode NFKC, case-folded, runs of white space as one space, stripped, then one trailing full
stop dropped. The unit is the item; its score the accuracy (exact-match rate)."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import Any

from harness.tasks.kinds.base import Generate, Gold, item_outcome
from harness.tasks.metrics import Outcome
from harness.tasks.spec import OUTPUT_CHARS, TaskFile, TaskItem, TaskSpec, Where, text_value


def normalise(text: str) -> str:
    """``text`` as it is compared (module docstring)."""
    first = text.split("\n", 1)[0]
    folded = " ".join(unicodedata.normalize("NFKC", first).casefold().split())
    return folded.removesuffix(".").rstrip()


class Exact(Generate):
    name = "exact"
    gold_keys = ("answer",)

    def read_gold(self, entry: TaskFile, data: dict[str, Any], where: Where) -> Gold:
        answer = text_value(data, "answer", where)
        if not normalise(answer):
            raise where.error("answer", "is empty once normalised; expected an answer")
        return Gold(label=answer)

    def target(self, task: TaskSpec, item: TaskItem) -> str:
        return " " + str(item.label)

    def outcome(self, task: TaskSpec, raw: Sequence[Any]) -> Outcome:
        items = task.scored
        if len(raw) != len(items):
            raise ValueError(f"{len(raw)} outputs for {len(items)} items")
        gold = [str(item.label) for item in items]
        correct = [normalise(out) == normalise(g) for out, g in zip(raw, gold, strict=True)]
        return item_outcome(self.name, task, correct, [t[:OUTPUT_CHARS] for t in raw], gold)
