"""The latency SLO and the figures derived from it: pure functions, no I/O.

The targets are the scenario's own type, `spec.SloTargets`; the share of requests that must meet
them is the level's `attainment` (`ServingLevel.attainment`, the scenario's `attainment:`).
Semantics (the DistServe / `vllm bench serve --goodput` definition, per request):

- a request **meets the SLO** when it succeeded, its TTFT ≤ `ttft_ms_p99` and its TPOT ≤
  `tpot_ms_p99`. TPOT = (end-to-end latency − TTFT) / (output tokens − 1); a request with one
  output token has no TPOT and counts as 0 ms, as vLLM counts it. A failed request never meets it.
  (The names say p99 because the scenario states the targets as "p99 ≤ X": with attainment
  0.99 the two readings coincide; with another attainment the per-request rule is what counts.)
- **slo_attainment** = requests meeting the SLO / requests sent (failed ones included).
- **goodput_rps** = requests meeting the SLO / the level's duration (≤ request_throughput, which
  counts every successful request over the same duration).
- **saturated** (per level, within one series of levels ordered by load): throughput stopped
  rising (less than `min_gain` above the best lower level) while latency grew (median end-to-end
  latency more than `min_latency_growth` above the previous level's) - the shape GuideLLM's
  over-saturation check flags.
- **the level at the SLO**: the highest `output_tok_s` among successful levels with a positive
  `output_tok_s` whose `slo_attainment` ≥ the target attainment (None when no level qualifies;
  `qualifies`, `choose_at_slo`). A search's probe meets the SLO when it `qualifies` too
  (harness.modes.serving.search).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol, TypeVar

from pydantic import BaseModel, ConfigDict

from harness.modes.serving.spec import SloTargets


class RequestTiming(BaseModel):
    """One request as the load generator saw it (milliseconds)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ok: bool
    ttft_ms: float
    e2e_ms: float
    input_tokens: int
    output_tokens: int
    itl_ms: tuple[float, ...] = ()
    error: str = ""

    @property
    def tpot_ms(self) -> float | None:
        """(e2e − TTFT) / (output tokens − 1); None for a failed or one-token request."""
        if not self.ok or self.output_tokens <= 1:
            return None
        return (self.e2e_ms - self.ttft_ms) / (self.output_tokens - 1)


def meets(request: RequestTiming, slo: SloTargets) -> bool:
    """Whether one request meets every latency target (see the module docstring)."""
    if not request.ok:
        return False
    tpot = request.tpot_ms
    return request.ttft_ms <= slo.ttft_ms_p99 and (0.0 if tpot is None else tpot) <= slo.tpot_ms_p99


def good_requests(requests: Sequence[RequestTiming], slo: SloTargets) -> int:
    return sum(1 for r in requests if meets(r, slo))


def attainment(requests: Sequence[RequestTiming], slo: SloTargets) -> float:
    """Share of the requests sent that met the SLO (0.0 when none was sent)."""
    return good_requests(requests, slo) / len(requests) if requests else 0.0


def goodput_rps(requests: Sequence[RequestTiming], slo: SloTargets, duration_s: float) -> float:
    """Requests per second that met the SLO."""
    return good_requests(requests, slo) / duration_s if duration_s > 0 else 0.0


def saturated_flags(
    loads: Sequence[float],
    throughputs: Sequence[float],
    latencies: Sequence[float],
    *,
    min_gain: float = 0.05,
    min_latency_growth: float = 0.10,
) -> list[bool]:
    """Per level (in the given order), whether it is past saturation; see the module docstring.

    Levels are compared in order of load; NaN figures (a failed level) are never flagged and
    never serve as the comparison.
    """
    if not len(loads) == len(throughputs) == len(latencies):
        raise ValueError("loads, throughputs and latencies must have the same length")
    order = sorted(range(len(loads)), key=lambda i: loads[i])
    flags = [False] * len(loads)
    best: float | None = None
    previous_latency: float | None = None
    for i in order:
        thr, lat = throughputs[i], latencies[i]
        if math.isnan(thr) or math.isnan(lat):
            continue
        if best is not None and previous_latency is not None:
            stalled = thr < best * (1.0 + min_gain)
            slower = lat > previous_latency * (1.0 + min_latency_growth)
            flags[i] = stalled and slower
        best = thr if best is None else max(best, thr)
        previous_latency = lat
    return flags


class LevelFigures(Protocol):
    """What the choice at the SLO reads from a level (a device-side record, or a result row)."""

    @property
    def status(self) -> str: ...
    @property
    def output_tok_s(self) -> float | None: ...
    @property
    def slo_attainment(self) -> float | None: ...


L = TypeVar("L", bound=LevelFigures)


def qualifies(level: LevelFigures, target_attainment: float) -> bool:
    """Whether a level counts at the SLO: ok, a positive output_tok_s, and an attainment ≥ the
    target (a missing or NaN figure never qualifies)."""
    tok_s, attained = level.output_tok_s, level.slo_attainment
    return (
        level.status == "ok"
        and tok_s is not None
        and tok_s > 0
        and attained is not None
        and attained >= target_attainment
    )


def choose_at_slo(levels: Sequence[L], target_attainment: float) -> L | None:
    """The level at the SLO: the highest output_tok_s among the levels that ``qualify`` (the
    first of equal ones, in the given order); None when none does. The one statement of the
    rule: the results side (harness.modes.serving.price) chooses with it too."""
    qualifying = [level for level in levels if qualifies(level, target_attainment)]
    return max(qualifying, key=lambda level: level.output_tok_s or 0.0, default=None)
