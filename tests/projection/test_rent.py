"""Before you rent: projection of measured rows, the ranking's price and verdict, the traffic
choice. Expected values by hand in the comments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.errors import UserInputError
from harness.projection import book, rent, text, traffic_fit
from harness.spec import catalog
from harness.spec.tariffs import load_tariffs, parse_tariffs

ROOT = Path(__file__).resolve().parents[2]
H200_ROWS = ROOT / "results/example/h200-2026-11-29/gpu_rows.json"


def projection(
    card: str,
    tok_s: float,
    band: tuple[float, float, float] | None = (1.0, 1.0, 1.0),
    *,
    label: str = "projected (from H200-141GB)",
    setup_s: float = 0.0,
) -> rent.Projection:
    """A projection with a band (low, median, high), or none (``band=None``: unvalidated)."""
    found = None if band is None else book.Band(low=band[0], median=band[1], high=band[2],
                                                source="test")  # fmt: skip
    return rent.Projection(
        model="tiny-llama", configuration="c", backend="transformers", quantization="none",
        kv_cache_dtype="auto", batch=8, context=128, output_tokens=16, repeats=1,
        source="H200-141GB", card=card, label=label, decode_tok_s=tok_s,
        decode_band=None if label == rent.MEASURED else found,
        decode_why="" if found else f"{book.NO_BAND} (test)", fits=True, setup_s=setup_s,
    )  # fmt: skip


TARIFFS = """
tariffs:
  - {provider: P, gpu: L40S, hourly_usd: 100.0, source: s, date: "2026-01",
     packages: [{days: 7, price_usd: 70.0}]}
  - {provider: Q, gpu: H200-141GB, hourly_usd: 100.0, source: s, date: "2026-01",
     packages: [{days: 30, price_usd: 600.0}]}
"""
SAME_PACKAGE = """
tariffs:
  - {provider: P, gpu: H100-SXM-80GB, gpus_per_node: 1, hourly_usd: 100.0, source: s,
     date: "2026-01", packages: [{days: 30, price_usd: 600.0}]}
  - {provider: Q, gpu: H200-141GB, hourly_usd: 100.0, source: s, date: "2026-01",
     packages: [{days: 30, price_usd: 600.0}]}
"""


def example_row(**update: object) -> dict[str, object]:
    return {**json.loads(H200_ROWS.read_text())[0], **update}


def vllm_row_on_h100() -> dict[str, object]:
    """An 8B model on vLLM at batch 8 on an H100, 60 % of its roofline: inside Argonne's data."""
    return example_row(
        model="meta-llama/Llama-3.1-8B-Instruct", backend="vllm", gpu="H100-SXM-80GB", batch=8,
        context=512, output_tokens=256, decode_tok_s=800.0, roofline_fraction=0.6,
    )  # fmt: skip


def test_a_card_projected_onto_itself_is_the_measured_row_exactly() -> None:
    row = example_row()
    got = rent.project_row(row, catalog.gpu("H200-141GB"), book.shipped_books())
    assert got.label == rent.MEASURED and got.validated
    assert got.decode_tok_s == row["decode_tok_s"]
    assert got.prefill_tok_s == row["prefill_tok_s"]
    assert got.decode_band is None and got.decode_range() == (got.decode_tok_s,) * 2


def test_an_overhead_bound_row_is_projected_but_outside_every_ledgers_data() -> None:
    row = example_row()
    got = rent.project_row(row, catalog.gpu("L40S"), book.shipped_books())
    # 237.3472 tok/s × 864 / 4800 GB/s = 42.7225 tok/s
    assert got.decode_tok_s == pytest.approx(237.34720279 * 864 / 4800)
    assert got.label == "projected (from H200-141GB)"
    # 0.094 % of its roofline: no band, said so, and still usable (unvalidated)
    assert got.decode_band is None and not got.validated and got.usable
    assert got.decode_why == "outside every ledger's data: overhead-bound (0.09% of its roofline)"
    assert got.fits and got.largest_batch == 4096  # the tiny model fits the harness's largest


def test_a_pair_argonne_measured_and_validated_gets_its_band() -> None:
    got = rent.project_row(vllm_row_on_h100(), catalog.gpu("A100-SXM-80GB"), book.shipped_books())
    # 800 tok/s × 2,039 / 3,350 GB/s = 486.925 tok/s
    assert got.decode_tok_s == pytest.approx(800 * 2039 / 3350)
    band = got.decode_band
    assert band is not None and band.low < band.median < band.high
    assert band.source.startswith("shipped Argonne: nvidia → nvidia, dense")
    assert got.decode_centre == pytest.approx(got.decode_tok_s * band.median)


