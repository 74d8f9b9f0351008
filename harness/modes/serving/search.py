"""The highest load that meets the SLO, searched (``serving: {search: ...}``): pure functions.

The rule, stated once (the device's probe loop, the plan's budget and the tests read it here):

1. **Bracket.** Probe LOW first: when it does not meet the SLO, no load of the range does (the
   bracket is (none, LOW), stop ``low-fails``). Then HIGH: when it meets it, the range is too
   narrow (the bracket is (HIGH, none), stop ``high-meets``: at least HIGH).
2. **Bisect** the bracket [passing, failing]: the next probe is its midpoint, geometric for a
   request rate (√(passing × failing): the same relative step on either side) and the integer
   ⌊(passing + failing) / 2⌋ for a concurrency.
3. **Stop** when (failing − passing) / passing ≤ ``tolerance`` (``tolerance``), when two
   concurrencies are adjacent (``adjacent``: no integer lies between), or after ``max_probes``
   probes (``max-probes``).

A probe **meets** the SLO when its level qualifies (``slo.qualifies``: ok, output tok/s > 0,
attainment ≥ the target). ``max_rate_at_slo`` is the bracket's passing end: the highest probed
load that met the SLO, with the lowest failing load above it as the bracket's other end. A
resumed search replays its stored probes through the same rule, so it probes the same loads.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from harness.modes.serving.spec import Search, ServingLevel
from harness.spec.scenario import Point

Stop = Literal["low-fails", "high-meets", "tolerance", "adjacent", "max-probes"]


@dataclass(frozen=True)
class Probe:
    """One probed load (requests/s or clients) and whether its level met the SLO."""

    load: float
    meets: bool


@dataclass(frozen=True)
class Outcome:
    """Where a search stands: the bracket (passing end, failing end; None: not found yet or
    beyond the range), the probes run, and why it stopped (None: not done)."""

    passing: float | None
    failing: float | None
    probes: int
    stop: Stop | None

    @property
    def done(self) -> bool:
        return self.stop is not None

    @property
    def max_load(self) -> float | None:
        """``max_rate_at_slo``: the highest probed load that met the SLO (None: none did)."""
        return self.passing


def bracket(probes: Sequence[Probe]) -> tuple[float | None, float | None]:
    """(the highest load that met the SLO, the lowest failing load above it) of the probes."""
    passing = max((p.load for p in probes if p.meets), default=None)
    above = [p.load for p in probes if not p.meets and (passing is None or p.load > passing)]
    return passing, min(above, default=None)


def outcome(search: Search, probes: Sequence[Probe]) -> Outcome:
    """The state of the search after `probes` (in the order they ran), by the module's rule."""
    passing, failing = bracket(probes)
    n = len(probes)
    stop: Stop | None = None
    if n >= 1 and not probes[0].meets:
        stop = "low-fails"
    elif n >= 2 and probes[1].meets:
        stop = "high-meets"
    elif n >= 2 and passing is not None and failing is not None:
        if search.axis == "concurrency" and failing - passing <= 1:
            stop = "adjacent"
        elif (failing - passing) / passing <= search.tolerance:
            stop = "tolerance"
    if stop is None and n >= search.max_probes:
        stop = "max-probes"
    return Outcome(passing=passing, failing=failing, probes=n, stop=stop)


def midpoint(search: Search, passing: float, failing: float) -> float:
    if search.axis == "concurrency":
        return float(math.floor((passing + failing) / 2))
    return math.sqrt(passing * failing)


def next_load(search: Search, probes: Sequence[Probe]) -> float | None:
    """The next load to probe (None: the search is done): LOW, HIGH, then bisection."""
    state = outcome(search, probes)
    if state.done:
        return None
    low, high = search.bounds
    if not probes:
        return low
    if len(probes) == 1:
        return high
    assert state.passing is not None and state.failing is not None
    return midpoint(search, state.passing, state.failing)


def run_search(search: Search, meets: Callable[[float], bool]) -> tuple[Outcome, list[Probe]]:
    """The whole search against `meets(load)` (one probe each): its outcome and probes."""
    probes: list[Probe] = []
    while (load := next_load(search, probes)) is not None:
        probes.append(Probe(load, meets(load)))
    return outcome(search, probes), probes


def worst_case_probes(search: Search) -> int:
    """The most probes the search can run (what `harness plan` budgets): LOW and HIGH, then one
    per bisection until the stopping rule holds, at most ``max_probes``. A rate's two halves
    have the same ratio, so one path is the worst; a concurrency's halves differ by rounding, so
    both are followed (memoised: at most one state per pair of integers)."""
    low, high = search.bounds

    @functools.cache
    def more(passing: float, failing: float, probes: int) -> int:
        state = outcome(search, [Probe(passing, True), Probe(failing, False)])
        if probes >= search.max_probes or state.stop not in (None, "max-probes"):
            return 0
        mid = midpoint(search, passing, failing)
        if search.axis == "request_rate":
            return 1 + more(passing, mid, probes + 1)
        return 1 + max(more(passing, mid, probes + 1), more(mid, failing, probes + 1))

    return min(search.max_probes, 2 + more(low, high, 2))


def worst_case_seconds(search: Search, probe_seconds: Callable[[float], float]) -> float:
    """The plan's seconds for a search: worst_case_probes × the longest probe of the range
    (`probe_seconds(load)` at LOW and at HIGH: a probe at a lower rate spans longer)."""
    low, high = search.bounds
    return worst_case_probes(search) * max(probe_seconds(low), probe_seconds(high))


def probe_level(level: ServingLevel, index: int, load: float) -> ServingLevel:
    """Probe `index` of the search `level` holds, at `load`: its own load and requests (the
    rest as the search's; the key of each probe differs by its index and load)."""
    assert level.search is not None
    axis = level.search.axis
    c, r = (int(load), None) if axis == "concurrency" else (None, load)
    return level.model_copy(
        update={
            "concurrency": c,
            "request_rate": r,
            "requests": level.probe_requests(load),
            "probe": index,
        }
    )


def probe_point(point: Point, index: int, load: float) -> Point:
    """The search point's probe `index` at `load` as a point of its own (its row's key)."""
    assert point.serving is not None
    level = probe_level(point.serving, index, load)
    return point.model_copy(update={"batch": level.concurrency or 1, "serving": level})
