"""Timing against known quantities: a fake clock for exact semantics, sleeps for the real ones."""

from __future__ import annotations

import inspect
import math
import time
from typing import Any

import pytest

from harness.measure.timing import (
    StepClock,
    derive_latencies,
    repeat_until,
    step_timestamps_processor,
    summarize,
)

# ---------------------------------------------------------------- summarize


def test_summarize_matches_hand_computed_values() -> None:
    s = summarize([4.0, 1.0, 3.0, 2.0])
    assert s.count == 4
    assert s.mean == pytest.approx(2.5)
    assert s.p50 == pytest.approx(2.5)
    assert s.p90 == pytest.approx(3.7)  # rank 0.9 × 3 = 2.7 → 3 + 0.7 × (4 − 3)
    assert s.p99 == pytest.approx(3.97)
    assert s.stdev == pytest.approx(math.sqrt(5 / 3))  # sample stdev, ddof=1
    assert s.cv == pytest.approx(math.sqrt(5 / 3) / 2.5)
    assert (s.min, s.max) == (1.0, 4.0)


def test_summarize_of_one_value_has_no_spread() -> None:
    s = summarize([7.0])
    assert (s.count, s.mean, s.p50, s.p99) == (1, 7.0, 7.0, 7.0)
    assert s.stdev is None and s.cv is None


def test_summarize_refuses_empty_and_nan() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        summarize([])
    with pytest.raises(ValueError, match="NaN"):
        summarize([1.0, float("nan")])


# ---------------------------------------------------------------- repeat_until


class FakeClock:
    """Time advances only inside the measured function, by `step_s` per call."""

    def __init__(self, step_s: float) -> None:
        self.now = 0.0
        self.step_s = step_s
        self.calls = 0

    def __call__(self) -> float:
        return self.now

    def work(self) -> int:
        self.calls += 1
        self.now += self.step_s
        return self.calls


def test_repeat_until_stops_when_the_duration_is_reached_after_enough_repeats() -> None:
    clock = FakeClock(0.25)
    results = repeat_until(clock.work, warmups=2, min_repeats=3, min_duration_s=1.0, clock=clock)
    assert results == [3, 4, 5, 6]  # warm-ups 1, 2 discarded; 4 × 0.25 s = 1.0 s


def test_repeat_until_runs_min_repeats_even_when_the_duration_is_reached() -> None:
    clock = FakeClock(0.25)
    results = repeat_until(clock.work, warmups=0, min_repeats=6, min_duration_s=0.5, clock=clock)
    assert len(results) == 6


def test_repeat_until_never_exceeds_max_repeats() -> None:
    clock = FakeClock(0.25)
    results = repeat_until(
        clock.work, warmups=1, min_repeats=2, min_duration_s=100.0, max_repeats=5, clock=clock
    )
    assert results == [2, 3, 4, 5, 6]


