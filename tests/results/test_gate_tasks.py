"""Tasks in the equal-quality gate and the publication: a planted regression on one intent
fails the configuration with that intent named, where the overall metric alone passes it; the
task tables, regressions.csv and the points files carry the tasks."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.atomic import atomic_write_bytes
from harness.measure import verdict
from harness.results.aggregate import aggregate_run
from harness.results.publish import report
from harness.row import ResultRow
from harness.row.tasks import TaskScore
from harness.run.store import load_window_tasks, window_scores_path
from harness.tasks import metrics
from harness.tasks.builtin import SNIPS_INTENTS
from harness.tasks.spec import TaskItem, TaskSpec
from tests import factories as F

PER_INTENT = 1000  # a task large enough that its overall interval can pass class 99
PLANTED = "GetWeather"
FLIPPED = 20  # right → wrong on the planted intent only


def big_intent_task() -> TaskSpec:
    items = tuple(
        TaskItem(f"{intent}-{k:04d}", intent, {"text": "t"}, label=intent)
        for intent in SNIPS_INTENTS
        for k in range(PER_INTENT)
    )
    return TaskSpec(
        name="snips-intent", kind="classify", prompt="{text}", scored=items, labels=SNIPS_INTENTS
    )


def reference_outcome(task: TaskSpec) -> metrics.Outcome:
    """Every 10th item wrong (accuracy 0.9), the rest right."""
    loglik = []
    for n, item in enumerate(task.scored):
        wrong = n % 10 == 9
        predicted = SNIPS_INTENTS[(SNIPS_INTENTS.index(str(item.label)) + wrong) % 7]
        loglik.append([0.0 if label == predicted else -1.0 for label in SNIPS_INTENTS])
    return metrics.outcome_of(task, loglik)


def record(run_dir: Path, group: str, outcome: metrics.Outcome) -> None:
    """A group's per-item file beside its window scores, as the worker keeps it."""
    buffer = io.BytesIO()
    np.savez(
        buffer,
        nll_sum=np.zeros(2),
        tokens=np.full(2, 63),
        **metrics.to_arrays("snips-intent", outcome),
    )
    atomic_write_bytes(window_scores_path(run_dir, group), buffer.getvalue())


def planted(recorded: metrics.Outcome) -> metrics.Outcome:
    """The recorded answers with FLIPPED right items of PLANTED answered wrong on purpose (the
    next intent predicted: the confusion matrix agrees with the accuracy, as the row's schema
    checks)."""
    correct, predicted = recorded.correct.copy(), recorded.predicted.copy()
    right_there = np.flatnonzero((recorded.category == PLANTED) & correct)[:FLIPPED]
    correct[right_there] = False
    wrong = SNIPS_INTENTS[(SNIPS_INTENTS.index(PLANTED) + 1) % len(SNIPS_INTENTS)]
    predicted[right_there] = wrong
    return replace(recorded, correct=correct, predicted=predicted)


def rows_for(run_dir: Path) -> list[ResultRow]:
    task = big_intent_task()
    record(run_dir, "ref", reference_outcome(task))
    stored = metrics.from_arrays(load_window_tasks(run_dir, "ref") or {})["snips-intent"]
    cand = planted(stored)
    record(run_dir, "int8", cand)
    ref_score = metrics.summarize("snips-intent", task, stored, stored)
    cand_score = metrics.summarize("snips-intent", task, cand, stored)
    return [
        F.reference(group="ref", window_tokens=64, **F.quality(100.0), tasks=[ref_score]),
        F.row(
            group="int8",
            quantization="bnb-int8",
            window_tokens=64,
            **F.quality(100.0),
            tasks=[cand_score],
        ),
    ]


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    F.write_run(tmp_path, rows_for(tmp_path))
    return tmp_path


def test_the_overall_metric_alone_would_pass_the_planted_regression(run_dir: Path) -> None:
    (_, cand) = rows_for(run_dir)
    assert cand.tasks is not None
    score: TaskScore = cand.tasks[0]
    assert score.diff == pytest.approx(FLIPPED / (7 * PER_INTENT))
    overall = verdict.Interval(
        score.diff or 0.0,
        score.diff_ci90_low or 0.0,
        score.diff_ci90_high or 0.0,
        float("nan"),
        7 * PER_INTENT,
    )
    margin = verdict.accuracy_margin(verdict.QUALITY_CLASSES["99"], score.ref_rate or 0.0)
    assert verdict.judge("tasks", overall, margin).verdict == "pass"
    assert score.worst_category == PLANTED