def test_a_card_absent_from_every_ledger_says_measure_it_in_the_ranking_and_verdict() -> None:
    books = book.shipped_books()
    row = vllm_row_on_h100()
    h200 = rent.project_row(row, catalog.gpu("H200-141GB"), books)
    assert h200.decode_band is None
    assert h200.decode_why == f"{book.NO_BAND} (no H200-141GB with vllm in shipped Argonne)"
    h100 = rent.project_row(row, catalog.gpu("H100-SXM-80GB"), books)
    table = parse_tariffs(SAME_PACKAGE)
    lines = rent.ranking([h100, h200], table, 1.0)[("meta-llama/Llama-3.1-8B-Instruct", 30)]
    cells = {r["card (tariff)"]: r for r in text.ranking_rows(lines)}
    shown = cells["H200-141GB×1 (Q)"]
    assert shown["[low, high]"] == book.NO_BAND
    assert shown["figures"] == "projected (from H100-SXM-80GB), unvalidated"
    found = rent.verdict(lines, [h100, h200], table, 1.0)
    assert found is not None and not found.robust
    # the H200's 4,800 GB/s projects it below the H100's measured cost, but with no band
    assert found.text.startswith(
        "not robust: H200-141GB (Q) is cheapest on a projected figure with no validated band; "
        "its range is unknown, so it may not beat H100-SXM-80GB (P)."
    )
    assert [t.card for t in found.trials] == ["H200-141GB"]


def test_onto_an_amd_card_the_held_out_check_fails_and_says_so() -> None:
    got = rent.project_row(vllm_row_on_h100(), catalog.gpu("MI300X"), book.shipped_books())
    assert got.decode_band is None
    assert got.decode_why.startswith(f"{book.NO_BAND} (held out a card at a time, 0.4 % inside")


def test_fp8_weights_are_not_projected_onto_an_a100() -> None:
    row = example_row(backend="vllm", quantization="fp8")
    got = rent.project_row(row, catalog.gpu("A100-SXM-80GB"), book.shipped_books())
    assert "no fp8 tensor units" in got.skipped and not got.usable


def test_the_price_range_comes_from_the_decode_band() -> None:
    table = parse_tariffs(TARIFFS)
    got = rent.price(projection("L40S", 1000.0, (0.8, 1.0, 1.25)), table.tariffs[0], 7, 1.0)
    # 70 $ ÷ (7 × 24 h) = 0.41667 $/h; ÷ (1000 tok/s × 3600) × 1e6 = 0.11574 $/Mtok
    assert got.centre == pytest.approx(0.115741, rel=1e-5) and got.projected == got.centre
    assert got.low == pytest.approx(0.115741 / 1.25, rel=1e-5)  # 0.09259: the band's high tok/s
    assert got.high == pytest.approx(0.115741 / 0.8, rel=1e-5)  # 0.14468


def test_a_projection_is_re_centred_on_its_bands_median_and_ranked_by_it() -> None:
    table = parse_tariffs(TARIFFS.replace("days: 30", "days: 7").replace("600.0", "84.0"))
    p = projection("L40S", 1000.0, (0.51, 0.555, 0.60))
    got = rent.price(p, table.tariffs[0], 7, 1.0)
    # 0.41667 $/h: centre 1000 × 0.555 = 555 tok/s → 0.41667e6 ÷ (555 × 3600) = 0.208542;
    # the roofline share alone 1000 tok/s → 0.115741; low at 600 tok/s 0.192901, high at 510
    # tok/s 0.226943: the centre inside the band, the un-centred figure below it
    assert (got.low, got.centre, got.high, got.projected) == pytest.approx(
        (0.192901, 0.208542, 0.226943, 0.115741), rel=1e-5
    )
    # the H200 7-day: 84 $ ÷ 168 h = 0.5 $/h, measured 690 tok/s: 0.5e6 ÷ (690 × 3600) =
    # 0.201288 $/Mtok, cheaper than the L40S's centre though dearer than its roofline share
    measured = projection("H200-141GB", 690.0, label=rent.MEASURED)
    lines = rent.ranking([p, measured], table, 1.0)[("tiny-llama", 7)]
    assert [x.card for x in lines] == ["H200-141GB", "L40S"]
    assert lines[1].usd_per_mtok == pytest.approx(0.208542, rel=1e-5)
    assert lines[1].usd_projected == pytest.approx(0.115741, rel=1e-5)
    row = text.ranking_rows(lines)[1]
    assert (row["$/Mtok out"], row["roofline share alone"]) == ("$0.2085", "$0.1157")


