"""The ledger's statistics, on a hand-made table of three cards."""

from __future__ import annotations

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
    measured = ledger.observations(parse_external(HEAD + ROWS).rows)
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


def pair(source: str, target: str, key: int, ratio: float, model: str = "m/a") -> ledger.PairError:
    """A hand-made pair: measured ``ratio`` against a projection of 1.0 tok/s."""
    return ledger.PairError(
        phase="decode", key=("vllm", model, "fp16", 1, key, 128, 128), source=source,
        target=target, klass=ledger.card_class(source, target), measured=ratio, projected=1.0,
        roofline=None,
    )  # fmt: skip


H100, H200, A100 = "H100-SXM-80GB", "H200-141GB", "A100-SXM-80GB"
MI300X, MI250 = "MI300X", "MI250-GCD"


def three_nvidia_cards() -> list[ledger.PairError]:
    """Ten keys on three cards: H100 ↔ H200 at ratio 1.0; onto the A100 0.5, from it 2.0 (its
    stack runs at half the share of its roofline the others do)."""
    out = []
    for k in range(1, 11):
        out += [pair(H100, H200, k, 1.0), pair(H200, H100, k, 1.0)]
        out += [pair(H100, A100, k, 0.5), pair(H200, A100, k, 0.5)]
        out += [pair(A100, H100, k, 2.0), pair(A100, H200, k, 2.0)]
    return out


def test_the_held_out_check_leaves_the_target_card_out() -> None:
    cell = ledger.cells(three_nvidia_cards())[("decode", "dense", "nvidia → nvidia")]
    # A100 left out: fitted on H100 ↔ H200 only (20 ratios of 1.0, 10 keys ≥ 9): [1.0, 1.0];
    #   its 20 pairs at 0.5: 0 inside.
    # H100 left out: fitted on H200 → A100 (0.5 ×10) and A100 → H200 (2.0 ×10), n = 20, rank
    #   ⌈21 × 0.9⌉ = 19: low the 2nd smallest 0.5, high the 2nd largest 2.0; its pairs at 1.0
    #   (from H200) and 2.0 (from A100): 20 of 20 inside. H200 the same: 20 of 20.
    # pooled: (0 + 20 + 20) ÷ 60 = 66.67 %: more than 5 points below 80: not validated
    assert cell.card_coverage_pct == pytest.approx({A100: 0.0, H100: 100.0, H200: 100.0})
    assert cell.held_out_coverage_pct == pytest.approx(200 / 3)
    assert (cell.held_out_pairs, cell.unbanded_pairs) == (60, 0)
    assert not cell.validated
    # the band in use is fitted on every pair: 60 ratios (20 × 0.5, 20 × 1.0, 20 × 2.0),
    # rank ⌈61 × 0.9⌉ = 55 → the 6th smallest 0.5 and the 6th largest 2.0; median 1.0
    assert (cell.low, cell.median, cell.high) == (0.5, 1.0, 2.0)


def test_two_cards_leave_nothing_to_fit_when_one_is_held_out() -> None:
    errors = [p for k in range(1, 11) for p in (pair(H100, H200, k, 1.1), pair(H200, H100, k, 0.9))]
    cell = ledger.cells(errors)[("decode", "dense", "nvidia → nvidia")]
    # the band on every pair exists (20 ratios), but no held-out check can be made
    assert cell.low is not None and cell.held_out_coverage_pct is None
    assert (cell.held_out_pairs, cell.unbanded_pairs) == (0, 20) and not cell.validated


def test_directions_are_fitted_apart_and_are_not_reciprocal() -> None:
    errors = []
    for k in range(1, 11):
        for n, a in ((H100, MI300X), (H100, MI250), (A100, MI300X), (A100, MI250)):
            errors += [pair(n, a, k, 0.50 + k / 100), pair(a, n, k, 1.50 + k / 20)]
    fitted = ledger.cells(errors)
    to_amd, to_nvidia = (
        fitted[("decode", "dense", "nvidia → amd")],
        fitted[("decode", "dense", "amd → nvidia")],
    )
    # nvidia → amd: 40 ratios 0.51 … 0.60, four of each; rank ⌈41 × 0.9⌉ = 37 → the 4th
    # smallest 0.51 and the 4th largest 0.60; median (0.55 + 0.56) ÷ 2 = 0.555
    assert (to_amd.low, to_amd.median, to_amd.high) == pytest.approx((0.51, 0.555, 0.60))
    # amd → nvidia: 1.55 … 2.00 the same way: [1.55, 2.00], median (1.75 + 1.80) ÷ 2 = 1.775;
    # not [1 / 0.60, 1 / 0.51] = [1.667, 1.961], the reciprocal a pooled band would give
    assert (to_nvidia.low, to_nvidia.median, to_nvidia.high) == pytest.approx((1.55, 1.775, 2.0))
    # MI300X left out of nvidia → amd: fitted on the 20 pairs onto the MI250, rank 19: the 2nd
    # smallest 0.51 and the 2nd largest 0.60: all 20 of the MI300X's inside; the MI250 alike
    assert to_amd.held_out_coverage_pct == 100.0 and to_amd.validated


def test_the_ledger_lines_state_a_cell_per_direction_and_the_summaries() -> None:
    lines = {
        (x.phase, x.klass, x.arch): x
        for x in ledger.ledger(ledger.observations(parse_external(HEAD + ROWS).rows))
    }
    assert set(lines) == {
        ("decode", "nvidia → nvidia", "dense"), ("decode", "nvidia → amd", "dense"),
        ("decode", "amd → nvidia", "dense"), ("decode", "same vendor", "all"),
        ("decode", "cross vendor", "all"), ("decode", "all", "all"),
    }  # fmt: skip
    assert (
        lines[("decode", "all", "all")].pairs == 6 and lines[("decode", "all", "all")].tau_keys == 1
    )
    # one key: no band, and the table says why
    cell = lines[("decode", "nvidia → amd", "dense")]
    assert cell.band_low is None and not cell.validated
    assert ledger.band_text(cell) == "too few keys to state a band: 1"
    assert ledger.band_text(lines[("decode", "all", "all")]) == "— (a band per direction)"


def test_kendall_tau_with_ties_does_not_depend_on_row_order() -> None:
    # xs tie on the first two: that pair counts neither way; (1,3)+ (2,3)+ → 2 / 3 either order
    assert ledger.kendall_tau([5, 5, 9], [1, 2, 3]) == pytest.approx(2 / 3)
    assert ledger.kendall_tau([5, 5, 9], [2, 1, 3]) == pytest.approx(2 / 3)
