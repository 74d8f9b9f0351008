"""Before you rent: projection of measured rows, the ranking's price and verdict, the traffic
choice. Expected values by hand in the comments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.errors import UserInputError
from harness.projection import rent, text, traffic_fit
from harness.spec import catalog
from harness.spec.tariffs import parse_tariffs

ROOT = Path(__file__).resolve().parents[2]
H200_ROWS = ROOT / "results/example/h200-2026-11-29/gpu_rows.json"


def projection(
    card: str,
    tok_s: float,
    band: tuple[float, float] = (1.0, 1.0),
    *,
    label: str = "projected (from H200-141GB)",
    setup_s: float = 0.0,
) -> rent.Projection:
    return rent.Projection(
        model="tiny-llama", configuration="c", backend="transformers", quantization="none",
        kv_cache_dtype="auto", batch=8, context=128, output_tokens=16, repeats=1,
        source="H200-141GB", card=card, label=label, decode_tok_s=tok_s,
        decode_band=rent.Band(low=band[0], high=band[1], source="test"), fits=True,
        setup_s=setup_s,
    )  # fmt: skip


TARIFFS = """
tariffs:
  - {provider: P, gpu: L40S, hourly_usd: 100.0, source: s, date: "2026-01",
     packages: [{days: 7, price_usd: 70.0}]}
  - {provider: Q, gpu: H200-141GB, hourly_usd: 100.0, source: s, date: "2026-01",
     packages: [{days: 30, price_usd: 600.0}]}
