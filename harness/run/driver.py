"""The Ray driver: one task (or actor) per group on a node that matches its target, rows streamed
back.

Rows come back to the driver as they are measured (a streaming generator), so the run folder
lives on the driver's machine and needs no shared filesystem. A lost node ends its actor's
stream; the group's remaining points are retried on another matching node (bounded), and what
still cannot run is written as `node_lost`. Resume is the default: `ok` points are never re-run.

Each node that can run a group gets a host (harness.run.host, handed in by the CLI like the
group's task and actor): a server that has imported the engines once, and forks a fresh child per
group. A group that can fork runs as a Ray task: it holds the group's resources and relays what
the child sends, so Ray reuses its worker process and a group starts in a fraction of a second.
The driver owns the hosts, so they end with the run; on a local run it starts its own node's
server before Ray, so the engines import while Ray starts. `HARNESS_FORKSERVER=0` creates none:
every group then imports its engine in a fresh actor, as a group that cannot fork does (one line
says why, once per reason).
"""

from __future__ import annotations

import os
import pickle
import re
import socket
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from harness import corpus
from harness.backends.base import WindowScores
from harness.errors import UserInputError
from harness.row import ResultRow
from harness.run import auth, forking, node, store, sweep
from harness.run.contracts import GroupItem, WorkContext, point_row
from harness.run.store import keep_scores, load_scores, reference_artifact
from harness.spec.scenario import Point

MAX_ATTEMPTS = 3  # per group: the first try and two retries on another node
PLACEMENT_TIMEOUT_S = 600.0  # an actor no node can host for this long is lost (image pulls)
NODE_WATCH_S = 5.0  # how often the driver asks the GCS which nodes it has marked dead


CONNECT_TIMEOUT_S = 10.0
MONITOR_SCRIPT = "autoscaler/_private/monitor.py"  # Ray's autoscaler monitor, as it is started


def reachable(address: str) -> None:
    """A HOST:PORT address must accept a TCP connection within CONNECT_TIMEOUT_S (Ray itself
    retries an unreachable head for minutes without a word)."""
    match = re.fullmatch(r"\[?([A-Za-z0-9_.:-]+?)\]?:(\d{1,5})", address)
    if not match:
        return  # "auto", ray://…: Ray resolves these itself
    host, port = match.group(1), int(match.group(2))
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        cause = exc.strerror or type(exc).__name__
        raise UserInputError(
            f"no Ray cluster answers at {address} ({cause}); start one with "
            "`harness node start --head` or give the head's HOST:PORT",
            field="--address",
        ) from None


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
        reachable(address)
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
    ray.init(
        address="local",  # a cluster of our own, never one another user started on this machine
        num_cpus=os.cpu_count(),
        num_gpus=inventory.gpu_count,
        resources=node.ray_resources(inventory),
        labels=node.ray_labels(inventory),
        include_dashboard=False,
        log_to_driver=False,
    )
    return {"address": "local", "inventory": inventory.model_dump()}


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


def has_capacity(target: str, simulate_on_cpu: bool) -> bool:
    """Is any live node able to host this target's actor at all?"""
    import ray

    needed = placement(target, simulate_on_cpu)["resources"]
    totals = ray.cluster_resources()
    return all(totals.get(name, 0.0) >= amount for name, amount in needed.items())


@dataclass
class Attempt:
    work: sweep.Work
    points: list[Point]
    tries: int = 1
    actor: Any = None  # the group's fresh actor; None while it runs as a task (a forked child)
    stream: Any = None
    node_id: str | None = None
    received: set[str] = field(default_factory=set)
    fresh: str | None = None  # why this group runs in a fresh actor (None: it may fork)


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


class GroupActor(Protocol):
    """What the driver asks of the fresh actor that measures one group on a node in its own
    process (harness.run.worker implements it; the driver is handed the class and never
    imports the device side)."""

    def __init__(self, simulate_on_cpu: bool = False) -> None: ...

    def measure(
        self, work: sweep.Work, points: list[Point], ctx: WorkContext, ref: WindowScores | None
    ) -> Iterator[tuple[GroupItem | forking.Started, str]]:
        """Yields `forking.Started` once, then each item of the group (harness.run.contracts
        .GroupItem), each with the Ray node id that produced it."""
        ...


class ChildRun(Protocol):
    """A group as a forked child runs it (harness.run.worker.measure_in_child): the driver
    pickles the call (`forking.group_payload`), the child adds its task's node id."""

    def __call__(
        self, work: sweep.Work, points: list[Point], ctx: WorkContext,
        reference: WindowScores | None, simulate_on_cpu: bool, node_id: str,
    ) -> Iterator[GroupItem]: ...  # fmt: skip


class GroupTask(Protocol):
    """The task that relays one group from a child of its node's host (harness.run.host
    .relay_group); `hosts`: node id -> that node's host actor (the driver's own node: its
    `forking.ServerInfo`). Yields `forking.Started` once the child runs, then each item as
    the child pickled it, each with the node's id; or first a `forking.Fallback`: run this
    group in a fresh actor instead."""

    def __call__(
        self, payload: bytes, hosts: dict[str, Any]
    ) -> Iterator[tuple[bytes | forking.Fallback | forking.Started, str]]: ...


class NodeHost(Protocol):
    """The long-lived actor per node (but the driver's) that starts its node's host server and
    tells groups how to reach it."""

    def __init__(self) -> None: ...


