"""The budget-vs-H200 check: what the recorded runs took, read from their rows, and the table."""

from __future__ import annotations

import pytest

from harness.peers import budget_vs_runs as bh


def test_took_seconds_sums_each_groups_load_once_from_the_recorded_rows() -> None:
    rows = bh.recorded_rows(bh.EXAMPLE / "gpu_ray_rows.json")
    took = bh.took_seconds(rows)
    # two groups, load_s 6.9617 (bf16) and 8.2080 (none): each group's load counted once
    assert took["load"] == pytest.approx(6.961687128999998 + 8.208033155000003)
    assert took["quality"] == pytest.approx(4.042721212999993 + 1.5271109420000002)
    # measured work is Σ measured_s less each row's quality share, never negative here
    assert 0 < took["measured"] < sum(r.measured_s or 0.0 for r in rows)


def test_gap_is_planned_minus_took_over_took() -> None:
    assert bh.gap_pct(15.0, 10.0) == pytest.approx(50.0)
    assert bh.gap_pct(5.0, 10.0) == pytest.approx(-50.0)
    assert bh.gap_pct(1.0, 0.0) is None


def test_a_drifted_scenario_is_named_not_compared() -> None:
    runs = [{"run": "x", "drifted": "plans 3 points, the run recorded 4 rows"}]
    unrecorded = {"points": 2, "groups": 1, "est_seconds": 10.0, "est_phase_seconds": {"load": 10}}
    text = bh.markdown(runs, unrecorded)
    assert "| x | — | — | — | not compared: plans 3 points, the run recorded 4 rows |" in text
    assert "2 points in 1 groups, planned 10 s (load 10 s)" in text


def test_every_recorded_run_is_compared_phase_by_phase() -> None:
    """The shipped scenarios still plan the recorded runs' points, so none is 'drifted', and the
    Ray run (the only one with a wall time) is compared on its whole wall too."""
    runs = [bh.compare_run(r) for r in bh.RECORDED]
    assert all("drifted" not in r for r in runs), runs
    for r in runs:
        assert [p["phase"] for p in r["phases"]][:3] == list(bh.ROW_PHASES)
        assert all(p["planned_s"] > 0 and p["took_s"] > 0 for p in r["phases"])
    ray = next(r for r in runs if r["run"] == "gpu-ray")
    wall = ray["phases"][-1]
    assert wall["phase"] == bh.WALL and wall["took_s"] == pytest.approx(40.996815035)
    # the bound for a fresh node (defaults): within ±50 % of what the run took
    gap = bh.gap_pct(wall["planned_s"], wall["took_s"])
    assert gap is not None and abs(gap) <= 50
