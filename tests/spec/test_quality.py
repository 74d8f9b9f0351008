"""The scenario's quality block (harness.spec.quality): ARC-Easy as the arc-easy task, the gate's
names (an earlier one read as today's), what the gate reads."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from harness.spec.quality import GATE_METRICS, QualitySettings, gate_names


def test_arc_items_are_scored_as_the_arc_easy_task_and_a_listed_one_decides() -> None:
    def scored(**settings: object) -> list[tuple[str, int]]:
        tasks = QualitySettings.model_validate(settings).scored_tasks()
        return [(t.name, len(t.scored)) for t in tasks]

    assert scored(arc_items=10) == [("arc-easy", 10)]
    assert scored(arc_items="all") == [("arc-easy", 2376)]  # every item the corpus ships
    assert scored(arc_items=0) == []
    assert scored(arc_items=10, tasks=["snips-intent"]) == [("snips-intent", 210), ("arc-easy", 10)]
    # listed, it is scored as listed (every item), once
    assert scored(arc_items=10, tasks=["arc-easy"]) == [("arc-easy", 2376)]


def test_the_gate_s_earlier_name_arc_is_read_as_tasks_once() -> None:
    assert gate_names(["ppl", "arc", "tasks"]) == ["ppl", "tasks"]
    assert QualitySettings.model_validate({"gate": ["arc"]}).gate == ["tasks"]
    assert GATE_METRICS == ("ppl", "tasks", "context")
    with pytest.raises(ValidationError, match="gate"):
        QualitySettings.model_validate({"gate": ["accuracy"]})


def test_the_gate_reads_tasks_only_where_a_task_is_scored() -> None:
    assert QualitySettings.model_validate({"arc_items": 0}).gated() == ("ppl",)
    assert QualitySettings.model_validate({"arc_items": 5}).gated() == ("ppl", "tasks")
    only = QualitySettings.model_validate({"arc_items": 0, "tasks": ["snips-intent"],
                                          "gate": ["tasks"]})  # fmt: skip
    assert only.gated() == ("tasks",)
