"""``classify``: a fixed label set (the task's ``labels``); each item has a ``label``, which is
also its category; every label is scored as " " + label after the prompt, the highest
log-likelihood is the prediction. Figures: accuracy, per-label accuracy (the label's recall), the
confusion matrix (gold × predicted) and macro-F1 (``harness.tasks.metrics``)."""

from __future__ import annotations

from typing import Any

from harness.errors import did_you_mean, one_of, quote
from harness.row.tasks import TaskScore
from harness.tasks.kinds.base import Gold, Pick
from harness.tasks.metrics import Outcome, confusion, macro_f1, rate
from harness.tasks.spec import (
    TaskFile,
    TaskItem,
    TaskSpec,
    Where,
    label_continuation,
    text_value,
)


class Classify(Pick):
    name = "classify"
    gold_keys = ("label",)
    takes = frozenset({"labels"})
    needs = frozenset({"labels"})
    figures = ("macro_f1", "labels", "confusion")

    @property
    def answer_keys(self) -> tuple[str, ...]:
        return ("label", "category")  # an item's category is its gold label

    def read_gold(self, entry: TaskFile, data: dict[str, Any], where: Where) -> Gold:
        label = text_value(data, "label", where)
        labels = entry.labels or []
        if label not in labels:
            near = did_you_mean(label, labels)
            raise where.error(
                "label", f"{quote(label)} is not in the task's labels{near}: {one_of(labels)}"
            )
        return Gold(label=label, category=label)

    def target(self, task: TaskSpec, item: TaskItem) -> str:
        return label_continuation(str(item.label))

    def options(self, task: TaskSpec, item: TaskItem) -> list[str]:
        return [label_continuation(label) for label in task.labels or ()]

    def answer(self, task: TaskSpec, item: TaskItem, index: int) -> str:
        return (task.labels or ())[index]

    def gold_answer(self, item: TaskItem) -> str:
        return str(item.label)

    def summarize(self, task: TaskSpec, outcome: Outcome, score: TaskScore) -> None:
        score.score = rate(outcome.correct)
        if task.labels:
            table = confusion(outcome.gold.tolist(), outcome.predicted.tolist(), task.labels)
            score.macro_f1 = macro_f1(table)
            score.labels, score.confusion = list(task.labels), table.tolist()
