"""``choice``: each item has ``choices`` (2 to ``MAX_CHOICES`` strings) and ``gold`` (the index
of the right one); every choice is scored as " " + choice after the prompt, the highest
log-likelihood is the answer (ARC-Easy's rule). The unit is the item: right or wrong.

Its own figure, ``acc_norm``, is lm-evaluation-harness's (0.4.x,
``ConfigurableTask.process_results``): the pick with each log-likelihood divided by its choice's
length in characters, without the leading space scored in front of it (``len(choice)``; dividing
by ``len(" " + choice)`` instead picks a different answer on some items). Ties go to the first
choice, as for the plain pick."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from harness.errors import quote
from harness.row.tasks import TaskScore
from harness.tasks.kinds.base import Gold, Pick
from harness.tasks.metrics import Outcome, rate
from harness.tasks.spec import MAX_CHOICES, TaskFile, TaskItem, TaskSpec, Where


def norm_pick(loglik: Sequence[float], choices: Sequence[str]) -> int:
    """The index of the highest log-likelihood per character of its choice (``acc_norm``)."""
    lengths = np.array([len(c) for c in choices], dtype=np.float64)
    ll = np.asarray(loglik, dtype=np.float64)
    if ll.shape != lengths.shape or np.any(lengths <= 0):
        raise ValueError(f"{ll.size} log-likelihoods for {lengths.size} non-empty choices")
    return int(np.argmax(ll / lengths))


class Choice(Pick):
    name = "choice"
    gold_keys = ("choices", "gold")
    figures = ("acc_norm",)

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

    def outcome(self, task: TaskSpec, raw: Sequence[Any]) -> Outcome:
        made = super().outcome(task, raw)
        norm = [norm_pick(row, item.choices or ()) == item.gold
                for row, item in zip(raw, task.scored, strict=True)]  # fmt: skip
        return dataclasses.replace(made, correct_norm=np.array(norm, dtype=bool))

    def summarize(self, task: TaskSpec, outcome: Outcome, score: TaskScore) -> None:
        score.score = rate(outcome.correct)
        if outcome.correct_norm is not None:
            score.acc_norm = rate(outcome.correct_norm)
