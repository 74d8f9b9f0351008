"""The node's own run history: what each phase of each run took, and the budget calibrated from it.

Every `harness run`, `harness bench` and `harness measure` appends one line to the history file
(``$HARNESS_HISTORY``, else ``~/.cache/harness/history.jsonl``): per (engine, device kind, model,
phase) the seconds the defaults planned and the seconds it took. `harness plan` and the sweep
multiply each default by the measured ÷ planned ratio of the latest runs with that key
(`calibration`), preferring runs of the same scenario.

What a phase took, from the rows (harness.row) and the run's clock:
  load          the group's `load_s` (training: every point's)
  quality       the group's `quality_s`
  measured      Σ offline `measured_s` less the quality share each carries
  server_start  the group's `server_start_s`
  serving       Σ `serving_duration_s` over the levels
  training      Σ `train_s`
  cluster       the Ray start (`ray.init` or joining), timed by the CLI
  startup       the rest of the wall time (fresh processes, imports, Ray's scheduling, the
                generator's start), split over the groups in proportion to what they planned
The orchestration side only: nothing here imports an engine or the device side.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from harness import atomic
from harness.budget import ANY, MODE_PHASE, PHASES, Calibration, PhaseSeconds
from harness.console import GroupProgress, duration
from harness.files import read_capped
from harness.row import ResultRow

HISTORY_ENV = "HARNESS_HISTORY"
SCHEMA = 1
RUNS_USED = 3  # the latest runs of a key that calibrate it
HISTORY_CAP_BYTES = 64 * 2**20
SHOWN_GAP = 0.10  # the end-of-run line names each phase more than 10 % (and 1 s) off its plan


def history_path() -> Path:
    """Where this node's history is kept: $HARNESS_HISTORY, else ~/.cache/harness/history.jsonl."""
    env = os.environ.get(HISTORY_ENV)
    return Path(env) if env else Path.home() / ".cache" / "harness" / "history.jsonl"


def read(path: Path) -> list[dict[str, Any]]:
    """Every run recorded at `path` (none when absent); a line that is not one of ours is left
    out, never guessed at."""
    if not path.exists():
        return []
    runs = []
    for line in (
        read_capped(path, HISTORY_CAP_BYTES, "run history").decode(errors="replace").splitlines()
    ):
        try:
            run = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(run, dict) and run.get("schema") == SCHEMA:
            runs.append(run)
    return runs


def record(path: Path, entry: dict[str, Any]) -> None:
    """Append one run (atomically: the whole file rewritten through harness.atomic)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    old = path.read_text() if path.exists() else ""
    if old and not old.endswith("\n"):
        old += "\n"
    atomic.atomic_write_text(path, old + json.dumps(entry, sort_keys=True) + "\n")


def calibration(runs: list[dict[str, Any]], scenario_hash: str | None = None) -> Calibration:
    """Measured ÷ default seconds per (engine, device, model, phase), and per (engine, device, ANY,
    phase) over every model, from the latest RUNS_USED runs holding each key; runs of
    `scenario_hash` first when it has any."""
    ordered = sorted(runs, key=lambda r: r.get("scenario_hash") == scenario_hash)  # stable
    sums: dict[tuple[str, str, str, str], list[float]] = {}
    used: dict[tuple[str, str, str, str], int] = {}
    for run in reversed(ordered):  # the same scenario's runs, newest first, then the others'
        for key, planned, took in _phase_figures(run):
            for k in (key, (key[0], key[1], ANY, key[3])):
                if used.get(k, 0) >= RUNS_USED:
                    continue
                acc = sums.setdefault(k, [0.0, 0.0])
                acc[0] += planned
                acc[1] += took
        for k in {k for key, _, _ in _phase_figures(run) for k in (key, (*key[:2], ANY, key[3]))}:
            used[k] = used.get(k, 0) + 1
    return {k: took / planned for k, (planned, took) in sums.items() if planned > 0}


def _phase_figures(run: dict[str, Any]) -> Iterable[tuple[tuple[str, str, str, str], float, float]]:
    for p in run.get("phases", []):
        try:
            key = (str(p["engine"]), str(p["device"]), str(p["model"]), str(p["phase"]))
            yield key, float(p["planned_s"]), float(p["took_s"])
        except (KeyError, TypeError, ValueError):
            continue


def took_phases(
    planned: list[PhaseSeconds],
    rows: list[ResultRow],
    *,
    wall_s: float,
    cluster_s: float | None,
) -> list[PhaseSeconds]:
    """What each planned phase took (the module docstring says how each is read), as
    PhaseSeconds whose ``seconds`` is the measured figure and ``default_s`` the default."""
    by_group: dict[str, list[ResultRow]] = {}
    for row in rows:
        by_group.setdefault(row.group or "", []).append(row)
    took: list[PhaseSeconds] = []
    for p in planned:
        if p.phase == "cluster":
            seconds = cluster_s
        elif p.phase == "startup":
            continue  # the rest of the wall, below
        else:
            seconds = row_seconds(p.phase, by_group.get(p.group, []))
        if seconds is not None:
            took.append(p.model_copy(update={"seconds": seconds}))
    starts = [p for p in planned if p.phase == "startup" and (p.group in by_group or not p.group)]
    rest = max(0.0, wall_s - sum(p.seconds for p in took))
    planned_starts = sum(p.default_s for p in starts) or 1.0
    took += [p.model_copy(update={"seconds": rest * p.default_s / planned_starts}) for p in starts]
    return took


def row_seconds(phase: str, rows: list[ResultRow]) -> float | None:
    """One group's measured seconds in `phase`, from its rows (None: no row says)."""
    if not rows:
        return None
    first = rows[0]
    if phase == "load":
        per_point = first.mode == "training"
        loads = [r.load_s for r in rows if r.load_s is not None]
        return (sum(loads) if per_point else loads[0]) if loads else None
    if phase == "quality":
        return next((r.quality_s for r in rows if r.quality_s is not None), None)
    if phase == "server_start":
        return next((r.server_start_s for r in rows if r.server_start_s is not None), None)
    if phase == "measured":
        offline = [r for r in rows if r.mode == "offline"]
        share = (row_seconds("quality", rows) or 0.0) / max(1, len(offline))
        return sum(r.measured_s - share for r in offline if r.measured_s is not None)
    if phase == "serving":
        return sum(r.serving_duration_s or 0.0 for r in rows if r.mode == "serving")
    if phase == "training":
        return sum(r.train_s or 0.0 for r in rows if r.mode == "training")
    return None


