"""A sweep's session: from a scenario to a run folder, everything around measuring the groups.

`run_sweep` (`harness run`, `harness bench`, the scaling benchmark) holds the run folder's lock,
starts this node's host server before Ray on a local run (the engines import while the scenario is
planned and Ray starts; it is stopped again if no group will fork), connects to (or starts) the
Ray cluster, hands the driver its launchers (harness.run.launchers: a forked child, else a fresh
actor), runs the reference groups first (the others compare with them), draws the progress and
appends the phases' times to the node's history. `measure_here` (`harness measure`) is the same
sweep in this process, without Ray (the inline launcher).

The command line parses, prints what a session returns, and sets the exit code.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from harness.console import err_console, shown
from harness.run.launchers.base import GroupCall, Launcher
from harness.run.launchers.forked import ForkedLauncher, OwnServer

if TYPE_CHECKING:
    from harness.row import ResultRow


@dataclass(frozen=True)
class SweepOutcome:
    """What a session leaves for its caller to print: where the rows are, the sweep's wall time
    (s), the points planned and skipped, and the lines "planned …, took …" (harness.run.history)."""

    run_dir: Path
    wall_s: float
    points: int
    skipped: int
    lines: list[str] = field(default_factory=list)


def run_sweep(
    scenario: Path,
    address: str | None,
    out: Path | None,
    resume: bool,
    gpu: str | None,
    simulate_on_cpu: bool = False,
) -> SweepOutcome:
    """The sweep over Ray (a local node when `address` is None); `out`: default
    results/<scenario name>."""
    forked = ForkedLauncher()  # reads HARNESS_FORKSERVER: a value it does not know is refused now
    with ExitStack() as owned:
        server = None
        if address is None and forked.off is None:  # before Ray: see the module's docstring
            server = forked.start_own_server()
            owned.callback(server.stop)
        from harness.run import store
        from harness.spec import scenario as scen

        run_dir = out or Path("results") / scen.load(scenario).name
        with store.run_lock(run_dir, "run"):  # one writer per run folder
            return sweep_locked(
                scenario, address, run_dir, resume, gpu, simulate_on_cpu, server, forked
            )


def sweep_locked(
    scenario: Path,
    address: str | None,
    run_dir: Path,
    resume: bool,
    gpu: str | None,
    simulate_on_cpu: bool,
    server: OwnServer | None = None,
    forked: ForkedLauncher | None = None,
) -> SweepOutcome:
    """The sweep, its run folder locked. `server`: this node's host server, already started."""
    from harness.run import driver, history, sweep
    from harness.run.launchers.actor import ActorLauncher

    forked = forked or ForkedLauncher()
    started, load = time.perf_counter(), history.foreign_load()
    cluster_s: list[float] = []
    clusters: list[dict[str, Any]] = []  # what connecting said

    def start_cluster(plan: Any) -> dict[str, Any]:
        if server is not None and forked.forks_any(plan.work):
            forked.own_server = server.info  # this node's groups reach it with no host actor
        elif server is not None:
            server.stop()
        began = time.perf_counter()
        cluster = {"cluster": driver.connect(address), "nodes": driver.node_inventory()}
        cluster_s.append(time.perf_counter() - began)
        clusters.append(cluster)
        return cluster

    plan, todo = sweep.begin(
        scenario, run_dir, gpu=gpu, resume=resume, mode="ray", on_start=start_cluster
    )

    def make_driver(**callbacks: Any) -> Any:
        launchers: list[Launcher] = [forked, ActorLauncher()]  # in order of preference
        return driver.Driver(
            run_dir, plan.context, launchers, simulate_on_cpu=simulate_on_cpu, **callbacks
        )

    rows, failures = drive(make_driver, plan, todo, started)
    driver.disconnect(local=local_node(clusters))
    wall_s = time.perf_counter() - started
    sweep.finish_manifest(run_dir, wall_s=wall_s, failures=failures)
    lines = history_lines(scenario, run_dir, plan, rows, wall_s, runner="ray",
                          cluster_s=sum(cluster_s), load=load)  # fmt: skip
    return SweepOutcome(run_dir, wall_s, plan.total_points, len(plan.skipped), lines)


def measure_here(scenario: Path, out: Path, gpu: str | None, resume: bool) -> SweepOutcome:
    """Every group in this process, one after another (no Ray): the inline launcher."""
    from harness.run import history, store, sweep
    from harness.run.launchers.inline import InlineLauncher

    launcher = InlineLauncher()
    with store.run_lock(out, "measure"):  # one writer per run folder
        plan, todo = sweep.begin(scenario, out, gpu=gpu, resume=resume, mode="in-process")
        todo = in_process_order(todo)
        started, load = time.perf_counter(), history.foreign_load()
        tracker, rows = sweep_tracker(plan, todo), []
        with progress_bar(plan.total_points) as (progress, task):
            progress.advance(task, plan.total_points - sum(len(pts) for _, pts in todo))
            tracker.attach(progress, task)
            for work, points in todo:
                tracker.group_started(work.group.label)
                for row in group_here(launcher, GroupCall(work, points, plan.context, None), out):
                    rows.append(row)
                    if row.is_planned_point:
                        progress.advance(task)
                        tracker.row(row.group, row.status)
        wall_s = time.perf_counter() - started
        sweep.finish_manifest(out, wall_s=wall_s)
    lines = history_lines(scenario, out, plan, rows, wall_s, runner="in-process", load=load)
    return SweepOutcome(out, wall_s, plan.total_points, len(plan.skipped), lines)


