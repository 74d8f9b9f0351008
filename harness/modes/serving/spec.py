"""The scenario's optional `serving:` block: each vLLM group is also measured behind a server.

    serving:
      concurrency: [1, 4, 16]        # closed-loop clients, and/or
      request_rate: [2.0, 8.0]       # open-loop Poisson arrivals per second
      requests: 64                   # per load level (or duration_s: rate levels only)
      prompt_tokens: {mean: 512, sd: 128}
      output_tokens: {mean: 128, sd: 32}
      slo: {ttft_ms_p99: 2000, tpot_ms_p99: 100}
      attainment: 0.99               # share of requests that must meet every SLO

Read as strictly as the rest of the scenario (no coercion, bounds in the messages). Each load
level of each group becomes one `Point` with a `ServingLevel` (its key differs from every offline
point's: the level and the serving settings are part of it). `duration_s` fixes the request count
of a rate level (⌈rate × duration_s⌉); a closed loop has no arrival rate to fix it, so concurrency
levels need `requests`.

The serving types, each stated once and read by every side of the mode: `Lengths` (a length
distribution), `SloTargets` (the per-request latency targets: `slo`'s rule), `Load` (a level's
load: clients or arrivals) and `ServingLevel`, a `Load` with everything else one level sends
(what `Point.serving` holds). The device's load generator takes a `Load`, `Lengths` and
`SloTargets` as they are.

A serving point's grid columns say its nominal shape: `batch` = the level's concurrency (1 for a
rate level), `context` / `output_tokens` = the mean prompt / output lengths.
"""

from __future__ import annotations

import math
import random
from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_CONCURRENCY = 4096
MAX_REQUEST_RATE = 100_000.0  # requests per second
MAX_REQUESTS = 100_000  # per level
MAX_SERVING_DURATION_S = 3600.0
MAX_LEVELS = 32
MAX_LENGTH = 1 << 20  # tokens
MAX_SLO_MS = 3_600_000.0  # an hour
# what a prompt's decode/encode round trip may add (harness.modes.serving.device.loadgen)
SPARE_TOKENS = 8

Concurrency = Annotated[int, Field(gt=0, le=MAX_CONCURRENCY)]
Rate = Annotated[float, Field(gt=0.0, le=MAX_REQUEST_RATE)]


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class Lengths(_Input):
    """Token lengths per request: round(N(mean, sd)), at least 1."""

    mean: int = Field(gt=0, le=MAX_LENGTH)
    sd: float = Field(0.0, ge=0.0, le=MAX_LENGTH)

    def draw(self, rng: random.Random) -> int:
        """One length from `rng` (a constant `mean` draws nothing from it)."""
        return max(1, round(rng.gauss(self.mean, self.sd)) if self.sd > 0 else self.mean)


def draw_lengths(
    prompt_tokens: Lengths, output_tokens: Lengths, n: int, seed: int
) -> list[tuple[int, int]]:
    """(prompt, output) tokens of `n` requests, drawn in turn from one `random.Random(seed)`: the
    one rule the plan (`ServingLevel.drawn_lengths`) and the load generator's prompts share."""
    rng = random.Random(seed)
    return [(prompt_tokens.draw(rng), output_tokens.draw(rng)) for _ in range(n)]


class SloTargets(_Input):
    """Per-request latency targets in milliseconds (see harness.modes.serving.slo for the rule)."""

    ttft_ms_p99: float = Field(gt=0.0, le=MAX_SLO_MS)
    tpot_ms_p99: float = Field(gt=0.0, le=MAX_SLO_MS)


