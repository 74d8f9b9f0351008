"""The ledger's statistics, on a hand-made table of three cards."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from harness.projection import ledger
from harness.projection.external import parse_external

HEAD = (
    "gpu,gpus,engine,engine_version,model,weights,batch,input_tokens,output_tokens,tpot_ms,source\n"
)
# batch 1, tpot 10 ms → 100 tok/s on the H100; the H200 measured 130, the MI300X 120.
ROWS = (
    "H100-SXM-80GB,1,vllm,x,m/a,fp16,1,128,128,10,s\n"
    "H200-141GB,1,vllm,x,m/a,fp16,1,128,128,7.6923076923,s\n"
    "MI300X,1,vllm,x,m/a,fp16,1,128,128,8.3333333333,s\n"
)


def test_leave_one_card_out_projects_each_card_from_each_other() -> None:
    measured = ledger.observations(parse_external(HEAD + ROWS))
    errors = {(e.source, e.target): e for e in ledger.leave_one_card_out(measured)}
    assert len(errors) == 6
    h100_to_h200 = errors[("H100-SXM-80GB", "H200-141GB")]
    # 100 × 4800 / 3350 = 143.28 projected against 130 measured: |143.28 − 130| / 130 = 10.22 %
    assert h100_to_h200.projected == pytest.approx(143.2836, rel=1e-5)
    assert ledger.ape(h100_to_h200.projected, h100_to_h200.measured) == pytest.approx(10.218, 1e-3)
    assert h100_to_h200.klass == "same vendor"
    assert errors[("H100-SXM-80GB", "MI300X")].klass == "cross vendor"


def test_kendall_tau_counts_concordant_less_discordant_pairs() -> None:
    assert ledger.kendall_tau([1, 2, 3], [10, 20, 30]) == 1.0
    assert ledger.kendall_tau([1, 2, 3], [30, 20, 10]) == -1.0
    # pairs (1,2)+ (1,3)+ (2,3)−: (2 − 1) / 3
    assert ledger.kendall_tau([1, 2, 3], [10, 30, 20]) == pytest.approx(1 / 3)


def test_the_conformal_rank_is_the_finite_sample_one() -> None:
    # ⌈(n + 1) × 0.9⌉: n = 9 → ⌈9.0⌉ = 9 ≤ 9; n = 8 → ⌈8.1⌉ = 9 > 8 (no band); n = 19 → ⌈18.0⌉ = 18
    assert [ledger.conformal_rank(n) for n in (8, 9, 19)] == [9, 9, 18]


def test_the_band_takes_the_rank_from_either_end() -> None:
    ratios = [r / 10 for r in (7, 3, 12, 1, 19, 5, 15, 9, 2, 17, 11, 4, 14, 6, 18, 8, 13, 10, 16)]
    # 0.1 … 1.9, n = 19, rank 18: low = the 18th largest = the 2nd smallest = 0.2,
    # high = the 18th smallest = 1.8
    assert ledger.band(ratios) == pytest.approx((0.2, 1.8))
    with pytest.raises(ValueError, match="8 ratios are too few"):
        ledger.band(ratios[:8])  # rank 9 > 8


# measured ÷ projected of ten pairs (five keys, two pairs each) per model
RATIOS = {
    "A": (0.70, 0.90, 0.95, 1.00, 1.00, 1.05, 1.05, 1.10, 1.10, 1.30),
    "B": (0.80, 0.92, 0.96, 1.00, 1.02, 1.04, 1.06, 1.08, 1.12, 1.20),
    "C": (0.60, 0.85, 0.94, 0.98, 1.00, 1.01, 1.03, 1.07, 1.15, 1.40),
}


def synthetic(
    ratios: Mapping[str, tuple[float, ...]], pairs_per_key: int
) -> list[ledger.PairError]:
    return [
        ledger.PairError(
            phase="decode", key=("vllm", model, "fp16", 1, i // pairs_per_key + 1, 128, 128),
            source="H100-SXM-80GB", target="H200-141GB", klass="same vendor",
            measured=r, projected=1.0, roofline=None,
        )
        for model, rs in ratios.items()
        for i, r in enumerate(rs)
    ]  # fmt: skip


def test_the_band_is_split_conformal_and_checked_leaving_one_model_out() -> None:
    got = ledger.calibrate(synthetic(RATIOS, pairs_per_key=2))
    # every pair, n = 30: rank ⌈31 × 0.9⌉ = ⌈27.9⌉ = 28 → the 3rd smallest (0.60, 0.70, 0.80) and
    # the 3rd largest (1.40, 1.30, 1.20): [0.80, 1.20]
    assert got.band == pytest.approx((0.80, 1.20))
    # each fold fits on 20 pairs (10 keys ≥ 9): rank ⌈21 × 0.9⌉ = 19 → 2nd smallest, 2nd largest
    # - A out, B ∪ C: [0.80, 1.20]; A's 0.70 and 1.30 fall out: 8 of 10 inside
    # - B out, A ∪ C: [0.70, 1.30]; all of B's 10 inside
    # - C out, A ∪ B: [0.80, 1.20]; C's 0.60 and 1.40 fall out: 8 of 10 inside
    # pooled: (8 + 10 + 8) / 30 = 86.667 %
    assert got.held_out_coverage_pct == pytest.approx(100 * 26 / 30)
    assert got.models == 3


def test_too_few_keys_state_no_band() -> None:
    # five pairs a key: a fold fits on 20 pairs but 2 keys × 2 models = 4 keys < 9
    assert ledger.calibrate(synthetic(RATIOS, pairs_per_key=5)).band is None
    # one model: nothing is left to fit on when it is held out
    only_a = ledger.calibrate(synthetic({"A": RATIOS["A"]}, pairs_per_key=1))
    assert only_a.band is None and only_a.held_out_coverage_pct is None


def test_the_ledger_lines_state_mape_and_tau_per_phase_and_class() -> None:
    lines = {
        (x.phase, x.klass): x
        for x in ledger.ledger(ledger.observations(parse_external(HEAD + ROWS)))
    }
    assert set(lines) == {("decode", "same vendor"), ("decode", "cross vendor"), ("decode", "all")}
    assert lines[("decode", "all")].pairs == 6 and lines[("decode", "all")].tau_keys == 1
    # one model, one key: no band, and the table says why
    assert lines[("decode", "all")].band_low is None
    assert ledger.band_text(lines[("decode", "all")]) == "too few keys to state a band: 1"
