"""A row's parts checked as a whole on admission (issue 35, cause 4): a task share outside
[0, 1], a paired change outside its own interval, an interval upside down, NaN, counts that
disagree, and a row claiming to be the reference that the reference rule could never make one
(an adapter: ppl 7,907 against the reference's 181) are refused, each named in one line with its
row file and field, and never published."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from harness.results.aggregate import aggregate_run
from harness.results.frame import load_run
from harness.row import Provenance, ResultRow
from harness.row.tasks import TaskScore
from harness.run.store import point_path, read_rows
from tests import factories as F

CORPUS = "c0ffee" * 4
PROV = Provenance(device_name="NVIDIA H100 80GB HBM3", harness="0.1.0", corpus_hash=CORPUS)
REF_GROUP = "tiny-llama|transformers|none|kv=auto|cuda"
Z2 = 1.6448536269514722**2
# a task of 400 items, every one right on both: diff 0 in [−z²/(400 + z²), +z²/(400 + z²)]
HIGH = Z2 / (400 + Z2)  # 0.0067184


def good_task(**overrides: Any) -> dict[str, Any]:
    """A consistent task part (as JSON): 400 items in two categories of 200, all paired."""
    half = {"items": 200, "score": 1.0, "unit_rate": 1.0, "ref_rate": 1.0, "diff": 0.0,
            "diff_ci90_low": -0.0134, "diff_ci90_high": 0.0134, "paired_units": 200}  # fmt: skip
    task: dict[str, Any] = {
        "name": "snips-intent", "kind": "classify", "items": 400, "units": 400, "score": 1.0,
        "unit_rate": 1.0, "ref_rate": 1.0, "diff": 0.0, "diff_ci90_low": -HIGH,
        "diff_ci90_high": HIGH, "paired_units": 400, "worst_category": "no",
        "worst_diff": 0.0, "worst_ci90_low": -0.0134, "worst_ci90_high": 0.0134,
        "categories": [{"category": "no", **half}, {"category": "yes", **half}],
        "labels": ["yes", "no"], "confusion": [[200, 0], [0, 200]],
    }  # fmt: skip
    task.update(overrides)
    return task


def write_raw(run: Path, key: str, **fields: Any) -> Path:
    """A row file written as a hostile user would: any JSON, no validation on the way."""
    row = json.loads(F.row(key=key, provenance=PROV, group=REF_GROUP).model_dump_json())
    row.update(fields)
    path = point_path(run, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(row))  # NaN is written as NaN, as json.dumps does
    return path


def why_unreadable(run: Path, key: str) -> str:
    _, bad = read_rows(run)
    found = [why for path, why in bad if Path(path).name == f"{key}.json"]
    if not found:  # read, then refused on admission
        frame, refused = load_run(run)
        assert key not in set(frame["key"])
        found = [why for path, why in refused if Path(path).name == f"{key}.json"]
    (why,) = found
    assert "\n" not in why and len(why) < 400  # one line, a few hundred characters at most
    return why


def test_a_consistent_task_part_is_read(tmp_path: Path) -> None:
    write_raw(tmp_path, "good", tasks=[good_task()])
    rows, bad = read_rows(tmp_path)
    assert bad == [] and [r.key for r in rows] == ["good"]


@pytest.mark.parametrize(
    ("task", "field", "cause"),
    [
        # a task accuracy of −0.5: never a share
        (good_task(score=-0.5), "tasks.0.score", "greater than or equal to 0"),
        (good_task(unit_rate=1.5), "tasks.0.unit_rate", "less than or equal to 1"),
        (good_task(json_valid=float("nan")), "tasks.0.json_valid", "finite number"),
        (good_task(ref_rate=float("inf")), "tasks.0.ref_rate", "finite number"),
        (good_task(diff=-1.5), "tasks.0.diff", "greater than or equal to -1"),
        (good_task(paired_units=-3), "tasks.0.paired_units", "greater than or equal to 0"),
        (good_task(confusion=[[200, 0], [-1, 201]]), "tasks.0.confusion.1.0", "greater than"),
    ],
)
def test_a_task_figure_out_of_its_range_is_unreadable_by_field(
    tmp_path: Path, task: dict[str, Any], field: str, cause: str
) -> None:
    write_raw(tmp_path, "bad", tasks=[task])
    why = why_unreadable(tmp_path, "bad")
    assert why.startswith(field + ":") and cause in why


@pytest.mark.parametrize(
    ("task", "cause"),
    [
        # a drop of 0.2 outside its own interval [0.01, 0.05]: once gated as a pass
        (
            good_task(diff=0.2, diff_ci90_low=0.01, diff_ci90_high=0.05),
            "diff 0.2 lies outside its own 90 % interval [0.01, 0.05]",
        ),
        (
            good_task(diff=0.03, diff_ci90_low=0.05, diff_ci90_high=0.01),
            "diff_ci90_low 0.05 is above diff_ci90_high 0.01",
        ),
        # ref_rate 0.5 − a candidate rate in [0, 1] lies in [−0.5, 0.5]: 0.7 is none of them
        (
            good_task(
                ref_rate=0.5, diff=0.7, diff_ci90_low=0.6, diff_ci90_high=0.8, paired_units=300
            ),
            "diff 0.7 is not ref_rate 0.5 minus a rate in [0, 1]",
        ),
        (good_task(diff=None), "paired figures without diff"),
        (good_task(paired_units=401), "paired_units 401 is above units 400"),
        (good_task(units=399, paired_units=399), "units 399 ≠ items 400"),
        (good_task(unit_rate=0.5), "unit_rate 0.5 ≠ score 1"),
        # every unit paired: diff = ref_rate − unit_rate = 1 − 0.9 = 0.1, not 0
        (
            good_task(score=0.9, unit_rate=0.9, confusion=[[180, 20], [20, 180]]),
            "diff 0 ≠ ref_rate 1 − unit_rate 0.9",
        ),
        (good_task(items=401, units=401, paired_units=400), "add up to 400, not items 401"),
        (good_task(worst_category="maybe"), "worst_category 'maybe' is none of its categories"),
        (good_task(worst_diff=0.01, worst_ci90_high=0.02), "not those of category 'no'"),
        (good_task(confusion=[[200, 0], [0, 199]]), "confusion counts add up to 399"),
        (good_task(confusion=[[100, 100], [0, 200]]), "diagonal gives accuracy 0.75"),
        (good_task(confusion=[[400]]), "confusion is not 2 × 2"),
        (good_task(labels=None), "confusion without labels"),
    ],
)
def test_a_task_part_that_contradicts_itself_is_unreadable(
    tmp_path: Path, task: dict[str, Any], cause: str
) -> None:
    write_raw(tmp_path, "bad", tasks=[task])
    why = why_unreadable(tmp_path, "bad")
    assert why.startswith("tasks.0:") and "'snips-intent'" in why
    assert cause in why


def test_a_category_outside_its_own_interval_is_named(tmp_path: Path) -> None:
    task = good_task()
    task["categories"][1].update(diff=0.3, diff_ci90_low=0.0, diff_ci90_high=0.1)
    write_raw(tmp_path, "bad", tasks=[task])
    why = why_unreadable(tmp_path, "bad")
    assert why.startswith("tasks.0.categories.1:")
    assert "category 'yes': diff 0.3 lies outside its own 90 % interval [0, 0.1]" in why


def test_a_negative_accuracy_is_never_published(tmp_path: Path) -> None:
    write_raw(tmp_path, "bad", tasks=[good_task(score=-0.5)])
    write_raw(tmp_path, "good", tasks=[good_task()])
    result = aggregate_run(tmp_path)
    assert set(result.points["key"]) == {"good"}
    ((path, why),) = result.unreadable
    assert Path(path) == point_path(tmp_path, "bad") and "tasks.0.score" in why


# --- the quality part and the reference claim (harness.results.admission) --------------------


def run_of(tmp_path: Path, extra: list[ResultRow]) -> Path:
    """A run of one reference (ppl 181) and one bnb-int8 row, with its manifest, plus ``extra``."""
    own = [
        F.reference(key="ref", group=REF_GROUP, provenance=PROV, **F.quality(181.0, 181.0)),
        F.row(key="int8", group="tiny-llama|transformers|bnb-int8|kv=auto|cuda",
              quantization="bnb-int8", provenance=PROV, **F.quality(181.1, 181.0)),
    ]  # fmt: skip
    run = F.write_run(tmp_path / "run-a", [*own, *extra])
    F.write_manifest(run, [*own, *extra])
    return run


def test_an_adapter_row_claiming_to_be_the_reference_is_refused(tmp_path: Path) -> None:
    """The audit's case: a LoRA row saying is_reference, ppl 7,907 against the reference's 181,
    once admitted and passed. Refused even under --allow-mixed: it contradicts itself."""
    claim = F.row(key="lora", is_reference=True, adapter="/adapters/lora",
                  group=REF_GROUP, provenance=PROV, **F.quality(7907.0, 7907.0))  # fmt: skip
    run = run_of(tmp_path, [claim])
    why = why_unreadable(run, "lora")
    assert why.startswith("is_reference with adapter '/adapters/lora'")
    for mixed in (False, True):
        result = aggregate_run(run, F.tariffs(), allow_mixed=mixed)
        points = result.points.set_index("key")
        assert "lora" not in points.index
        assert points.loc["int8", "ppl_ref"] == 181.0  # never the median of 181 and 7,907


@pytest.mark.parametrize(
    ("overrides", "cause"),
    [
        ({"weights": "random"}, "is_reference on random weights"),
        (
            {
                "dnll_vs_ref": 0.5,
                "dnll_ci90_low": 0.4,
                "dnll_ci90_high": 0.6,
                "dnll_ci_low": 0.3,
                "dnll_ci_high": 0.7,
            },
            "is_reference with dnll_vs_ref 0.5: the reference against itself is 0",
        ),
        # ARC-Easy against itself dropping 0.1: 0.6 − 0.5, every one of 100 items paired
        (
            {
                "tasks": [
                    TaskScore(
                        name="arc-easy",
                        kind="choice",
                        items=100,
                        units=100,
                        score=0.5,
                        unit_rate=0.5,
                        ref_rate=0.6,
                        diff=0.1,
                        diff_ci90_low=0.05,
                        diff_ci90_high=0.15,
                        paired_units=100,
                    )
                ]
            },
            "is_reference with task arc-easy's diff 0.1",
        ),
    ],
)
def test_a_reference_claim_the_rule_could_never_make_is_refused(
    tmp_path: Path, overrides: dict[str, Any], cause: str
) -> None:
    claim = F.reference(key="claim", group=REF_GROUP, provenance=PROV, **F.quality(181.0, 181.0))
    run = run_of(tmp_path, [claim.model_copy(update=overrides)])
    assert cause in why_unreadable(run, "claim")


def test_the_reference_configuration_includes_weights_and_adapter() -> None:
    """Two checkpoint references and one on random weights: the third is another configuration
    (under --allow-mixed, where the claim's own check is what refuses it, this is the second)."""
    from harness.results.admission import reference_problems

    rows = [
        F.reference(key="a"),
        F.reference(key="b"),
        F.reference(key="c").model_copy(update={"adapter": "/x/lora"}),
    ]
    problems = reference_problems(rows)
    assert list(problems) == [2]
    assert "with adapter /x/lora" in problems[2] and "transformers/none/auto" in problems[2]


@pytest.mark.parametrize(
    ("overrides", "cause"),
    [
        # ΔNLL 0.02 outside its own 90 % interval [0.001, 0.005] (a drop once shown as a pass)
        (
            {
                "dnll_vs_ref": 0.02,
                "dnll_ci90_low": 0.001,
                "dnll_ci90_high": 0.005,
                "dnll_ci_low": 0.0,
                "dnll_ci_high": 0.03,
            },
            "dnll_vs_ref 0.02 lies outside its own interval [dnll_ci90_low 0.001",
        ),
        (
            {"dnll_ci90_low": 0.006, "dnll_ci90_high": 0.001, "dnll_vs_ref": 0.003},
            "dnll_ci90_low 0.006 is above dnll_ci90_high 0.001",
        ),
        (
            {
                "dnll_vs_ref": 0.003,
                "dnll_ci90_low": 0.0,
                "dnll_ci90_high": 0.006,
                "dnll_ci_low": 0.001,
                "dnll_ci_high": 0.005,
            },
            "the ΔNLL 90 % interval [0, 0.006] is not inside its 95 % one [0.001, 0.005]",
        ),
        # exp(4.6) = 99.484…, not 181.1
        ({"nll_mean": 4.6}, "ppl 181.1 ≠ exp(nll_mean 4.6) = 99.48"),
        (
            {"ppl_ci_low": 190.0, "ppl_ci_high": 200.0},
            "ppl 181.1 lies outside its own interval [ppl_ci_low 190",
        ),
    ],
)
def test_a_quality_part_that_contradicts_itself_is_refused(
    tmp_path: Path, overrides: dict[str, Any], cause: str
) -> None:
    bad = F.row(key="bad", group="tiny-llama|transformers|bnb-int8|kv=auto|cuda",
                quantization="bnb-int8", provenance=PROV, **F.quality(181.1, 181.0))  # fmt: skip
    run = run_of(tmp_path, [bad.model_copy(update=overrides)])
    why = why_unreadable(run, "bad")
    assert cause in why


def legacy_row(run: Path, key: str, **arc: float) -> None:
    """A row file as a run before ARC was a task wrote it: its ARC figures in arc_* fields."""
    row = F.row(key=key, group="tiny-llama|transformers|bnb-int8|kv=auto|cuda",
                quantization="bnb-int8", provenance=PROV, **F.quality(181.1, 181.0))  # fmt: skip
    data = {**row.model_dump(mode="json", exclude={"tasks"}), **arc}
    (run / "points" / f"{key}.json").write_text(json.dumps(data))


def test_an_earlier_run_s_arc_fields_are_read_as_the_arc_easy_task_and_checked_as_one(
    tmp_path: Path,
) -> None:
    run = run_of(tmp_path, [])
    paired = {"arc_items": 100, "arc_paired_items": 100, "arc_diff_ci90_low": 0.05}
    legacy_row(run, "old", arc_acc=0.5, arc_acc_norm=0.55, arc_diff=0.1,
               arc_diff_ci90_high=0.15, **paired)  # fmt: skip
    # every item paired: the reference's accuracy is arc_diff + arc_acc = 0.3 + 0.8 = 1.1
    legacy_row(run, "impossible", arc_acc=0.8, arc_diff=0.3, arc_diff_ci90_high=0.4, **paired)
    rows, _ = read_rows(run)
    (old,) = [r for r in rows if r.key == "old"]
    assert old.tasks is not None
    (arc,) = old.tasks
    assert (arc.name, arc.kind, arc.items, arc.units) == ("arc-easy", "choice", 100, 100)
    assert (arc.score, arc.acc_norm, arc.diff, arc.paired_units) == (0.5, 0.55, 0.1, 100)
    assert arc.ref_rate == pytest.approx(0.6)  # 0.1 + 0.5
    assert [c.category for c in arc.categories] == ["all"] and arc.worst_category == "all"
    assert "ref_rate" in why_unreadable(run, "impossible")


def test_a_consistent_quality_part_with_its_nll_is_admitted(tmp_path: Path) -> None:
    good = F.row(key="good", group="tiny-llama|transformers|bnb-int8|kv=auto|cuda",
                 quantization="bnb-int8", provenance=PROV, nll_mean=math.log(181.1),
                 **F.quality(181.1, 181.0), **F.arc(0.6, 2, 1, items=100))  # fmt: skip
    run = run_of(tmp_path, [good])
    frame, bad = load_run(run)
    assert bad == [] and "good" in set(frame["key"])


def test_the_task_scores_the_metrics_write_are_admitted(tmp_path: Path) -> None:
    """What harness.tasks.metrics.summarize writes holds every check (a partial pairing too)."""
    from harness.tasks import metrics
    from harness.tasks.spec import TaskItem, TaskSpec

    labels = ("yes", "no")
    items = tuple(TaskItem(f"i{k}", labels[k % 2], {"text": "t"}, label=labels[k % 2])
                  for k in range(10))  # fmt: skip
    task = TaskSpec(name="t", kind="classify", prompt="{text}", scored=items, labels=labels)
    # the reference right on all but item 9; the candidate wrong on items 0 and 1 too
    ref = metrics.outcome_of(task, [[0.0, -1.0] if (k % 2 == 0) != (k == 9) else [-1.0, 0.0]
                                        for k in range(10)])  # fmt: skip
    cand = metrics.outcome_of(task, [[0.0, -1.0] if (k % 2 == 0) != (k in (0, 1, 9))
                                         else [-1.0, 0.0] for k in range(10)])  # fmt: skip
    half = TaskSpec(name="t", kind="classify", prompt="{text}", scored=items[:6], labels=labels)
    part = metrics.outcome_of(half, [[0.0, -1.0] if k % 2 == 0 else [-1.0, 0.0]
                                         for k in range(6)])  # fmt: skip
    scores = [
        metrics.summarize("t", task, cand, ref),
        metrics.summarize("t", half, part, ref),
        metrics.summarize("t", task, cand, None),
    ]
    full = scores[0]
    # 9 of 10 right on the reference, 7 of 10 on the candidate: a drop of 0.2 on 10 paired
    assert (full.ref_rate, full.unit_rate, full.paired_units) == (0.9, 0.7, 10)
    assert full.diff == pytest.approx(0.2)
    assert scores[1].paired_units == 6 and scores[2].diff is None
    run = F.write_run(tmp_path, [F.row(tasks=[s]) for s in scores])
    rows, bad = read_rows(run)
    assert bad == [] and len(rows) == 3
    assert TaskScore.model_validate(full.model_dump()) == full
