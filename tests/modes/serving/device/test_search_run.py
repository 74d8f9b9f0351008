"""The device side of a search (harness.modes.serving.device.run.search_rows): each probe a level
of its own key and row, the next load from the rows so far, then the search's own row; a resumed
run replays the probes stored ok in the run folder and measures only the rest.

The levels come from a recorded sequence: a table of attainment against request rate standing in
for the generator (what `vllm bench serve` against a server would have measured; the real thing
runs in tests/modes/serving/device/test_run.py and `harness measure` on
scenarios/examples/serving-search-cpu.yaml)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import corpus
from harness.modes.serving import search
from harness.modes.serving.device.run import level_settings, search_rows, stored_rows
from harness.row import Part, ResultRow, Serving, Speed, Status
from harness.run import store
from harness.run.contracts import WorkContext, point_row
from harness.spec import scenario as scen
from harness.spec.quality import QualitySettings
from harness.spec.scenario import Point, Reference

SCENARIO = """\
name: search-run-test
models: [tiny-llama]
backend: [vllm]
quantization: [fp32]
batch: [1]
context: [32]
output_tokens: 8
targets: [cpu]
serving:
  requests: 16
  prompt_tokens: {mean: 32}
  output_tokens: {mean: 16}
  slo: {ttft_ms_p99: 500, tpot_ms_p99: 50}
  attainment: 0.9
  search: {request_rate: [1.0, 64.0], max_probes: 8, tolerance: 0.15}
"""
# the recorded sequence: attainment at a request rate (steps: up to each bound)
TABLE = [(10.0, 1.0), (14.0, 0.93), (float("inf"), 0.4)]


def attained(rate: float) -> float:
    return next(value for bound, value in TABLE if rate <= bound)


@pytest.fixture
def search_point(tmp_path: Path) -> Point:
    path = tmp_path / "scenario.yaml"
    path.write_text(SCENARIO)
    points = [p for p in scen.expand(scen.load(path), str(path)).points if p.serving is not None]
    (point,) = points
    return point


def make_row(point: Point, status: Status, error: str | None, parts: list[Part]) -> ResultRow:
    return point_row(
        point, *parts, run="run", corpus_hash=corpus.corpus_hash(), status=status, error=error
    )


class Recorded:
    """A probe measured from TABLE: a row as the device writes one; every load asked for kept."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.asked: list[float] = []
        self.fail_at = fail_at

    def __call__(self, probe: Point) -> tuple[ResultRow, bool]:
        level = probe.serving
        assert level is not None and level.request_rate is not None
        self.asked.append(level.request_rate)
        if self.fail_at is not None and len(self.asked) > self.fail_at:
            return make_row(probe, "error", "the server did not start", []), False
        share = attained(level.request_rate)
        serving = Serving(
            request_rate=level.request_rate,
            requests_sent=level.requests,
            requests_ok=level.requests,
            requests_failed=0,
            output_tok_s=16.0 * level.request_rate,
            goodput_rps=share * level.request_rate,
            slo_attainment=share,
            slo_attainment_target=level.attainment,
            tpot_ms_p90=12.0,
            **level_settings(level),
        )
        return make_row(probe, "ok", None, [Speed(tpot_ms_p50=10.0), serving]), True


def context(run_dir: Path) -> WorkContext:
    return WorkContext(
        run_dir=str(run_dir), run="run", reference=Reference(), quality=QualitySettings(),
        reference_backend="vllm",
    )  # fmt: skip


def run_search(point: Point, stored: dict[str, ResultRow], measure: Recorded) -> list[ResultRow]:
    return list(search_rows(point, stored, corpus.corpus_hash(), measure, make_row))


def test_each_probe_is_a_level_row_of_its_own_and_the_search_row_holds_the_bracket(
    search_point: Point,
) -> None:
    measure = Recorded()
    rows = run_search(search_point, {}, measure)
    *probes, own = rows
    assert search_point.serving is not None and search_point.serving.search is not None
    expected, _ = search.run_search(search_point.serving.search, lambda r: attained(r) >= 0.9)
    # by hand: 1 ✓, 64 ✗, 8 ✓, 22.6 ✗, 13.45 ✓ (0.93), 17.4 ✗, 15.3 ✗ (15.3/13.45 = 1.14 ≤ 1.15)
    assert measure.asked == pytest.approx([1, 64, 8, 22.627, 13.454, 17.448, 15.322], rel=1e-3)
    assert [r.search_probe for r in probes] == list(range(7))
    assert len({r.key for r in rows}) == 8 and own.key == search_point.key(corpus.corpus_hash())
    assert own.status == "ok" and own.search_axis == "request_rate"
    assert own.max_rate_at_slo == pytest.approx(13.454, rel=1e-3) == expected.max_load
    assert (own.search_bracket_low, own.search_bracket_high) == (
        own.max_rate_at_slo,
        probes[-1].request_rate,
    )
    assert own.search_probes == 7 and own.search_stop == "tolerance"
    assert own.output_tok_s is None  # the search's row has no load of its own


def test_a_resumed_search_measures_only_the_probes_not_stored_ok(
    search_point: Point, tmp_path: Path
) -> None:
    first = run_search(search_point, {}, Recorded())
    run_dir = tmp_path / "run"
    for row in first[:3]:  # three probes stored ok, the fourth as an error: to be redone
        store.write_row(run_dir, row)
    store.write_row(run_dir, first[3].model_copy(update={"status": "error"}))
    group = search_point.group
    stored = stored_rows(context(run_dir), group)
    assert set(stored) == {r.key for r in first[:3]}
    measure = Recorded()
    again = run_search(search_point, stored, measure)
    assert measure.asked == pytest.approx([r.request_rate for r in first[3:-1]])
    assert [r.key for r in again] == [r.key for r in first[3:]]  # the stored ones not rewritten
    assert again[-1].model_dump(exclude={"provenance"}) == first[-1].model_dump(
        exclude={"provenance"}
    )


def test_a_search_stored_whole_starts_no_server(search_point: Point, tmp_path: Path) -> None:
    first = run_search(search_point, {}, Recorded())
    run_dir = tmp_path / "run"
    for row in first[:-1]:
        store.write_row(run_dir, row)
    measure = Recorded()
    again = run_search(search_point, stored_rows(context(run_dir), search_point.group), measure)
    assert measure.asked == [] and [r.key for r in again] == [first[-1].key]
    assert again[-1].max_rate_at_slo == first[-1].max_rate_at_slo


def test_a_probe_whose_server_does_not_start_ends_the_search_as_an_error(
    search_point: Point,
) -> None:
    rows = run_search(search_point, {}, Recorded(fail_at=3))
    assert [r.status for r in rows] == ["ok", "ok", "ok", "error", "error"]
    own = rows[-1]
    assert own.search_probes == 3 and own.search_stop is None
    assert own.max_rate_at_slo == 8.0 and own.search_bracket_high == 64.0
