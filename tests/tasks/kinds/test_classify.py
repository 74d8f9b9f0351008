"""The classify kind: the gold label is the item's category, every label is an option, and the
summary holds the confusion matrix and macro-F1."""

from __future__ import annotations

import pytest

from harness.tasks import metrics
from harness.tasks.kinds import kind_of
from harness.tasks.kinds.classify import Classify
from harness.tasks.spec import TaskItem, TaskSpec

TASK = TaskSpec(name="t", kind="classify", prompt="{text}", labels=("A", "B"), scored=tuple(
    TaskItem(str(k), label, {"text": str(k)}, label=label) for k, label in enumerate("AAB")
))  # fmt: skip


def test_each_label_is_an_option_and_the_summary_has_its_confusion_and_macro_f1() -> None:
    kind = kind_of("classify")
    assert isinstance(kind, Classify)
    assert kind.options(TASK, TASK.scored[0]) == [" A", " B"]
    got = metrics.outcome_of(TASK, [[0.0, -1.0], [-1.0, 0.0], [-1.0, 0.0]])  # A, B, B
    score = metrics.summarize("t", TASK, got, None)
    assert score.confusion == [[1, 1], [0, 1]]  # gold A: 1 A, 1 B; gold B: 1 B
    # F1(A) = 2·1 / (2·1 + 0 + 1) = 2/3; F1(B) = 2·1 / (2·1 + 1 + 0) = 2/3; macro 2/3
    assert score.macro_f1 == pytest.approx(2 / 3) and score.score == pytest.approx(2 / 3)