def test_a_verdict_never_contradicts_your_own_measurement() -> None:
    table = parse_tariffs(SAME_PACKAGE)
    # H100 measured 1000 tok/s on 600 $ / 720 h = 0.8333 $/h: 0.231481 $/Mtok. H200 projected
    # 1500 tok/s at its roofline share (0.154321 $/Mtok, below the H100) with band 0.5–0.65,
    # median 0.6: centre 900 tok/s 0.257202, fast end 975 tok/s 0.237417 > 0.231481: the
    # H100 is cheapest and the H200's whole band is above it
    ps = [projection("H100-SXM-80GB", 1000.0, label=rent.MEASURED),
          projection("H200-141GB", 1500.0, (0.5, 0.6, 0.65))]  # fmt: skip
    lines = rent.ranking(ps, table, 1.0)[("tiny-llama", 30)]
    assert [x.card for x in lines] == ["H100-SXM-80GB", "H200-141GB"]
    assert lines[1].usd_low == pytest.approx(0.237417, rel=1e-5)
    found = rent.verdict(lines, ps, table, 1.0)
    assert found is not None and found.robust and found.cheapest == "H100-SXM-80GB (P)"


def test_robust_when_the_cheapest_upper_bound_is_below_every_other_lower_bound() -> None:
    table = parse_tariffs(TARIFFS.replace("days: 30", "days: 7"))
    # L40S 7-day: 0.41667 $/h at 4000 tok/s ± 10 %: [0.02630, 0.03215] $/Mtok;
    # H200 7-day: 600 ÷ 168 h = 3.5714 $/h at 1000 tok/s (measured): 0.99206 $/Mtok
    ps = [projection("L40S", 4000.0, (0.9, 1.0, 1.1)),
          projection("H200-141GB", 1000.0, label=rent.MEASURED)]  # fmt: skip
    lines = rent.ranking(ps, table, 1.0)[("tiny-llama", 7)]
    found = rent.verdict(lines, ps, table, 1.0)
    assert found is not None and found.robust and found.cheapest == "L40S (P)"


def test_an_unvalidated_card_is_in_contention_and_never_makes_a_verdict_robust() -> None:
    table = parse_tariffs(TARIFFS.replace("days: 30", "days: 7"))
    # the same figures, the L40S without a band: its range is unknown
    ps = [projection("L40S", 4000.0, None), projection("H200-141GB", 1000.0, label=rent.MEASURED)]
    lines = rent.ranking(ps, table, 1.0)[("tiny-llama", 7)]
    found = rent.verdict(lines, ps, table, 1.0)
    assert found is not None and not found.robust
    assert found.text.startswith(
        "not robust: L40S (P) is cheapest on a projected figure with no validated band"
    )
    assert [t.card for t in found.trials] == ["L40S"]


def test_one_card_with_figures_is_no_verdict_and_the_others_are_one_line() -> None:
    text_ = TARIFFS.replace("gpu: L40S", "gpu: cpu")
    table = parse_tariffs(text_)
    cpu = projection("cpu", 50.0, label=rent.MEASURED)
    skipped = rent.Projection(
        **{**cpu.model_dump(), "card": "H200-141GB", "label": "projected (from cpu)",
           "decode_tok_s": None, "skipped": "CPU and GPU figures are not projected"},
    )  # fmt: skip
    ranked = rent.ranking([cpu, skipped], table, 1.0)
    found = rent.verdict(ranked[("tiny-llama", 7)], [cpu, skipped], table, 1.0)
    assert found is not None and not found.robust
    assert found.text == "no verdict: only cpu (P) has a figure, no other card to compare it with"
    every = [x for lines in ranked.values() for x in lines]
    assert text.unpriced_line(every) == (
        "not priced: H200-141GB×1 (Q): CPU and GPU figures are not projected"
    )
    assert rent.verdict(ranked[("tiny-llama", 30)], [cpu, skipped], table, 1.0) is None


def test_overlapping_bands_name_the_rental_that_decides() -> None:
    table = parse_tariffs(TARIFFS.replace("days: 30", "days: 7"))
    # L40S: 0.41667 $/h at 1000 tok/s, band 0.5–2: [0.05787, 0.23148] $/Mtok; H200 measured
    # 3.5714 $/h at 5000 tok/s = 0.198413 $/Mtok: inside the L40S range → rent the L40S
    ps = [projection("L40S", 1000.0, (0.5, 1.0, 2.0)),
          projection("H200-141GB", 5000.0, label=rent.MEASURED)]  # fmt: skip
    lines = rent.ranking(ps, table, 1.0)[("tiny-llama", 7)]
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