class Serving(_Input):
    concurrency: list[Concurrency] | None = Field(None, min_length=1, max_length=MAX_LEVELS)
    request_rate: list[Rate] | None = Field(None, min_length=1, max_length=MAX_LEVELS)
    requests: int | None = Field(None, gt=0, le=MAX_REQUESTS)
    duration_s: float | None = Field(None, gt=0.0, le=MAX_SERVING_DURATION_S)
    prompt_tokens: Lengths
    output_tokens: Lengths
    slo: SloTargets
    attainment: float = Field(0.99, gt=0.0, le=1.0)

    @model_validator(mode="after")
    def levels_and_size(self) -> Serving:
        if not self.concurrency and not self.request_rate:
            raise ValueError("give at least one load level: concurrency: [...] and/or request_rate")
        for name in ("concurrency", "request_rate"):
            values = getattr(self, name) or []
            if len(set(values)) != len(values):
                raise ValueError(f"{name} lists a value twice; give each level once")
        if (self.requests is None) == (self.duration_s is None):
            raise ValueError("give exactly one of requests (per level) or duration_s")
        if self.duration_s is not None:
            if self.concurrency:
                raise ValueError(
                    "duration_s fixes the requests of request_rate levels (rate × duration_s); "
                    "concurrency levels have no arrival rate: give requests instead"
                )
            too_many = [r for r in self.request_rate or [] if self.requests_at(r) > MAX_REQUESTS]
            if too_many:
                raise ValueError(
                    f"request_rate {too_many[0]:g} × duration_s {self.duration_s:g} is more than "
                    f"{MAX_REQUESTS:,} requests per level (the limit)"
                )
        return self

    def requests_at(self, request_rate: float | None) -> int:
        """The requests of one level: `requests`, or ⌈rate × duration_s⌉."""
        if self.requests is not None:
            return self.requests
        return max(1, math.ceil((request_rate or 0.0) * (self.duration_s or 0.0)))

    def levels(self, seed: int = 0) -> list[ServingLevel]:
        """Every load level in order: concurrency levels, then rate levels."""
        loads: list[tuple[int | None, float | None]] = [(c, None) for c in self.concurrency or []]
        loads += [(None, r) for r in self.request_rate or []]
        return [
            ServingLevel(
                concurrency=c,
                request_rate=r,
                requests=self.requests_at(r),
                prompt_tokens=self.prompt_tokens,
                output_tokens=self.output_tokens,
                slo=self.slo,
                attainment=self.attainment,
                seed=seed,
            )
            for c, r in loads
        ]


class Load(BaseModel):
    """A level's load: exactly one of closed-loop clients (`concurrency`) or Poisson arrivals per
    second (`request_rate`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    concurrency: int | None = Field(default=None, gt=0)
    request_rate: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def exactly_one_load(self) -> Self:
        if (self.concurrency is None) == (self.request_rate is None):
            raise ValueError("a load level has exactly one of concurrency or request_rate")
        return self

    @property
    def mode(self) -> Literal["concurrency", "request_rate"]:
        return "concurrency" if self.concurrency is not None else "request_rate"

    @property
    def load(self) -> float:
        return float(self.concurrency if self.concurrency is not None else self.request_rate or 0)

    @property
    def label(self) -> str:
        return f"c{self.concurrency}" if self.concurrency is not None else f"r{self.request_rate:g}"


class ServingLevel(Load):
    """One load level of a serving point: what `Point.serving` holds (part of its key): its load
    (`Load`'s fields first), then what it sends and the SLO it is held to."""

    requests: int
    prompt_tokens: Lengths
    output_tokens: Lengths
    slo: SloTargets
    attainment: float
    seed: int = 0

    def drawn_lengths(self) -> list[tuple[int, int]]:
        """(prompt, output) tokens per request, as `device.loadgen.cut_prompts` draws them
        (`draw_lengths`, before a prompt is shortened to fit max_model_len)."""
        return draw_lengths(self.prompt_tokens, self.output_tokens, self.requests, self.seed)

    def longest_sequence(self) -> int:
        """The most tokens one request holds (prompt + output + the round trip's spare)."""
        return max(p + o for p, o in self.drawn_lengths()) + SPARE_TOKENS