def test_repeat_until_with_a_real_sleep_meets_both_minimums() -> None:
    started = time.perf_counter()
    results = repeat_until(lambda: time.sleep(0.01), warmups=1, min_repeats=2, min_duration_s=0.05)
    measured_s = time.perf_counter() - started
    assert 2 <= len(results) <= 6  # ≥ 5 sleeps of ≥ 10 ms would already reach 50 ms
    assert measured_s >= 0.05


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"warmups": -1, "min_repeats": 1, "min_duration_s": 0}, "warmups"),
        ({"warmups": 0, "min_repeats": 0, "min_duration_s": 0}, "min_repeats"),
        ({"warmups": 0, "min_repeats": 1, "min_duration_s": -1}, "min_duration_s"),
        ({"warmups": 0, "min_repeats": 5, "min_duration_s": 0, "max_repeats": 4}, "max_repeats"),
    ],
)
def test_repeat_until_rejects_impossible_settings(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        repeat_until(lambda: None, **kwargs)


# ---------------------------------------------------------------- StepClock and the processor


def test_step_clock_on_cpu_is_monotonic_and_counts_marks() -> None:
    clock = StepClock("cpu")
    clock.start()
    for _ in range(3):
        time.sleep(0.01)
        clock.mark()
    clock.stop()
    elapsed = clock.elapsed_ms()
    assert clock.name == "perf_counter"
    assert len(clock) == 3 and len(elapsed) == 3
    assert elapsed == sorted(elapsed) and elapsed[0] >= 9.0
    assert len(clock.intervals_ms()) == 2 and all(gap >= 9.0 for gap in clock.intervals_ms())
    assert clock.total_ms() >= elapsed[-1]


def test_step_clock_start_forgets_earlier_marks() -> None:
    clock = StepClock("cpu")
    clock.start()
    clock.mark()
    clock.start()
    assert clock.elapsed_ms() == []


def test_step_clock_refuses_marks_before_start_and_total_before_stop() -> None:
    clock = StepClock("cpu")
    with pytest.raises(RuntimeError, match="before start"):
        clock.mark()
    clock.start()
    with pytest.raises(RuntimeError, match="stop"):
        clock.total_ms()


def test_processor_marks_once_per_call_and_returns_scores_untouched() -> None:
    clock = StepClock("cpu")
    processor = step_timestamps_processor(clock)
    scores = object()
    clock.start()
    assert processor(None, scores) is scores
    assert processor(None, scores) is scores
    assert len(clock) == 2
    # LogitsProcessorList passes only (input_ids, scores) to a __call__ of two parameters
    assert list(inspect.signature(processor.__call__).parameters) == ["input_ids", "scores"]


@pytest.mark.engine
def test_generate_calls_the_processor_once_per_new_token() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(4, 64, (2, 7))
    clock = StepClock("cpu")
    processors = transformers.LogitsProcessorList([step_timestamps_processor(clock)])
    clock.start()
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=5,
        min_new_tokens=5,
        do_sample=False,
        pad_token_id=0,
        logits_processor=processors,
    )
    clock.stop()
    new_tokens = out.shape[1] - ids.shape[1]
    assert new_tokens == 5 and len(clock) == new_tokens
    latencies = derive_latencies(
        clock.elapsed_ms(),
        batch=2,
        context_tokens=7,
        new_tokens=new_tokens,
        e2e_ms=clock.total_ms(),
    )
    assert len(latencies.itl_ms) == 4 and latencies.decode_tok_s is not None


@pytest.mark.gpu
def test_step_clock_on_cuda_uses_events_and_is_monotonic() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA/ROCm device")
    a = torch.randn(2048, 2048, device="cuda")
    clock = StepClock("cuda")
    clock.start()
    for _ in range(3):
        a = a @ a
        a = a / a.norm()
        clock.mark()
    clock.stop()
    elapsed = clock.elapsed_ms()
    assert clock.name == "cuda_events"
    assert len(elapsed) == 3 and elapsed == sorted(elapsed) and elapsed[0] > 0
    assert clock.total_ms() >= elapsed[-1]


@pytest.mark.engine
def test_step_clock_on_cpu_only_torch_says_no_gpu_is_visible() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    with pytest.raises(RuntimeError, match="StepClock\\('cpu'\\)"):
        StepClock("cuda")


# ---------------------------------------------------------------- derive_latencies


def test_derive_latencies_on_a_worked_example() -> None:
    lat = derive_latencies(
        [50.0, 60.0, 70.0, 80.0], batch=2, context_tokens=100, new_tokens=4, e2e_ms=85.0
    )
    assert lat.ttft_ms == 50.0
    assert lat.itl_ms == [10.0, 10.0, 10.0]
    assert lat.tpot_ms == pytest.approx(10.0)
    assert lat.e2e_ms == 85.0
    assert lat.prefill_tok_s == pytest.approx(2 * 100 / 0.050)  # 4000 tok/s
    assert lat.decode_tok_s == pytest.approx(2 * 3 / 0.035)  # 171.4 tok/s


def test_derive_latencies_with_one_token_has_no_decode() -> None:
    lat = derive_latencies([40.0], batch=1, context_tokens=10, new_tokens=1)
    assert lat.e2e_ms == 40.0 and lat.tpot_ms is None and lat.decode_tok_s is None
    assert lat.itl_ms == []


def test_derive_latencies_rejects_bad_step_times() -> None:
    with pytest.raises(ValueError, match="at least one step"):
        derive_latencies([], batch=1, context_tokens=1, new_tokens=1)
    with pytest.raises(ValueError, match="non-decreasing"):
        derive_latencies([5.0, 4.0], batch=1, context_tokens=1, new_tokens=2)
    with pytest.raises(ValueError, match="e2e_ms"):
        derive_latencies([5.0, 6.0], batch=1, context_tokens=1, new_tokens=2, e2e_ms=5.5)