class Driver:
    def __init__(
        self,
        run_dir: Path,
        ctx: WorkContext,
        actor: type[GroupActor],
        *,
        simulate_on_cpu: bool = False,
        on_row: Callable[[ResultRow, str | None], None] | None = None,
        on_group: Callable[[str, str | None], None] | None = None,
        host: type[NodeHost] | None = None,
        task: GroupTask | None = None,
        child_run: ChildRun | None = None,
        on_note: Callable[[str], None] | None = None,
        own_server: forking.ServerInfo | None = None,
    ) -> None:
        """`own_server`: the host server the CLI started on this (the driver's) node before
        Ray; this node's groups reach it with no host actor."""
        import ray

        self.ray = ray
        self.run_dir = run_dir
        self.ctx = ctx
        self.simulate_on_cpu = simulate_on_cpu
        self.on_row = on_row or (lambda row, node_id: None)
        self.on_group = on_group or (lambda label, node_id: None)
        self.actor_cls = ray.remote(max_restarts=0, max_task_retries=0)(actor)
        self.fork_off = forking.forkserver_off() or (
            None if host and task and child_run else "no node host given"
        )
        self.host_cls = None if host is None or self.fork_off else ray.remote(max_restarts=0)(host)
        self.task_fn = None if task is None else ray.remote(max_retries=0)(task)
        self.child_run = child_run
        self.own_server = own_server
        # node id -> its host actor (held: the driver owns them), or this node's own server
        self.hosts: dict[str, Any] = {}
        self.hosts_tag = uuid.uuid4().hex[:12]
        self.on_note = on_note or (lambda line: print(line, file=sys.stderr, flush=True))
        self.notes: set[str] = set()
        self.corpus_hash = corpus.corpus_hash()
        self.failures: list[dict[str, Any]] = []
        self.nodes_checked = 0.0  # monotonic time of the last look for dead nodes

    def reference_for(self, work: sweep.Work) -> WindowScores | None:
        return None if work.reference else load_scores(reference_artifact(self.ctx, work.group))

    def start_hosts(self, works: list[tuple[sweep.Work, list[Point]]]) -> None:
        """A host actor on every live node that can run one of these groups and has none yet,
        pinned to it; it starts importing the engines while Ray places the groups' tasks. This
        node's own server, when the CLI started one, needs none."""
        if self.host_cls is None:
            return
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        needs = [placement(w.group.target, self.simulate_on_cpu)["resources"] for w, _ in works]
        here = self.ray.get_runtime_context().get_node_id()
        for n in node_inventory():
            fits = any(all(n["resources"].get(k, 0) >= v for k, v in r.items()) for r in needs)
            if not n["alive"] or not fits or n["node_id"] in self.hosts:
                continue
            if n["node_id"] == here and self.own_server is not None:
                self.hosts[here] = self.own_server
                continue
            pin = NodeAffinitySchedulingStrategy(node_id=n["node_id"], soft=False)
            name = node.host_name(n["node_id"], self.hosts_tag)
            self.hosts[n["node_id"]] = self.host_cls.options(
                name=name, num_cpus=0, scheduling_strategy=pin
            ).remote()

    def note(self, line: str) -> None:
        if line not in self.notes:
            self.notes.add(line)
            self.on_note(line)

    def launch(self, attempt: Attempt) -> None:
        """A fresh process per group: a child forked from its node's host (through a task), or
        a fresh actor where the group cannot fork. Either way the memory figures of one group
        never carry another's leftovers, and engines that keep device memory release it when
        the process ends."""
        work = attempt.work
        options = placement(work.group.target, self.simulate_on_cpu)
        why = attempt.fresh or self.fork_off or forking.unforkable(work.group, attempt.points)
        reference = self.reference_for(work)
        attempt.node_id = None
        if why is None and self.task_fn is not None and self.child_run is not None:
            attempt.actor = None
            payload = forking.group_payload(
                self.child_run, dict(
                    work=work, points=attempt.points, ctx=self.ctx, reference=reference,
                    simulate_on_cpu=self.simulate_on_cpu,
                ),
            )  # fmt: skip
            attempt.stream = self.task_fn.options(**options, num_returns="streaming").remote(
                payload, self.hosts
            )
            return
        self.note(f"a fresh process per group, importing its engine ({why})")
        attempt.actor = self.actor_cls.options(**options).remote(self.simulate_on_cpu)
        attempt.stream = attempt.actor.measure.options(num_returns="streaming").remote(
            work, attempt.points, self.ctx, reference
        )

    def stop(self, attempt: Attempt) -> None:
        """End an attempt's process: its actor, or its task (the child ends with its caller)."""
        if attempt.actor is not None:
            self.ray.kill(attempt.actor)
        elif attempt.stream is not None:
            self.ray.cancel(attempt.stream, force=True)

    def run_wave(self, works: list[tuple[sweep.Work, list[Point]]]) -> None:
        """Launch every group of a wave at once; Ray queues what the cluster cannot host yet."""
        running: dict[Any, Attempt] = {}
        self.start_hosts(works)
        for work, points in works:
            attempt = Attempt(work=work, points=points)
            self.launch(attempt)
            running[attempt.stream] = attempt
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
            if attempt.actor is not None:
                self.ray.kill(attempt.actor)
            return False
        except RayError as exc:
            return self.retry_or_lose(attempt, exc)
        if isinstance(item, bytes):  # as a forked child pickled it
            item = pickle.loads(item)
        if isinstance(item, forking.Fallback):  # the node cannot fork it: a fresh actor instead
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
        target = attempt.work.group.target
        if left and attempt.tries < MAX_ATTEMPTS and has_capacity(target, self.simulate_on_cpu):
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
            if not has_capacity(attempt.work.group.target, self.simulate_on_cpu):
                running.pop(stream)
                self.stop(attempt)
                self.write_lost(attempt.work, self.remaining(attempt), "no node can host it")
