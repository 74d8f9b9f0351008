"""The launcher protocol (harness.run.launchers): each of the three process paths runs a group
and streams its items back, read the one way the driver reads them.

The group here is a stand-in (no engine): two points, one row each, the row's `error` naming the
process that made it. The inline launcher runs it in this process; the forked launcher in a child
of a real host server's forkserver (its relay task stood in for by a plain call, no Ray); the
actor launcher in a fresh Ray actor on a local node. Then the driver's choice among launchers,
with stand-in launchers.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.errors import UserInputError
from harness.row import ResultRow
from harness.run import forking, sweep
from harness.run.contracts import GroupItem, WorkContext, point_row
from harness.run.launchers import base, forked, inline
from harness.run.launchers.base import GroupCall, Launched
from harness.spec.quality import QualitySettings
from harness.spec.scenario import Point
from tests import factories as F

QUALITY = QualitySettings(window_tokens=64, max_windows=2, arc_items=2, bootstrap_samples=200)
CORPUS = "c"  # the stand-in rows' corpus hash
closed: list[str] = []  # the stand-in groups that were closed before their last row


def stand_in_rows(points: list[Point], ctx: WorkContext, tag: str) -> Iterator[ResultRow]:
    """A row per point, its error naming who made it: `tag` and the process id."""
    try:
        for p in points:
            yield point_row(
                p, run=ctx.run, corpus_hash=CORPUS, status="ok", error=f"{tag} {os.getpid()}"
            )
    finally:
        closed.append(tag)


handed_plans: list[list[Any]] = []  # the plans each inline stand-in group was handed


def stand_in_group(
    group: Any, points: list[Point], ctx: WorkContext, *, reference: Any, device_override: Any,
    plans: Any,
) -> Iterator[GroupItem]:  # fmt: skip
    """As harness.run.worker.iter_group is called by the inline launcher."""
    handed_plans.append(list(plans))
    return stand_in_rows(points, ctx, f"inline device={device_override}")


def stand_in_child_run(
    work: sweep.Work, points: list[Point], ctx: WorkContext, reference: Any,
    simulate_on_cpu: bool, node_id: str,
) -> Iterator[GroupItem]:  # fmt: skip
    """As harness.run.worker.measure_in_child is called in a forked child."""
    return stand_in_rows(points, ctx, f"forked simulate={simulate_on_cpu} node={node_id}")


class StandInActor:
    """As harness.run.worker.GroupActor: Started first, then each row, with the node's id."""

    def __init__(self, simulate_on_cpu: bool = False) -> None:
        self.simulate_on_cpu = simulate_on_cpu

    def measure(
        self, work: sweep.Work, points: list[Point], ctx: WorkContext, reference: Any
    ) -> Iterator[tuple[Any, str]]:
        yield forking.Started(), "node-z"
        for row in stand_in_rows(points, ctx, f"actor simulate={self.simulate_on_cpu}"):
            yield row, "node-z"


def call(tmp_path: Path, simulate_on_cpu: bool = False) -> GroupCall:
    points = [F.tiny_point(QUALITY, context=16), F.tiny_point(QUALITY, context=32)]
    work = sweep.Work(group=points[0].group, points=points, reference=True, est_seconds=1.0)
    return GroupCall(work, points, F.work_context(tmp_path, QUALITY), None, simulate_on_cpu)


def rows_of(items: list[Any]) -> list[tuple[int, str | None]]:
    return [(r.context, r.error) for r in items if isinstance(r, ResultRow)]


def test_the_inline_launcher_runs_the_group_in_this_process(tmp_path: Path) -> None:
    launcher = inline.InlineLauncher(stand_in_group)
    launched = launcher.launch(call(tmp_path), {})
    items = [(launcher.unwrap(item), node_id) for item, node_id in launched.stream]
    launcher.finished(launched)
    me = os.getpid()
    assert rows_of([i for i, _ in items]) == [
        (16, f"inline device=None {me}"),
        (32, f"inline device=None {me}"),
    ]
    assert {node_id for _, node_id in items} == {None}  # no Ray node
    assert launcher.path == "in-process" and launcher.unable(call(tmp_path).work, []) is None


