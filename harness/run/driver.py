"""The Ray driver: one task (or actor) per group on a node that matches its target, rows streamed
back.

Rows come back to the driver as they are measured (a streaming generator), so the run folder
lives on the driver's machine and needs no shared filesystem. A lost node ends its actor's
stream; the group's remaining points are retried on another matching node (bounded), and what
still cannot run is written as `node_lost`. Resume is the default: `ok` points are never re-run.

A group's process comes from a launcher (harness.run.launchers), handed in by the sweep's
session in order of preference: a child forked from its node's host (`forked`: the engines
already imported, a group starts in a fraction of a second), else a fresh actor that imports its
engine (`actor`). The first launcher that takes a group runs it; one line says why a group was
passed on, once per reason. A forked group whose host cannot fork it answers `forking.Fallback`
and runs in the next launcher.
"""

from __future__ import annotations

import os
import re
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import corpus
from harness.backends.base import WindowScores
from harness.errors import UserInputError
from harness.row import ResultRow
from harness.run import auth, forking, node, reservation, store, sweep
from harness.run.contracts import WorkContext, point_row
from harness.run.launchers.base import GroupCall, Launched, Launcher
from harness.run.store import keep_scores, load_scores, reference_artifact
from harness.spec.scenario import GroupKey, Point

MAX_ATTEMPTS = 3  # per group: the first try and two retries on another node
PLACEMENT_TIMEOUT_S = 600.0  # an actor no node can host for this long is lost (image pulls)
NODE_WATCH_S = 5.0  # how often the driver asks the GCS which nodes it has marked dead
MONITOR_SCRIPT = "autoscaler/_private/monitor.py"  # Ray's autoscaler monitor, as it is started


def connect(address: str | None) -> dict[str, Any]:
    """Join a cluster, or start a local Ray node advertising this machine's accelerators."""
    auth.require_token_mode()  # before Ray is imported where possible: its core reads it once
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if ray.is_initialized():
        if not address or ray.get_runtime_context().gcs_address == address:
            return {"address": "existing"}
        ray.shutdown()  # connected elsewhere (an earlier run in this process): not that cluster
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        node.reachable(address)  # a head that is not there: one line, not minutes of retries
        auth.require_token_to_join(address)
        if re.fullmatch(r"[^/]+:\d{1,5}", address):  # HOST:PORT (not auto, not ray://)
            auth.check_token_accepted(address)  # a wrong token: one line within seconds
        try:
            ray.init(address=address, log_to_driver=False)
        except (ConnectionError, TimeoutError, RuntimeError, ray.exceptions.RayError) as exc:
            cause = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            raise UserInputError(
                f"cannot join the Ray cluster at {address}: {cause}; {auth.refused_hint()}",
                field="--address",
            ) from None
        return {"address": address}
    auth.ensure_token()
    inventory = node.detect()
    too_long = socket_path_problem()
    if too_long:
        raise UserInputError(too_long)
    try:
        ray.init(
            address="local",  # a cluster of our own, never one another user started here
            num_cpus=os.cpu_count(),
            num_gpus=inventory.gpu_count,
            resources=node.ray_resources(inventory),
            labels=node.ray_labels(inventory),
            include_dashboard=False,
            log_to_driver=False,
        )
    except (OSError, ValueError, RuntimeError, TimeoutError, ray.exceptions.RayError) as exc:
        cause = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise UserInputError(
            f"cannot start a local Ray node: {cause}; `harness measure` runs without Ray"
        ) from None
    return {"address": "local", "inventory": inventory.model_dump()}


# A unix socket's path holds at most 107 bytes on Linux (103 on macOS); Ray puts its sockets at
# <temp>/ray/session_<date>_<time>_<µs>_<pid>/sockets/plasma_store (ray/_private/node.py,
# validate_socket_filepath): 66 bytes after <temp>/ray at most.
SOCKET_MAX_BYTES = 103 if sys.platform.startswith("darwin") else 107
SESSION_SOCKET_BYTES = 66


def ray_temp_dir() -> str:
    """Where a local Ray node keeps its session (Ray's rule, ray/_common/utils.py,
    get_default_system_temp_dir): $RAY_TMPDIR, else $TMPDIR on Linux, else /tmp; then ray/."""
    base = os.environ.get("RAY_TMPDIR")
    if base is None and sys.platform.startswith("linux"):
        base = os.environ.get("TMPDIR")
    return os.path.join(base or "/tmp", "ray")


