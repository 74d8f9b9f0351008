"""SLO semantics, attainment, goodput, saturation and the level chosen at the SLO (pure)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import pytest
from pydantic import ValidationError

from harness.modes.serving.slo import (
    RequestTiming,
    attainment,
    choose_at_slo,
    goodput_rps,
    meets,
    saturated_flags,
)
from harness.modes.serving.spec import SloTargets

SLO = SloTargets(ttft_ms_p99=100, tpot_ms_p99=10)
TARGET = 0.9  # the share of requests that must meet it (a level's `attainment`)


def req(ttft: float, tpot: float, out: int = 11, ok: bool = True) -> RequestTiming:
    """A request with the given TTFT and TPOT (e2e = ttft + tpot × (out − 1))."""
    return RequestTiming(ok=ok, ttft_ms=ttft, e2e_ms=ttft + tpot * (out - 1), input_tokens=8,
                         output_tokens=out, error="" if ok else "boom")  # fmt: skip


def test_a_request_meets_the_slo_only_within_every_target() -> None:
    assert meets(req(100, 10), SLO)  # on the line: met (≤)
    assert not meets(req(100.1, 1), SLO)  # TTFT over
    assert not meets(req(1, 10.1), SLO)  # TPOT over
    assert not meets(req(1, 1, ok=False), SLO)  # a failed request never meets it
    one = RequestTiming(ok=True, ttft_ms=50, e2e_ms=5000, input_tokens=8, output_tokens=1)
    assert one.tpot_ms is None and meets(one, SLO)  # one token: no TPOT, counted as 0 (as vLLM)


def test_tpot_is_decode_time_per_token_after_the_first() -> None:
    assert req(40, 7.5, out=5).tpot_ms == pytest.approx(7.5)
    assert req(40, 7.5, ok=False).tpot_ms is None


def test_attainment_counts_every_request_sent_and_goodput_never_exceeds_throughput() -> None:
    requests = [req(10, 5)] * 6 + [req(500, 5), req(10, 50), req(10, 5, ok=False), req(10, 5)]
    assert attainment(requests, SLO) == pytest.approx(7 / 10)
    duration = 2.0
    good = goodput_rps(requests, SLO, duration)
    throughput = sum(r.ok for r in requests) / duration
    assert good == pytest.approx(3.5) and good <= throughput
    assert attainment([], SLO) == 0.0 and goodput_rps(requests, SLO, 0.0) == 0.0


def test_a_level_that_misses_the_slo() -> None:
    slow = [req(150, 5)] * 9 + [req(10, 5)]
    share = attainment(slow, SLO)
    assert share == pytest.approx(0.1) and share < TARGET
    assert choose_at_slo([Level("c4", 300.0, share)], TARGET) is None


def test_slo_targets_must_be_positive_and_name_only_the_two_targets() -> None:
    with pytest.raises(ValidationError):
        SloTargets(ttft_ms_p99=0, tpot_ms_p99=10)
    with pytest.raises(ValidationError):  # the attainment target is the level's, not the SLO's
        SloTargets(ttft_ms_p99=10, tpot_ms_p99=10, attainment=0.9)  # type: ignore[call-arg]


# --- saturation ---------------------------------------------------------------------------------


def test_rising_throughput_is_never_saturated() -> None:
    assert saturated_flags([1, 4, 16], [100, 350, 900], [50, 60, 90]) == [False] * 3


def test_stalled_throughput_with_growing_latency_is_saturated() -> None:
    flags = saturated_flags([1, 4, 16, 32], [100, 350, 360, 340], [50, 60, 200, 400])
    assert flags == [False, False, True, True]


def test_stalled_throughput_with_flat_latency_is_not_saturated() -> None:
    assert saturated_flags([1, 4], [100, 101], [50, 52]) == [False, False]


def test_saturation_orders_by_load_and_skips_failed_levels() -> None:
    nan = math.nan
    flags = saturated_flags([16, 1, 4, 8], [360, 100, 350, nan], [200, 50, 60, nan])
    assert flags == [True, False, False, False]
    with pytest.raises(ValueError):
        saturated_flags([1], [1, 2], [1])


# --- the level at the SLO -----------------------------------------------------------------------


@dataclass
class Level:
    name: str
    output_tok_s: float | None
    slo_attainment: float | None
    status: Literal["ok", "error"] = "ok"


def test_the_highest_output_among_levels_that_meet_the_attainment() -> None:
    levels = [Level("c1", 100, 1.0), Level("c4", 350, 0.995), Level("c16", 900, 0.80),
              Level("c8", 600, 0.99)]  # fmt: skip
    chosen = choose_at_slo(levels, 0.99)
    assert chosen is not None and chosen.name == "c8"


def test_no_level_qualifies_gives_none_and_errors_never_qualify() -> None:
    assert choose_at_slo([Level("c1", 100, 0.5), Level("c4", 300, 0.9)], 0.99) is None
    levels = [Level("c1", 100, 1.0), Level("c4", 999, 1.0, status="error"), Level("c8", None, 1.0)]
    chosen = choose_at_slo(levels, 0.99)
    assert chosen is not None and chosen.name == "c1"
    assert choose_at_slo([], 0.99) is None