def test_the_inline_launcher_hands_the_group_the_plans_its_work_carries(tmp_path: Path) -> None:
    from harness import plan as planner
    from harness.spec import catalog

    given = call(tmp_path)
    plans = [planner.plan_point(p, catalog.gpu("cpu")) for p in given.points]
    work = given.work.model_copy(update={"plans": plans})
    handed_plans.clear()
    launcher = inline.InlineLauncher(stand_in_group)
    launcher.launch(GroupCall(work, given.points, given.ctx, None), {})
    assert handed_plans == [plans]


def test_the_inline_launcher_simulates_a_gpu_target_on_the_cpu(tmp_path: Path) -> None:
    launcher = inline.InlineLauncher(stand_in_group)
    launched = launcher.launch(call(tmp_path, simulate_on_cpu=True), {})
    first, _ = next(launched.stream)
    assert first.error == f"inline device=cpu {os.getpid()}"


def test_stopping_an_inline_group_closes_it_before_its_last_row(tmp_path: Path) -> None:
    closed.clear()
    launcher = inline.InlineLauncher(stand_in_group)
    launched = launcher.launch(call(tmp_path), {})
    next(launched.stream)  # one row of two
    launcher.stop(launched)
    assert closed == ["inline device=None"]


def test_a_launcher_loads_the_device_side_part_it_names() -> None:
    from harness.run import host, worker

    assert inline.InlineLauncher().group is worker.iter_group
    assert base.device_part(forked.TASK) is host.relay_group
    assert base.device_part(forked.CHILD_RUN) is worker.measure_in_child
    assert base.device_part(forked.HOST) is host.NodeHost
    assert base.device_part(forked.SERVER) is host.start_server