@pytest.mark.engine  # the error analysis loads the model's tokenizer (transformers) for excerpts
def test_a_planted_regression_on_one_intent_fails_and_names_it(run_dir: Path) -> None:
    points = aggregate_run(run_dir).points.set_index("group")
    assert points.loc["int8", "tasks_verdict_99"] == "fail"
    assert points.loc["int8", "verdict_99"] == "fail"  # tasks are gated: the configuration fails
    assert not points.loc["int8", "pass_99"]
    failed = points.loc["int8", "tasks_failed_by_99"]
    assert f"category {PLANTED}" in failed and "snips-intent" in failed
    assert points.loc["ref", "verdict_99"] == "pass"  # the reference passes by definition


def test_the_unplanted_configuration_passes_on_its_tasks(tmp_path: Path) -> None:
    task = big_intent_task()
    outcome = reference_outcome(task)
    same = metrics.summarize("snips-intent", task, outcome, outcome)
    F.write_run(
        tmp_path,
        [
            F.reference(group="ref", **F.quality(100.0), tasks=[same]),
            F.row(group="fp16", quantization="fp16", **F.quality(100.0), tasks=[same]),
        ],
    )
    points = aggregate_run(tmp_path).points.set_index("group")
    assert points.loc["fp16", "tasks_verdict_99"] == "pass"
    assert points.loc["fp16", "tasks_failed_by_99"] == ""


@pytest.mark.engine  # the error analysis loads the model's tokenizer (transformers) for excerpts
def test_the_report_names_the_intent_and_regressions_csv_lists_the_flips(run_dir: Path) -> None:
    out = report(run_dir, None)
    readme = (out / "README.md").read_text()
    assert "## Tasks" in readme and f"category {PLANTED}" in readme
    html = (out / "report.html").read_text()
    assert f"category {PLANTED}" in html
    flips = pd.read_csv(out / "regressions.csv")
    mine = flips[flips["kind"] == "task:snips-intent"]
    assert len(mine) == FLIPPED and set(mine["change"]) == {"right_to_wrong"}
    assert mine["item"].str.startswith(f"snips-intent:{PLANTED}-").all()
    assert pd.read_parquet(out / "points.parquet")["tasks"].notna().all()


def test_rows_without_tasks_are_not_measured_on_tasks() -> None:
    from harness.results.aggregate import aggregate
    from harness.results.frame import frame_from_rows

    points = aggregate(
        frame_from_rows([F.reference(**F.quality(100.0)), F.row(**F.quality(100.0))])
    ).points
    assert set(points["tasks_verdict_99"]) == {"not measured"}


def test_compare_shows_each_task_both_runs_scored(tmp_path: Path) -> None:
    from harness.results.compare import compare

    a, b = tmp_path / "a", tmp_path / "b"
    rows_a, rows_b = rows_for(a), rows_for(b)
    F.write_run(a, rows_a)
    F.write_run(b, [rows_b[0], rows_b[0].model_copy(update={"key": "other"})])
    table = compare(a, b, 2.0).table
    mine = table[table["metric"] == "task:snips-intent"]
    assert len(mine) == 1 and mine["method"].tolist() == ["point"]
    score_a = rows_a[0].tasks[0].score  # type: ignore[index]
    assert mine["a"].iloc[0] == pytest.approx(score_a)


def test_a_row_whose_task_share_is_out_of_range_is_unreadable(tmp_path: Path) -> None:
    import json

    from harness.run.store import point_path, read_rows

    # written as a hostile file would hold them: the schema refuses them when read
    bad = {"name": "t", "kind": "classify", "items": 3, "units": 3, "score": 5.0}
    negative = {"name": "t", "kind": "classify", "items": -1, "units": 3, "score": 0.5}
    for key, task in (("bad", bad), ("negative", negative)):
        row = {**json.loads(F.row(key=key).model_dump_json()), "tasks": [task]}
        point_path(tmp_path, key).parent.mkdir(parents=True, exist_ok=True)
        point_path(tmp_path, key).write_text(json.dumps(row))
    rows, unreadable = read_rows(tmp_path)
    assert rows == []
    reasons = sorted(why for _, why in unreadable)
    assert reasons == [
        "tasks.0.items: Input should be greater than or equal to 0",
        "tasks.0.score: Input should be less than or equal to 1",
    ]


def test_compare_cmd_prints_the_task_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.cli.results import compare_cmd

    a, b = tmp_path / "a", tmp_path / "b"
    F.write_run(a, rows_for(a))
    F.write_run(b, rows_for(b))
    compare_cmd(a, b, threshold_pct=2.0)
    out = capsys.readouterr().out
    assert "task:snips-intent: equivalent 2" in out
