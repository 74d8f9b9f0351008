"""The progress of a group retried on another node: one bar per group, which ends full.

The driver calls `on_group` again when a group's remaining points start on another node (a fresh
attempt) and `on_row` once per row. `harness run` draws those callbacks; here a stand-in Driver
makes them as a real retry does (1 row on node A, the node lost, 3 rows on node B) and the bars
are read back from the Progress that the sweep's session (harness.run.session) drew into.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.progress import Progress, TaskID

from harness.run import driver, session, sweep
from harness.run.contracts import point_row

# Loads an engine or starts Ray: not in `make test-fast` (tests/conftest.py).
pytestmark = pytest.mark.ray

FIXTURE = Path(__file__).parents[1] / "fixtures" / "tiny-sweep.yaml"


class RetryingDriver:
    """Each group: its first point on node A, then (node A lost) the rest on node B."""

    def __init__(self, run_dir: Path, ctx: Any, launchers: Any, **kw: Any) -> None:
        self.ctx, self.on_row, self.on_group = ctx, kw["on_row"], kw["on_group"]
        self.failures: list[dict[str, Any]] = []

    def run_wave(self, works: list[tuple[sweep.Work, list[Any]]]) -> None:
        for work, points in works:
            label = work.group.label
            for i, point in enumerate(points):
                if i in (0, 1):  # first attempt starts; then the retry starts on another node
                    self.on_group(label, "node-a" if i == 0 else "node-b")
                self.on_row(point_row(point, run=self.ctx.run, corpus_hash="c", status="ok"), None)


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> Iterator[Progress]:
    progress = Progress(disable=True)

    @contextlib.contextmanager
    def bar(total: int) -> Iterator[tuple[Progress, TaskID]]:
        yield progress, progress.add_task("starting", total=total)

    monkeypatch.setattr(session, "progress_bar", bar)
    monkeypatch.setattr(driver, "Driver", RetryingDriver)
    monkeypatch.setattr(driver, "connect", lambda address: {"address": "stand-in"})
    monkeypatch.setattr(driver, "node_inventory", lambda: [])
    yield progress


def test_a_retried_group_has_one_bar_that_ends_full(drawn: Progress, tmp_path: Path) -> None:
    session.run_sweep(FIXTURE, None, tmp_path / "run", True, None)
    sweep_task, *group_tasks = drawn.tasks
    assert sweep_task.completed == sweep_task.total
    plan = sweep.prepare(FIXTURE, tmp_path / "run")
    assert len(group_tasks) == len(plan.work)  # a retry adds no second bar
    for task, work in zip(group_tasks, plan.work, strict=True):
        assert (task.completed, task.total) == (len(work.points), len(work.points))
        assert task.description.endswith("@ node node-b (retry)"), task.description