@pytest.mark.parametrize(
    ("switch", "why"), [("0", "HARNESS_FORKSERVER=0"), ("off", "HARNESS_FORKSERVER=off")]
)
def test_the_forked_launcher_refuses_every_group_when_the_switch_is_off(
    switch: str, why: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESS_FORKSERVER", switch)
    launcher = forked.ForkedLauncher()
    work = call(tmp_path).work
    assert launcher.unable(work, work.points) == why
    assert not launcher.forks_any([work])


def test_the_forked_launcher_refuses_a_group_with_its_own_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESS_FORKSERVER", "1")
    launcher = forked.ForkedLauncher()
    point = F.tiny_point(QUALITY, backend="vllm")
    work = sweep.Work(group=point.group, points=[point], reference=True, est_seconds=1.0)
    mine = call(tmp_path).work
    assert launcher.unable(work, [point]) == (
        "a vllm group with its own processes (its engine core, or a server)"
    )
    assert launcher.unable(mine, mine.points) is None
    assert launcher.forks_any([work, mine]) and not launcher.forks_any([work])


def test_a_switch_value_that_is_no_switch_is_refused_when_the_launcher_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HARNESS_FORKSERVER", "maybe")
    with pytest.raises(UserInputError, match="HARNESS_FORKSERVER"):
        forked.ForkedLauncher()


class RelayedHere:
    """The relay task (harness.run.host.relay_group) as a plain call: the group's payload to
    this node's host server, each child message back as the task yields it."""

    def __init__(self, server: forking.ServerInfo) -> None:
        self.server = server
        self.asked: list[dict[str, Any]] = []

    def options(self, **options: Any) -> RelayedHere:
        self.asked.append(options)
        return self

    def remote(self, payload: bytes, hosts: dict[str, Any]) -> Iterator[tuple[Any, str]]:
        from harness.run import host

        request = host.Request(payload, host.device_env(), {"node_id": "node-y"}, os.getpid())
        for message in host.run_group_via(self.server, request):
            if isinstance(message, host.Pickled):
                yield message.data, "node-y"
            elif isinstance(message, forking.Fallback):
                yield message, "node-y"
            else:
                yield forking.Started(), "node-y"


@pytest.mark.engine  # the host server's forkserver imports torch
def test_the_forked_launcher_runs_the_group_in_a_child_of_the_nodes_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.run import host

    monkeypatch.setenv("HARNESS_FORKSERVER", "1")
    launcher = forked.ForkedLauncher(child_run=stand_in_child_run)
    with host.start_server() as server:
        launcher.remote_task = RelayedHere(server.info)
        launched = launcher.launch(call(tmp_path, simulate_on_cpu=True), {"num_cpus": 1})
        items = [launcher.unwrap(item) for item, _ in launched.stream]
        launcher.finished(launched)
    assert isinstance(items[0], forking.Started)
    (_, first), (_, second) = rows_of(items)
    tag, pid = str(first).rsplit(" ", 1)
    assert tag == "forked simulate=True node=node-y" and second == first
    assert int(pid) not in (os.getpid(), server.process.pid)  # a child of its forkserver
    assert [r.context for r in items[1:]] == [16, 32]
    assert launcher.remote_task.asked == [{"num_cpus": 1, "num_returns": "streaming"}]
    assert launcher.path == "forkserver"


@pytest.mark.ray
@pytest.mark.slow  # a local Ray node starts (about 20 s here, more under load)
def test_the_actor_launcher_runs_the_group_in_a_fresh_actor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    from harness.run.launchers.actor import ActorLauncher

    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        launcher = ActorLauncher(StandInActor)
        launched = launcher.launch(call(tmp_path, simulate_on_cpu=True), {"num_cpus": 0})
        items = []
        for ref in launched.stream:
            item, node_id = ray.get(ref)
            items.append(launcher.unwrap(item))
            assert node_id == "node-z"
        launcher.finished(launched)
    finally:
        ray.shutdown()
    assert isinstance(items[0], forking.Started)
    (_, first), (_, second) = rows_of(items)
    tag, pid = str(first).rsplit(" ", 1)
    assert tag == "actor simulate=True" and second == first
    assert int(pid) != os.getpid()  # a process of its own
    assert [r.context for r in items[1:]] == [16, 32]
    assert launcher.path == "fresh"


# --- the driver's choice ----------------------------------------------------------------------


class StandInLauncher:
    """A launcher that refuses every group (`refuses`) or takes each; what it launched."""

    def __init__(self, path: Any, refuses: str | None = None) -> None:
        self.path, self.refuses, self.launched = path, refuses, []

    def unable(self, work: sweep.Work, points: list[Point]) -> str | None:
        return self.refuses

    def because(self, why: str) -> str:
        return f"{self.path} because {why}"

    def prepare(self, needs: list[dict[str, float]]) -> None: ...

    def launch(self, call: GroupCall, options: dict[str, Any]) -> Launched:
        self.launched.append(call.work.group.label)
        return Launched(stream=f"{self.path}-stream", process=f"{self.path}-process")

    def unwrap(self, item: Any) -> Any:
        return item

    def finished(self, launched: Launched) -> None: ...

    def stop(self, launched: Launched) -> None: ...


@pytest.mark.ray  # the driver imports Ray (it starts none here)
@pytest.mark.parametrize(
    ("refuses", "fell_back", "runs_in", "notes"),
    [
        (None, None, "forkserver", []),
        ("cannot fork", None, "fresh", ["fresh because cannot fork"]),
        (None, "the host fell back", "fresh", ["fresh because the host fell back"]),
    ],
)
def test_the_driver_runs_a_group_in_the_first_launcher_that_takes_it(
    tmp_path: Path, refuses: str | None, fell_back: str | None, runs_in: str, notes: list[str]
) -> None:
    from harness.run import driver

    first, last = StandInLauncher("forkserver", refuses), StandInLauncher("fresh")
    said: list[str] = []
    d = driver.Driver(
        tmp_path, F.work_context(tmp_path, QUALITY), [first, last], on_note=said.append
    )
    work = call(tmp_path).work
    for _ in range(2):  # the same reason is said once
        attempt = driver.Attempt(work=work, points=work.points, fresh=fell_back)
        d.launch(attempt)
        assert (attempt.stream, attempt.process) == (f"{runs_in}-stream", f"{runs_in}-process")
        assert attempt.launcher is (first if runs_in == "forkserver" else last)
    assert said == notes
