"""A group in this process, no Ray (`harness measure`): for debugging, and the building block the
other launchers run in their process. Its engine memory is released between groups by each
mode's runner (harness.run.worker.iter_group), not by a process's end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from harness.run.launchers.base import GroupCall, Launched, device_part

if TYPE_CHECKING:
    from harness.row import ProcessPath
    from harness.run.contracts import GroupItem
    from harness.run.sweep import Work
    from harness.spec.scenario import Point

GROUP = "harness.run.worker:iter_group"  # a group's items, in the calling process


class InlineLauncher:
    """Implements harness.run.launchers.base.Launcher. `group`: the function that yields a
    group's items (default: the worker's, loaded from GROUP); its stream's node id is None (no
    Ray node); its process is the group's generator."""

    path: ProcessPath = "in-process"

    def __init__(self, group: Callable[..., Iterator[GroupItem]] | None = None) -> None:
        self.group = group or device_part(GROUP)

    def unable(self, work: Work, points: list[Point]) -> str | None:
        return None

    def because(self, why: str) -> str:
        return f"in this process ({why})"

    def prepare(self, needs: list[dict[str, float]]) -> None:
        return None

    def launch(self, call: GroupCall, options: dict[str, Any]) -> Launched:
        device = "cpu" if call.simulate_on_cpu else None
        items = self.group(
            call.work.group, call.points, call.ctx, reference=call.reference,
            device_override=device, plans=call.work.plans,
        )  # fmt: skip
        return Launched(((item, None) for item in items), items)

    def unwrap(self, item: Any) -> Any:
        return item

    def finished(self, launched: Launched) -> None:
        return None

    def stop(self, launched: Launched) -> None:
        launched.process.close()  # the group's runners close what they loaded