def test_utilisation_is_per_node_across_three_nodes() -> None:
    table = parse_tariffs(TARIFFS)
    p = projection("H200-141GB", 1000.0, label=rent.MEASURED)
    got = traffic_fit.package_option(table.tariffs[1], 30, p, 2.4e8)
    assert isinstance(got, traffic_fit.Option)
    # one node: 1000 tok/s × 86,400 s = 8.64e7 a day; 2.4e8 needs ⌈2.778⌉ = 3 nodes, each
    # carrying 2.4e8 ÷ (3 × 8.64e7) = 0.925926 of its capacity (not 1.000)
    assert got.nodes == 3 and got.utilisation == pytest.approx(0.925926, rel=1e-6)
    assert got.usd_per_day == pytest.approx(3 * 600 / 30)  # 60 $/day
    assert got.breakeven_utilisation == pytest.approx(600 / (100 * 30 * 24))  # 0.00833
    row = text.option_rows([got])[0]
    assert row["utilisation per node"] == "0.926" and row["nodes"] == "3"


def test_traffic_is_sized_at_the_bands_low_end() -> None:
    table = parse_tariffs(TARIFFS)
    p = projection("L40S", 1000.0, (0.8, 1.0, 1.1))
    got = traffic_fit.package_option(table.tariffs[0], 7, p, 8e7)
    assert isinstance(got, traffic_fit.Option)
    # at the centre 1000 tok/s one node serves 8.64e7 ≥ 8e7; at the low end 800 tok/s it
    # serves 6.912e7: ⌈8e7 ÷ 6.912e7⌉ = ⌈1.157⌉ = 2 nodes, each at 8e7 ÷ 1.3824e8 = 0.578704
    assert (got.nodes, got.tok_s, got.sized_at) == (2, 800.0, traffic_fit.LOW_END)
    assert got.utilisation == pytest.approx(0.578704, rel=1e-6)
    assert got.usd_per_day == pytest.approx(2 * 70 / 7)  # 20 $/day
    unbanded = traffic_fit.package_option(
        table.tariffs[0], 7, projection("L40S", 1000.0, None), 8e7
    )
    assert isinstance(unbanded, traffic_fit.Option)
    assert (unbanded.nodes, unbanded.sized_at) == (1, traffic_fit.UNBANDED)


def test_a_setup_longer_than_the_package_is_one_line_not_a_division_by_zero() -> None:
    table = parse_tariffs(TARIFFS)
    p = projection("L40S", 1000.0, setup_s=7 * 86_400 + 1)
    fit = traffic_fit.fit_traffic([p], table, "tiny-llama", 1e6)
    assert fit.not_options == [
        "L40S (P) 7 days: the setup (604,801 s) takes the whole package (604,800 s): not an option"
    ]
    assert [o.package for o in fit.options] == ["hourly (per hour)"]


def test_setup_is_paid_in_each_days_billed_hours() -> None:
    text_ = TARIFFS.replace(
        'hourly_usd: 100.0, source: s, date: "2026-01",\n     packages: [{days: 7',
        "hourly_usd: 2.0, billing: hour, storage_usd_per_day: 0.24, source: s, "
        'date: "2026-01",\n     packages: [{days: 7',
    )
    table = parse_tariffs(text_)
    p = projection("L40S", 1000.0, setup_s=1800.0)
    got = traffic_fit.hourly_option(table.tariffs[0], p, 7.2e6)
    # busy 7.2e6 ÷ 1000 = 7200 s, + setup 1800 = 9000 s → 3 h billed × 2 $ = 6 $;
    # stopped 21 of 24 h: 0.24 × 21/24 = 0.21 $ → 6.21 $/day
    assert got.usd_per_day == pytest.approx(6.21)
    assert got.setup_s == 1800.0 and got.nodes == 1


