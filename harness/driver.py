"""The Ray driver: one actor per group on a node that matches its target, rows streamed back.

Rows come back to the driver as they are measured (a streaming generator), so the run folder
lives on the driver's machine and needs no shared filesystem. A lost node ends its actor's
stream; the group's remaining points are retried on another matching node (bounded), and what
still cannot run is written as `node_lost`. Resume is the default: `ok` points are never re-run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import corpus, node, store, sweep
from harness.backends.base import WindowScores
from harness.scenario import Point
from harness.schema import ResultRow
from harness.worker import WorkContext, keep_scores, load_scores, reference_artifact

MAX_ATTEMPTS = 3  # per group: the first try and two retries on another node
PLACEMENT_TIMEOUT_S = 600.0  # an actor no node can host for this long is lost (image pulls)


def connect(address: str | None) -> dict[str, Any]:
    """Join a cluster, or start a local Ray node advertising this machine's accelerators."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if ray.is_initialized():
        return {"address": "existing"}
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, log_to_driver=False)
        return {"address": address}
    inventory = node.detect()
    ray.init(
        num_cpus=os.cpu_count(),
        num_gpus=inventory.gpu_count,
        resources=node.ray_resources(inventory),
        labels=node.ray_labels(inventory),
        include_dashboard=False,
        log_to_driver=False,
    )
    return {"address": "local", "inventory": inventory.model_dump()}


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


class GroupActor:
    """Lives on a worker node; measures one group and streams its rows (and reference scores)."""

    def __init__(self, simulate_on_cpu: bool = False) -> None:
        self.simulate_on_cpu = simulate_on_cpu
        threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
        os.environ["OMP_NUM_THREADS"] = str(threads)

    def where(self) -> dict[str, Any]:
        import ray

        ctx = ray.get_runtime_context()
        return {"node_id": ctx.get_node_id(), "pid": os.getpid()}

    def measure(
        self,
        work: sweep.Work,
        points: list[Point],
        ctx: WorkContext,
        reference: WindowScores | None,
    ) -> Any:
        import ray
        import torch

        from harness.worker import iter_group

        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
        node_id = ray.get_runtime_context().get_node_id()
        override = "cpu" if self.simulate_on_cpu else None
        for kind, payload in iter_group(
            work.group, points, ctx, reference=reference, device_override=override
        ):
            yield kind, payload, node_id


@dataclass
class Attempt:
    work: sweep.Work
    points: list[Point]
    tries: int = 1
    actor: Any = None
    stream: Any = None
    node_id: str | None = None
    received: set[str] = field(default_factory=set)
    finished: bool = False  # the stream ended normally (its actor may serve another group)


