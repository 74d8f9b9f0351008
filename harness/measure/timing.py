"""Timing: repeat-until loops, summary statistics, per-step clocks and the latencies they give.

Times are seconds unless a name says ms. On CUDA/ROCm a step is timed with CUDA events (device
time, one synchronize at the end); on CPU with `time.perf_counter`. torch is imported only when a
CUDA clock is built.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict

from harness.measure import device_kind

T = TypeVar("T")
S = TypeVar("S")


# ---------------------------------------------------------------- statistics


class Summary(BaseModel):
    """Summary of repeated measurements, in the unit of the values.

    Percentiles use linear interpolation between order statistics (numpy's default,
    `method="linear"`, the same as Excel's PERCENTILE.INC). `stdev` is the sample standard
    deviation (ddof=1); `stdev` and `cv` (= stdev / mean) are None for fewer than 2 values,
    and `cv` is None when the mean is 0.
    """

    model_config = ConfigDict(extra="forbid")

    count: int
    mean: float
    p50: float
    p90: float
    p99: float
    stdev: float | None
    cv: float | None
    min: float
    max: float


def summarize(values: Sequence[float]) -> Summary:
    """Count, mean, p50/p90/p99 (linear interpolation), sample stdev, cv, min and max."""
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(
            f"summarize needs a non-empty flat sequence of numbers, got shape {array.shape}"
        )
    if not np.all(np.isfinite(array)):
        raise ValueError("summarize: values contain NaN or infinity")
    mean = float(array.mean())
    p50, p90, p99 = (float(q) for q in np.percentile(array, [50, 90, 99], method="linear"))
    stdev = float(array.std(ddof=1)) if array.size >= 2 else None
    cv = stdev / mean if stdev is not None and mean != 0 else None
    return Summary(
        count=int(array.size),
        mean=mean,
        p50=p50,
        p90=p90,
        p99=p99,
        stdev=stdev,
        cv=cv,
        min=float(array.min()),
        max=float(array.max()),
    )


# ---------------------------------------------------------------- repeat loop


def repeat_until(
    fn: Callable[[], T],
    *,
    warmups: int,
    min_repeats: int,
    min_duration_s: float,
    max_repeats: int = 1000,
    clock: Callable[[], float] = time.perf_counter,
) -> list[T]:
    """Call `fn` `warmups` times (results discarded), then repeat it until BOTH at least
    `min_repeats` calls were made AND their summed time (by `clock`, seconds, warm-ups excluded,
    time between calls excluded) reaches `min_duration_s`; never more than `max_repeats` calls.
    Returns the results of the measured calls, in order."""
    _check_repeat_args(warmups, min_repeats, min_duration_s, max_repeats)
    for _ in range(warmups):
        fn()
    results: list[T] = []
    spent_s = 0.0
    while len(results) < max_repeats and (len(results) < min_repeats or spent_s < min_duration_s):
        started = clock()
        results.append(fn())
        spent_s += clock() - started
    return results


def _check_repeat_args(
    warmups: int, min_repeats: int, min_duration_s: float, max_repeats: int
) -> None:
    if warmups < 0:
        raise ValueError(f"warmups must be >= 0, got {warmups}")
    if min_repeats < 1:
        raise ValueError(f"min_repeats must be >= 1, got {min_repeats}")
    if min_duration_s < 0:
        raise ValueError(f"min_duration_s must be >= 0 seconds, got {min_duration_s}")
    if max_repeats < min_repeats:
        raise ValueError(f"max_repeats ({max_repeats}) must be >= min_repeats ({min_repeats})")


# ---------------------------------------------------------------- per-step clock


class StepClock:
    """Timestamps of generation steps, relative to `start()`.

    `device` 'cpu' → `time.perf_counter()` (name "perf_counter"); 'cuda[:N]' (also ROCm) →
    `torch.cuda.Event(enable_timing=True)` recorded on the current stream (name "cuda_events"),
    converted to ms after a single synchronize when the times are first read. Usage::

        clock.start(); model.generate(...); clock.stop()
        clock.elapsed_ms()   # ms since start, one per mark: [TTFT, t2, t3, ...]
        clock.total_ms()     # ms from start to stop: end-to-end
    """

    def __init__(self, device: str = "cpu") -> None:
        self.device = device
        self._cuda = device_kind(device) == "cuda"
        self.name = "cuda_events" if self._cuda else "perf_counter"
        self._torch: Any = _cuda_torch(device) if self._cuda else None
        self._start: Any = None
        self._stop: Any = None
        self._marks: list[Any] = []
        self._cache_ms: tuple[list[float], float | None] | None = None

    def __len__(self) -> int:
        return len(self._marks)

    def start(self) -> None:
        """Forget earlier marks and stamp the start."""
        self._marks = []
        self._stop = None
        self._cache_ms = None
        self._start = self._stamp()

    def mark(self) -> None:
        """Stamp one step (called once per generated token by the logits processor)."""
        if self._start is None:
            raise RuntimeError("StepClock.mark() called before start()")
        self._marks.append(self._stamp())
        self._cache_ms = None

    def stop(self) -> None:
        """Stamp the end of the timed call (for `total_ms`)."""
        if self._start is None:
            raise RuntimeError("StepClock.stop() called before start()")
        self._stop = self._stamp()
        self._cache_ms = None

    def elapsed_ms(self) -> list[float]:
        """ms from start to each mark; the first is TTFT when marks come from generate."""
        return list(self._resolve()[0])

    def intervals_ms(self) -> list[float]:
        """ms between consecutive marks (one fewer than the marks): the inter-token latencies."""
        elapsed = self.elapsed_ms()
        return [later - earlier for earlier, later in itertools.pairwise(elapsed)]

    def total_ms(self) -> float:
        """ms from start to stop."""
        total = self._resolve()[1]
        if total is None:
            raise RuntimeError("StepClock.total_ms() needs stop() first")
        return total

    def _stamp(self) -> Any:
        if not self._cuda:
            return time.perf_counter()
        event = self._torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def _resolve(self) -> tuple[list[float], float | None]:
        if self._start is None:
            raise RuntimeError("StepClock has not been started")
        if self._cache_ms is None:
            if self._cuda:
                self._torch.cuda.synchronize(self.device)  # the single synchronize
            marks = [self._since_start_ms(stamp) for stamp in self._marks]
            total = None if self._stop is None else self._since_start_ms(self._stop)
            self._cache_ms = (marks, total)
        return self._cache_ms

    def _since_start_ms(self, stamp: Any) -> float:
        if self._cuda:
            return float(self._start.elapsed_time(stamp))
        return (float(stamp) - float(self._start)) * 1e3


def _cuda_torch(device: str) -> Any:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(
            f"StepClock({device!r}): torch sees no CUDA/ROCm device (torch.cuda.is_available() "
            "is False); use StepClock('cpu')"
        )
    return torch


class Marker(Protocol):
    def mark(self) -> None: ...


class StepTimestampsProcessor:
    """A transformers logits processor that stamps `clock.mark()` at every generation step.

    `generate` calls each processor of a `LogitsProcessorList` once per step, right after that
    step's forward pass, with `(input_ids, scores)`; any callable of two arguments works
    (transformers 5.20 `LogitsProcessorList.__call__` only inspects the signature's length), so
    no transformers base class is needed. First mark = end of prefill (TTFT); each later mark =
    one more token (ITL). One mark per generated token on CPU and CUDA; on MPS transformers
    defers the stop check and may run (and mark) one extra step that it then drops.
    """

    def __init__(self, clock: Marker) -> None:
        self.clock = clock

    def __call__(self, input_ids: object, scores: S) -> S:
        self.clock.mark()
        return scores


def step_timestamps_processor(clock: Marker) -> StepTimestampsProcessor:
    """`generate(..., logits_processor=LogitsProcessorList([step_timestamps_processor(clock)]))`."""
    return StepTimestampsProcessor(clock)


# ---------------------------------------------------------------- latencies of one generate call


class Latencies(BaseModel):
    """Latencies (ms) and throughputs (tok/s, aggregate over the batch) of one generate call."""

    model_config = ConfigDict(extra="forbid")

    ttft_ms: float
    tpot_ms: float | None
    itl_ms: list[float]
    e2e_ms: float
    prefill_tok_s: float
    decode_tok_s: float | None


def derive_latencies(
    step_ms: Sequence[float],
    *,
    batch: int,
    context_tokens: int,
    new_tokens: int,
    e2e_ms: float | None = None,
) -> Latencies:
    """Latencies and throughputs of one repeat from its step times.

    `step_ms`: ms since the generate call started, one per step (`StepClock.elapsed_ms()`);
    the first is the first token. `new_tokens`: tokens generated per sequence, COUNTED from the
    outputs by the caller (not the requested max). `e2e_ms`: the whole call
    (`StepClock.total_ms()`); defaults to the last step time.

    - TTFT = step_ms[0]
    - ITL  = [step_ms[i] - step_ms[i-1] for i >= 1]
    - TPOT = mean(ITL) = (step_ms[-1] - step_ms[0]) / (len(step_ms) - 1)   (None for one step)
    - prefill_tok_s = batch × context_tokens / TTFT
    - decode_tok_s  = batch × (new_tokens − 1) / (e2e − TTFT)   (None if new_tokens < 2)

    The first token comes out of prefill, hence `new_tokens − 1` decoded tokens. When
    sequences of a batch may stop early (EOS), generate with min_new_tokens = max_new_tokens so
    that `batch × new_tokens` is what was produced.
    """
    steps = _check_steps(step_ms)
    _check_counts(batch, context_tokens, new_tokens)
    ttft_ms = steps[0]
    end_ms = steps[-1] if e2e_ms is None else float(e2e_ms)
    if not math.isfinite(end_ms) or end_ms < steps[-1]:
        raise ValueError(
            f"e2e_ms ({end_ms}) must be finite and >= the last step time ({steps[-1]} ms)"
        )
    itl_ms = [later - earlier for earlier, later in itertools.pairwise(steps)]
    decode_ms = end_ms - ttft_ms
    decodes = new_tokens >= 2 and decode_ms > 0
    return Latencies(
        ttft_ms=ttft_ms,
        tpot_ms=float(np.mean(itl_ms)) if itl_ms else None,
        itl_ms=itl_ms,
        e2e_ms=end_ms,
        prefill_tok_s=batch * context_tokens / (ttft_ms / 1e3),
        decode_tok_s=batch * (new_tokens - 1) / (decode_ms / 1e3) if decodes else None,
    )


def _check_steps(step_ms: Sequence[float]) -> list[float]:
    steps = [float(value) for value in step_ms]
    if not steps:
        raise ValueError("derive_latencies needs at least one step time (no marks were recorded)")
    if not all(math.isfinite(value) for value in steps) or steps[0] <= 0:
        raise ValueError(f"step times must be finite and the first > 0 ms, got {steps[:3]}...")
    if any(later < earlier for earlier, later in itertools.pairwise(steps)):
        raise ValueError("step times must be non-decreasing (ms since the call started)")
    return steps


def _check_counts(batch: int, context_tokens: int, new_tokens: int) -> None:
    for name, value in (
        ("batch", batch),
        ("context_tokens", context_tokens),
        ("new_tokens", new_tokens),
    ):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
