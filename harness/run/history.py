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
A group whose rows are not all `ok` contributes no time to its points' phase (its figures
would be partial, and a failed group's 0 s would scale every later plan to nothing), nor does a
phase no row carries; the startup rest is then not recorded either (the wall holds time no phase
accounts for).

Each line records the foreign load the run started under (``foreign_load``: the node's 1-minute
load average per core when it began, as `make side-by-side` reads the machine before a timed run).
A run that began above QUIET_LOAD ran beside other work and took longer for it: calibration
reads quiet runs (and lines older than the field) first, and a key only loaded runs hold is
calibrated from them and said to be noisy.

The history is input like any other: each line is read on its own and checked (`RunLine`: JSON
of schema 1, UTF-8, every phase time finite, ≥ 0 and at most MAX_PHASE_S); a line that fails is
left out and counted, and one warning names the file and the lines. A run is appended as one
write of one line under an exclusive lock (`fcntl.flock`), so runs that end at once keep every
line. Which runs calibrate which phase: harness.budget.calibration_key.
The orchestration side only: nothing here imports an engine or the device side.
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import stat
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness import modes
from harness.budget import (
    PHASES,
    Calibration,
    PhaseKey,
    PhaseSeconds,
    calibration_key,
)
from harness.console import GroupProgress, duration, err_console
from harness.errors import IN_A_NAME, UserInputError, without_controls
from harness.files import open_regular, strict_json
from harness.row import ResultRow

HISTORY_ENV = "HARNESS_HISTORY"
SCHEMA = 1
RUNS_USED = 3  # the latest runs of a key that calibrate it
HISTORY_CAP_BYTES = 64 * 2**20  # the newest this many bytes are read (older runs are not used)
SHOWN_GAP = 0.10  # the end-of-run line names each phase more than 10 % (and 1 s) off its plan
MAX_PHASE_S = 366 * 86_400.0  # no phase of one run on a rented node takes more than a year
SHOWN_LINES = 8  # the line numbers a warning lists before "and N more"
KEY_CHARS = 256  # the longest engine, device, model or phase name a line may hold
QUIET_LOAD = 0.5  # a run that began with more than half the node's cores busy ran beside others


def foreign_load() -> float | None:
    """The node's 1-minute load average per core, now (None where the system does not say)."""
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        return None


def history_path() -> Path:
    """Where this node's history is kept: $HARNESS_HISTORY, else ~/.cache/harness/history.jsonl."""
    env = os.environ.get(HISTORY_ENV)
    return Path(env) if env else Path.home() / ".cache" / "harness" / "history.jsonl"


PhaseTime = Annotated[float, Field(ge=0.0, le=MAX_PHASE_S, allow_inf_nan=False)]
Name = Annotated[str, Field(min_length=1, max_length=KEY_CHARS)]


class PhaseFigure(BaseModel):
    """One (engine, device, model, phase) of a recorded run: the default's, the calibrated plan's
    and the measured seconds."""

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)
    engine: Name
    device: Name
    model: Name
    phase: Name
    planned_s: PhaseTime
    calibrated_s: PhaseTime | None = None
    took_s: PhaseTime

    @property
    def key(self) -> PhaseKey:
        return calibration_key(self.engine, self.device, self.model, self.phase)


class RunLine(BaseModel):
    """One history line as read (the fields calibration reads; others are kept in the file)."""

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True, populate_by_name=True)
    schema_version: Literal[1] = Field(alias="schema")
    scenario_hash: str | None = None
    foreign_load: Annotated[float, Field(ge=0.0, allow_inf_nan=False)] | None = None
    phases: list[PhaseFigure]

    @property
    def quiet(self) -> bool:
        """Whether the run began on a quiet node (unknown for lines older than the field)."""
        return self.foreign_load is None or self.foreign_load <= QUIET_LOAD


