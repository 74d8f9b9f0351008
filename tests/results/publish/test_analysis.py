"""harness.results.publish.analysis: the sections both pages carry (energy, the error analysis
against the reference), written through each page's own pieces, the modes' report parts in the
registry's order, and regressions.csv's frame."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import pandas as pd
import pytest

from harness.modes.base import Column
from harness.modes.serving import report as serving_report
from harness.modes.training import report as training_report
from harness.results import regressions as reg
from harness.results.aggregate import Aggregate, aggregate
from harness.results.frame import frame_from_rows
from harness.results.publish import analysis
from harness.results.publish.analysis import Page
from harness.spec.tariffs import TariffTable
from tests.factories import row, tariff

Drawn = list[tuple[str, pd.DataFrame]]


def page(drawn: Drawn) -> Page:
    def table(frame: pd.DataFrame, columns: Sequence[Column], table_id: str) -> str:
        drawn.append((table_id, frame))
        return f"table {table_id}"

    return Page(
        heading=lambda level, text: f"h{level} {text}",
        paragraph=lambda text: f"p {text}",
        listing=lambda lead, items: [f"list {lead}", *items],
        table=table,
    )


def result_of(*rows: object, tariffs: TariffTable | None = None) -> Aggregate:
    return aggregate(frame_from_rows(list(rows)), tariffs)  # type: ignore[arg-type]


def test_the_modes_report_parts_in_the_registrys_order() -> None:
    # offline has no report part of its own; serving then training, as the registry lists them
    assert analysis.mode_reports() == [serving_report.REPORT, training_report.REPORT]


def test_no_energy_measured_lists_why_and_says_there_is_no_electricity_price() -> None:
    drawn: Drawn = []
    result = result_of(row(energy_unavailable_reason="no counter"), row(status="oom"))
    out = analysis.energy_section(result, None, "99", page(drawn))
    assert out[:3] == [
        "h2 Energy (device counter)",
        "list No energy measured on this run",
        "no counter (1 rows)",
    ]  # fmt: skip  (the oom row is not a measured one)
    assert out[3:5] == [f"p {line}" for line in analysis.ENERGY_RULES]
    assert out[5].startswith("p No electricity_usd_per_kwh in the tariff file")
    assert drawn == [] and len(out) == 6  # no table, no rent vs own


def test_measured_energy_is_a_table_and_an_electricity_price_gives_rent_vs_own() -> None:
    drawn: Drawn = []
    table = TariffTable(tariffs=[tariff(purchase_usd=250_000.0)], electricity_usd_per_kwh=0.2)
    measured = row(is_reference=True, j_per_token_decode=0.002, avg_power_w_decode=700.0,
                   energy_source="nvml")  # fmt: skip
    out = analysis.energy_section(result_of(measured, tariffs=table), table, "99", page(drawn))
    assert "p Electricity: $0.2 per kWh (tariff file)." in out
    assert out[-2:] == ["h3 Rent vs own", "table rent-vs-own"]
    (energy, rows), (rent, owned) = drawn
    assert (energy, rent) == ("energy", "rent-vs-own")
    # 0.002 J/token × 1e6 = 2,000 J/Mtok; ÷ 3.6e6 J/kWh × $0.2 = $0.000111 per Mtok
    assert rows["j_per_mtok_output"].tolist() == [pytest.approx(2000.0)]
    assert rows["usd_per_mtok_electricity"].tolist() == [pytest.approx(2000 / 3.6e6 * 0.2)]
    # 700 W × 8 cards ÷ 1000 × $0.2 = $1.12 an hour; 250,000 ÷ (23.92 − 1.12) = 10,964.9 hours
    assert owned["own_usd_per_hour"].tolist() == [pytest.approx(1.12)]
    assert owned["breakeven_hours"].tolist() == [pytest.approx(250_000 / 22.8)]


def test_without_a_comparison_the_error_analysis_says_so_on_both_pages() -> None:
    result = result_of(row())
    assert analysis.compared(result) is None
    assert analysis.regressions_html(result, lambda *a: "") == [
        "<h2>Error analysis against the reference</h2>",
        '<p class="note">No configuration compared with a reference here.</p>',
    ]
    assert analysis.regressions_markdown(result, lambda rows: "") == [
        "\n## Error analysis against the reference\n",
        "_No configuration compared with a reference here._\n",
    ]
    assert list(analysis.regressions_frame(result).columns) == reg.ITEM_COLUMNS
    empty = reg.Regressions.empty()
    assert list(empty.summary.columns) == reg.SUMMARY_COLUMNS
    assert list(empty.flips.columns) == reg.FLIPS_COLUMNS


def comparison(items: int, tasks: int = 1) -> reg.Regressions:
    summary = pd.DataFrame([{"model": "m", "quantization": "fp8", "windows_paired": 4,
                             "note": "n"}])  # fmt: skip
    flips = pd.DataFrame([{"model": "m", "quantization": "fp8", "task": f"t{k}",
                           "units_paired": 6, "right_to_wrong": 2, "wrong_to_right": 1,
                           "mcnemar_p_exact": 1.0} for k in range(tasks)])  # fmt: skip
    flipped = pd.DataFrame([{"model": "m", "item": f"t0:{i}", "change": "right_to_wrong"}
                            for i in range(items)])  # fmt: skip
    return reg.Regressions(summary, flips, flipped)


def test_a_comparison_is_its_summary_its_flips_and_its_items_on_both_pages() -> None:
    result = dataclasses.replace(result_of(row()), regressions=comparison(40, tasks=60))
    drawn: list[tuple[str, list[str]]] = []

    def html_table(frame: pd.DataFrame, columns: Sequence[Column], table_id: str) -> str:
        drawn.append((table_id, [name for name, _, _ in columns]))
        return ""

    html = analysis.regressions_html(result, html_table)
    assert [table_id for table_id, _ in drawn] == ["regressions", "regression-flips",
                                                   "regression-items"]  # fmt: skip
    assert html[3] == "<h3>Flips per task</h3>"
    (_, summary_columns), (_, flips_columns), _ = drawn
    assert "arc_items_paired" not in summary_columns and "right_to_wrong" not in summary_columns
    assert flips_columns[-5:] == ["task", "units_paired", "right_to_wrong", "wrong_to_right",
                                  "mcnemar_p_exact"]  # fmt: skip
    assert "Test on each task&#x27;s flips: McNemar exact" in html[1] and "ARC" not in html[1]
    assert f"{reg.TOP_WINDOWS} windows with the largest ΔNLL" in html[1]
    tables: list[list[dict[str, str]]] = []

    def md_table(rows: list[dict[str, str]]) -> str:
        tables.append(rows)
        return ""

    markdown = analysis.regressions_markdown(result, md_table)  # type: ignore[arg-type]
    assert "### Flips per task (first 50)\n" in markdown
    assert "### Flipped items and worst windows (first 30)\n" in markdown
    summary, flips, items = tables
    assert len(flips) == 50 and len(items) == 30  # of 60 tasks' rows and 40 flipped items
    assert flips[0]["task"] == "t0" and flips[0]["units paired"] == "6"
    assert "note" not in summary[0]  # the Markdown summary leaves the note to the HTML page
    assert len(analysis.regressions_frame(result)) == 40


def test_without_a_task_both_scored_there_is_no_flips_table() -> None:
    result = dataclasses.replace(result_of(row()), regressions=comparison(2, tasks=0))
    drawn: list[str] = []

    def html_table(frame: pd.DataFrame, columns: Sequence[Column], table_id: str) -> str:
        drawn.append(table_id)
        return ""

    analysis.regressions_html(result, html_table)
    assert drawn == ["regressions", "regression-items"]
    markdown = analysis.regressions_markdown(result, lambda rows: "")
    assert not any("Flips per task" in part for part in markdown)


def test_md_rows_format_or_blank_each_cell_up_to_the_limit() -> None:
    frame = pd.DataFrame({"a": ["x", None, "z"], "b": [1.5, math.nan, 3.0]})
    columns: list[Column] = [("a", "A", None), ("b", "B", lambda v: f"{v:.0f}!")]
    # NaN in a column without a format is blank; a format is given every value, NaN included
    assert analysis.md_rows(frame, columns, 2) == [{"A": "x", "B": "2!"}, {"A": "", "B": "nan!"}]
