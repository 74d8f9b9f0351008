"""A serving level's energy: the counter traced while the generator ran, read over the level's
load window (the generator's first request + its duration), per output token of the ok requests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.measure import energy
from harness.measure.energy import EnergyMeter, nvml_joules
from harness.modes.serving.device.loadgen import (
    LevelResult,
    level_result,
    parse_bench_json,
)
from harness.modes.serving.device.run import level_energy
from harness.modes.serving.spec import Load, SloTargets

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "bench-c1.json"


def recorded_level(start_s: float | None, duration_s: float) -> LevelResult:
    data = json.loads(FIXTURE.read_text())  # 16 requests, 237 output tokens
    run = parse_bench_json(data)
    result = level_result(Load(concurrency=1), run, SloTargets(ttft_ms_p99=500, tpot_ms_p99=50),
                          sent=16)  # fmt: skip
    return result.model_copy(update={"window_start_s": start_s, "duration_s": duration_s})


def nvml_trace(readings_mj: list[int], times: list[float]) -> energy.CounterTrace[int]:
    reads: Iterator[int] = iter(readings_mj)
    clock: Iterator[float] = iter(times)
    meter = EnergyMeter("nvml", lambda: next(reads), nvml_joules, clock=lambda: next(clock))
    trace = energy.CounterTrace(meter)
    for _ in readings_mj:
        trace.sample()
    return trace


def test_the_load_window_is_read_from_the_trace_not_the_generators_whole_run() -> None:
    """The generator ran 0-10 s (start-up 0-4 s at 70 W idle, load 4-6 s at 450 W, then writing
    its JSON at idle); the level's window is 4-6 s: 900 J, 450 W, 900 J ÷ 237 tokens."""
    trace = nvml_trace([0, 280_000, 1_180_000, 1_460_000], [0.0, 4.0, 6.0, 10.0])
    part = level_energy(trace, recorded_level(4.0, 2.0))
    assert part.energy_unavailable_reason is None and part.energy_source == "nvml"
    assert part.energy_j_serving == pytest.approx(900.0)
    assert part.avg_power_w_serving == pytest.approx(450.0)
    assert part.j_per_token_serving == pytest.approx(900.0 / 237)


def test_a_short_level_or_one_without_start_times_is_none_with_the_reason() -> None:
    trace = nvml_trace([0, 1000, 2000], [0.0, 1.0, 2.0])
    short = level_energy(trace, recorded_level(0.5, 0.55))
    assert short.energy_j_serving is None and "shorter than 1 s" in str(
        short.energy_unavailable_reason
    )
    unknown = level_energy(trace, recorded_level(None, 1.7))
    assert unknown.j_per_token_serving is None
    assert "no request start times" in str(unknown.energy_unavailable_reason)


def test_an_unreadable_counter_gives_its_own_reason() -> None:
    with energy.CounterTrace(EnergyMeter.unavailable("rapl: no powercap")) as trace:
        pass
    for start in (1.0, None):
        part = level_energy(trace, recorded_level(start, 1.7))
        assert part.energy_unavailable_reason == "rapl: no powercap"
        assert part.energy_j_serving is None and part.energy_source is None
