"""Is the equal-quality gate calibrated? Resampling over the shipped tiny model's stored paired
scores (tests/measure/fixtures/README.md), no model run: an A/A comparison passes class 99 in
at least 95 % of replications and never fails; a planted, known degradation fails both classes.
The rates are printed at the end of every test run ("equal-quality gate calibration")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.measure.verdict import (
    QUALITY_CLASSES,
    PairedItems,
    PairedWindows,
    gate,
    simulate_verdicts,
)

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "tiny-llama-paired-scores.npz"
REPLICATIONS = 200


@pytest.fixture(scope="module")
def scores() -> dict[str, np.ndarray]:
    with np.load(FIXTURE) as data:
        return {k: data[k] for k in data.files}


def windows(scores: dict[str, np.ndarray], candidate: np.ndarray) -> PairedWindows:
    t = scores["tokens"]
    return PairedWindows(scores["none_nll"], candidate, t, t)


def rates_line(name: str, rates: dict[str, float]) -> str:
    return (
        f"{name}, {REPLICATIONS} replications: pass {rates['pass']:.3f}, undecided "
        f"{rates['undecided']:.3f}, fail {rates['fail']:.3f}"
    )


def test_a_re_measured_reference_passes_class_99_every_time(
    scores: dict[str, np.ndarray], calibration_report: list[str]
) -> None:
    """The reference re-measured in another process is bit-identical on this CPU (fixture
    README): every resample's ΔNLL is 0 and its interval [0, 0]."""
    paired = windows(scores, scores["none_nll"].copy())
    for name, share in QUALITY_CLASSES.items():
        rates = simulate_verdicts(share, windows=paired, replications=REPLICATIONS, seed=5)
        calibration_report.append(rates_line(f"A/A re-measured, class {name}", rates))
        assert rates["pass"] == 1.0 and rates["fail"] == 0.0, rates


def test_a_null_difference_at_a_quantized_models_real_spread_passes_and_never_fails(
    scores: dict[str, np.ndarray], calibration_report: list[str]
) -> None:
    """A/A with noise: bnb-nf4's measured per-window differences with their mean removed (the
    spread of a real 4-bit configuration, no effect at all). False-fail rate printed."""
    ref, nf4, tokens = scores["none_nll"], scores["bnb-nf4_nll"], scores["tokens"]
    diff = nf4 - ref
    centred = ref + diff - tokens * (diff.sum() / tokens.sum())
    paired = windows(scores, centred)
    rates = simulate_verdicts(0.99, windows=paired, replications=REPLICATIONS, seed=6)
    strict = simulate_verdicts(0.999, windows=paired, replications=REPLICATIONS, seed=6)
    calibration_report.append(rates_line("A/A at nf4's spread, class 99", rates))
    calibration_report.append(rates_line("A/A at nf4's spread, class 99.9", strict))
    assert rates["pass"] >= 0.95, rates
    assert rates["fail"] == 0.0 and strict["fail"] == 0.0, (rates, strict)


def test_the_reference_against_itself_on_every_arc_item_passes_class_99(
    scores: dict[str, np.ndarray], calibration_report: list[str]
) -> None:
    items = PairedItems(scores["none_arc"], scores["none_arc"].copy())
    rates = simulate_verdicts(0.99, items=items, replications=REPLICATIONS, seed=7)
    calibration_report.append(rates_line("A/A on 2,376 ARC items, class 99", rates))
    assert rates["pass"] >= 0.95 and rates["fail"] == 0.0, rates


def test_quanto_int2s_measured_degradation_fails_both_classes(
    scores: dict[str, np.ndarray], calibration_report: list[str]
) -> None:
    """quanto-int2 on the tiny model: ppl +1.50 % (ΔNLL 0.0149 > class 99's 0.01005). Its own
    verdict is fail for both classes; resampled, it never passes, and the share of replications
    that fail (the test's power at 64 windows) is printed: ~0.76 for class 99, where its
    distance to the margin (0.0049) is 2.4 standard errors."""
    paired = windows(scores, scores["quanto-int2_nll"])
    for name, share in QUALITY_CLASSES.items():
        observed, _ = gate(share, windows=paired)
        rates = simulate_verdicts(share, windows=paired, replications=REPLICATIONS, seed=8)
        line = rates_line(f"planted quanto-int2 (+1.5 % ppl), class {name}", rates)
        calibration_report.append(f"{line}; its own verdict: {observed}")
        assert observed == "fail", line
        assert rates["pass"] == 0.0 and rates["fail"] >= 0.5, line
