"""The launcher protocol: how a group of a sweep gets a process to run in.

As optimum-benchmark's `launchers/{inline,process,torchrun}`: the session and the driver ask a
launcher to run a group and read what it streams back; which process that is (this one, a child
forked from the node's host, a fresh actor) is the launcher's business alone.

A launcher's stream yields `(item, node_id)` pairs: `forking.Started` once the group's process
runs, then each `GroupItem` (in the launcher's own wire form, which `unwrap` turns back into
one); or first a `forking.Fallback`, which asks for the next launcher instead.

The device side's parts a launcher starts (the worker's group actor, the host's task) are named
by reference (`"module:attr"`, as `harness.modes` names a mode's parts) and loaded when the
launcher is built: this module and the launchers are the orchestration side.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # the types only: the session starts a host server before it imports more
    from harness.backends.base import WindowScores
    from harness.row import ProcessPath
    from harness.run.contracts import WorkContext
    from harness.run.sweep import Work
    from harness.spec.scenario import Point


@dataclass(frozen=True)
class GroupCall:
    """One group as a launcher is asked to run it: its work (the group, with each point's plan
    as orchestration made it, which travels to the device), its points still to measure, the
    run's context, the reference's scores (None for a reference group), and whether GPU targets
    run on the CPU (tests only)."""

    work: Work
    points: list[Point]
    ctx: WorkContext
    reference: WindowScores | None
    simulate_on_cpu: bool = False


@dataclass
class Launched:
    """A group's process as its launcher started it: the stream of `(item, node_id)` and what
    ends it (an actor's handle; None where the stream itself is the process's end)."""

    stream: Any
    process: Any = None


class Launcher(Protocol):
    """One way to run a group in a process."""

    path: ProcessPath  # what the rows' provenance says about the process that measured them

    def unable(self, work: Work, points: list[Point]) -> str | None:
        """Why this launcher cannot run the group (None: it can)."""
        ...

    def because(self, why: str) -> str:
        """The one line said when this launcher runs a group the launchers before it refused."""
        ...

    def prepare(self, needs: list[dict[str, float]]) -> None:
        """Before a wave: what this launcher's processes need on the nodes that can host one of
        the wave's groups (`needs`: each group's Ray resources)."""
        ...

    def launch(self, call: GroupCall, options: dict[str, Any]) -> Launched:
        """Start the group's process (`options`: its Ray placement)."""
        ...

    def unwrap(self, item: Any) -> Any:
        """One streamed item as the driver reads it (a forked child's pickled bytes, unpickled)."""
        ...

    def finished(self, launched: Launched) -> None:
        """The stream ended: end what is left of the group's process."""
        ...

    def stop(self, launched: Launched) -> None:
        """End the group's process before its stream ends (a failure, a lost node)."""
        ...


def device_part(ref: str) -> Any:
    """The device side's part named `"module:attr"`, imported now."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)