def test_the_choice_flips_from_the_7_to_the_30_day_package_as_traffic_grows() -> None:
    table = parse_tariffs(TARIFFS)
    ps = [projection("L40S", 1000.0), projection("H200-141GB", 4000.0, label=rent.MEASURED)]
    low = traffic_fit.fit_traffic(ps, table, "tiny-llama", 5e7).options
    # L40S: 1 node (8.64e7 a day ≥ 5e7) at 70 ÷ 7 = 10 $/day; H200 30-day 20 $/day
    assert (low[0].card, low[0].package, low[0].usd_per_day) == ("L40S", "7 days", 10.0)
    assert low[1].usd_per_day == 20.0 and low[1].package == "30 days"
    high = traffic_fit.fit_traffic(ps, table, "tiny-llama", 2e8)
    # L40S: ⌈2e8 ÷ 8.64e7⌉ = 3 nodes = 30 $/day; H200: 3.456e8 a day, 1 node = 20 $/day
    first = high.options[0]
    assert (first.card, first.package, first.usd_per_day) == ("H200-141GB", "30 days", 20.0)
    line = text.choice_line(high, 2e8)
    assert "runner-up L40S (P) 7 days at $30.00/day, 50.0 % dearer" in line
    assert "1 node(s) sized at measured, utilisation per node 0.579" in line  # 2e8 ÷ 3.456e8


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
    assert "| measured |" in readme
    assert "| projected (from H200-141GB), unvalidated |" in readme
    assert "## Before you rent" in readme
    for card in ("H100-SXM-80GB", "A100-SXM-80GB", "L40S", "MI300X", "RTX-4090"):
        assert f"| {card}×" in readme  # every GPU card of the tariff file has a line
    # the CPU tariff: one line, not a table of dashes per package
    cpu = next(t for t in load_tariffs(tariffs).tariffs if t.gpu == "cpu")
    assert f"tiny-llama: not priced: cpu×1 ({cpu.provider}): CPU and GPU" in readme
    ahead = readme[readme.index("## Before you rent") :]
    assert "| cpu×" not in ahead and " days: robust" not in ahead
    assert "experiment that decides" in readme and book.NO_BAND in readme
    rented = CliRunner().invoke(
        app, ["rent", str(run), "--tariffs", tariffs, "--traffic", "2.5e9"],
        env={"COLUMNS": "250"},
    )  # fmt: skip
    assert rented.exit_code == 0, rented.output
    assert "runner-up" in rented.output and "sized at" in rented.output
    refused = CliRunner().invoke(app, ["rent", str(run), "--tariffs", tariffs, "--traffic", "-1"])
    assert refused.exit_code == 2 and "--traffic" in refused.output


def test_rent_names_unreadable_rows_and_says_when_no_row_passed(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from harness.cli.main import app
    from tests import factories as F

    # one row and no reference: nothing has a quality class, so nothing passes the gate
    run = F.write_run(tmp_path / "run", [F.row(**F.quality(200.0))])
    bad = F.write_bad_file(run)
    tariffs = str(ROOT / "tariffs/example.yaml")
    done = CliRunner().invoke(app, ["rent", str(run), "--tariffs", tariffs], env={"COLUMNS": "250"})
    assert done.exit_code == 0, done.output
    lines = done.output.splitlines()
    assert any(x.startswith(f"unreadable, skipped: {bad}: ") for x in lines)
    assert (
        "no row passed the gate at class 99 on one catalog card: nothing to price or carry to "
        "another card"
    ) in lines


def test_a_cpu_bench_prints_no_robust_verdict_and_one_line_for_the_unpriced_cards(
    tmp_path: Path,
) -> None:
    from typer.testing import CliRunner

    from harness.cli.main import app
    from tests import factories as F

    cpu = {"gpu": "cpu", "target": "cpu", "provenance": F.row().provenance}
    run = F.write_run(
        tmp_path / "run",
        [F.reference(**cpu, **F.quality(100.0)), F.row(**cpu, **F.quality(100.0), batch=4)],
    )
    tariffs = str(ROOT / "tariffs/example.yaml")
    done = CliRunner().invoke(
        app, ["report", str(run), "--tariffs", tariffs], env={"COLUMNS": "400"}
    )
    assert done.exit_code == 0, done.output
    lines = done.output.splitlines()
    assert not any(": robust:" in x for x in lines)  # nothing to compare the CPU with
    table = load_tariffs(tariffs).tariffs
    provider = {t.gpu: t.provider for t in table}
    assert (
        f"tiny-llama, 30 days: no verdict: only cpu ({provider['cpu']}) has a figure, no other "
        "card to compare it with"
    ) in lines
    unpriced = [x for x in lines if x.startswith("tiny-llama: not priced: ")]
    assert len(unpriced) == 1  # one line for every package, not a table of dashes each
    for t in table:
        if t.gpu != "cpu":
            assert f"{t.gpu}×{t.gpus_per_node} ({t.provider})" in unpriced[0]
