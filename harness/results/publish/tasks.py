"""The tasks section of both pages (written once, through the page's ``Page``): per configuration
and task the overall figures with the paired drop next to the worst category's and the tasks
verdict (naming what failed it); then every category's score and drop. The figures:
``harness.tasks.metrics``; the verdict: ``harness.measure.verdict.METHOD["tasks"]``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.measure.verdict import METHOD
from harness.modes.base import Column
from harness.results.columns import table_columns
from harness.results.tasks import IDENTITY, task_categories, task_overview

if TYPE_CHECKING:
    from harness.results.aggregate import Aggregate
    from harness.results.publish.analysis import Page

OVERVIEW: list[Column] = table_columns(
    (
        *IDENTITY, "task", "task_items", "task_score", "macro_f1", "json_valid",
        "required_present", "field_f1", "task_change_with_ci", "worst_category",
        "worst_change_with_ci", "tasks_verdict", "tasks_failed_by",
    )
)  # fmt: skip
CATEGORIES: list[Column] = table_columns(
    (*IDENTITY, "task", "category", "task_items", "task_score", "task_change_with_ci")
)
NOTE = (
    "Scores are shares in [0, 1]: accuracy (classify, choice) or field-level exact-match F1 "
    "(extract); JSON valid = outputs whose first line parses as a JSON object; required present "
    "= required fields found in the outputs. A drop is the reference's rate minus the "
    "configuration's on the same units (items; extract: gold fields), with its 90 % Newcombe "
    "interval."
)


def tasks_section(result: Aggregate, quality_class: str, page: Page) -> list[str]:
    """The tasks section, or nothing when the run scored no task."""
    overview = task_overview(result.points, quality_class)
    if overview.empty:
        return []
    return [
        page.heading(2, f"Tasks (class {quality_class} verdict)"),
        page.paragraph(NOTE),
        page.paragraph(METHOD["tasks"]),
        page.table(overview, OVERVIEW, "tasks"),
        page.heading(3, "Per category"),
        page.table(task_categories(result.points), CATEGORIES, "task-categories"),
    ]
