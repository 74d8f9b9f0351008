"""Energy in the tables: J/Mtok beside $/Mtok, electricity cost, the rent-vs-own break-even
(each by hand), and what the report says when nothing was measured."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from harness.results import energy as en
from harness.results.aggregate import aggregate
from harness.results.frame import frame_from_rows
from harness.results.publish import report
from harness.spec.tariffs import TariffTable
from tests import factories as F

MEASURED = {"j_per_token_decode": 0.05, "avg_power_w_decode": 700.0, "energy_source": "nvml",
            "energy_j_decode": 6.2, "energy_j_prefill": 0.4}  # fmt: skip


def priced(electricity: float | None, purchase: float | None = None) -> TariffTable:
    return TariffTable(
        tariffs=[F.tariff(purchase_usd=purchase)], electricity_usd_per_kwh=electricity
    )


def test_j_per_mtok_and_electricity_cost_by_hand() -> None:
    frame = frame_from_rows([F.reference(**MEASURED), F.row(quantization="bnb-int8")])
    points = aggregate(frame, priced(0.2)).points
    assert points["j_per_mtok_output"].iloc[0] == pytest.approx(50_000.0)  # 0.05 J × 10⁶
    # 50,000 J ÷ 3.6 × 10⁶ J/kWh × 0.2 $/kWh
    assert points["usd_per_mtok_electricity"].iloc[0] == pytest.approx(50_000 / 3.6e6 * 0.2)
    assert pd.isna(points["j_per_mtok_output"].iloc[1])  # not measured: NaN, never a guess
    assert pd.isna(aggregate(frame, priced(None)).points["usd_per_mtok_electricity"].iloc[0])


def test_cost_rows_carry_j_per_mtok_beside_usd_per_mtok() -> None:
    result = aggregate(frame_from_rows([F.reference(**MEASURED)]), priced(0.2))
    columns = list(result.cost.columns)
    at = columns.index("j_per_mtok_output")
    assert columns.index("usd_per_mtok_output") < at < columns.index("usd_per_mtok_total")
    assert result.cost["j_per_mtok_output"].eq(50_000.0).all()


def test_rent_vs_own_break_even_by_hand() -> None:
    result = aggregate(frame_from_rows([F.reference(**MEASURED)]), priced(0.2, 300_000.0), 0.5)
    cheapest = result.cheapest[result.cheapest["quality_class"] == "99"]
    table = en.rent_vs_own(cheapest, priced(0.2, 300_000.0), 0.5)
    (row,) = table.to_dict(orient="records")
    own = 700 * 8 / 1000 * 0.2  # 1.12 $ per node-hour of electricity at 700 W on 8 cards
    assert row["own_usd_per_hour"] == pytest.approx(own)
    assert row["breakeven_hours"] == pytest.approx(300_000 / (23.92 - own))  # ≈ 13,158 h
    assert row["breakeven_days"] == pytest.approx(300_000 / (23.92 - own) / (24 * 0.5))
    without_purchase = en.rent_vs_own(cheapest, priced(0.2), 0.5)
    assert without_purchase["breakeven_hours"].isna().all()
    assert en.rent_vs_own(cheapest, priced(None), 0.5).empty  # no electricity price: no table


def test_renting_below_the_electricity_never_breaks_even() -> None:
    assert en.breakeven_hours(1000.0, hourly_usd=1.0, own_usd_per_hour=1.5) == float("inf")


def test_the_report_says_why_energy_is_missing(tmp_path: Path) -> None:
    why = "rapl: /sys/class/powercap does not exist (no powercap driver, or a container)"
    F.write_run(tmp_path, [F.reference(energy_unavailable_reason=why)])
    published = report(tmp_path, priced(0.2))
    readme = (published / "README.md").read_text()
    assert "No energy measured on this run" in readme and f"{why} (1 rows)" in readme
    page = (published / "report.html").read_text()
    assert "Energy (device counter)" in page and "/sys/class/powercap does not exist" in page


def test_the_report_shows_measured_energy_and_the_break_even(tmp_path: Path) -> None:
    F.write_run(tmp_path, [F.reference(**MEASURED)])
    published = report(tmp_path, priced(0.2, 300_000.0))
    readme = (published / "README.md").read_text()
    assert "### Rent vs own" in readme and "5e+04" in readme  # J/Mtok, 4 significant digits
    assert f"{300_000 / (23.92 - 1.12):.4g}" in readme


def test_the_cheapest_table_shows_j_per_mtok_beside_the_price(tmp_path: Path) -> None:
    F.write_run(tmp_path, [F.reference(**MEASURED)])
    page = (report(tmp_path, priced(0.2)) / "report.html").read_text()
    start = page.index('id="cheapest"')
    table = page[start : page.index("</table>", start)]
    heads = table[: table.index("</thead>")]
    assert heads.index("$/Mtok out, hourly") < heads.index("J/Mtok out")
    assert 'data-v="50000.0"' in table  # 0.05 J/token × 10⁶
