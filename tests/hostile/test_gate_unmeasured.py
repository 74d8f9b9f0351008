"""A gated metric that was never compared with the reference never passes a configuration
(issue 35, cause 1): the row stays undecided, and the reason (which metric, why) travels with it
to points.csv and the report's undecided table.

The case that started it: a run killed after its reference group, the task file's ids changed,
the run resumed; bnb-int8's task items paired with none of the reference's stored outcomes, its
row carried the task without paired figures, and it was published as a class-99 pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.results.aggregate import aggregate, aggregate_run
from harness.results.frame import frame_from_rows
from harness.row import ResultRow
from harness.row.tasks import TaskScore
from harness.tasks import metrics
from harness.tasks.spec import TaskItem, TaskSpec
from tests import factories as F

LABELS = ("yes", "no")
ITEMS = 400  # every item right on both: the paired interval's high end z²/(n + z²)
Z2 = 1.6448536269514722**2  # z_0.95² = 2.7055434
# 2.7055434 / (400 + 2.7055434) = 0.0067184: below class 99's margin 0.01 × 1.0 → pass
HIGH = Z2 / (ITEMS + Z2)
UNPAIRED = "task snips-intent: no item ids paired with the reference's"


def intent_task(prefix: str, n: int = ITEMS) -> TaskSpec:
    """A classify task of ``n`` items whose ids start with ``prefix`` (the file's ids)."""
    items = tuple(
        TaskItem(f"{prefix}{k:04d}", LABELS[k % 2], {"text": "t"}, label=LABELS[k % 2])
        for k in range(n)
    )
    return TaskSpec(
        name="snips-intent", kind="classify", prompt="{text}", scored=items, labels=LABELS
    )


def all_right(task: TaskSpec) -> metrics.Outcome:
    """Every item predicted as its gold label."""
    loglik = [[0.0 if label == item.label else -1.0 for label in LABELS] for item in task.scored]
    return metrics.outcome_of(task, loglik)


def resumed_rows() -> list[ResultRow]:
    """The reference scored the task file before the kill (ids a0000…); the resumed run scored
    bnb-int8 on the edited file (ids b0000…), against the reference's stored outcomes."""
    old, new = intent_task("a"), intent_task("b")
    stored = all_right(old)
    ref_score = metrics.summarize("snips-intent", old, stored, stored)
    cand_score = metrics.summarize("snips-intent", new, all_right(new), stored)
    assert cand_score.diff is None and cand_score.paired_units is None  # nothing paired
    return [
        F.reference(group="ref", **F.quality(100.0), tasks=[ref_score]),
        F.row(group="int8", quantization="bnb-int8", **F.quality(100.05), tasks=[cand_score]),
    ]


def passing_task(name: str) -> TaskScore:
    """A task paired on every one of ITEMS items, all right on both: diff 0, [−HIGH, HIGH]
    (Newcombe with b = c = 0 is symmetric here), a class-99 pass."""
    return TaskScore(
        name=name, kind="classify", items=ITEMS, units=ITEMS, score=1.0, unit_rate=1.0,
        ref_rate=1.0, diff=0.0, diff_ci90_low=-HIGH, diff_ci90_high=HIGH, paired_units=ITEMS,
    )  # fmt: skip


def unpaired_task(name: str) -> TaskScore:
    return TaskScore(name=name, kind="classify", items=4, units=4, score=0.75, unit_rate=0.75)


def by_group(rows: list[ResultRow], gated: Any = None) -> Any:
    return aggregate(frame_from_rows(rows), F.tariffs(), gated=gated).points.set_index("group")


def test_the_paired_task_really_passes_class_99_on_its_own() -> None:
    """The fixture's arithmetic: a row gated on that task alone passes, so what follows is the
    unmeasured metric's doing, not the paired one's."""
    rows = [
        F.reference(group="ref", **F.quality(100.0), tasks=[passing_task("a")]),
        F.row(group="int8", quantization="bnb-int8", **F.quality(100.05),
              tasks=[passing_task("a")]),
    ]  # fmt: skip
    points = by_group(rows, gated=("ppl", "tasks"))
    assert points.loc["int8", "tasks_verdict_99"] == "pass"
    assert points.loc["int8", "verdict_99"] == "pass"
    assert points.loc["int8", "unmeasured_gates"] == ""


def test_a_resumed_run_whose_task_ids_changed_is_undecided_with_the_task_named(
    tmp_path: Path,
) -> None:
    rows = resumed_rows()
    F.write_run(tmp_path, rows)
    F.write_manifest(tmp_path, rows, quality_gate=["ppl", "tasks"])
    points = aggregate_run(tmp_path).points.set_index("group")
    # ppl alone passes class 99 (ΔNLL ln(1.0005) = 0.0005, 90 % high ≈ 0.00092 ≤ 0.01005) ...
    assert points.loc["int8", "ppl_verdict_99"] == "pass"
    # ... but the gated task was never compared: undecided, never a pass
    assert points.loc["int8", "tasks_verdict_99"] == "not measured"
    assert points.loc["int8", "verdict_99"] == "undecided"
    assert not points.loc["int8", "pass_99"]
    assert points.loc["int8", "quality_class"] == "undecided"
    assert points.loc["int8", "undecided_by_99"] == "tasks"
    assert points.loc["int8", "unmeasured_gates"] == UNPAIRED
    assert points.loc["ref", "verdict_99"] == "pass"  # the reference, by definition


def test_the_unpaired_task_is_never_priced_as_equal_quality(tmp_path: Path) -> None:
    rows = resumed_rows()
    F.write_run(tmp_path, rows)
    F.write_manifest(tmp_path, rows, quality_gate=["ppl", "tasks"])
    result = aggregate_run(tmp_path, F.tariffs())
    priced = set(result.cheapest["quantization"]) if len(result.cheapest) else set()
    assert "bnb-int8" not in priced


def test_one_task_unpaired_beside_a_passing_one_is_undecided_and_only_that_one_named() -> None:
    rows = [
        F.reference(group="ref", **F.quality(100.0),
                    tasks=[passing_task("intent"), passing_task("slots")]),
        F.row(group="int8", quantization="bnb-int8", **F.quality(100.05),
              tasks=[passing_task("intent"), unpaired_task("slots")]),
    ]  # fmt: skip
    points = by_group(rows, gated=("ppl", "tasks"))
    assert points.loc["int8", "verdict_99"] == "undecided"
    assert points.loc["int8", "unmeasured_gates"] == (
        "task slots: no item ids paired with the reference's"
    )


def test_a_task_the_reference_scored_and_the_row_did_not_leaves_it_undecided() -> None:
    rows = [
        F.reference(group="ref", **F.quality(100.0),
                    tasks=[passing_task("intent"), passing_task("slots")]),
        F.row(group="int8", quantization="bnb-int8", **F.quality(100.05),
              tasks=[passing_task("intent")]),
    ]  # fmt: skip
    points = by_group(rows, gated=("ppl", "tasks"))
    assert points.loc["int8", "verdict_99"] == "undecided"
    assert points.loc["int8", "unmeasured_gates"] == (
        "task slots: scored by the reference, not on this row"
    )


def test_arc_scored_on_other_items_than_the_reference_is_not_a_pass() -> None:
    """ARC items changed on resume: the row has its accuracy but no paired difference."""
    part = F.arc_part(0.60, 0, 0)
    alone = ("name", "kind", "items", "units", "score", "unit_rate")
    unpaired = {k: v for k, v in part.items() if k in alone}
    unpaired["categories"] = [{"category": "all", "items": part["items"], "score": part["score"],
                               "unit_rate": part["unit_rate"]}]  # fmt: skip
    rows = [
        F.reference(group="ref", **F.quality(100.0), tasks=[part]),
        F.row(group="int8", quantization="bnb-int8", **F.quality(100.05), tasks=[unpaired]),
    ]
    points = by_group(rows)  # no manifest: every metric a row scored (ppl, tasks) is gated
    assert points.loc["int8", "ppl_verdict_99"] == "pass"
    assert points.loc["int8", "tasks_verdict_99"] == "not measured"
    assert points.loc["int8", "verdict_99"] == "undecided"
    assert points.loc["int8", "unmeasured_gates"] == (
        "task arc-easy: no item ids paired with the reference's"
    )


def test_perplexity_never_paired_is_not_passed_on_arc_alone() -> None:
    """The reference's window scores were gone: ppl measured, no ΔNLL; ARC passes (no flip)."""
    quality = F.quality(100.05)
    unpaired = {k: v for k, v in quality.items() if not k.startswith("dnll")}
    rows = [
        F.reference(group="ref", **F.quality(100.0), **F.arc(0.60, 0, 0)),
        F.row(group="int8", quantization="bnb-int8", **unpaired, **F.arc(0.60, 0, 0)),
    ]
    points = by_group(rows)
    assert points.loc["int8", "tasks_verdict_99"] == "pass"
    assert points.loc["int8", "ppl_verdict_99"] == "not measured"
    assert points.loc["int8", "verdict_99"] == "undecided"
    assert points.loc["int8", "unmeasured_gates"] == (
        "ppl: its windows were not paired with the reference's (no ΔNLL stored)"
    )


def test_a_metric_the_manifest_gates_on_and_no_row_scored_is_said_not_dropped(
    tmp_path: Path,
) -> None:
    rows = [
        F.reference(group="ref", **F.quality(100.0)),
        F.row(group="int8", quantization="bnb-int8", **F.quality(100.05)),
    ]
    F.write_run(tmp_path, rows)
    # a run before ARC was a task named it `arc`: read as `tasks`
    F.write_manifest(tmp_path, rows, quality_gate=["ppl", "arc"])
    result = aggregate_run(tmp_path)
    points = result.points.set_index("group")
    assert result.gated == ("ppl", "tasks")  # the report states what the scenario gates on
    assert points.loc["int8", "verdict_99"] == "undecided"
    assert points.loc["int8", "unmeasured_gates"] == "tasks: no task scored on this row"
    # a run whose manifest does not say gates on what its rows scored: ppl alone here
    (tmp_path / "manifest.json").unlink()
    assert aggregate_run(tmp_path).points.set_index("group").loc["int8", "verdict_99"] == "pass"


def test_a_failing_metric_still_fails_beside_an_unmeasured_one() -> None:
    """60 of 2,376 ARC items lost: beyond class 99's margin for sure; the task unpaired."""
    rows = [
        F.reference(group="ref", **F.quality(100.0),
                    tasks=[F.arc_part(0.60, 0, 0), passing_task("intent")]),
        F.row(group="int8", quantization="bnb-int8", **F.quality(100.05),
              tasks=[F.arc_part(0.60, 60, 0), unpaired_task("intent")]),
    ]  # fmt: skip
    points = by_group(rows)
    assert points.loc["int8", "verdict_99"] == "fail"
    assert points.loc["int8", "quality_class"] == "below"


def test_a_metric_the_run_does_not_gate_on_never_holds_a_row_back() -> None:
    rows = resumed_rows()
    points = by_group(rows, gated=("ppl",))
    assert points.loc["int8", "tasks_verdict_99"] == "not measured"  # judged, shown ...
    assert points.loc["int8", "verdict_99"] == "pass"  # ... not gated on
    assert points.loc["int8", "unmeasured_gates"] == ""
    assert points.loc["int8", "tasks_unmeasured"] == UNPAIRED  # said all the same
    assert points.loc["int8", "gated_on"] == "ppl"


def test_the_report_names_the_unpaired_task_in_its_undecided_table(tmp_path: Path) -> None:
    from harness.results.publish import report

    rows = resumed_rows()
    F.write_run(tmp_path, rows)
    F.write_manifest(tmp_path, rows, quality_gate=["ppl", "tasks"])
    out = report(tmp_path, F.tariffs())
    readme = (out / "README.md").read_text()
    html = (out / "report.html").read_text()
    assert UNPAIRED in readme
    assert UNPAIRED.replace("'", "&#x27;") in html or UNPAIRED in html
    points = (out / "points.csv").read_text()
    assert UNPAIRED in points


def test_every_row_undecided_for_want_of_a_reference_says_so() -> None:
    rows = [F.row(group="int8", quantization="bnb-int8", **F.quality(100.05))]
    points = by_group(rows)
    assert points.loc["int8", "verdict_99"] == "undecided"
    assert points.loc["int8", "quality_class"] == "unknown"
    assert points.loc["int8", "unmeasured_gates"] == (
        "ppl: no reference row of its run, model and revision scored perplexity"
    )


@pytest.mark.parametrize("n", [1, 3])
def test_the_reasons_are_one_line_each(n: int) -> None:
    tasks = [unpaired_task(f"t{k}") for k in range(n)]
    rows = [
        F.reference(
            group="ref", **F.quality(100.0), tasks=[passing_task(f"t{k}") for k in range(n)]
        ),
        F.row(group="int8", quantization="bnb-int8", **F.quality(100.05), tasks=tasks),
    ]
    text = str(by_group(rows).loc["int8", "unmeasured_gates"])
    assert "\n" not in text
    assert text.count("no item ids paired") == n
    assert np.all([f"task t{k}:" in text for k in range(n)])