"""


def test_a_card_projected_onto_itself_is_the_measured_row_exactly() -> None:
    row = json.loads(H200_ROWS.read_text())[0]
    h200 = catalog.gpu("H200-141GB")
    got = rent.project_row(row, h200, rent.Bands([]))
    assert got.label == rent.MEASURED
    assert got.decode_tok_s == row["decode_tok_s"]
    assert got.prefill_tok_s == row["prefill_tok_s"]
    assert got.decode_band == rent.EXACT


def test_decode_projects_by_the_bandwidth_ratio_with_the_shipped_class_band() -> None:
    row = json.loads(H200_ROWS.read_text())[0]
    got = rent.project_row(row, catalog.gpu("L40S"), rent.Bands([]))
    # 237.3472 tok/s × 864 / 4800 GB/s = 42.7225 tok/s
    assert got.decode_tok_s == pytest.approx(row["decode_tok_s"] * 864 / 4800)
    assert got.label == "projected (from H200-141GB)"
    assert got.decode_band is not None
    # ledger.csv, decode, same vendor: [0.8514, 1.1745]; L40S is not one of its cards
    assert (round(got.decode_band.low, 4), round(got.decode_band.high, 4)) == (0.8514, 1.1745)
    assert "no L40S in it" in got.decode_band.source
    assert got.fits and got.largest_batch == 4096  # the tiny model fits the harness's largest
    assert any("overhead-bound" in f for f in got.flags)  # 0.094 % of its roofline


def test_the_band_takes_a_shipped_pair_and_the_mi300x_ledger_for_the_mi300x() -> None:
    band = rent.Bands([]).band("decode", "H100-SXM-80GB", "MI300X")
    # ledger-with-mi300x.csv pair H100 → MI300X: [0.3237, 0.5158], 120 pairs
    assert band is not None
    assert (round(band.low, 4), round(band.high, 4)) == (0.3237, 0.5158)
    assert "with MI300X" in band.source and "120 pairs" in band.source


def test_prefill_has_no_band_where_the_shipped_ledger_has_too_few_keys() -> None:
    # ledger.csv, prefill: 6 keys in every class, fewer than the 9 an 80 % band needs
    assert rent.Bands([]).band("prefill", "H100-SXM-80GB", "L40S") is None
    row = json.loads(H200_ROWS.read_text())[0]
    got = rent.project_row(row, catalog.gpu("L40S"), rent.Bands([]))
    assert got.prefill_tok_s is not None and got.prefill_band is None and got.usable


def test_fp8_weights_are_not_projected_onto_an_a100() -> None:
    row = {**json.loads(H200_ROWS.read_text())[0], "backend": "vllm", "quantization": "fp8"}
    got = rent.project_row(row, catalog.gpu("A100-SXM-80GB"), rent.Bands([]))
    assert "no fp8 tensor units" in got.skipped and not got.usable


def test_the_price_range_comes_from_the_decode_band() -> None:
    table = parse_tariffs(TARIFFS)
    p = projection("L40S", 1000.0, (0.8, 1.25))
    low, central, high = rent.price(p, table.tariffs[0], 7, 1.0)
    # 70 $ ÷ (7 × 24 h) = 0.41667 $/h; ÷ (1000 tok/s × 3600) × 1e6 = 0.11574 $/Mtok
    assert central == pytest.approx(0.115741, rel=1e-5)
    assert low == pytest.approx(0.115741 / 1.25, rel=1e-5)  # 0.09259: the band's high tok/s
    assert high == pytest.approx(0.115741 / 0.8, rel=1e-5)  # 0.14468


def test_robust_when_the_cheapest_upper_bound_is_below_every_other_lower_bound() -> None:
    table = parse_tariffs(TARIFFS)
    # L40S 7-day: 0.41667 $/h at 4000 tok/s ± 10 %: [0.02630, 0.03215] $/Mtok;
    # H200 30-day: 600 ÷ 720 h = 0.8333 $/h at 1000 tok/s (measured): 0.23148 $/Mtok
    ps = [projection("L40S", 4000.0, (0.9, 1.1)),
          projection("H200-141GB", 1000.0, label=rent.MEASURED)]  # fmt: skip
    lines = rent.ranking(ps, table, 1.0)
    seven = lines[("tiny-llama", 7)]
    assert [x.card for x in seven] == ["L40S"]  # only P has a 7-day package
    both = [*seven, *lines[("tiny-llama", 30)]]
    both.sort(key=lambda x: x.usd_per_mtok or 0.0)
    found = rent.verdict(both, ps, table, 1.0)
    assert found is not None and found.robust


def test_overlapping_bands_name_the_rental_that_decides() -> None:
    table = parse_tariffs(TARIFFS)
    # L40S: [0.0579, 0.2315] $/Mtok (1000 tok/s, band 0.5–2); H200 measured 600/720 $/h at
    # 1200 tok/s = 0.19290 $/Mtok: inside the L40S range → decide by renting the L40S
    ps = [projection("L40S", 1000.0, (0.5, 2.0)),
          projection("H200-141GB", 1200.0, label=rent.MEASURED)]  # fmt: skip
    lines = sorted(
        [
            *rent.ranking(ps, table, 1.0)[("tiny-llama", 7)],
            *rent.ranking(ps, table, 1.0)[("tiny-llama", 30)],
        ],
        key=lambda x: x.usd_per_mtok or 0.0,
    )
    found = rent.verdict(lines, ps, table, 1.0)
    assert found is not None and not found.robust
    assert [t.card for t in found.trials] == ["L40S"]  # the measured H200 needs no rental
    trial = found.trials[0]
    # billed per hour: the plan's budget (well under an hour) rounds up to 1 h × 100 $/h
    assert trial.hours < 1 and trial.usd == pytest.approx(100.0)


def test_billing_rounds_up_to_its_unit() -> None:
    assert rent.billed_seconds(5401, "hour") == 7200
    assert rent.billed_seconds(5401, "minute") == 5460  # 91 minutes
    assert rent.billed_seconds(5401, "second") == 5401


def test_utilisation_is_capped_at_one_and_more_nodes_are_rented() -> None:
    table = parse_tariffs(TARIFFS)
    p = projection("H200-141GB", 1000.0, label=rent.MEASURED)
    got = traffic_fit.package_option(table.tariffs[1], 30, p, 2e8)
    # one node: 1000 tok/s × 86,400 s = 8.64e7 a day; 2e8 needs ⌈2.315⌉ = 3 nodes
    assert got.utilisation == 1.0 and got.nodes == 3
    assert got.usd_per_day == pytest.approx(3 * 600 / 30)  # 60 $/day
    assert got.breakeven_utilisation == pytest.approx(600 / (100 * 30 * 24))  # 0.00833


def test_setup_is_paid_in_each_days_billed_hours() -> None:
    text = TARIFFS.replace(
        'hourly_usd: 100.0, source: s, date: "2026-01",\n     packages: [{days: 7',
        "hourly_usd: 2.0, billing: hour, storage_usd_per_day: 0.24, source: s, "
        'date: "2026-01",\n     packages: [{days: 7',
    )
    table = parse_tariffs(text)
    p = projection("L40S", 1000.0, setup_s=1800.0)
    got = traffic_fit.hourly_option(table.tariffs[0], p, 7.2e6)
    # busy 7.2e6 ÷ 1000 = 7200 s, + setup 1800 = 9000 s → 3 h billed × 2 $ = 6 $;
    # stopped 21 of 24 h: 0.24 × 21/24 = 0.21 $ → 6.21 $/day
    assert got.usd_per_day == pytest.approx(6.21)
    assert got.setup_s == 1800.0 and got.nodes == 1


def test_the_choice_flips_from_the_7_to_the_30_day_package_as_traffic_grows() -> None:
    table = parse_tariffs(TARIFFS)
    ps = [projection("L40S", 1000.0), projection("H200-141GB", 4000.0, label=rent.MEASURED)]
    low = traffic_fit.fit_traffic(ps, table, "tiny-llama", 5e7)
    # L40S: 1 node (8.64e7 a day ≥ 5e7) at 70 ÷ 7 = 10 $/day; H200 30-day 20 $/day
    assert (low[0].card, low[0].package, low[0].usd_per_day) == ("L40S", "7 days", 10.0)
    assert low[1].usd_per_day == 20.0 and low[1].package == "30 days"
    high = traffic_fit.fit_traffic(ps, table, "tiny-llama", 2e8)
    # L40S: ⌈2e8 ÷ 8.64e7⌉ = 3 nodes = 30 $/day; H200: 3.456e8 a day, 1 node = 20 $/day
    assert (high[0].card, high[0].package, high[0].usd_per_day) == ("H200-141GB", "30 days", 20.0)
    line = text.choice_line(high, 2e8)
    assert "runner-up L40S (P) 7 days at $30.00/day, 50.0 % dearer" in line


def test_a_billing_unit_outside_the_three_is_one_line_naming_the_field() -> None:
    bad = TARIFFS.replace("hourly_usd: 100.0, source", "hourly_usd: 100.0, billing: days, source")
    with pytest.raises(UserInputError) as caught:
        parse_tariffs(bad, "t.yaml")
    text = str(caught.value)
    assert "billing" in text and "t.yaml" in text and "\n" not in text
    negative = TARIFFS.replace("source: s, date", "storage_usd_per_day: -1.0, source: s, date", 1)
    with pytest.raises(UserInputError, match="storage_usd_per_day"):
        parse_tariffs(negative, "t.yaml")


def test_report_on_the_h200_example_rows_prints_and_publishes_the_ranking(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from harness.cli.main import app
    from harness.row import ResultRow
    from harness.run.store import write_row

    run = tmp_path / "h200"
    for row in json.loads(H200_ROWS.read_text()):
        write_row(run, ResultRow.model_validate(row))
    tariffs = str(ROOT / "tariffs/example.yaml")
    done = CliRunner().invoke(
        app, ["report", str(run), "--tariffs", tariffs], env={"COLUMNS": "250"}
    )
    assert done.exit_code == 0, done.output
    assert "Before you rent: tiny-llama, 30-day package" in done.output
    readme = (run / "published/README.md").read_text()
    assert "| measured |" in readme and "| projected (from H200-141GB) |" in readme
    assert "## Before you rent" in readme
    for card in ("H100-SXM-80GB", "A100-SXM-80GB", "L40S", "MI300X", "RTX-4090", "cpu"):
        assert f"| {card}×" in readme  # every card of the tariff file has a line
    assert "experiment that decides" in readme or "robust:" in readme
    rented = CliRunner().invoke(
        app, ["rent", str(run), "--tariffs", tariffs, "--traffic", "2.5e9"],
        env={"COLUMNS": "250"},
    )  # fmt: skip
    assert rented.exit_code == 0, rented.output
    assert "runner-up" in rented.output
    refused = CliRunner().invoke(app, ["rent", str(run), "--tariffs", tariffs, "--traffic", "-1"])
    assert refused.exit_code == 2 and "--traffic" in refused.output
