"""Golden task metrics on hand-made outputs: every figure worked out by hand in the comments."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.measure import verdict
from harness.tasks import metrics
from harness.tasks.spec import TaskItem, TaskSpec

GOLD = {"city": "Paris", "day": "monday"}


def extract_task(*golds: dict[str, str], categories: tuple[str, ...] = ()) -> TaskSpec:
    cats = categories or tuple("c" for _ in golds)
    items = tuple(
        TaskItem(f"i{n}", cats[n], {"text": "t"}, target_fields=g) for n, g in enumerate(golds)
    )
    return TaskSpec(name="x", kind="extract", prompt="{text}", scored=items)


def outcome_of(outputs: list[str], *golds: dict[str, str]) -> metrics.Outcome:
    return metrics.outcome_of(extract_task(*golds), outputs)


def test_json_that_does_not_parse_is_invalid_and_hits_nothing() -> None:
    got = outcome_of(['{"city": "Paris", "day": ', "Paris monday"], GOLD, GOLD)
    assert got.valid.tolist() == [False, False]
    assert metrics.json_validity(got) == 0.0
    assert metrics.presence_rate(got) == 0.0  # 0 of 4 required fields present
    assert metrics.field_prf(got) == (0.0, 0.0, 0.0)
    assert got.field_hit.tolist() == [False] * 4 and not got.correct.any()


def test_a_json_value_that_is_not_an_object_is_invalid() -> None:
    got = outcome_of(['["Paris", "monday"]', '"Paris"'], GOLD, GOLD)
    assert metrics.json_validity(got) == 0.0


def test_only_the_first_line_is_read_and_the_rest_ignored() -> None:
    got = outcome_of([' {"city": "Paris", "day": "monday"}\nUtterance: more text'], GOLD)
    assert got.valid.tolist() == [True] and got.correct.tolist() == [True]
    assert metrics.field_prf(got) == (1.0, 1.0, 1.0)


def test_a_missing_required_field_lowers_presence_and_recall_not_precision() -> None:
    got = outcome_of(['{"city": "Paris"}'], GOLD)
    assert metrics.json_validity(got) == 1.0
    assert metrics.presence_rate(got) == 0.5  # 1 of 2 required fields
    p, r, f1 = metrics.field_prf(got)
    assert (p, r) == (1.0, 0.5)  # 1 hit / 1 said; 1 hit / 2 gold
    assert f1 == pytest.approx(2 * 1 * 0.5 / 1.5)  # 0.6667
    assert not got.correct[0]


def test_a_wrong_field_value_counts_against_precision_and_recall() -> None:
    got = outcome_of(['{"city": "Paris", "day": "Monday"}'], GOLD)  # case differs: exact match
    assert metrics.presence_rate(got) == 1.0  # the key is there
    assert metrics.field_prf(got) == (0.5, 0.5, 0.5)
    assert got.field_hit.tolist() == [True, False]


def test_extra_fields_lower_precision_only() -> None:
    got = outcome_of(['{"city": "Paris", "day": "monday", "time": "noon"}'], GOLD)
    p, r, f1 = metrics.field_prf(got)
    assert p == pytest.approx(2 / 3) and r == 1.0
    assert f1 == pytest.approx(0.8)  # 2 · (2/3) · 1 / (2/3 + 1)
    assert got.correct[0]  # every gold field exact: the item is right


def test_field_scores_pool_over_items_and_per_category() -> None:
    task = extract_task(GOLD, {"city": "Rome"}, categories=("a", "b"))
    got = metrics.outcome_of(task, ['{"city": "Paris"}', '{"city": "Rome", "x": "y"}'])
    # a: 1 hit / 1 said, 1 / 2 gold → F1 2/3; b: 1 / 2 said, 1 / 1 gold → F1 2/3;
    # pooled: 2 hits, 3 said, 3 gold → P = R = F1 = 2/3
    assert metrics.field_prf(got) == pytest.approx((2 / 3, 2 / 3, 2 / 3))
    assert metrics.field_prf(got, got.category == "a")[2] == pytest.approx(2 / 3)
    assert metrics.field_prf(got, got.category == "b")[:2] == pytest.approx((0.5, 1.0))


def classify_task(golds: list[str], labels: tuple[str, ...] = ("A", "B", "C")) -> TaskSpec:
    items = tuple(TaskItem(f"i{n}", g, {"text": "t"}, label=g) for n, g in enumerate(golds))
    return TaskSpec(name="c", kind="classify", prompt="{text}", scored=items, labels=labels)


def loglik_for(
    predicted: list[str], labels: tuple[str, ...] = ("A", "B", "C")
) -> list[list[float]]:
    return [[0.0 if label == p else -1.0 for label in labels] for p in predicted]


def test_a_per_category_confusion_by_hand() -> None:
    golds = ["A", "A", "A", "B", "B", "C"]
    predicted = ["A", "A", "B", "B", "A", "C"]
    task = classify_task(golds)
    got = metrics.outcome_of(task, loglik_for(predicted))
    table = metrics.confusion(got.gold.tolist(), got.predicted.tolist(), ("A", "B", "C"))
    assert table.tolist() == [[2, 1, 0], [1, 1, 0], [0, 0, 1]]
    assert metrics.rate(got.correct) == pytest.approx(4 / 6)
    assert metrics.per_category_accuracy(got) == pytest.approx({"A": 2 / 3, "B": 0.5, "C": 1.0})
    # F1: A = 4 / (4 + 1 + 1) = 2/3; B = 2 / (2 + 1 + 1) = 1/2; C = 1 → macro 13/18
    assert metrics.macro_f1(table) == pytest.approx((2 / 3 + 0.5 + 1.0) / 3)


def test_macro_f1_leaves_out_labels_that_never_occur() -> None:
    table = np.array([[2, 0, 0], [0, 0, 0], [0, 0, 3]])
    assert metrics.macro_f1(table) == 1.0


def test_a_tie_picks_the_first_label() -> None:
    got = metrics.outcome_of(classify_task(["B"]), [[0.0, 0.0, -1.0]])
    assert got.predicted.tolist() == ["A"]


def test_paired_classify_items_match_the_newcombe_interval() -> None:
    task = classify_task(["A"] * 10)
    ref = metrics.outcome_of(task, loglik_for(["A"] * 10))
    cand = metrics.outcome_of(task, loglik_for(["A"] * 7 + ["B"] * 3))
    found = metrics.paired(ref, cand)
    assert found is not None
    interval, ref_rate = found
    expected = verdict.paired_proportion_ci(7, 3, 0, 0)
    assert interval == expected and ref_rate == 1.0
    assert interval.estimate == pytest.approx(0.3)


def test_extract_items_pair_per_field() -> None:
    task = extract_task(GOLD, {"city": "Rome"})
    ref = metrics.outcome_of(task, ['{"city": "Paris", "day": "monday"}', '{"city": "Rome"}'])
    cand = metrics.outcome_of(task, ['{"city": "Paris"}', '{"city": "Rome"}'])
    found = metrics.paired(ref, cand)
    assert found is not None
    interval, ref_rate = found
    assert interval.n == 3  # three gold fields: (i0, city), (i0, day), (i1, city)
    assert interval == verdict.paired_proportion_ci(2, 1, 0, 0) and ref_rate == 1.0


def test_units_pair_by_id_whatever_their_order() -> None:
    task = classify_task(["A", "B", "C"])
    ref = metrics.outcome_of(task, loglik_for(["A", "B", "A"]))
    flipped = classify_task(["C", "B", "A"])  # the same ids in another order, other golds
    items = tuple(reversed(task.scored))
    cand = metrics.outcome_of(
        TaskSpec(name="c", kind="classify", prompt="{text}", scored=items, labels=("A", "B", "C")),
        loglik_for(["C", "B", "A"]),
    )
    assert flipped.labels
    found = metrics.paired(ref, cand)
    assert found is not None
    interval, _ = found
    assert interval.estimate == pytest.approx(-1 / 3)  # i2 wrong → right; i0, i1 right both


def test_summary_names_the_worst_category() -> None:
    golds = ["A"] * 4 + ["B"] * 4
    task = classify_task(golds, ("A", "B"))
    ref = metrics.outcome_of(task, loglik_for(golds, ("A", "B")))
    cand = metrics.outcome_of(task, loglik_for(["A"] * 4 + ["A", "A", "B", "B"], ("A", "B")))
    score = metrics.summarize("c", task, cand, ref)
    assert score.score == pytest.approx(6 / 8) and score.diff == pytest.approx(2 / 8)
    assert score.worst_category == "B" and score.worst_diff == pytest.approx(0.5)
    by = {c.category: c for c in score.categories}
    assert by["A"].diff == 0.0 and by["B"].paired_units == 4
    assert score.confusion == [[4, 0], [2, 2]]


def test_arrays_round_trip_and_a_damaged_task_is_left_out() -> None:
    task = extract_task(GOLD, {"city": "Rome"})
    got = metrics.outcome_of(task, ['{"city": "Paris"}', "no"])
    arrays = metrics.to_arrays("x", got)
    back = metrics.from_arrays(arrays)["x"]
    assert back.kind == "extract" and back.field_hit.tolist() == got.field_hit.tolist()
    assert back.predicted.tolist() == ['{"city": "Paris"}', "no"]
    arrays["task__x__field_hit"] = np.array([True])  # one per gold field expected: 3
    assert metrics.from_arrays(arrays) == {}


def test_no_gold_field_leaves_recall_undefined() -> None:
    got = metrics.outcome_of(extract_task(GOLD), ['{"city": "Paris"}'])
    p, r, f1 = metrics.field_prf(got, np.zeros(1, dtype=bool))
    assert p == 0.0 and math.isnan(r) and math.isnan(f1)


def test_choice_items_are_right_when_the_gold_choice_scores_highest() -> None:
    items = (
        TaskItem("q0", "science", {"text": "t"}, choices=("a", "b", "c"), gold=2),
        TaskItem("q1", "history", {"text": "t"}, choices=("a", "b"), gold=0),
    )
    task = TaskSpec(name="q", kind="choice", prompt="{text}", scored=items)
    got = metrics.outcome_of(task, [[-3.0, -2.0, -1.0], [-1.0, -0.5]])
    assert got.correct.tolist() == [True, False]
    assert got.predicted.tolist() == ["2", "1"] and got.gold.tolist() == ["2", "0"]
    assert metrics.per_category_accuracy(got) == {"history": 0.0, "science": 1.0}
