"""The task tables of a run (harness.tasks; the figures as ``harness.tasks.metrics`` states them):
per configuration and task the overall figures, the paired change vs the reference next to the
worst category's; per category its score and paired change; and for ``regressions.csv`` the
items a configuration got wrong (extract: with the output's excerpt) or flipped vs the reference.

A configuration is one measured group: its points share their tasks (scored once per group),
so each table has one row per group, not per point.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from harness.results.columns import CONFIGURATION
from harness.results.gate import NOT_MEASURED
from harness.run.store import load_window_tasks
from harness.spec.labels import model_shown
from harness.tasks import metrics
from harness.tasks.kinds import kind_of

# what makes a configuration one group (its points share the tasks scored on its one load)
GROUP = ("run", "model", "revision", "weights", "adapter", "backend", "quantization",
         "kv_cache_dtype", "target")  # fmt: skip
IDENTITY = ("model", *(c for c in CONFIGURATION if c not in ("batch", "context")))
FAILURES_PER_TASK = 50  # items listed per configuration and task


def _groups(points: pd.DataFrame) -> pd.DataFrame:
    """One ok row per measured group that scored tasks."""
    if "tasks" not in points.columns or points.empty:
        return points.iloc[0:0]
    ok = points[(points["status"] == "ok") & points["tasks"].map(lambda t: isinstance(t, list))]
    present = [c for c in GROUP if c in ok.columns]
    return ok.drop_duplicates(present)


def _identity(rec: dict[Any, Any]) -> dict[str, Any]:
    """The configuration's columns, its model with revision and adapter (``model_shown``)."""
    return {c: rec.get(c) for c in IDENTITY if c in rec} | {"model": model_shown(rec)}


def _interval(part: dict[str, Any], prefix: str) -> tuple[Any, Any, Any]:
    return (part.get(prefix), part.get(f"{prefix}_ci90_low"), part.get(f"{prefix}_ci90_high"))


def task_overview(points: pd.DataFrame, quality_class: str = "99") -> pd.DataFrame:
    """One row per (configuration, task): overall score, macro-F1, JSON validity, required-field
    presence, field P/R/F1, the paired change [90 % CI] and the worst category's, the tasks
    verdict of the class and what failed it."""
    rows = []
    suffix = quality_class.replace(".", "_")
    for rec in _groups(points).to_dict(orient="records"):
        for task in rec["tasks"]:
            worst = (task.get("worst_diff"), task.get("worst_ci90_low"),
                     task.get("worst_ci90_high"))  # fmt: skip
            rows.append({
                **_identity(rec),
                "task": task["name"], "task_kind": task["kind"], "task_items": task["items"],
                "task_score": task.get("score"), "macro_f1": task.get("macro_f1"),
                "json_valid": task.get("json_valid"),
                "required_present": task.get("required_present"),
                "field_precision": task.get("field_precision"),
                "field_recall": task.get("field_recall"), "field_f1": task.get("field_f1"),
                "task_change_with_ci": _interval(task, "diff"),
                "worst_category": task.get("worst_category"), "worst_change_with_ci": worst,
                "tasks_verdict": _task_verdict(task, rec.get(f"tasks_verdict_{suffix}")),
                "tasks_failed_by": rec.get(f"tasks_failed_by_{suffix}") or "",
            })  # fmt: skip
    return pd.DataFrame(rows)


def _task_verdict(task: dict[str, Any], verdict: Any) -> Any:
    """The configuration's tasks verdict, or why this task was not compared with the reference
    (no paired figures: it left the configuration undecided, ``harness.results.gate``)."""
    if task.get("diff") is None or task.get("ref_rate") is None:
        return f"{NOT_MEASURED}: no item ids paired with the reference's"
    return verdict


def task_categories(points: pd.DataFrame) -> pd.DataFrame:
    """One row per (configuration, task, category): items, score (accuracy; extract: field
    F1), the paired change [90 % CI] vs the reference."""
    rows = []
    for rec in _groups(points).to_dict(orient="records"):
        for task in rec["tasks"]:
            for cat in task.get("categories") or []:
                rows.append({
                    **_identity(rec), "task": task["name"], "category": cat["category"],
                    "task_items": cat["items"], "task_score": cat.get("score"),
                    "task_change_with_ci": _interval(cat, "diff"),
                })  # fmt: skip
    return pd.DataFrame(rows)


def kept_outcomes(run_dir: Path, group: str) -> dict[str, metrics.Outcome]:
    """A group's per-item task results as the run kept them beside its window scores (task name
    → outcome; none when it kept no file or no task)."""
    return metrics.from_arrays(load_window_tasks(run_dir, group) or {})


def task_items(
    own: dict[str, metrics.Outcome], refs: dict[str, metrics.Outcome], config: dict[str, Any]
) -> list[dict[str, Any]]:
    """``regressions.csv``'s task rows of one configuration (its ``kept_outcomes``) against its
    reference's: the items each task's kind lists (``Kind.misses``: for extract every item it
    got wrong, with the output's excerpt and the reference's state; else the items that flipped,
    right → wrong or wrong → right), at most ``FAILURES_PER_TASK`` a task."""
    rows: list[dict[str, Any]] = []
    for name, outcome in own.items():
        ref = refs.get(name)
        ref_right = {} if ref is None else dict(zip(ref.item_id.tolist(), ref.correct.tolist(),
                                                    strict=True))  # fmt: skip
        misses = kind_of(outcome.kind).misses(outcome, ref_right)[:FAILURES_PER_TASK]
        rows += [{**config, "kind": f"task:{name}", "item": f"{name}:{m.item}",
                  "change": m.change, "excerpt": m.excerpt} for m in misses]  # fmt: skip
    return rows
