"""The extract kind: its unit is the gold field, keyed by item and field name; a wrong item is
listed with why it failed and the reference's state."""

from __future__ import annotations

from harness.tasks import metrics
from harness.tasks.kinds import kind_of
from harness.tasks.kinds.extract import parse_output
from harness.tasks.spec import TaskItem, TaskSpec

TASK = TaskSpec(name="s", kind="extract", prompt="{text}", scored=(
    TaskItem("a", "all", {"text": "x"}, target_fields={"city": "Paris", "day": "monday"}),
    TaskItem("b", "all", {"text": "y"}, target_fields={"city": "Rome"}),
))  # fmt: skip


def test_the_units_are_the_gold_fields_and_the_misses_say_why() -> None:
    got = metrics.outcome_of(TASK, ['{"city": "Paris"}', "not json"])
    keys, _, hits = kind_of("extract").units(got)
    assert keys.tolist() == ["a\x1fcity", "a\x1fday", "b\x1fcity"]
    assert hits.tolist() == [True, False, False]
    misses = kind_of("extract").misses(got, {"a": True})
    assert [(m.item, m.change) for m in misses] == [
        ("a", "1 required field(s) missing; the reference was right"),
        ("b", "not a JSON object"),
    ]


def test_an_output_is_its_first_line_as_a_json_object() -> None:
    assert parse_output(' {"a": "b"}\nmore') == {"a": "b"}
    assert parse_output("[1, 2]") is None
