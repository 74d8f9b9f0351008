"""The terminal: one console for tables and one for errors and progress, shared by the CLI.

Logs (no terminal) get 160 columns, so tables stay readable in `make bench > log`, or the
columns ``HARNESS_LOG_WIDTH`` names (the tests render at a fixed wide width this way, so no
line they read is wrapped where a temporary path happens to end). A sweep's
progress (`SweepProgress`) is a rich bar on a terminal and one line per point and per finished
group in a log, with the same figures: points done / total, elapsed time, the remaining-time
estimate and the group's status counts.

Names from the user's disk (a folder, a file, a label built of them) reach the terminal through
``shown``: their control characters as escapes (``\\x1b``), their rich markup as text. Both
consoles also escape, in every string they render (a line, a table's cell, a title), any control
character a caller let through (``SafeConsole``), so no escape sequence is ever written raw.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.markup import escape as markup_escape
from rich.progress import Progress, TaskID
from rich.text import Text

from harness.errors import CONTROLS, IN_A_NAME, without_controls

LOG_WIDTH = 160
LOG_WIDTH_ENV = "HARNESS_LOG_WIDTH"


def shown(name: object) -> str:
    """A name from the user's disk as the terminal shows it, on one line: control characters as
    escapes (an OSC title-set ``\\x1b]0;…\\x07`` stays text), rich markup escaped (``[red]``
    in a folder's name is shown, not obeyed)."""
    return markup_escape(without_controls(str(name), IN_A_NAME))


class SafeConsole(Console):
    """A rich console that escapes control characters in every string it renders (lines, table
    cells, titles): whatever a caller forgot to pass through ``shown``, the terminal never
    receives an escape sequence from it. Rich's own styling is not in those strings."""

    def render_str(self, text: str, **options: Any) -> Text:
        return super().render_str(without_controls(text, CONTROLS), **options)


def log_width() -> int:
    """The columns of a log: ``HARNESS_LOG_WIDTH`` when it is a whole number of them, else 160."""
    named = os.environ.get(LOG_WIDTH_ENV, "")
    return int(named) if named.isdigit() and int(named) > 0 else LOG_WIDTH


console = SafeConsole(width=None if sys.stdout.isatty() else log_width())
err_console = SafeConsole(stderr=True, width=None if sys.stderr.isatty() else log_width())


def duration(seconds: float) -> str:
    """A span as a person reads it: 12 s, 3 m 40 s, 1 h 2 m."""
    s = max(0, round(seconds))
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60} m"
    if s >= 60:
        return f"{s // 60} m {s % 60} s"
    return f"{s} s"


@dataclass
class GroupProgress:
    """One group as planned: its points, the seconds it pays once (process start, load, quality,
    server start) and the seconds of its points' own work."""

    points: int
    fixed_s: float
    work_s: float
    done: int = 0
    statuses: dict[str, int] = field(default_factory=dict)

    def planned_done_s(self) -> float:
        """The planned seconds of what is done: the fixed part with the first point, then an
        even share of the work per point."""
        if not self.done:
            return 0.0
        return self.fixed_s + self.work_s * self.done / max(1, self.points)

    def counts(self) -> str:
        return ", ".join(f"{n} {s}" for s, n in sorted(self.statuses.items())) or "none yet"


class SweepProgress:
    """A sweep's progress figures. The remaining-time estimate is the plan's seconds still to go ×
    what the done part took ÷ what it planned: the budget model, updated with what has been
    measured. In a log (`log`; default: stderr is no terminal) each event prints one line; on a
    terminal the figures go into the description of the bar `attach`ed (rich's Progress)."""

    def __init__(
        self,
        groups: dict[str, GroupProgress],
        *,
        already_done: int = 0,
        sweep_fixed_s: float = 0.0,
        log: bool | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.groups = groups
        self.already_done = already_done
        self.sweep_fixed_s = sweep_fixed_s  # the Ray start: done once the first row is in
        self.log = (not err_console.is_terminal) if log is None else log
        self.clock = clock
        self.started = clock()
        self.total = already_done + sum(g.points for g in groups.values())
        self.finished_groups = 0
        self.bar: tuple[Progress, TaskID] | None = None

    # --- figures ---------------------------------------------------------------------------

    @property
    def done(self) -> int:
        return self.already_done + sum(g.done for g in self.groups.values())

    def planned_s(self) -> float:
        return self.sweep_fixed_s + sum(g.fixed_s + g.work_s for g in self.groups.values())

    def elapsed_s(self) -> float:
        return self.clock() - self.started

    def remaining_s(self) -> float:
        """Seconds still to go: planned remainder × (elapsed ÷ planned done); before anything is
        done, the plan less the time already spent."""
        planned_done = sum(g.planned_done_s() for g in self.groups.values())
        if planned_done <= 0:
            return max(0.0, self.planned_s() - self.elapsed_s())
        planned_done += self.sweep_fixed_s
        left = max(0.0, self.planned_s() - planned_done)
        return left * self.elapsed_s() / planned_done

    def counts(self) -> str:
        """The status counts over every group so far."""
        counts: dict[str, int] = {}
        for g in self.groups.values():
            for status, n in g.statuses.items():
                counts[status] = counts.get(status, 0) + n
        return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))

    def figures(self) -> str:
        return (
            f"{self.done}/{self.total} points · elapsed {duration(self.elapsed_s())} · "
            f"ETA {duration(self.remaining_s())} (planned {duration(self.planned_s())})"
        )

    # --- events ----------------------------------------------------------------------------

    def attach(self, progress: Progress, task: TaskID) -> None:
        """Show the figures in this bar's description (a terminal)."""
        self.bar = (progress, task)
        self._refresh()

    def start(self, at: float | None = None) -> None:
        """The sweep started `at` (the clock's reading; default now): elapsed counts from it."""
        self.started = self.clock() if at is None else at
        self._line(f"sweep: {len(self.groups)} groups · {self.figures()}")

    def group_started(self, label: str, where: str = "") -> None:
        group = self.groups.get(label)
        size = f"{group.points} points" if group else "? points"
        self._line(f"running {label}{f' @ {where}' if where else ''} ({size})")

    def row(self, label: str, status: str) -> None:
        """One point's row: a line with the figures; another when it finishes its group."""
        group = self.groups.setdefault(label, GroupProgress(points=1, fixed_s=0.0, work_s=0.0))
        group.done += 1
        group.statuses[status] = group.statuses.get(status, 0) + 1
        self._line(f"{self.figures()} · {label}: {group.done}/{group.points} ({group.counts()})")
        if group.done == group.points:
            self.finished_groups += 1
            self._line(
                f"group {self.finished_groups}/{len(self.groups)} done: {label}: "
                f"{group.counts()} · {self.figures()}"
            )

    def _line(self, text: str) -> None:
        if self.log:
            # labels hold names from the user's disk: one line, never read as markup
            line = f"[{duration(self.elapsed_s())}] {without_controls(text, IN_A_NAME)}"
            err_console.print(line, highlight=False, markup=False)
        self._refresh()

    def _refresh(self) -> None:
        if self.bar is None:
            return
        progress, task = self.bar
        counts = self.counts()
        progress.update(
            task,
            description=f"sweep · ETA {duration(self.remaining_s())} of "
            f"{duration(self.planned_s())} planned{f' · {counts}' if counts else ''}",
        )
