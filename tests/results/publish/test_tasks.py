"""harness.results.publish.tasks: the tasks section, written once for both pages through their
``Page``: the overview under its class's verdict, the method, then the categories; nothing for a
run that scored no task."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pandas as pd

from harness.measure.verdict import METHOD
from harness.modes.base import Column
from harness.results.aggregate import Aggregate, aggregate
from harness.results.frame import frame_from_rows
from harness.results.publish import tasks as section
from harness.results.publish.analysis import Page
from harness.results.publish.html import HTML_PAGE
from harness.results.publish.markdown import MARKDOWN_PAGE
from harness.results.tasks import task_overview
from tests.factories import row

TASK: dict[str, Any] = {
    "name": "spam", "kind": "classify", "items": 4, "score": 0.75, "ref_rate": 1.0,
    "diff": 0.25, "diff_ci90_low": 0.0, "diff_ci90_high": 0.6, "worst_category": "<b>spam",
    "worst_diff": 0.5, "worst_ci90_low": 0.0, "worst_ci90_high": 0.9,
    "categories": [
        {"category": "<b>spam", "items": 2, "score": 0.5, "diff": 0.5},
        {"category": "ham", "items": 2, "score": 1.0, "diff": 0.0},
    ],
}  # fmt: skip


def with_tasks() -> Aggregate:
    result = aggregate(frame_from_rows([row()]))
    points = result.points.copy()
    points["tasks"] = pd.Series([[TASK]], index=points.index, dtype=object)
    points["tasks_verdict_99"] = ["fail"]
    points["tasks_failed_by_99"] = ["spam"]
    return dataclasses.replace(result, points=points)


def recording_page(tables: list[tuple[str, pd.DataFrame, Sequence[Column]]]) -> Page:
    def table(frame: pd.DataFrame, columns: Sequence[Column], table_id: str) -> str:
        tables.append((table_id, frame, columns))
        return f"table {table_id}"

    return Page(
        heading=lambda level, text: f"h{level} {text}",
        paragraph=lambda text: f"p {text}",
        listing=lambda lead, items: [lead, *items],
        table=table,
    )


def test_the_section_is_the_overview_the_method_and_the_categories_in_order() -> None:
    tables: list[tuple[str, pd.DataFrame, Sequence[Column]]] = []
    out = section.tasks_section(with_tasks(), "99", recording_page(tables))
    assert out == [
        "h2 Tasks (class 99 verdict)", f"p {section.NOTE}", f"p {METHOD['tasks']}",
        "table tasks", "h3 Per category", "table task-categories",
    ]  # fmt: skip
    # one configuration × one task; its two categories
    assert [(t[0], len(t[1])) for t in tables] == [("tasks", 1), ("task-categories", 2)]


def test_every_column_the_section_shows_is_in_its_table() -> None:
    overview = task_overview(with_tasks().points, "99")
    missing = [name for name, _, _ in section.OVERVIEW if name not in overview.columns]
    assert missing == []


def test_both_pages_write_it_escaped_and_a_run_without_tasks_writes_nothing() -> None:
    html = "".join(section.tasks_section(with_tasks(), "99", HTML_PAGE))
    assert "<h2>Tasks (class 99 verdict)</h2>" in html and 'id="task-categories"' in html
    assert "&lt;b&gt;spam" in html and "<b>spam" not in html
    markdown = "".join(section.tasks_section(with_tasks(), "99", MARKDOWN_PAGE))
    assert "## Tasks (class 99 verdict)" in markdown and "### Per category" in markdown
    assert section.tasks_section(aggregate(frame_from_rows([row()])), "99", HTML_PAGE) == []