class Driver:
    def __init__(
        self,
        run_dir: Path,
        ctx: WorkContext,
        *,
        simulate_on_cpu: bool = False,
        on_row: Callable[[ResultRow, str | None], None] | None = None,
        on_group: Callable[[str, str | None], None] | None = None,
    ) -> None:
        import ray

        self.ray = ray
        self.run_dir = run_dir
        self.ctx = ctx
        self.simulate_on_cpu = simulate_on_cpu
        self.on_row = on_row or (lambda row, node_id: None)
        self.on_group = on_group or (lambda label, node_id: None)
        self.actor_cls = ray.remote(max_restarts=0, max_task_retries=0)(GroupActor)
        self.corpus_hash = corpus.corpus_hash()
        self.failures: list[dict[str, Any]] = []
        self.idle: dict[str, list[Any]] = {}  # per target: CPU workers between groups

    def reference_for(self, work: sweep.Work) -> WindowScores | None:
        return None if work.reference else load_scores(reference_artifact(self.ctx, work.group))

    def reusable(self, target: str) -> bool:
        """CPU workers serve group after group (imports once per process); a GPU group gets a
        fresh process, since engines do not reliably give all device memory back."""
        return target == "cpu" or self.simulate_on_cpu

    def slots(self, target: str) -> int:
        resources = placement(target, self.simulate_on_cpu)["resources"]
        totals = self.ray.cluster_resources()
        return max(1, min(int(totals.get(name, 0) // need) for name, need in resources.items()))

    def launch(self, attempt: Attempt, actor: Any = None) -> None:
        if actor is None:
            options = placement(attempt.work.group.target, self.simulate_on_cpu)
            actor = self.actor_cls.options(**options).remote(self.simulate_on_cpu)
        attempt.actor = actor
        attempt.stream = actor.measure.options(num_returns="streaming").remote(
            attempt.work, attempt.points, self.ctx, self.reference_for(attempt.work)
        )
        attempt.node_id = None

    def run_wave(self, works: list[tuple[sweep.Work, list[Point]]]) -> None:
        """Start every group a node can take now (Ray queues what the cluster cannot host yet);
        a CPU worker that finishes a group takes the next one of its target."""
        queued: dict[str, list[Attempt]] = {}
        for work, points in works:
            queued.setdefault(work.group.target, []).append(Attempt(work=work, points=points))
        running: dict[Any, Attempt] = {}
        for target, attempts in queued.items():
            first = len(attempts) if not self.reusable(target) else self.slots(target)
            for attempt in attempts[:first]:
                spare = self.idle.get(target)
                self.launch(attempt, spare.pop() if spare else None)
                running[attempt.stream] = attempt
            del attempts[:first]
        waiting_since = {id(a): time.monotonic() for a in running.values()}
        while running:
            ready, _ = self.ray.wait(list(running), num_returns=1, timeout=5.0)
            if not ready:
                self.check_stalled(running, waiting_since)
                continue
            attempt = running.pop(ready[0])
            if self.advance(attempt):
                running[attempt.stream] = attempt
                waiting_since[id(attempt)] = time.monotonic()
                continue
            target = attempt.work.group.target
            if attempt.finished and self.reusable(target):
                if queued[target]:
                    follower = queued[target].pop(0)
                    self.launch(follower, attempt.actor)
                    running[follower.stream] = follower
                    waiting_since[id(follower)] = time.monotonic()
                else:
                    self.idle.setdefault(target, []).append(attempt.actor)
            elif queued.get(target):  # the worker was lost: start a fresh one for the queue
                follower = queued[target].pop(0)
                self.launch(follower)
                running[follower.stream] = follower
                waiting_since[id(follower)] = time.monotonic()

    def close(self) -> None:
        for actors in self.idle.values():
            for actor in actors:
                self.ray.kill(actor)
        self.idle.clear()

    def advance(self, attempt: Attempt) -> bool:
        """Take one item from a stream; True while the attempt (or its retry) goes on."""
        from ray.exceptions import RayError

        try:
            kind, payload, node_id = self.ray.get(next(attempt.stream))
        except StopIteration:
            attempt.finished = True
            if not self.reusable(attempt.work.group.target):
                self.ray.kill(attempt.actor)
            return False
        except RayError as exc:
            return self.retry_or_lose(attempt, exc)
        if attempt.node_id is None:
            attempt.node_id = node_id
            self.on_group(attempt.work.group.label, node_id)
        if kind == "row":
            store.write_row(self.run_dir, payload)
            attempt.received.add(payload.key)
            self.on_row(payload, node_id)
        elif kind == "scores":
            keep_scores(self.ctx, attempt.work.group, payload)
        return True

    def remaining(self, attempt: Attempt) -> list[Point]:
        return [p for p in attempt.points if p.key(self.corpus_hash) not in attempt.received]

    def retry_or_lose(self, attempt: Attempt, exc: BaseException) -> bool:
        left = self.remaining(attempt)
        self.failures.append(
            {
                "group": attempt.work.group.label,
                "node_id": attempt.node_id,
                "error": f"{type(exc).__name__}: {str(exc)[:300]}",
                "points_left": len(left),
                "attempt": attempt.tries,
            }
        )
        self.ray.kill(attempt.actor)
        target = attempt.work.group.target
        if left and attempt.tries < MAX_ATTEMPTS and has_capacity(target, self.simulate_on_cpu):
            retry = Attempt(work=attempt.work, points=left, tries=attempt.tries + 1)
            self.launch(retry)
            attempt.__dict__.update(retry.__dict__)
            return True
        self.write_lost(attempt.work, left, f"node lost: {type(exc).__name__}")
        return False

    def write_lost(self, work: sweep.Work, points: list[Point], reason: str) -> None:
        for point in points:
            row = ResultRow(
                key=point.key(self.corpus_hash),
                run=self.ctx.run,
                status="node_lost",
                error=reason,
                group=work.group.label,
                **point.model_dump(
                    exclude={"warmups", "min_duration_s", "window_tokens", "max_windows"}
                ),
            )
            store.write_row(self.run_dir, row)
            self.on_row(row, None)

    def check_stalled(self, running: dict[Any, Attempt], since: dict[int, float]) -> None:
        """An attempt that never started because no node can host it any more is lost."""
        for stream, attempt in list(running.items()):
            started = attempt.node_id is not None
            if started or time.monotonic() - since[id(attempt)] < PLACEMENT_TIMEOUT_S:
                continue
            if not has_capacity(attempt.work.group.target, self.simulate_on_cpu):
                running.pop(stream)
                self.ray.kill(attempt.actor)
                self.write_lost(attempt.work, self.remaining(attempt), "no node can host it")