def socket_path_problem() -> str | None:
    """One line where a local Ray node's sockets would not fit a unix socket path (Ray would
    fail with a long traceback after starting its processes), else None."""
    temp = ray_temp_dir()
    longest = len(temp.encode()) + SESSION_SOCKET_BYTES
    if longest <= SOCKET_MAX_BYTES:
        return None
    room = SOCKET_MAX_BYTES - SESSION_SOCKET_BYTES - len("/ray")
    return (
        f"cannot start a local Ray node: its socket paths under {temp} would reach {longest} "
        f"bytes, over the {SOCKET_MAX_BYTES} a unix socket path holds; set RAY_TMPDIR to a "
        f"folder of at most {room} bytes (e.g. RAY_TMPDIR=/tmp)"
    )


def disconnect(*, local: bool) -> None:
    """End this driver's Ray session once its sweep is done: a local node that `connect`
    started (`local`) stops with it; a joined cluster only loses this driver. Ray's own exit
    hook would do the same after a 0.5 s pause for log lines, which this driver does not take
    (log_to_driver=False)."""
    import ray

    if not ray.is_initialized():
        return
    if local:
        stop_local_monitor()
    ray.shutdown()


def stop_local_monitor() -> None:
    """Stop the autoscaler monitor of the local node this driver started (its child process)
    before `ray.shutdown()`, which stops it only after the GCS: its SIGTERM handler then reports
    to the stopped GCS until Ray's 1 s grace ends and Ray kills it (1.0 s of every local run's
    1.1-1.3 s shutdown here; 0.1 s without it). Nothing autoscales a local node; a joined
    cluster's monitor is not this process's child."""
    import psutil

    for child in psutil.Process().children():
        try:
            if MONITOR_SCRIPT in " ".join(child.cmdline()):
                child.kill()
        except psutil.Error:
            continue


def placement(target: str, simulate_on_cpu: bool) -> dict[str, Any]:
    """Actor options for a target. Simulation (tests only) routes by vendor but takes no GPU."""
    options = node.actor_options(target)
    if simulate_on_cpu:
        options = {**options, "num_gpus": 0, "num_cpus": 0}
    return options


def node_inventory() -> list[dict[str, Any]]:
    import ray

    return [
        {
            "node_id": n["NodeID"],
            "address": n.get("NodeManagerAddress"),
            "alive": n["Alive"],
            "resources": n.get("Resources", {}),
            "labels": n.get("Labels", {}),
        }
        for n in ray.nodes()
    ]


def has_capacity(group: GroupKey, simulate_on_cpu: bool) -> bool:
    """Could the cluster host this group at all (its one card, or all the cards its layout
    reserves: harness.run.reservation)?"""
    import ray

    needed = reservation.total(group, placement(group.target, simulate_on_cpu))
    totals = ray.cluster_resources()
    return all(totals.get(name, 0.0) >= amount for name, amount in needed.items())


@dataclass
class Attempt:
    work: sweep.Work
    points: list[Point]
    tries: int = 1
    launcher: Launcher | None = None  # the launcher that started its process
    process: Any = None  # what that launcher ends the process by (an actor's handle)
    stream: Any = None
    node_id: str | None = None
    received: set[str] = field(default_factory=set)
    fresh: str | None = None  # why this group runs in the last launcher (None: any may take it)
    # the placement group holding a layout's cards (harness.run.reservation); None: one card
    reserved: Any = None


class NodeLost(RuntimeError):
    """The GCS marked a running group's node dead. Ray fails an actor's stream as soon as it
    does (the GCS fails the node's actors), but a task's only once the call to its worker fails:
    on a node cut off from the network, when gRPC's keepalive gives up (300 s + 120 s by
    default). The driver gives up on such a task's stream itself (`Driver.check_lost_nodes`)."""


