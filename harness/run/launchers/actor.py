"""A group in a fresh Ray actor: a new process that imports its engine (≈5 s) and measures the
group there. The path of a group that cannot fork, and of every group with `HARNESS_FORKSERVER=0`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from harness.run.launchers.base import GroupCall, Launched, device_part

if TYPE_CHECKING:
    from harness.backends.base import WindowScores
    from harness.row import ProcessPath
    from harness.run import forking
    from harness.run.contracts import GroupItem, WorkContext
    from harness.run.sweep import Work
    from harness.spec.scenario import Point

ACTOR = "harness.run.worker:GroupActor"  # implements GroupActor below


class GroupActor(Protocol):
    """What this launcher asks of the fresh actor that measures one group on a node in its own
    process (harness.run.worker implements it; loaded from ACTOR, or handed in)."""

    def __init__(self, simulate_on_cpu: bool = False) -> None: ...

    def measure(
        self, work: Work, points: list[Point], ctx: WorkContext, ref: WindowScores | None
    ) -> Iterator[tuple[GroupItem | forking.Started, str]]:
        """Yields `forking.Started` once, then each item of the group (harness.run.contracts
        .GroupItem), each with the Ray node id that produced it."""
        ...


class ActorLauncher:
    """Implements harness.run.launchers.base.Launcher. `actor`: the group actor class (default:
    the worker's, loaded from ACTOR)."""

    path: ProcessPath = "fresh"

    def __init__(self, actor: type[GroupActor] | None = None) -> None:
        import ray

        self.ray = ray
        self.remote: Any = ray.remote(max_restarts=0, max_task_retries=0)(
            actor or device_part(ACTOR)
        )

    def unable(self, work: Work, points: list[Point]) -> str | None:
        return None  # any group runs in a fresh process

    def because(self, why: str) -> str:
        return f"a fresh process per group, importing its engine ({why})"

    def prepare(self, needs: list[dict[str, float]]) -> None:
        return None

    def launch(self, call: GroupCall, options: dict[str, Any]) -> Launched:
        actor = self.remote.options(**options).remote(call.simulate_on_cpu)
        stream = actor.measure.options(num_returns="streaming").remote(
            call.work, call.points, call.ctx, call.reference
        )
        return Launched(stream, actor)

    def unwrap(self, item: Any) -> Any:
        return item

    def finished(self, launched: Launched) -> None:
        self.ray.kill(launched.process)

    def stop(self, launched: Launched) -> None:
        self.ray.kill(launched.process)