class History(BaseModel):
    """A history file as read: its valid runs in file order, and the lines left out (1-based)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    path: Path
    runs: list[RunLine] = []
    skipped: list[int] = []
    unread: str | None = None  # why the file could not be read at all (None: it was, or absent)


def read(path: Path) -> History:
    """Every run recorded at `path` (none when absent), each line checked on its own: a line that
    is not a RunLine is left out and counted, never guessed at; a file that cannot be read at
    all gives no runs and says why (`unread`). Only the newest HISTORY_CAP_BYTES are read."""
    try:
        data = tail_bytes(path, HISTORY_CAP_BYTES)
    except FileNotFoundError:
        return History(path=path)
    except UserInputError as exc:  # a folder, a FIFO: the plan goes on, on the defaults
        return History(path=path, unread=exc.message)
    except OSError as exc:  # unreadable: the same
        return History(path=path, unread=exc.strerror or str(exc))
    runs, skipped = [], []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        run = parse_line(raw)
        if run is None:
            skipped.append(number)
        else:
            runs.append(run)
    return History(path=path, runs=runs, skipped=skipped)


def tail_bytes(path: Path, cap: int) -> bytes:
    """The last `cap` bytes of the regular file `path`, from the first whole line among them."""
    with open_regular(path, "run history") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size <= cap:
            return handle.read(cap)
        handle.seek(size - cap)
        data = handle.read(cap)
    return data[data.find(b"\n") + 1 :]  # the first line may be cut: from the next


def parse_line(raw: bytes) -> RunLine | None:
    """One line as a RunLine, or None: not UTF-8, not JSON as ``files.strict_json`` reads it (a
    key given twice, a number that is not finite, nested past the parser's depth), not schema
    1, or a phase time that is not finite and ≥ 0. Lines are read one by one, not as a file
    (``files.text_lines``), so that one bad line costs that line only."""
    try:
        return RunLine.model_validate(strict_json(raw.decode("utf-8")))
    except (UnicodeDecodeError, ValueError, RecursionError, ValidationError):
        return None


def skipped_warning(history: History) -> str | None:
    """The one warning a history's unreadable file or lines give (None: nothing left out)."""
    where = without_controls(str(history.path), IN_A_NAME)  # a name from the environment
    if history.unread is not None:
        return f"warning: run history {where} not read ({history.unread}): defaults used"
    if not history.skipped:
        return None
    shown = ", ".join(map(str, history.skipped[:SHOWN_LINES]))
    more = len(history.skipped) - SHOWN_LINES
    shown += f" and {more} more" if more > 0 else ""
    lines = "line" if len(history.skipped) == 1 else "lines"
    return (
        f"warning: run history {where}: {lines} {shown} left out (each must be a JSON "
        f"run of schema {SCHEMA}, UTF-8, with every phase time finite and ≥ 0)"
    )


def load_calibration(scenario_hash: str | None, path: Path | None = None) -> Calibration:
    """This node's calibration for a plan of `scenario_hash` (`calibration`), read from `path`
    (default history_path()); what was left out is said in one warning on stderr."""
    history = read(path or history_path())
    warning = skipped_warning(history)
    if warning is not None and warning not in _WARNED:  # `bench` plans, then runs: said once
        _WARNED.add(warning)
        err_console.print(warning, highlight=False, markup=False, soft_wrap=True)
    return calibration(history, scenario_hash)


_WARNED: set[str] = set()  # the history warnings this process has printed


def calibration(history: History, scenario_hash: str | None = None) -> Calibration:
    """Measured ÷ default seconds per calibration_key (harness.budget: the same engine, device
    kind and model; any model for the model-free phases), from the latest RUNS_USED runs holding
    each key; quiet runs first, a key only loaded runs hold calibrated from them (``noisy``);
    among those, runs of `scenario_hash` first when it has any. A figure that planned or took
    no time is no measurement and is not used."""
    ordered = sorted(history.runs, key=lambda r: (r.quiet, r.scenario_hash == scenario_hash))
    sums: dict[PhaseKey, list[float]] = {}
    used: dict[PhaseKey, int] = {}
    quiet: set[PhaseKey] = set()  # keys a quiet run calibrates: no loaded run joins them
    for run in reversed(ordered):  # quiet runs (the scenario's, newest first), then loaded ones
        mine: dict[PhaseKey, list[float]] = {}
        for figure in run.phases:
            if figure.planned_s > 0 and figure.took_s > 0:
                acc = mine.setdefault(figure.key, [0.0, 0.0])
                acc[0] += figure.planned_s
                acc[1] += figure.took_s
        for key, (planned, took) in mine.items():
            if run.quiet:
                quiet.add(key)
            elif key in quiet:
                continue
            if used.get(key, 0) < RUNS_USED:
                acc = sums.setdefault(key, [0.0, 0.0])
                acc[0] += planned
                acc[1] += took
                used[key] = used.get(key, 0) + 1
    factors = {k: took / planned for k, (planned, took) in sums.items()}
    return Calibration(
        factors={k: f for k, f in factors.items() if math.isfinite(f)},
        runs=used,
        noisy=sorted(k for k in used if k not in quiet),
        source=str(history.path),
        runs_read=len(history.runs),
    )


def record(path: Path, entry: dict[str, Any]) -> None:
    """Append one run as one line: one write under an exclusive lock (fcntl.flock) on the file
    opened for appending, so runs that end at once all keep their line; a last line left without
    its newline (a writer killed mid-line) is ended first. OSError when it cannot be written."""
    line = (json.dumps(entry, sort_keys=True, allow_nan=False) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    # O_NONBLOCK: a FIFO put where the history goes fails at once instead of waiting for a reader
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(path, flags, 0o666)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        written = os.write(fd, line)
        while written < len(line):  # a regular file takes it whole; a short write goes on
            written += os.write(fd, line[written:])
        os.fsync(fd)
    finally:
        os.close(fd)  # and the lock with it


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
        if seconds is not None and math.isfinite(seconds) and seconds >= 0:
            took.append(p.model_copy(update={"seconds": seconds}))
    if len(took) < sum(p.phase != "startup" for p in planned):
        return took  # a phase no row measured: the rest of the wall is not the starts' alone
    starts = [p for p in planned if p.phase == "startup" and (p.group in by_group or not p.group)]
    rest = max(0.0, wall_s - sum(p.seconds for p in took))
    planned_starts = sum(p.default_s for p in starts) or 1.0
    took += [p.model_copy(update={"seconds": rest * p.default_s / planned_starts}) for p in starts]
    return took


def point_phases() -> dict[str, modes.Mode]:
    """Each mode's point phase, and the mode: a group is measured in it only when every row of
    that mode is ok and carries the mode's figure (`Facts.figure`)."""
    return {m.facts.phase: m for m in modes.REGISTRY.values()}


def start_figures() -> dict[str, str]:
    """The phases a mode's groups pay once (serving's server start), and each one's row field."""
    starts = (m.facts.start for m in modes.REGISTRY.values())
    return {s.phase: s.figure for s in starts if s is not None}


def row_seconds(phase: str, rows: list[ResultRow]) -> float | None:
    """One group's measured seconds in `phase`, from its rows (None: no row says, or a point
    phase of a group not every row of which is ok: a failed group contributes no time)."""
    if not rows:
        return None
    if phase == "load":
        loads = [r.load_s for r in rows if r.load_s is not None]
        if not modes.get(rows[0].mode).facts.load_per_point:
            return loads[0] if loads else None
        return sum(loads) if loads and len(loads) == len(rows) else None  # one load a point
    if phase == "quality":
        return next((r.quality_s for r in rows if r.quality_s is not None), None)
    starts = start_figures()
    if phase in starts:
        once = (getattr(r, starts[phase]) for r in rows)
        return next((f for f in once if f is not None), None)
    mode = point_phases().get(phase)
    if mode is None:
        return None
    mine = [r for r in rows if r.mode == mode.name]
    figures: list[float | None] = [getattr(r, mode.facts.figure) for r in mine if r.status == "ok"]
    measured = [f for f in figures if f is not None]
    if not mine or len(measured) < len(mine):
        return None
    if mode.facts.scores_quality:  # each of its rows carries its share of the quality phase
        share = (row_seconds("quality", rows) or 0.0) / len(mine)
        return sum(f - share for f in measured)
    return sum(measured)


def entry(
    planned: list[PhaseSeconds],
    took: list[PhaseSeconds],
    *,
    run: str,
    scenario_hash: str,
    runner: str,
    wall_s: float,
    load: float | None = None,
) -> dict[str, Any]:
    """The history line of one run: each phase's default, planned (calibrated) and measured
    seconds, summed per (engine, device, model, phase), and the foreign load it began under."""
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
        **({} if load is None else {"foreign_load": round(load, 3)}),
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
        elif group is not None and p.phase in point_phases():
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
    load: float | None = None,
) -> list[str]:
    """At the end of a run: what each phase of the groups that ran took, appended to the history
    (`path`, default history_path()); the lines to print (planned against took, per phase where
    they differ, and where the figures went). `load`: the foreign load the run began under
    (``foreign_load()`` read before its first process started)."""
    ran = {row.group for row in rows}
    sweep_own = {"startup"} if cluster_s is None else {"startup", "cluster"}
    planned = [p for p in phases if p.group in ran or (not p.group and p.phase in sweep_own)]
    took = took_phases(planned, rows, wall_s=wall_s, cluster_s=cluster_s)
    path = path or history_path()
    figures = entry(
        planned, took, run=run, scenario_hash=scenario_hash, runner=runner, wall_s=wall_s,
        load=load,
    )  # fmt: skip
    lines = summary_lines(planned, took, wall_s)
    try:
        record(path, figures)
    except (OSError, ValueError) as exc:  # the rows are written: a history it cannot keep
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc  # ends nothing
        return [*lines, f"phase times not recorded in {path}: {reason}"]
    return [*lines, f"phase times recorded in {path} (the next plan's calibration)"]
