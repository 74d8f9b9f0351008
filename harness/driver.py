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
from harness.worker import (
    WorkContext,
    keep_scores,
    load_scores,
    point_row,
    reference_artifact,
)

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


def node_threads() -> int:
    """Threads for a CPU group: the CPUs its node advertises to Ray (a CPU group owns its node's
    single accel:cpu slot), never more than this process may run on. Simulated nodes that share
    one machine then do not oversubscribe it."""
    import ray

    here = ray.get_runtime_context().get_node_id()
    advertised = next((n["Resources"].get("CPU", 1) for n in ray.nodes() if n["NodeID"] == here), 1)
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(int(advertised), usable or 1))


class GroupActor:
    """Lives on a worker node; measures one group and streams its rows (and reference scores)."""

    def __init__(self, simulate_on_cpu: bool = False) -> None:
        self.simulate_on_cpu = simulate_on_cpu
        os.environ["OMP_NUM_THREADS"] = str(node_threads())

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

    def reference_for(self, work: sweep.Work) -> WindowScores | None:
        return None if work.reference else load_scores(reference_artifact(self.ctx, work.group))

    def launch(self, attempt: Attempt) -> None:
        """A fresh actor (process) per group: memory figures of one group never carry another's
        leftovers, and engines that keep device memory release it when the process ends."""
        options = placement(attempt.work.group.target, self.simulate_on_cpu)
        attempt.actor = self.actor_cls.options(**options).remote(self.simulate_on_cpu)
        attempt.stream = attempt.actor.measure.options(num_returns="streaming").remote(
            attempt.work, attempt.points, self.ctx, self.reference_for(attempt.work)
        )
        attempt.node_id = None

    def run_wave(self, works: list[tuple[sweep.Work, list[Point]]]) -> None:
        """Launch every group of a wave at once; Ray queues what the cluster cannot host yet."""
        running: dict[Any, Attempt] = {}
        for work, points in works:
            attempt = Attempt(work=work, points=points)
            self.launch(attempt)
            running[attempt.stream] = attempt
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

    def advance(self, attempt: Attempt) -> bool:
        """Take one item from a stream; True while the attempt (or its retry) goes on."""
        from ray.exceptions import RayError

        try:
            kind, payload, node_id = self.ray.get(next(attempt.stream))
        except StopIteration:
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
            row = point_row(
                point, run=self.ctx.run, corpus_hash=self.corpus_hash, status="node_lost",
                error=reason,
            )  # fmt: skip
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
