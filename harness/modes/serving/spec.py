"""The scenario's optional `serving:` block: each vLLM group is also measured behind a server.

    serving:
      concurrency: [1, 4, 16]        # closed-loop clients, and/or
      request_rate: [2.0, 8.0]       # open-loop Poisson arrivals per second
      requests: 64                   # per load level (or duration_s: rate levels only)
      prompt_tokens: {mean: 512, sd: 128}
      output_tokens: {mean: 128, sd: 32}
      slo: {ttft_ms_p99: 2000, tpot_ms_p99: 100}
      attainment: 0.99               # share of requests that must meet every SLO
      # optional: what the requests are, and the server's prefix caching as an axis
      workload: {trace: mooncake-conversation, time_scale: 2.0, length_scale: 0.25,
                 max_requests: 40}   # or {multi_turn: {conversations: N, turns: K, ...}}
      prefix_caching: [on, off]      # one level each, on its own server
    # lengths may be long-tailed: {mean: 512, sd: 400, distribution: lognormal}

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
from collections.abc import Iterator
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from harness.errors import UserInputError, quote

MAX_CONCURRENCY = 4096
MAX_REQUEST_RATE = 100_000.0  # requests per second
# The most requests one level or one search probe sends, whatever sets them (requests, rate ×
# duration_s, a workload, min_requests): the plan draws every request's lengths and the load
# generator builds every prompt before the first is sent, so what one level holds in memory grows
# with its requests (10⁵ prompts of a few thousand tokens: about a GB of token ids).
MAX_REQUESTS = 100_000
# The longest a level's or a probe's arrivals may span (requests ÷ rate), whatever sets them: a
# rented node's hour; a rate level may send at most rate × this requests (`max_requests_at`).
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
    """Token lengths per request, at least 1: round(N(mean, sd)) (`distribution: normal`), or
    round(LogNormal) with that mean and sd (`lognormal`: the long tail of real prompts;
    σ² = ln(1 + sd² / mean²), μ = ln(mean) − σ² / 2: the draw's mean and sd are the given ones)."""

    mean: int = Field(gt=0, le=MAX_LENGTH)
    sd: float = Field(0.0, ge=0.0, le=MAX_LENGTH)
    distribution: Literal["normal", "lognormal"] = "normal"

    def draw(self, rng: random.Random) -> int:
        """One length from `rng` (a constant `mean` draws nothing from it)."""
        if self.sd <= 0:
            return self.mean
        if self.distribution == "lognormal":
            sigma2 = math.log1p((self.sd / self.mean) ** 2)
            mu = math.log(self.mean) - sigma2 / 2.0
            return max(1, min(MAX_LENGTH, round(rng.lognormvariate(mu, math.sqrt(sigma2)))))
        return max(1, round(rng.gauss(self.mean, self.sd)))

    @model_serializer(mode="wrap")
    def _normal_as_before(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A normal distribution dumps as before the field existed (points keep their keys)."""
        data: dict[str, Any] = handler(self)
        if data.get("distribution") == "normal":
            data.pop("distribution")
        return data


def draw_lengths(
    prompt_tokens: Lengths, output_tokens: Lengths, n: int, seed: int
) -> list[tuple[int, int]]:
    """(prompt, output) tokens of `n` requests, drawn in turn from one `random.Random(seed)`: the
    one rule the plan (`ServingLevel.drawn_lengths`) and the load generator's prompts share."""
    return list(iter_lengths(prompt_tokens, output_tokens, n, seed))


def iter_lengths(
    prompt_tokens: Lengths, output_tokens: Lengths, n: int, seed: int
) -> Iterator[tuple[int, int]]:
    """`draw_lengths` one request at a time; never more than MAX_REQUESTS (the validation's cap:
    a level past it is a bug, not an input)."""
    if n > MAX_REQUESTS:
        raise ValueError(f"{n:,} requests to draw, more than {MAX_REQUESTS:,} (MAX_REQUESTS)")
    rng = random.Random(seed)
    for _ in range(n):
        yield prompt_tokens.draw(rng), output_tokens.draw(rng)


def max_requests_at(request_rate: float) -> int:
    """The most requests a level or probe at `request_rate` may send: the plan's span of its
    arrivals (requests ÷ rate) at most MAX_SERVING_DURATION_S, and never more than MAX_REQUESTS.
    (duration_s rounds a level's requests up: at duration_s = the cap, a rate whose product is
    not whole is one request over.)"""
    return min(MAX_REQUESTS, math.floor(request_rate * MAX_SERVING_DURATION_S))


def over_cap(requests: int, request_rate: float | None) -> str | None:
    """Why `requests` at `request_rate` (None: a closed loop) break a cap, and what would not, in
    words; None when they do not."""
    if requests > MAX_REQUESTS:
        return (
            f"{requests:,} requests, more than {MAX_REQUESTS:,} per level or probe (the limit): "
            "give fewer (requests, a shorter duration_s or a lower rate, search.min_requests, "
            "the workload's)"
        )
    if request_rate is not None and requests > max_requests_at(request_rate):
        return (
            f"{requests:,} requests at {request_rate:g}/s take {requests / request_rate:.6g} s, "
            f"more than {MAX_SERVING_DURATION_S:g} s per level or probe (the limit): give fewer "
            "requests or a higher rate"
        )
    return None


MOONCAKE_CONVERSATION = "mooncake-conversation"  # the shipped trace (harness/data/traces)
TRACE_BLOCK_TOKENS = 512  # Mooncake's prefix block: one hash id = 512 tokens
MAX_TURNS = 64
MAX_CONVERSATIONS = 10_000


class MultiTurn(_Input):
    """``multi_turn: {conversations: N, turns: K, shared_system_tokens: S}``: N conversations of
    K turns; every prompt starts with the same S-token system prompt, and turn i resends turns
    < i (their user text and answers) before its own user text (``prompt_tokens`` tokens; each
    answer ``output_tokens``)."""

    conversations: int = Field(gt=0, le=MAX_CONVERSATIONS)
    turns: int = Field(gt=0, le=MAX_TURNS)
    shared_system_tokens: int = Field(0, ge=0, le=MAX_LENGTH)


class Workload(_Input):
    """``workload:``, exactly one of:

    - ``{trace: PATH | mooncake-conversation, time_scale: F, length_scale: F, max_requests: N}``:
      the first N requests of a Mooncake-format JSONL trace (``timestamp`` ms, ``input_length``,
      ``output_length``, ``hash_ids``: 512-token prefix blocks); lengths and blocks ×
      ``length_scale`` (a small model's positions), arrival times × ``time_scale``;
    - ``{multi_turn: {...}}`` (`MultiTurn`).

    How prompts are built and sent: harness.modes.serving.workload."""

    trace: str | None = Field(None, min_length=1, max_length=4096)
    time_scale: float = Field(1.0, gt=0.0, le=1000.0)
    length_scale: float = Field(1.0, gt=0.0, le=1.0)
    max_requests: int | None = Field(None, gt=0, le=MAX_REQUESTS)
    multi_turn: MultiTurn | None = None

    @model_validator(mode="after")
    def one_kind(self) -> Self:
        if (self.trace is None) == (self.multi_turn is None):
            raise ValueError("give exactly one of workload.trace or workload.multi_turn")
        if self.trace is not None and self.max_requests is None:
            raise ValueError("a trace workload needs max_requests (the requests it replays)")
        if self.multi_turn is not None and (
            self.max_requests is not None or "time_scale" in self.model_fields_set
            or "length_scale" in self.model_fields_set
        ):  # fmt: skip
            raise ValueError("time_scale, length_scale and max_requests belong to a trace")
        if self.requests > MAX_REQUESTS:
            raise ValueError(
                f"multi_turn sends conversations × turns = {self.requests:,} requests, more than "
                f"{MAX_REQUESTS:,} per level (the limit): give fewer conversations or turns"
            )
        return self

    @property
    def block_tokens(self) -> int:
        """Tokens of one trace hash id's block, scaled (at least 1)."""
        return max(1, round(TRACE_BLOCK_TOKENS * self.length_scale))

    @property
    def requests(self) -> int:
        """The requests the workload sends: the trace's `max_requests`, or N × K turns."""
        if self.multi_turn is not None:
            return self.multi_turn.conversations * self.multi_turn.turns
        return self.max_requests or 0


class SloTargets(_Input):
    """Per-request latency targets in milliseconds (see harness.modes.serving.slo for the rule)."""

    ttft_ms_p99: float = Field(gt=0.0, le=MAX_SLO_MS)
    tpot_ms_p99: float = Field(gt=0.0, le=MAX_SLO_MS)


MAX_PROBES = 32  # a search's step budget, at most
MAX_BANDS = 16
MAX_TOK_S_USER = 100_000.0  # output tok/s per user (1 / TPOT)


def as_tuple(value: object) -> object:
    """A YAML list as the tuple a point (hashed, frozen) holds; anything else as it is."""
    return tuple(value) if isinstance(value, list) else value


class Search(_Input):
    """``search: {request_rate: [LOW, HIGH] | concurrency: [LOW, HIGH], max_probes: N,
    tolerance: F, min_requests: N}``: the highest load that meets the SLO, bracketed then bisected
    (the rule: harness.modes.serving.search). ``tolerance`` is relative: the search stops when
    (failing − passing) / passing ≤ it, or after ``max_probes`` probes; each probe sends at least
    ``min_requests`` (default: the block's ``requests`` / ``duration_s`` rule)."""

    request_rate: tuple[Rate, Rate] | None = None
    concurrency: tuple[Concurrency, Concurrency] | None = None
    max_probes: int = Field(ge=2, le=MAX_PROBES)
    tolerance: float = Field(0.1, ge=0.001, le=1.0)
    min_requests: int | None = Field(None, gt=0, le=MAX_REQUESTS)

    _pairs = field_validator("request_rate", "concurrency", mode="before")(as_tuple)

    @model_validator(mode="after")
    def one_axis_low_below_high(self) -> Self:
        if (self.request_rate is None) == (self.concurrency is None):
            raise ValueError("give exactly one of request_rate: [LOW, HIGH] or concurrency")
        low, high = self.bounds
        if not low < high:
            raise ValueError(f"{self.axis} [{low:g}, {high:g}]: LOW must be below HIGH")
        return self

    @property
    def axis(self) -> Literal["concurrency", "request_rate"]:
        return "concurrency" if self.concurrency is not None else "request_rate"

    @property
    def bounds(self) -> tuple[float, float]:
        low, high = self.concurrency or self.request_rate or [0.0, 0.0]
        return float(low), float(high)


class Interactivity(_Input):
    """``interactivity: {bands: [10, 30, 100], tpot: p50 | p90}``: cost against interactivity
    (output tok/s per user = 1000 / TPOT in ms, at the stated percentile), and the cheapest
    configuration and card per band (≥ each value, tok/s/user)."""

    bands: tuple[Annotated[float, Field(gt=0.0, le=MAX_TOK_S_USER)], ...] = Field(
        (10.0, 30.0, 100.0), min_length=1, max_length=MAX_BANDS
    )
    tpot: Literal["p50", "p90"] = "p50"

    _bands = field_validator("bands", mode="before")(as_tuple)

    @model_validator(mode="after")
    def increasing(self) -> Self:
        if any(b <= a for a, b in zip(self.bands, self.bands[1:], strict=False)):
            raise ValueError("interactivity bands must be strictly increasing (tok/s/user)")
        return self


class Serving(_Input):
    concurrency: list[Concurrency] | None = Field(None, min_length=1, max_length=MAX_LEVELS)
    request_rate: list[Rate] | None = Field(None, min_length=1, max_length=MAX_LEVELS)
    requests: int | None = Field(None, gt=0, le=MAX_REQUESTS)
    duration_s: float | None = Field(None, gt=0.0, le=MAX_SERVING_DURATION_S)
    prompt_tokens: Lengths
    output_tokens: Lengths
    workload: Workload | None = None  # a replayed trace or multi-turn conversations
    # the server's prefix caching as an axis: [on, off] (YAML reads on / off as booleans)
    prefix_caching: list[bool | Literal["on", "off"]] | None = Field(
        None, min_length=1, max_length=2
    )
    slo: SloTargets
    attainment: float = Field(0.99, gt=0.0, le=1.0)
    search: Search | None = None
    interactivity: Interactivity = Field(default_factory=Interactivity)

    @model_validator(mode="after")
    def levels_and_size(self) -> Serving:
        trace = self.workload is not None and self.workload.trace is not None
        if not self.concurrency and not self.request_rate and self.search is None and not trace:
            raise ValueError(
                "give at least one load level: concurrency: [...] and/or request_rate, or search"
            )
        if (
            self.search is not None
            and self.search.axis == "concurrency"
            and self.duration_s is not None
            and self.search.min_requests is None
        ):
            raise ValueError(
                "a concurrency search has no arrival rate for duration_s: give search.min_requests"
            )
        for name in ("concurrency", "request_rate"):
            values = getattr(self, name) or []
            if len(set(values)) != len(values):
                raise ValueError(f"{name} lists a value twice; give each level once")
        if len(set(self.caching_settings())) != len(self.prefix_caching or [None]):
            raise ValueError("prefix_caching lists a value twice; give on and/or off once")
        if self.workload is not None:
            if self.requests is not None or self.duration_s is not None:
                raise ValueError(
                    "a workload fixes its own requests (trace: max_requests; multi_turn: "
                    "conversations × turns): drop requests / duration_s"
                )
        elif (self.requests is None) == (self.duration_s is None):
            raise ValueError("give exactly one of requests (per level) or duration_s")
        elif self.duration_s is not None and self.concurrency:
            raise ValueError(
                "duration_s fixes the requests of request_rate levels (rate × duration_s); "
                "concurrency levels have no arrival rate: give requests instead"
            )
        self.within_caps()
        return self

    def within_caps(self) -> None:
        """Every level and every probe a search may run within the caps (`over_cap`), whatever
        sets its requests. A probe's requests grow with its load and its span (requests ÷ rate)
        shrinks, so a search is checked at HIGH for the count and at LOW for the span."""
        loads: list[tuple[str, int, float | None]] = [
            (f"concurrency {c}", self.requests_at(None), None) for c in self.concurrency or []
        ]
        loads += [(f"request_rate {r:g}", self.requests_at(r), r) for r in self.request_rate or []]
        if self.search is not None:
            open_loop = self.search.axis == "request_rate"
            for end, load in zip(("LOW", "HIGH"), self.search.bounds, strict=True):
                name = f"search.{self.search.axis} {end} {load:g}"
                loads.append((name, self.probe_requests_at(load), load if open_loop else None))
        for name, requests, arrivals in loads:
            why = over_cap(requests, arrivals)
            if why is not None:
                raise ValueError(f"{name}: {why}")

    def trace_within_caps(self, request_rate: float) -> None:
        """The level at a trace's own arrivals (known once the trace is read) within the caps."""
        assert self.workload is not None
        why = over_cap(self.workload.requests, request_rate)
        if why is not None:
            raise UserInputError(
                f"the trace {quote(self.workload.trace)} at time_scale "
                f"{self.workload.time_scale:g} arrives at {request_rate:.3g}/s: {why} (a lower "
                "time_scale or max_requests)",
                field="serving.workload.time_scale",
            )

    def probe_requests_at(self, load: float) -> int:
        """The requests a probe of this block's search sends at `load`."""
        return self.search_level(0).probe_requests(load)

    def search_level(self, seed: int) -> ServingLevel:
        """The search's one point (its probes are found as it runs), before it is given HIGH's
        requests: its load HIGH (the most it may put on the server: its plan), its base requests
        a workload's first min_requests (all of it by default), else the block's requests, at
        least min_requests."""
        assert self.search is not None
        high = self.search.bounds[1]
        c, r = (int(high), None) if self.search.axis == "concurrency" else (None, high)
        if self.workload is not None:
            requests = min(self.search.min_requests or MAX_REQUESTS, self.requests_at(None))
        else:
            requests = self.requests or self.search.min_requests or 1
        search = {"search": self.search, "duration_s": self.duration_s}
        return self.level(c, r, requests, seed).model_copy(update=search)

    def requests_at(self, request_rate: float | None) -> int:
        """The requests of one level: the workload's, `requests`, or ⌈rate × duration_s⌉."""
        if self.workload is not None:
            return self.workload.requests
        if self.requests is not None:
            return self.requests
        return max(1, math.ceil((request_rate or 0.0) * (self.duration_s or 0.0)))

    def levels(
        self, seed: int = 0, trace_arrivals: tuple[float, float] | None = None
    ) -> list[ServingLevel]:
        """Every load level in order: concurrency levels, then rate levels, then, for a trace
        workload, one level at the trace's own arrivals (`trace_arrivals` = (requests/s,
        burstiness) from harness.modes.serving.workload: every rate level arrives that bursty);
        each once per `prefix_caching` value."""
        loads: list[tuple[int | None, float | None]] = [(c, None) for c in self.concurrency or []]
        loads += [(None, r) for r in self.request_rate or []]
        if trace_arrivals is not None and trace_arrivals[0] not in (self.request_rate or []):
            loads.append((None, trace_arrivals[0]))
            self.trace_within_caps(trace_arrivals[0])
        levels = [self.level(c, r, self.requests_at(r), seed) for c, r in loads]
        if self.search is not None:  # one point: its probes are found as it runs
            level = self.search_level(seed)
            # its requests: HIGH's probe's, the most a probe sends (the plan's longest request)
            high = self.search.bounds[1]
            levels.append(level.model_copy(update={"requests": level.probe_requests(high)}))
        burst = {"burstiness": trace_arrivals[1] if trace_arrivals is not None else None}
        return [
            level.model_copy(update={**burst, "prefix_caching": on})
            for on in self.caching_settings()
            for level in levels
        ]

    def caching_settings(self) -> list[bool | None]:
        """The `prefix_caching` axis as the server's flag per value ([None]: no axis, off)."""
        values = self.prefix_caching or []
        return [v if isinstance(v, bool) else v == "on" for v in values] or [None]

    def level(self, c: int | None, r: float | None, requests: int, seed: int) -> ServingLevel:
        """A level of this block: its load, requests and seed, and the block's settings every
        level carries as they are (LEVEL_SETTINGS)."""
        settings = {name: getattr(self, name) for name in LEVEL_SETTINGS}
        return ServingLevel(concurrency=c, request_rate=r, requests=requests, seed=seed, **settings)


# The serving block's settings a level carries under the same names (ServingLevel's fields).
LEVEL_SETTINGS = (
    "prompt_tokens", "output_tokens", "slo", "attainment", "interactivity", "workload",
)  # fmt: skip


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
    interactivity: Interactivity = Field(default_factory=Interactivity)
    # a search (harness.modes.serving.search): the search point holds it with probe None (its
    # load: HIGH); each of its probes holds it too, with its index and its own load and requests
    search: Search | None = None
    probe: int | None = Field(default=None, ge=0)
    duration_s: float | None = None  # a search's: a rate probe sends ⌈rate × duration_s⌉
    # what the requests are (None: independent prompts of drawn lengths; harness.modes.serving.
    # workload builds the others), the arrivals' gamma shape (None: Poisson, 1), and whether the
    # server caches prefixes (None: off, as before the axis existed)
    workload: Workload | None = None
    burstiness: float | None = Field(default=None, gt=0)
    prefix_caching: bool | None = None

    @model_serializer(mode="wrap")
    def _unset_as_before(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """`workload`, `burstiness` and `prefix_caching` dump only when set: a level without
        them keeps the dump and key it had before they existed."""
        data: dict[str, Any] = handler(self)
        for name in ("workload", "burstiness", "prefix_caching", "search", "probe", "duration_s"):
            if data.get(name) is None:
                data.pop(name, None)
        if self.interactivity == Interactivity():  # the default bands: dumped only when set
            data.pop("interactivity", None)
        return data

    def probe_requests(self, load: float) -> int:
        """The requests of one probe of this search at `load`: ⌈load × duration_s⌉ for a rate
        probe of a `duration_s` block, else the block's `requests`; at least min_requests."""
        assert self.search is not None
        least = self.search.min_requests or 1
        if self.duration_s is not None and self.search.axis == "request_rate":
            return max(least, math.ceil(load * self.duration_s))
        return max(least, self.requests)

    @property
    def label(self) -> str:
        own = super().label
        if self.search is None:
            return own
        if self.probe is None:
            low, high = self.search.bounds
            return f"search-{self.search.axis}-{low:g}-{high:g}"
        return f"probe{self.probe}-{own}"

    def drawn_lengths(self) -> list[tuple[int, int]]:
        """(prompt, output) tokens per request, as `prompts.cut_prompts` draws them
        (`draw_lengths`, before a prompt is shortened to fit max_model_len)."""
        return draw_lengths(self.prompt_tokens, self.output_tokens, self.requests, self.seed)

    def longest_sequence(self) -> int:
        """The most tokens one request holds (prompt + output + the round trip's spare)."""
        lengths = iter_lengths(self.prompt_tokens, self.output_tokens, self.requests, self.seed)
        return max(p + o for p, o in lengths) + SPARE_TOKENS  # one request at a time
