"""A group in a fresh child forked from its node's host server (harness.run.host: the engines
already imported), reached through a Ray task that holds the group's resources and relays what
the child sends: a group starts in a fraction of a second. A group that must not fork
(`forking.unforkable`), or every group with `HARNESS_FORKSERVER=0`, is refused here and runs in
the next launcher (a fresh actor); so is one whose host answers `forking.Fallback`.

The launcher owns the hosts: this node's server, which the session starts before Ray on a local
run (`start_own_server`: the engines import while Ray starts), and a `NodeHost` actor, pinned
and named, on every other node that can run a group of a wave (`prepare`), ended with the run.
"""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from harness.run import forking
from harness.run.launchers.base import GroupCall, Launched, device_part

if TYPE_CHECKING:
    from harness.backends.base import WindowScores
    from harness.row import ProcessPath
    from harness.run.contracts import GroupItem, WorkContext
    from harness.run.sweep import Work
    from harness.spec.scenario import Point

HOST = "harness.run.host:NodeHost"  # implements NodeHost below
TASK = "harness.run.host:relay_group"  # implements GroupTask below
CHILD_RUN = "harness.run.worker:measure_in_child"  # implements ChildRun below
SERVER = "harness.run.host:start_server"  # this node's host server, started by the session


class ChildRun(Protocol):
    """A group as a forked child runs it (harness.run.worker.measure_in_child): the launcher
    pickles the call (`forking.group_payload`), the child adds its task's node id."""

    def __call__(
        self, work: Work, points: list[Point], ctx: WorkContext,
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


class OwnServer(Protocol):
    """This node's host server as the session holds it (harness.run.host.HostServer)."""

    info: forking.ServerInfo

    def stop(self) -> None: ...


class ForkedLauncher:
    """Implements harness.run.launchers.base.Launcher. The device side's parts are handed in or
    loaded from HOST, TASK, CHILD_RUN and SERVER when first used (this node's server starts
    before the rest of the harness is imported). `HARNESS_FORKSERVER` is read here, once: a
    value that is not a switch is refused before anything starts."""

    path: ProcessPath = "forkserver"

    def __init__(
        self, *, host: type[NodeHost] | None = None, task: GroupTask | None = None,
        child_run: ChildRun | None = None,
        own_server: forking.ServerInfo | None = None,
    ) -> None:  # fmt: skip
        self.off = forking.forkserver_off()
        self.host, self.task, self.child_run = host, task, child_run
        self.own_server = own_server  # this node's server: its groups need no host actor
        # node id -> its host actor (held: the run owns them), or this node's own server
        self.hosts: dict[str, Any] = {}
        self.hosts_tag = uuid.uuid4().hex[:12]
        self.remote_task: Any = None  # the task and the host as Ray runs them, made when
        self.remote_host: Any = None  # first needed (after the session connected to Ray)

    def start_own_server(self) -> OwnServer:
        """Start this node's host server (harness.run.host.HostServer: a context manager)."""
        server: OwnServer = device_part(SERVER)()
        return server

    def forks_any(self, work: list[Work]) -> bool:
        """Will a group of this work fork from a node host?"""
        if self.off:
            return False
        return any(forking.unforkable(w.group, w.points) is None for w in work if w.points)

    def unable(self, work: Work, points: list[Point]) -> str | None:
        return self.off or forking.unforkable(work.group, points)

    def because(self, why: str) -> str:
        return f"a child forked from its node's host ({why})"

    def prepare(self, needs: list[dict[str, float]]) -> None:
        """A host actor on every live node that can run one of the wave's groups and has none
        yet, pinned to it; it starts importing the engines while Ray places the groups' tasks.
        This node's own server, when the session started one, needs none."""
        if self.off:
            return
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from harness.run import node
        from harness.run.driver import node_inventory

        if self.remote_host is None:
            self.remote_host = ray.remote(max_restarts=0)(self.host or device_part(HOST))
        here = ray.get_runtime_context().get_node_id()
        for n in node_inventory():
            fits = any(all(n["resources"].get(k, 0) >= v for k, v in r.items()) for r in needs)
            if not n["alive"] or not fits or n["node_id"] in self.hosts:
                continue
            if n["node_id"] == here and self.own_server is not None:
                self.hosts[here] = self.own_server
                continue
            pin = NodeAffinitySchedulingStrategy(node_id=n["node_id"], soft=False)
            name = node.host_name(n["node_id"], self.hosts_tag)
            self.hosts[n["node_id"]] = self.remote_host.options(
                name=name, num_cpus=0, scheduling_strategy=pin
            ).remote()

    def launch(self, call: GroupCall, options: dict[str, Any]) -> Launched:
        if self.remote_task is None:
            import ray

            self.remote_task = ray.remote(max_retries=0)(self.task or device_part(TASK))
        payload = forking.group_payload(
            self.child_run or device_part(CHILD_RUN), dict(
                work=call.work, points=call.points, ctx=call.ctx, reference=call.reference,
                simulate_on_cpu=call.simulate_on_cpu,
            ),
        )  # fmt: skip
        stream = self.remote_task.options(**options, num_returns="streaming").remote(
            payload, self.hosts
        )
        return Launched(stream)

    def unwrap(self, item: Any) -> Any:
        return pickle.loads(item) if isinstance(item, bytes) else item  # as the child pickled it

    def finished(self, launched: Launched) -> None:
        return None  # the child has ended; Ray reuses the task's worker

    def stop(self, launched: Launched) -> None:
        import ray

        ray.cancel(launched.stream, force=True)  # the child ends with its caller
