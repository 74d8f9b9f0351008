"""harness.results.tasks: the task tables of a run, one row per configuration (a measured
group, not a point) and task, per category, and the items regressions.csv lists."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.atomic import atomic_write_bytes
from harness.results import tasks
from harness.run.store import window_scores_path
from harness.tasks import metrics
from harness.tasks.spec import TaskItem, TaskSpec

SPAM: dict[str, Any] = {
    "name": "spam", "kind": "classify", "items": 100, "score": 0.8, "macro_f1": 0.79,
    "json_valid": None, "ref_rate": 0.85, "diff": 0.05, "diff_ci90_low": -0.01,
    "diff_ci90_high": 0.11, "worst_category": "spam", "worst_diff": 0.1,
    "worst_ci90_low": 0.02, "worst_ci90_high": 0.18,
    "categories": [
        {"category": "spam", "items": 50, "score": 0.7, "diff": 0.1, "diff_ci90_low": 0.02,
         "diff_ci90_high": 0.18},
        {"category": "ham", "items": 50, "score": 0.9, "diff": 0.0, "diff_ci90_low": -0.05,
         "diff_ci90_high": 0.05},
    ],
}  # fmt: skip
# a task the reference's items could not be paired with: no diff, no reference rate
UNPAIRED: dict[str, Any] = {"name": "other", "kind": "choice", "items": 10, "score": 0.5}


def point(**kw: Any) -> dict[str, Any]:
    return {
        "run": "r", "model": "m/x", "revision": "main", "weights": "checkpoint", "adapter": None,
        "backend": "vllm", "quantization": "fp8", "kv_cache_dtype": "auto", "target": "cuda",
        "layout": None, "speculative": None, "batch": 1, "context": 128, "status": "ok",
        "tasks": [SPAM, UNPAIRED], "tasks_verdict_99": "fail", "tasks_failed_by_99": "spam",
        "tasks_verdict_99_9": "fail", "tasks_failed_by_99_9": "spam, other", **kw,
    }  # fmt: skip


def points() -> pd.DataFrame:
    return pd.DataFrame(
        [
            point(),
            point(batch=4),  # the same group at another batch: its tasks were scored once
            point(revision="v2", tasks_verdict_99="pass", tasks_failed_by_99=""),  # a group
            point(quantization="int4", status="oom", tasks=None),  # no tasks: left out
            point(quantization="int8", tasks=None),
        ]
    )


def test_the_overview_has_one_row_per_group_and_task() -> None:
    found = tasks.task_overview(points())
    # two groups (main and v2) × two tasks; the second batch of a group adds no row
    assert list(zip(found["model"], found["task"], strict=True)) == [
        ("m/x", "spam"), ("m/x", "other"), ("m/x@v2", "spam"), ("m/x@v2", "other"),
    ]  # fmt: skip
    first = found.iloc[0]
    assert (first["task_items"], first["task_score"], first["macro_f1"]) == (100, 0.8, 0.79)
    assert first["task_change_with_ci"] == (0.05, -0.01, 0.11)
    assert first["worst_category"] == "spam" and first["worst_change_with_ci"] == (0.1, 0.02, 0.18)
    assert (first["tasks_verdict"], first["tasks_failed_by"]) == ("fail", "spam")
    assert found.iloc[2]["tasks_verdict"] == "pass" and found.iloc[2]["tasks_failed_by"] == ""
    assert "batch" not in found.columns and "context" not in found.columns


def test_a_task_without_paired_figures_says_why_it_is_not_measured() -> None:
    other = tasks.task_overview(points()).iloc[1]
    assert other["tasks_verdict"] == "not measured: no item ids paired with the reference's"


def test_the_class_picks_its_own_verdict_columns() -> None:
    found = tasks.task_overview(points(), "99.9")
    assert found.iloc[0]["tasks_failed_by"] == "spam, other"


def test_categories_one_row_each_with_their_change() -> None:
    found = tasks.task_categories(points())
    # 2 groups × the 2 categories of spam (other has none)
    assert len(found) == 4
    assert list(found["category"][:2]) == ["spam", "ham"]
    assert found.iloc[1]["task_change_with_ci"] == (0.0, -0.05, 0.05)


def test_no_tasks_column_or_no_rows_is_an_empty_table() -> None:
    assert tasks.task_overview(pd.DataFrame({"status": ["ok"]})).empty
    assert tasks.task_categories(points().iloc[0:0]).empty


TASK = TaskSpec(
    name="spam", kind="classify", prompt="{text}", labels=("spam", "ham"),
    scored=tuple(TaskItem(f"i{n}", lab, {"text": "t"}, label=lab)
                 for n, lab in enumerate(["spam", "ham", "spam", "ham"])),
)  # fmt: skip


def save(run_dir: Path, group: str, predicted: list[str]) -> None:
    """A group's per-item file as the worker keeps it (a label's log-likelihood 0, else −1)."""
    loglik = [[0.0 if label == p else -1.0 for label in ("spam", "ham")] for p in predicted]
    outcome = metrics.outcome_of(TASK, loglik)
    buffer = io.BytesIO()
    arrays: dict[str, Any] = {"nll_sum": np.zeros(2), "tokens": np.full(2, 63)}
    arrays.update(metrics.to_arrays("spam", outcome))
    np.savez(buffer, **arrays)
    atomic_write_bytes(window_scores_path(run_dir, group), buffer.getvalue())


def test_the_items_that_flipped_against_the_reference_are_listed(tmp_path: Path) -> None:
    save(tmp_path, "ref", ["spam", "ham", "spam", "spam"])  # right, right, right, wrong
    save(tmp_path, "cand", ["ham", "ham", "spam", "ham"])  # wrong, right, right, right
    own, refs = tasks.kept_outcomes(tmp_path, "cand"), tasks.kept_outcomes(tmp_path, "ref")
    found = tasks.task_items(own, refs, {"model": "m/x"})
    # i0 right → wrong, i3 wrong → right; i1 and i2 agree with the reference
    assert [(r["item"], r["change"]) for r in found] == [
        ("spam:i0", "right_to_wrong"), ("spam:i3", "wrong_to_right"),
    ]  # fmt: skip
    assert all(r["kind"] == "task:spam" and r["model"] == "m/x" for r in found)
    assert found[0]["excerpt"] == "predicted ham, gold spam"
    # without the reference's results no item flipped: a classify task lists none
    assert tasks.task_items(own, {}, {}) == []
    assert tasks.kept_outcomes(tmp_path, "nothing") == {}  # no file: no task
    assert tasks.task_items({}, refs, {}) == []
