"""Each price's age, the stale flag past the table's threshold, and the console's notes on
stale, example and spot prices (ages counted by hand from the dates)."""

from __future__ import annotations

import datetime as dt

from harness.prices.stale import price_notes
from harness.results.pricing import packages_frame
from harness.spec.tariffs import Package, Tariff, TariffTable

TODAY = dt.date(2026, 12, 7)


def fed(gpu: str, observed_at: str, **extra: object) -> Tariff:
    fields: dict[str, object] = {
        "provider": "runpod", "gpu": gpu, "hourly_usd": 2.0, "source": "fixture",
        "date": observed_at[:10], "observed_at": observed_at, "feed": "gpuhunt-csv",
        "packages": [Package(days=7, discount_pct=10)],
    }  # fmt: skip
    fields.update(extra)
    return Tariff.model_validate(fields)


TABLE = TariffTable(
    tariffs=[fed("H100-SXM-80GB", "2026-11-20T09:00:00Z"), fed("L40S", "2026-12-01T09:00:00Z")]
)


def test_a_price_older_than_the_threshold_is_flagged_stale() -> None:
    frame = packages_frame(TABLE, TODAY)
    # 2026-11-20 → 2026-12-07: 10 days of November left + 7 = 17 days; 2026-12-01 → 6 days
    assert frame["price_age_days"].tolist() == [17, 6]
    assert frame["price_stale"].tolist() == [True, False]  # 17 > 7, 6 ≤ 7
    assert frame["price_read"].tolist() == ["2026-11-20, 17 d, STALE", "2026-12-01, 6 d"]


def test_the_threshold_is_set_in_the_tariff_file() -> None:
    table = TABLE.model_copy(update={"stale_after_days": 30})
    assert packages_frame(table, TODAY)["price_stale"].tolist() == [False, False]  # 17, 6 ≤ 30


def test_the_console_notes_say_stale_and_example_prices() -> None:
    table = TariffTable(tariffs=[*TABLE.tariffs, fed("L4", "2026-12-06T00:00:00Z", example=True)])
    lines = price_notes(table, TODAY)
    assert lines[0].startswith("STALE prices: 1 of 3 tariffs were read more than 7 days ago")
    assert "17 days" in lines[0]
    assert lines[1] == "EXAMPLE prices: 1 of 3 tariffs are examples, not quotes"


def test_a_month_only_date_is_read_as_its_first_day() -> None:
    tariff = fed("L4", "2026-12-01T00:00:00Z").model_copy(
        update={"observed_at": None, "date": "2026-05"}
    )
    # 2026-05-01 → 2026-12-07: 31+30+31+31+30+31 (May-Oct) + 30 (Nov) + 6 = 220 days
    assert tariff.age_days(TODAY) == 220
