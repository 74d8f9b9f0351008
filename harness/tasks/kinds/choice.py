"""``choice``: each item has ``choices`` (2 to ``MAX_CHOICES`` strings) and ``gold`` (the index
of the right one); every choice is scored as " " + choice after the prompt, the highest
log-likelihood is the answer (ARC-Easy's rule). The unit is the item: right or wrong."""

from __future__ import annotations

from typing import Any

from harness.errors import quote
from harness.tasks.kinds.base import Gold, Pick
from harness.tasks.spec import MAX_CHOICES, TaskFile, TaskItem, TaskSpec, Where


class Choice(Pick):
    name = "choice"
    gold_keys = ("choices", "gold")

    def read_gold(self, entry: TaskFile, data: dict[str, Any], where: Where) -> Gold:
        given = data.get("choices")
        choices: list[Any] = given if isinstance(given, list) else []
        ok = isinstance(given, list) and 2 <= len(choices) <= MAX_CHOICES
        if not ok or not all(isinstance(c, str) and c for c in choices):
            raise where.error("choices", f"{quote(given)}; expected a list of 2 to "
                                         f"{MAX_CHOICES} non-empty strings")  # fmt: skip
        gold = data.get("gold")
        if isinstance(gold, bool) or not isinstance(gold, int) or not 0 <= gold < len(choices):
            raise where.error("gold", f"{quote(gold)}; expected the index of the right choice "
                                      f"(0 to {len(choices) - 1})")  # fmt: skip
        return Gold(choices=tuple(choices), gold=gold)

    def target(self, task: TaskSpec, item: TaskItem) -> str:
        return " " + (item.choices or ())[item.gold or 0]

    def options(self, task: TaskSpec, item: TaskItem) -> list[str]:
        return [" " + choice for choice in item.choices or ()]

    def answer(self, task: TaskSpec, item: TaskItem, index: int) -> str:
        return str(index)

    def gold_answer(self, item: TaskItem) -> str:
        return str(item.gold)
