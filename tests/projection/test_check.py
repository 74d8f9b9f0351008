"""`harness ledger check`'s scoring, on three cards by hand: coverage of the banded pairs, the
share left unbanded, MAPE, and τ over throughput and over cost."""

from __future__ import annotations

import pytest

from harness.projection import check, ledger
from harness.projection.external import parse_external
from harness.spec.tariffs import parse_tariffs

HEAD = (
    "gpu,gpus,engine,engine_version,model,weights,batch,input_tokens,output_tokens,tpot_ms,source\n"
)
# batch 1: tpot 10 ms → 100 tok/s on the H100, 7.6923 ms → 130 on the H200, 16.667 ms → 60 on
# the A100 (bandwidths 3,350, 4,800 and 2,039 GB/s)
ROWS = (
    "H100-SXM-80GB,1,vllm,x,m/a,fp16,1,128,128,10,s\n"
    "H200-141GB,1,vllm,x,m/a,fp16,1,128,128,7.6923076923,s\n"
    "A100-SXM-80GB,1,vllm,x,m/a,fp16,1,128,128,16.6666666667,s\n"
)
H100, H200, A100 = "H100-SXM-80GB", "H200-141GB", "A100-SXM-80GB"
PRICES = {H100: 2.0, H200: 3.0, A100: 1.0}  # USD per card-hour


def band_of(pair: ledger.PairError) -> tuple[float, float] | None:
    """[0.95, 1.05] for every pair but H200 → A100, which gets none."""
    return None if (pair.source, pair.target) == (H200, A100) else (0.95, 1.05)


def lines() -> dict[str, check.CheckLine]:
    measured = ledger.observations(parse_external(HEAD + ROWS).rows)
    return {x.klass: x for x in check.check(measured, band_of, PRICES)}


def test_coverage_unbanded_share_and_mape_by_hand() -> None:
    line = lines()["all"]
    # pair: projected = measured × target bw ÷ source bw; ratio = measured ÷ projected; APE
    # H100→H200: 100 × 4800/3350 = 143.2836; 0.90729 (out);  13.2836/130 = 10.2181 %
    # H100→A100: 100 × 2039/3350 =  60.8657; 0.98578 (in);    0.8657/60  =  1.4428 %
    # H200→H100: 130 × 3350/4800 =  90.7292; 1.10218 (out);   9.2708/100 =  9.2708 %
    # H200→A100: 130 × 2039/4800 =  55.2229; no band;          4.7771/60  =  7.9618 %
    # A100→H100:  60 × 3350/2039 =  98.5777; 1.01443 (in);    1.4223/100 =  1.4223 %
    # A100→H200:  60 × 4800/2039 = 141.2457; 0.92038 (out);  11.2457/130 =  8.6505 %
    assert (line.pairs, line.banded) == (6, 5)
    assert line.unbanded_pct == pytest.approx(100 / 6)  # 1 of 6
    assert line.coverage_pct == pytest.approx(40.0)  # 2 of 5 banded pairs inside
    # (10.2181 + 1.4428 + 9.2708 + 7.9618 + 1.4223 + 8.6505) / 6 = 38.9663 / 6
    assert line.mape_pct == pytest.approx(6.49440, rel=1e-5)
    assert set(lines()) == {"same vendor", "all"}  # three NVIDIA cards: no cross-vendor pair


def test_tau_over_cost_differs_from_tau_over_throughput_by_hand() -> None:
    line = lines()["all"]
    # each card projected as the geometric mean of its projections from the others:
    # H100 √(90.7292 × 98.5777) = 94.572, H200 √(143.2836 × 141.2457) = 142.260,
    # A100 √(60.8657 × 55.2229) = 57.976: the same order as measured (130 > 100 > 60): τ = 1
    assert line.tau == pytest.approx(1.0) and line.tau_keys == 1
    # cost ∝ price ÷ tok/s. measured: A100 1/60 = 0.01667 < H100 2/100 = 0.02 < H200 3/130 =
    # 0.02308; projected: A100 1/57.976 = 0.01725 < H200 3/142.260 = 0.02109 < H100 2/94.572 =
    # 0.02115. H100 vs H200 discordant, the other two pairs concordant: (2 − 1) / 3
    assert line.cost_tau == pytest.approx(1 / 3) and line.cost_tau_keys == 1


def test_cost_tau_needs_three_priced_cards() -> None:
    measured = ledger.observations(parse_external(HEAD + ROWS).rows)
    (line,) = [
        x for x in check.check(measured, band_of, {H100: 2.0, H200: 3.0}) if x.klass == "all"
    ]
    assert line.tau == pytest.approx(1.0) and line.cost_tau is None and line.cost_tau_keys == 0


def test_a_cards_price_is_its_cheapest_tariff_per_card_hour() -> None:
    table = parse_tariffs(
        "tariffs:\n"
        "  - {provider: a, gpu: H100, gpus_per_node: 8, hourly_usd: 24, source: s, date: 2026-01,"
        " packages: [{days: 3, price_usd: 1000}]}\n"
        "  - {provider: b, gpu: H100-SXM-80GB, gpus_per_node: 1, hourly_usd: 2.5, source: s,"
        " date: 2026-01, packages: [{days: 3, price_usd: 100}]}\n"
    )
    assert check.card_prices(table) == {H100: 2.5}  # 24 / 8 = 3.0 against 2.5 / 1
    # 2.5 USD an hour at 100 tok/s: 2.5 / 360,000 tokens × 10⁶ = 6.944 USD per Mtok
    assert check.usd_per_mtok(2.5, 100) == pytest.approx(6.9444, rel=1e-4)
