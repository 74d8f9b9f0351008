"""A sweep's progress (harness.console.SweepProgress): the remaining-time estimate from the plan,
updated with what has been measured, and one line per point and per finished group in a log."""

from __future__ import annotations

import pytest
from rich.progress import Progress

from harness.console import GroupProgress, SweepProgress, duration


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def two_groups(clock: Clock, *, log: bool = True) -> SweepProgress:
    """Two groups of 2 points, each planned 10 s once (load, quality) + 10 s of points' work."""
    groups = {label: GroupProgress(points=2, fixed_s=10.0, work_s=10.0) for label in ("g-a", "g-b")}
    progress = SweepProgress(groups, sweep_fixed_s=5.0, log=log, clock=clock)
    progress.start()
    return progress


def test_before_anything_is_done_the_estimate_is_the_plan_less_the_time_spent() -> None:
    clock = Clock()
    progress = two_groups(clock)
    assert progress.planned_s() == pytest.approx(45.0)
    clock.now = 3.0
    assert progress.remaining_s() == pytest.approx(42.0)


def test_the_estimate_scales_what_is_left_by_measured_over_planned() -> None:
    clock = Clock()
    progress = two_groups(clock)
    clock.now = 50.0  # group a took 50 s where 5 + 20 s were planned: twice the plan
    progress.row("g-a", "ok")
    progress.row("g-a", "ok")
    assert progress.remaining_s() == pytest.approx(20.0 * 50.0 / 25.0)
    clock.now = 60.0
    progress.row("g-b", "oom")  # b's fixed part and half its work: 15 s in 10 s
    planned_done = 5.0 + 20.0 + 15.0
    assert progress.remaining_s() == pytest.approx(5.0 * 60.0 / planned_done)


def test_a_log_gets_a_line_per_point_and_per_finished_group_with_counts_and_eta(
    capsys: pytest.CaptureFixture[str],
) -> None:
    clock = Clock()
    progress = two_groups(clock)
    progress.group_started("g-a", "node 1234abcd")
    for status in ("ok", "error"):
        clock.now += 10.0
        progress.row("g-a", status)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("[0 s] sweep: 2 groups · 0/4 points")
    assert lines[1] == "[0 s] running g-a @ node 1234abcd (2 points)"
    assert "1/4 points · elapsed 10 s · ETA" in lines[2] and "g-a: 1/2 (1 ok)" in lines[2]
    done = lines[-1]
    assert done.startswith("[20 s] group 1/2 done: g-a: 1 error, 1 ok · 2/4 points")
    assert f"ETA {duration(20.0 * 20.0 / 25.0)} (planned 45 s)" in done


def test_on_a_terminal_the_bar_carries_the_same_figures_and_no_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    clock = Clock()
    progress = two_groups(clock, log=False)
    bar = Progress(disable=True)
    task = bar.add_task("starting", total=4)
    progress.attach(bar, task)
    clock.now = 50.0
    progress.row("g-a", "ok")
    progress.row("g-a", "ok")
    description = bar.tasks[0].description
    assert description == f"sweep · ETA {duration(40.0)} of 45 s planned · 2 ok"
    assert capsys.readouterr().err == ""


def test_durations_read_as_minutes_and_hours() -> None:
    assert [duration(s) for s in (0.4, 12.4, 220, 3720)] == ["0 s", "12 s", "3 m 40 s", "1 h 2 m"]