def entry(
    planned: list[PhaseSeconds],
    took: list[PhaseSeconds],
    *,
    run: str,
    scenario_hash: str,
    runner: str,
    wall_s: float,
) -> dict[str, Any]:
    """The history line of one run: each phase's default, planned (calibrated) and measured
    seconds, summed per (engine, device, model, phase)."""
    figures: dict[tuple[str, str, str, str], list[float]] = {}
    plan_of = {(p.group, p.phase): p for p in planned}
    for t in took:
        plan = plan_of[(t.group, t.phase)]
        acc = figures.setdefault(t.key, [0.0, 0.0, 0.0])
        acc[0] += plan.default_s
        acc[1] += plan.seconds
        acc[2] += t.seconds
    return {
        "schema": SCHEMA,
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "run": run,
        "scenario_hash": scenario_hash,
        "runner": runner,
        "wall_s": wall_s,
        "planned_wall_s": sum(p.seconds for p in planned),
        "phases": [
            {
                "engine": k[0],
                "device": k[1],
                "model": k[2],
                "phase": k[3],
                "planned_s": v[0],
                "calibrated_s": v[1],
                "took_s": v[2],
            }
            for k, v in figures.items()
        ],
    }


def versus(planned_s: float, took_s: float) -> str:
    """planned 3 m 40 s, took 3 m 55 s (+7 %)"""
    gap = f" ({100 * (took_s - planned_s) / planned_s:+.0f} %)" if planned_s > 0 else ""
    return f"planned {duration(planned_s)}, took {duration(took_s)}{gap}"


def summary_lines(
    planned: list[PhaseSeconds], took: list[PhaseSeconds], wall_s: float
) -> list[str]:
    """The end-of-run lines: the wall time against the plan, then each phase that differs by
    more than SHOWN_GAP (and a second)."""
    ran = {(t.group, t.phase) for t in took}
    planned_by = _by_phase(p for p in planned if (p.group, p.phase) in ran)
    took_by = _by_phase(took)
    planned_wall = sum(planned_by.values())
    lines = [f"{versus(planned_wall, wall_s)} (wall time; plan from the budget's phases)"]
    for phase, label in PHASES.items():
        if phase not in took_by:
            continue
        p, t = planned_by[phase], took_by[phase]
        if abs(t - p) > max(1.0, SHOWN_GAP * p):
            lines.append(f"  {label}: {versus(p, t)}")
    return lines


def _by_phase(phases: Iterable[PhaseSeconds]) -> dict[str, float]:
    out: dict[str, float] = {}
    for p in phases:
        out[p.phase] = out.get(p.phase, 0.0) + p.seconds
    return out


def calibration_note(path: Path, runs: list[dict[str, Any]]) -> str:
    """What the plan's budget was calibrated from, in words."""
    if not runs:
        return f"defaults (no history yet at {path})"
    return f"calibrated from {len(runs)} run(s) recorded at {path}"


def progress_groups(
    phases: list[PhaseSeconds], points: dict[str, int]
) -> tuple[dict[str, GroupProgress], float]:
    """What the progress display needs of the plan: per group to run (label → its points to
    measure), the seconds it pays once and its points' work; and the sweep's own seconds."""
    groups = {
        label: GroupProgress(points=n, fixed_s=0.0, work_s=0.0) for label, n in points.items()
    }
    sweep_s = 0.0
    for p in phases:
        group = groups.get(p.group)
        if p.group == "":
            sweep_s += p.seconds
        elif group is not None and p.phase in MODE_PHASE.values():
            group.work_s += p.seconds
        elif group is not None:
            group.fixed_s += p.seconds
    return groups, sweep_s


def finish(
    phases: list[PhaseSeconds],
    rows: list[ResultRow],
    *,
    run: str,
    scenario_hash: str,
    runner: str,
    wall_s: float,
    cluster_s: float | None = None,
    path: Path | None = None,
) -> list[str]:
    """At the end of a run: what each phase of the groups that ran took, appended to the history
    (`path`, default history_path()); the lines to print (planned against took, per phase where
    they differ, and where the figures went)."""
    ran = {row.group for row in rows}
    sweep_own = {"startup"} if cluster_s is None else {"startup", "cluster"}
    planned = [p for p in phases if p.group in ran or (not p.group and p.phase in sweep_own)]
    took = took_phases(planned, rows, wall_s=wall_s, cluster_s=cluster_s)
    path = path or history_path()
    figures = entry(
        planned, took, run=run, scenario_hash=scenario_hash, runner=runner, wall_s=wall_s
    )
    lines = summary_lines(planned, took, wall_s)
    try:
        record(path, figures)
    except OSError as exc:  # the run's rows are written: a history it cannot keep ends nothing
        return [*lines, f"phase times not recorded in {path}: {exc.strerror or exc}"]
    return [*lines, f"phase times recorded in {path} (the next plan's calibration)"]