def in_process_order(todo: list[Any]) -> list[Any]:
    """The groups as one process runs them: the references first (the others pair with their
    scores), and groups with speculative decoding after every group without: vLLM's n-gram
    proposer leaves compiled state in the process that a later plain vLLM engine there fails on
    ("'_lib_fn_wrapper' object has no attribute 'get'"); Ray's paths run each group in a process
    of its own."""
    return sorted(todo, key=lambda item: (not item[0].reference,
                                          item[0].group.speculative is not None))  # fmt: skip


def group_here(launcher: Launcher, call: GroupCall, run_dir: Path) -> Iterator[ResultRow]:
    """One group through a launcher that runs it in this process, with the reference's scores
    read from the run folder (none for a reference group, whose scores are kept there); each
    row written as it comes, then handed on."""
    from harness.row import ResultRow
    from harness.run import store

    work, ctx = call.work, call.ctx
    reference = (
        None if work.reference else store.load_scores(store.reference_artifact(ctx, work.group))
    )
    launched = launcher.launch(replace(call, reference=reference), {})
    for item, _ in launched.stream:
        item = launcher.unwrap(item)
        if isinstance(item, ResultRow):
            store.write_row(run_dir, item)
            yield item
        else:  # the group's WindowScores
            store.keep_scores(ctx, work.group, item)
    launcher.finished(launched)


def local_node(clusters: list[dict[str, Any]]) -> bool:
    """Did this run start its own local Ray node (rather than join a cluster)?"""
    return any(c["cluster"].get("address") == "local" for c in clusters)


def drive(
    make_driver: Callable[..., Any], plan: Any, todo: list[Any], started: float
) -> tuple[list[Any], list[dict[str, Any]]]:
    """The sweep's waves through a driver (references first: the others compare with them),
    with the progress bar or the log's lines; the rows measured and the driver's failures."""
    tracker, rows = sweep_tracker(plan, todo, started), []
    with progress_bar(plan.total_points) as (progress, task):
        progress.advance(task, plan.total_points - sum(len(pts) for _, pts in todo))
        tracker.attach(progress, task)
        groups: dict[str, TaskID] = {}

        def on_row(row: Any, node_id: str | None) -> None:
            rows.append(row)
            if not row.is_planned_point:
                return
            tracker.row(row.group, row.status)
            progress.advance(task)
            if row.group in groups:
                progress.advance(groups[row.group])

        def on_group(label: str, node_id: str | None) -> None:
            where = (node_id or "?")[:8]
            bar = f"  {shown(label)} @ node {shown(where)}"  # a bar's text is markup
            if label in groups:  # a retry on another node: the same bar goes on from where it was
                progress.update(groups[label], description=f"{bar} (retry)")
                return
            size = next(len(p) for w, p in todo if w.group.label == label)
            groups[label] = progress.add_task(bar, total=size)
            tracker.group_started(label, f"node {where}")

        runner = make_driver(on_row=on_row, on_group=on_group)
        references = [(w, p) for w, p in todo if w.reference]
        others = [(w, p) for w, p in todo if not w.reference]
        for wave in (references, others):
            if wave:
                runner.run_wave(wave)
    return rows, runner.failures if todo else []


def sweep_tracker(plan: Any, todo: list[Any], started: float | None = None) -> Any:
    """The sweep's progress figures (harness.console.SweepProgress) from its calibrated plan;
    `started`: the perf_counter reading the run's clock starts from (the Ray start is in it)."""
    from harness.console import SweepProgress
    from harness.run import history

    todo_points = {w.group.label: len(pts) for w, pts in todo}
    groups, sweep_s = history.progress_groups(plan.phases, todo_points)
    tracker = SweepProgress(
        groups, already_done=plan.total_points - sum(todo_points.values()), sweep_fixed_s=sweep_s
    )
    tracker.start(started)
    return tracker


def history_lines(
    scenario: Path, run_dir: Path, plan: Any, rows: list[Any], wall_s: float, *, runner: str,
    cluster_s: float | None = None, load: float | None = None,
) -> list[str]:  # fmt: skip
    """The phases' times join the node's history (harness.run.history), with the foreign load
    the run began under (`load`); the lines "planned
    3 m 40 s, took 3 m 55 s (+7 %)", per phase where they differ (none when nothing ran)."""
    from harness.run import history, sweep

    if not rows:
        return []
    return history.finish(
        plan.phases, rows, run=run_dir.name, scenario_hash=sweep.scenario_hash(scenario),
        runner=runner, wall_s=wall_s, cluster_s=cluster_s, load=load,
    )  # fmt: skip


@contextlib.contextmanager
def progress_bar(total: int) -> Iterator[tuple[Progress, TaskID]]:
    """A bar on a terminal, its description the sweep's figures (harness.console.SweepProgress:
    the remaining time from the budget model); where stderr is a log, no bar: SweepProgress
    prints a line per point and per finished group."""
    if not err_console.is_terminal:
        quiet = Progress(console=err_console, disable=True)
        yield quiet, quiet.add_task("starting", total=total)
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err_console, transient=False) as progress:
        yield progress, progress.add_task("starting", total=total)