def failure_text(exc: BaseException) -> str:
    """An actor's failure in one line's worth: a task error names the exception it carries
    (e.g. "RayTaskError: ChildDied: … killed by signal 9 (SIGKILL)"), not its traceback."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(exc).__name__}: {type(cause).__name__}: {str(cause)[:300]}"
    return f"{type(exc).__name__}: {str(exc)[:300]}"


class Driver:
    def __init__(
        self,
        run_dir: Path,
        ctx: WorkContext,
        launchers: list[Launcher],
        *,
        simulate_on_cpu: bool = False,
        on_row: Callable[[ResultRow, str | None], None] | None = None,
        on_group: Callable[[str, str | None], None] | None = None,
        on_note: Callable[[str], None] | None = None,
    ) -> None:
        """`launchers`: in order of preference; the last takes every group (a fresh actor)."""
        import ray

        self.ray = ray
        self.run_dir = run_dir
        self.ctx = ctx
        self.simulate_on_cpu = simulate_on_cpu
        self.on_row = on_row or (lambda row, node_id: None)
        self.on_group = on_group or (lambda label, node_id: None)
        self.launchers = launchers
        self.hosts_tag = uuid.uuid4().hex[:12]
        self.on_note = on_note or (lambda line: print(line, file=sys.stderr, flush=True))
        self.notes: set[str] = set()
        self.corpus_hash = corpus.corpus_hash()
        self.failures: list[dict[str, Any]] = []
        self.nodes_checked = 0.0  # monotonic time of the last look for dead nodes

    def reference_for(self, work: sweep.Work) -> WindowScores | None:
        return None if work.reference else load_scores(reference_artifact(self.ctx, work.group))

    def prepare(self, works: list[tuple[sweep.Work, list[Point]]]) -> None:
        """Each launcher readies what its processes need on the nodes that can run one of
        these groups (the forked launcher: a host on each)."""
        needs = [placement(w.group.target, self.simulate_on_cpu)["resources"] for w, _ in works]
        for launcher in self.launchers:
            launcher.prepare(needs)

    def note(self, line: str) -> None:
        if line not in self.notes:
            self.notes.add(line)
            self.on_note(line)

    def launch(self, attempt: Attempt) -> None:
        """A fresh process per group, from the first launcher that takes it (a child forked
        from its node's host, or a fresh actor). Either way the memory figures of one group
        never carry another's leftovers, and engines that keep device memory release it when
        the process ends."""
        work = attempt.work
        options = self.options_for(attempt)
        launcher = self.launcher_for(attempt)
        reference = self.reference_for(work)
        call = GroupCall(work, attempt.points, self.ctx, reference, self.simulate_on_cpu)
        attempt.node_id = None
        launched = launcher.launch(call, options)
        attempt.launcher = launcher
        attempt.process, attempt.stream = launched.process, launched.stream

    def launcher_for(self, attempt: Attempt) -> Launcher:
        """The first launcher that takes the attempt's group; the last takes any, and says once
        per reason why the group was passed on to it."""
        why = attempt.fresh
        for launcher in self.launchers[:-1]:
            why = why or launcher.unable(attempt.work, attempt.points)
            if why is None:
                return launcher
        self.note(self.launchers[-1].because(why or "no node host given"))
        return self.launchers[-1]

    def launched(self, attempt: Attempt) -> Launched:
        return Launched(attempt.stream, attempt.process)

    def options_for(self, attempt: Attempt) -> dict[str, Any]:
        """The group's actor (or task) options: its one card, or a place in the placement group
        that reserves its layout's cards (made on the attempt's first launch, kept across a
        fallback to a fresh actor, released by `stop`)."""
        group = attempt.work.group
        options = placement(group.target, self.simulate_on_cpu)
        if not reservation.needs_reservation(group):
            return options
        if attempt.reserved is None:
            name = f"harness-{self.hosts_tag}-{uuid.uuid4().hex[:8]}"
            attempt.reserved = reservation.reserve(group, options, name)
        return reservation.scheduled_in(group, options, attempt.reserved)

    def stop(self, attempt: Attempt) -> None:
        """End an attempt's process: its actor, or its task (the child ends with its caller);
        then give back the cards its placement group reserved."""
        try:
            if attempt.launcher is not None and attempt.stream is not None:
                attempt.launcher.stop(self.launched(attempt))
        finally:
            self.release(attempt)

    def release(self, attempt: Attempt) -> None:
        if attempt.reserved is not None:
            reservation.release(attempt.reserved)
            attempt.reserved = None

    def run_wave(self, works: list[tuple[sweep.Work, list[Point]]]) -> None:
        """Launch every group of a wave at once; Ray queues what the cluster cannot host yet."""
        running: dict[Any, Attempt] = {}
        attempts: list[Attempt] = []
        try:
            self.prepare(works)
            for work, points in works:
                attempt = Attempt(work=work, points=points)
                attempts.append(attempt)
                self.launch(attempt)
                running[attempt.stream] = attempt
            self.drain(running)
        finally:  # an error or an interrupt: no placement group outlives its group
            for attempt in attempts:
                if attempt.reserved is not None:
                    self.stop(attempt)

    def drain(self, running: dict[Any, Attempt]) -> None:
        """Take each group's items as they come until every group of the wave has ended."""
        waiting_since = {id(a): time.monotonic() for a in running.values()}
        while running:
            ready, _ = self.ray.wait(list(running), num_returns=1, timeout=5.0)
            self.check_lost_nodes(running, waiting_since)
            if not ready:
                self.check_stalled(running, waiting_since)
                continue
            if ready[0] not in running:  # its node was lost just now: check_lost_nodes retried it
                continue
            attempt = running.pop(ready[0])
            if self.advance(attempt):
                running[attempt.stream] = attempt
                waiting_since[id(attempt)] = time.monotonic()

    def advance(self, attempt: Attempt) -> bool:
        """Take one item from a stream; True while the attempt (or its retry) goes on."""
        from ray.exceptions import RayError

        try:
            item, node_id = self.ray.get(next(attempt.stream))
        except StopIteration:
            try:
                if attempt.launcher is not None:
                    attempt.launcher.finished(self.launched(attempt))
            finally:
                self.release(attempt)  # the cards its placement group held
            return False
        except RayError as exc:
            return self.retry_or_lose(attempt, exc)
        if attempt.launcher is not None:
            item = attempt.launcher.unwrap(item)
        if isinstance(item, forking.Fallback):  # its launcher cannot run it: the last one instead
            attempt.fresh = item.reason
            self.launch(attempt)
            return True
        if attempt.node_id is None:
            attempt.node_id = node_id
            self.on_group(attempt.work.group.label, node_id)
        if isinstance(item, forking.Started):
            return True
        if isinstance(item, ResultRow):
            store.write_row(self.run_dir, item)
            attempt.received.add(item.key)
            self.on_row(item, node_id)
        else:
            keep_scores(self.ctx, attempt.work.group, item)
        return True

    def remaining(self, attempt: Attempt) -> list[Point]:
        return [p for p in attempt.points if p.key(self.corpus_hash) not in attempt.received]

    def retry_or_lose(self, attempt: Attempt, exc: BaseException) -> bool:
        left = self.remaining(attempt)
        self.failures.append(
            {
                "group": attempt.work.group.label,
                "node_id": attempt.node_id,
                "error": failure_text(exc),
                "points_left": len(left),
                "attempt": attempt.tries,
            }
        )
        self.stop(attempt)
        group = attempt.work.group
        if left and attempt.tries < MAX_ATTEMPTS and has_capacity(group, self.simulate_on_cpu):
            retry = Attempt(
                work=attempt.work, points=left, tries=attempt.tries + 1, fresh=attempt.fresh
            )
            self.launch(retry)
            attempt.__dict__.update(retry.__dict__)
            return True
        self.write_lost(attempt.work, left, f"node lost: {type(exc).__name__}")
        return False

    def write_lost(self, work: sweep.Work, points: list[Point], reason: str) -> None:
        for point in points:
            row = point_row(
                point, run=self.ctx.run, corpus_hash=self.corpus_hash, status="node_lost",
                error=reason,
            )  # fmt: skip
            store.write_row(self.run_dir, row)
            self.on_row(row, None)

    def check_lost_nodes(self, running: dict[Any, Attempt], since: dict[int, float]) -> None:
        """An attempt whose node the GCS has marked dead is retried (or lost) now, not when Ray
        fails its stream (see NodeLost); at most once per NODE_WATCH_S. An attempt names its
        node from its first message (`forking.Started`); one still queued has none."""
        if time.monotonic() - self.nodes_checked < NODE_WATCH_S:
            return
        self.nodes_checked = time.monotonic()
        dead = {n["node_id"] for n in node_inventory() if not n["alive"]}
        for stream, attempt in list(running.items()):
            if attempt.node_id not in dead:
                continue
            running.pop(stream)
            lost = NodeLost(f"the GCS marked node {attempt.node_id} dead mid-group")
            if self.retry_or_lose(attempt, lost):
                running[attempt.stream] = attempt
                since[id(attempt)] = time.monotonic()

    def check_stalled(self, running: dict[Any, Attempt], since: dict[int, float]) -> None:
        """An attempt that never started because no node can host it any more is lost."""
        for stream, attempt in list(running.items()):
            started = attempt.node_id is not None
            if started or time.monotonic() - since[id(attempt)] < PLACEMENT_TIMEOUT_S:
                continue
            if not has_capacity(attempt.work.group, self.simulate_on_cpu):
                running.pop(stream)
                self.stop(attempt)
                self.write_lost(attempt.work, self.remaining(attempt), "no node can host it")
