"""Tariff files: validation with file/line/field, package prices from discounts, the example."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from harness.errors import UserInputError
from harness.spec.tariffs import Package, Tariff, TariffTable, load_tariffs, parse_tariffs

EXAMPLE = Path(__file__).resolve().parents[2] / "tariffs" / "example.yaml"

GOOD = """\
tariffs:
  - provider: Lambda
    gpu: H100
    gpus_per_node: 8
    hourly_usd: 23.92
    source: https://lambda.ai/pricing
    date: 2026-05-01
    example: true
    packages:
      - {days: 3, discount_pct: 8}
      - {days: 30, price_usd: 12000}
"""


def test_example_file_prices_six_gpus_and_a_cpu_node_for_3_7_and_30_days_as_examples() -> None:
    table = load_tariffs(EXAMPLE)
    gpus = {t.gpu for t in table.tariffs}
    six = {"H100-SXM-80GB", "H200-141GB", "A100-SXM-80GB", "L40S", "MI300X", "RTX-4090"}
    assert gpus == six | {"cpu"}
    for tariff in table.tariffs:
        assert tariff.example
        assert tariff.source and tariff.date
        assert sorted(p.days for p in tariff.packages) == [3, 7, 30]
        assert all(p.rule for p in tariff.packages)  # which published rule gave the price
    assert table.note and "example" in table.note.lower()


def test_example_packages_apply_the_published_discounts_to_the_hourly_price() -> None:
    table = load_tariffs(EXAMPLE)
    h100 = next(t for t in table.tariffs if t.gpu == "H100-SXM-80GB")
    price = {p.days: h100.package_price_usd(p) for p in h100.packages}
    # 8 × 2.99 = 23.92 per node-hour; day −8 %, week −10 %, month −20 %
    assert price[3] == pytest.approx(23.92 * 24 * 3 * 0.92)
    assert price[7] == pytest.approx(3616.704)
    assert price[30] == pytest.approx(13777.92)


def test_a_gpu_alias_is_stored_as_its_catalog_name_and_dates_become_text() -> None:
    table = parse_tariffs(GOOD, "t.yaml")
    tariff = table.tariffs[0]
    assert tariff.gpu == "H100-SXM-80GB"
    assert tariff.date == "2026-05-01"
    assert tariff.package_price_usd(tariff.packages[1]) == 12000


def test_package_rows_are_flat_and_carry_the_node_size() -> None:
    rows = parse_tariffs(GOOD, "t.yaml").package_rows()
    assert [r["package_days"] for r in rows] == [3, 30]
    assert rows[0]["gpus_in_package"] == 8
    assert rows[0]["package_price_usd"] == pytest.approx(23.92 * 72 * 0.92)


def _error(text: str) -> UserInputError:
    with pytest.raises(UserInputError) as info:
        parse_tariffs(text, "prices.yaml")
    return info.value


def test_an_unknown_gpu_is_named_with_file_line_field_and_a_suggestion() -> None:
    err = _error(GOOD.replace("gpu: H100", "gpu: H100-SXM-80G"))
    assert err.file == "prices.yaml"
    assert err.line == 3
    assert err.field == "tariffs[0].gpu"
    assert "H100-SXM-80GB" in err.message  # did you mean


def test_an_unknown_field_is_named_with_its_line_and_the_known_ones() -> None:
    err = _error(GOOD.replace("hourly_usd:", "hourly_used:"))
    assert err.line == 5
    assert err.field == "tariffs[0].hourly_used"
    assert "hourly_usd" in err.message


def test_an_unknown_package_field_lists_the_package_fields() -> None:
    err = _error(GOOD.replace("{days: 3, discount_pct: 8}", "{days: 3, discount: 8}"))
    assert err.line == 10
    assert "discount_pct" in err.message and "price_usd" in err.message


def test_a_package_needs_exactly_one_of_price_and_discount() -> None:
    err = _error(
        GOOD.replace("{days: 3, discount_pct: 8}", "{days: 3, discount_pct: 8, price_usd: 1}")
    )
    assert err.line == 10
    assert "exactly one of price_usd or discount_pct" in err.message
    err = _error(GOOD.replace("{days: 3, discount_pct: 8}", "{days: 3}"))
    assert "exactly one" in err.message


def test_a_currency_other_than_usd_is_refused_with_the_choices() -> None:
    err = _error(GOOD.replace("    example: true\n", "    example: true\n    currency: EUR\n"))
    assert err.field == "tariffs[0].currency"
    assert "'EUR' is not allowed" in err.message and "USD" in err.message


def test_two_packages_of_the_same_length_are_refused() -> None:
    err = _error(GOOD.replace("{days: 30, price_usd: 12000}", "{days: 3, price_usd: 12000}"))
    assert "two packages of 3 days" in err.message


def test_negative_prices_and_full_discounts_are_refused() -> None:
    assert "greater than 0" in _error(GOOD.replace("23.92", "-1")).message
    assert _error(GOOD.replace("discount_pct: 8", "discount_pct: 100")).line == 10


def test_bad_yaml_and_wrong_shapes_name_the_file() -> None:
    err = _error("tariffs: [\n  {provider: x\n")
    assert err.file == "prices.yaml" and err.line is not None
    assert "expected a mapping" in _error("- a\n- b\n").message
    assert _error("{}\n").field == "tariffs"


def test_a_missing_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match="tariff file not found"):
        load_tariffs(tmp_path / "nope.yaml")


def test_models_can_be_built_in_code() -> None:
    tariff = Tariff(
        provider="p",
        gpu="L40S",
        hourly_usd=1.4,
        source="s",
        date="2026-03",
        packages=[Package(days=7, discount_pct=10)],
    )
    assert tariff.package_price_usd(tariff.packages[0]) == pytest.approx(1.4 * 24 * 7 * 0.9)
    assert tariff.label == "p L40S×1"


def test_electricity_and_purchase_price_are_optional_and_read_strictly() -> None:
    text = "electricity_usd_per_kwh: 0.15\n" + GOOD.replace(
        "    example: true\n", "    example: true\n    purchase_usd: 250000\n"
    )
    table = parse_tariffs(text, "prices.yaml")
    assert table.electricity_usd_per_kwh == 0.15
    assert table.tariffs[0].purchase_usd == 250000
    assert parse_tariffs(GOOD).electricity_usd_per_kwh is None  # older files still read


def test_electricity_prices_out_of_bounds_or_as_text_are_named() -> None:
    for bad, says in (("-0.1", "greater than 0"), ("11", "less than or equal to 10"),
                      ('"0.15"', "valid number")):  # fmt: skip
        err = _error(f"electricity_usd_per_kwh: {bad}\n" + GOOD)
        assert err.file == "prices.yaml" and err.line == 1
        assert err.field == "electricity_usd_per_kwh" and says in err.message, err.message
    err = _error(GOOD.replace("    example: true\n", "    example: true\n    purchase_usd: 0\n"))
    assert err.field == "tariffs[0].purchase_usd" and err.line == 9


# --- imported rows: spot's restart charge, the spread of a card's offers (issue 48) ------------


def spot_h100(**extra: object) -> Tariff:
    fields: dict[str, object] = {
        "provider": "runpod", "gpu": "H100-SXM-80GB", "hourly_usd": 1.75, "source": "fixture",
        "date": "2026-12-07", "basis": "spot", "interruptions_per_day": 2.0, "restart_s": 900.0,
        "packages": [Package(days=7, discount_pct=10)],
    }  # fmt: skip
    fields.update(extra)
    return Tariff.model_validate(fields)


def test_a_spot_package_is_dearer_than_its_bare_price_by_the_stated_restart_charge() -> None:
    spot = spot_h100()
    # per hour: 2 interruptions/day ÷ 24 × 900 s ÷ 3600 × 1.75 $/h = 0.875 ÷ 24 = 0.0364583 $/h
    assert spot.spot_restart_usd_per_hour() == pytest.approx(0.875 / 24)
    # 7 days: 14 interruptions × 0.25 h × 1.75 $/h = 6.125 $; bare 1.75 × 24 × 7 × 0.9 = 264.6 $
    assert spot.spot_restart_usd(7) == pytest.approx(6.125)
    assert spot.package_price_usd(spot.packages[0]) == pytest.approx(264.6 + 6.125)
    (row,) = TariffTable(tariffs=[spot]).package_rows()
    assert row["spot_restart_usd"] == pytest.approx(6.125)
    assert row["package_price_usd"] == pytest.approx(270.725)
    assert row["tariff_basis"] == "spot"


def test_a_spot_tariff_without_its_interruption_rate_is_refused() -> None:
    with pytest.raises(ValidationError, match="states interruptions_per_day and restart_s"):
        spot_h100(interruptions_per_day=None)
    with pytest.raises(ValidationError, match="for basis: spot only"):
        spot_h100(basis="on-demand")


def test_offers_of_one_card_differing_in_region_or_basis_are_separate_tariffs() -> None:
    on_demand = spot_h100(basis="on-demand", interruptions_per_day=None, restart_s=None)
    TariffTable(tariffs=[on_demand, spot_h100()])  # same provider and card, two bases: fine
    with pytest.raises(ValidationError, match="repeats tariffs"):
        TariffTable(tariffs=[spot_h100(), spot_h100(hourly_usd=1.5)])


def test_the_spread_of_a_cards_offers_counts_spot_with_its_restart_charge() -> None:
    offers = [
        spot_h100(),  # 1.75 + 0.875 / 24 = 1.7864583 $/card-h
        spot_h100(basis="on-demand", interruptions_per_day=None, restart_s=None, hourly_usd=2.69),
        spot_h100(basis="on-demand", interruptions_per_day=None, restart_s=None, region="US",
                  gpus_per_node=8, hourly_usd=8 * 2.79),  # 2.79 $/card-h
    ]  # fmt: skip
    spread = TariffTable(tariffs=offers).card_spread()["H100-SXM-80GB"]
    assert spread.offers == 3
    assert spread.usd_min == pytest.approx(1.75 + 0.875 / 24)
    assert spread.usd_median == pytest.approx(2.69)
    assert spread.usd_max == pytest.approx(2.79)
    assert spread.cheapest_offer == "runpod ×1 spot"
