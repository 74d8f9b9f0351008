"""From a scenario to the work of a run: groups in order (references first), skip rows, manifest.

Shared by `harness measure` (in-process) and `harness run` (Ray); neither decides this alone.
"""

from __future__ import annotations

import hashlib
import platform
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from harness import __version__, budget, corpus, modes
from harness.console import err_console
from harness.errors import UserInputError
from harness.plan import PointPlan
from harness.row import SCHEMA_VERSION, ResultRow
from harness.run import history, provenance, store
from harness.run.contracts import WorkContext, is_reference, point_row
from harness.spec import inputs, models
from harness.spec import scenario as scen
from harness.spec.engines import engines
from harness.spec.scenario import GroupKey, Point, Scenario


class Work(BaseModel):
    """One group of a run as the driver hands it to a launcher: its points, and each point's
    plan as orchestration made it (budget.plan_grid), carried to the device that measures it
    (harness.run.device.Job.plan), which plans again only on another card."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    group: GroupKey
    points: list[Point]
    reference: bool
    est_seconds: float
    plans: list[PointPlan] = []  # the points' plans, in their order


class SweepPlan(BaseModel):
    model_config = ConfigDict(extra="forbid")
    scenario: Scenario
    context: WorkContext
    work: list[Work]  # reference groups first
    skipped: list[tuple[Point, str]]
    added_reference_groups: list[str]
    phases: list[budget.PhaseSeconds] = []  # the budget's phases, calibrated (run.history)
    # the files its points read, by content: what → {path, sha256} (harness.spec.inputs.record)
    inputs: dict[str, dict[str, str]] = {}

    @property
    def total_points(self) -> int:
        return sum(len(w.points) for w in self.work)


def prepare(
    scenario_path: Path, run_dir: Path, gpu: str | None = None, runner: str = "ray"
) -> SweepPlan:
    """Validate, expand, plan; add each model's reference group when the grid lacks it. The
    budget is calibrated from this node's history (harness.run.history)."""
    scenario = scen.load(scenario_path)
    grid = scen.expand(scenario, str(scenario_path))
    points = list(grid.points)
    added: list[str] = []
    reference_backend = (
        "transformers" if "transformers" in scenario.backend else (scenario.backend[0])
    )
    ctx = WorkContext(
        run_dir=str(run_dir),
        run=run_dir.name,
        reference=scenario.reference,
        quality=scenario.quality,
        engines=scenario.engines,
        reference_backend=reference_backend,
        gpu=gpu or scenario.gpu,
    )
    present = {p.group for p in points}
    for point in grid.points:
        if point.weights == "random":  # no quality, so nothing to compare with a reference
            continue
        if modes.never_reference(point.mode):  # compared otherwise (the mode's Facts say how)
            continue
        ref = scen.reference_point(scenario, point).model_copy(
            update={"backend": reference_backend}
        )
        if ref.group not in present and ref not in points:
            points.append(ref)
            if ref.group.label not in added:
                added.append(ref.group.label)
    calibration = history.load_calibration(scenario_hash(scenario_path))
    plan = budget.plan_grid(
        grid.model_copy(update={"points": points}), gpu=gpu, calibration=calibration,
        runner=runner,
    )  # fmt: skip
    planned = {p.point: p for p in plan.points}  # only the points that fit
    groups: dict[GroupKey, list[Point]] = defaultdict(list)
    for point in points:
        if point in planned:
            groups[point.group].append(point)
    work = [
        Work(
            group=g,
            points=ps,
            reference=is_reference(g, ctx),
            est_seconds=sum(ph.seconds for ph in plan.phases if ph.group == g.label),
            plans=[planned[p] for p in ps],
        )
        for g, ps in groups.items()
    ]
    work.sort(key=lambda w: not w.reference)  # stable: references first, else scenario order
    skipped = [(s.point, s.reason) for s, _ in plan.skipped]
    return SweepPlan(
        scenario=scenario, context=ctx, work=work, skipped=skipped, added_reference_groups=added,
        phases=plan.phases, inputs=inputs_of(scenario, points),
    )  # fmt: skip


def inputs_of(scenario: Scenario, points: list[Point]) -> dict[str, dict[str, str]]:
    """What the run's manifest records of the files its points read (harness.spec.inputs)."""
    tasks = inputs.task_files(scenario.quality.tasks or [])
    return inputs.record(f for p in points for f in scen.point_inputs(p, tasks))


def skipped_rows(sweep: SweepPlan) -> list[ResultRow]:
    corpus_hash = corpus.corpus_hash()
    return [
        point_row(
            point, run=sweep.context.run, corpus_hash=corpus_hash, status="skipped", error=reason
        )
        for point, reason in sweep.skipped
    ]


def scenario_hash(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def start_manifest(
    run_dir: Path, scenario_path: Path, sweep: SweepPlan, mode: str
) -> dict[str, Any]:
    """The run manifest: append-only history of what ran, where and why (runs are resumable)."""
    manifest = store.read_manifest(run_dir)
    entry = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "mode": mode,
        "harness": __version__,
        "schema_version": SCHEMA_VERSION,  # of the rows this run writes (a newer one is refused)
        "git_sha": provenance.git_sha(),
        "scenario": str(scenario_path),
        "scenario_hash": scenario_hash(scenario_path),
        "corpus_hash": corpus.corpus_hash(),
        "python": platform.python_version(),
        "packages": {
            name: provenance.package_version(name)
            for name in (
                "torch",
                *(card.package for card in engines().values()),  # each engine's distribution
                "bitsandbytes",
                "optimum-quanto",
                "gptqmodel",
                "ray",
                "pandas",
                "pydantic",
            )
        },
        "groups": [w.group.label for w in sweep.work],
        "points": sweep.total_points,
        "added_reference_groups": sweep.added_reference_groups,
        "skipped": [{"point": p.model_dump(), "reason": r} for p, r in sweep.skipped],
        "quality_gate": list(sweep.scenario.quality.gated()),
        "inputs": sweep.inputs,
        **mode_entries(sweep.scenario),
    }
    manifest.setdefault("runs", []).append(entry)
    manifest["name"] = run_dir.name
    store.write_manifest(run_dir, manifest)
    return manifest


def mode_entries(scenario: Scenario) -> dict[str, Any]:
    """What each mode adds to the run's manifest entry (its `manifest` part), in registry order."""
    entries: dict[str, Any] = {}
    for mode in modes.REGISTRY.values():
        if mode.ref("manifest") is not None:
            entries.update(mode.load("manifest")(scenario))
    return entries


def finish_manifest(run_dir: Path, **fields: Any) -> None:
    manifest = store.read_manifest(run_dir)
    if manifest.get("runs"):
        manifest["runs"][-1].update(ended=time.strftime("%Y-%m-%dT%H:%M:%S%z"), **fields)
    store.write_manifest(run_dir, manifest)


def begin(
    scenario_path: Path,
    run_dir: Path,
    *,
    gpu: str | None,
    resume: bool,
    mode: str,
    on_start: Callable[[SweepPlan], dict[str, Any]] | None = None,
) -> tuple[SweepPlan, list[tuple[Work, list[Point]]]]:
    """Start (or resume) a run: plan it, call `on_start` with the plan (e.g. connect to a
    cluster; what it
    returns joins the manifest entry), record the run, write the skip rows, and return the
    groups with the points still to measure. Bad input fails before anything starts; without
    resume, a folder that already holds points is refused rather than silently mixed."""
    if not resume and (run_dir / store.POINTS).exists():
        raise UserInputError(
            f"{run_dir} already holds points; choose a new --out or keep resume on", field="--out"
        )
    recorded = store.read_manifest(run_dir)  # a broken or foreign manifest stops here
    store.refuse_newer_schema(recorded, run_dir)  # nor are a newer harness's rows resumed
    plan = prepare(scenario_path, run_dir, gpu=gpu, runner=mode)
    if mode == "in-process":  # this machine loads the models: their files must be here first
        wanted = ((w.group.model, w.group.revision, w.group.weights) for w in plan.work)
        for model, revision, weights in dict.fromkeys(wanted):
            models.resolve(model, revision, need="config" if weights == "random" else "weights")
    last = recorded["runs"][-1].get("scenario_hash") if recorded.get("runs") else None
    now = scenario_hash(scenario_path)
    if last is not None and last != now:
        raise UserInputError(
            f"{run_dir} holds a run of another scenario (hash {str(last)[:16]}; this one is "
            f"{now}): its rows would mix with these; choose a new --out",
            file=str(scenario_path),
        )
    if recorded.get("runs"):  # its rows were measured on these files' content, or refused
        changed = inputs.changed(inputs.recorded(recorded["runs"]), plan.inputs)
        if changed is not None:
            raise changed
    extra = on_start(plan) if on_start else {}
    started = start_manifest(run_dir, scenario_path, plan, mode=mode)
    for line in started["runs"][-1].get("leakage_warnings") or []:  # a task on text seen
        err_console.print(f"[yellow]warning[/]: {line}", highlight=False)
    if extra:
        recorded = store.read_manifest(run_dir)
        recorded["runs"][-1].update(extra)
        store.write_manifest(run_dir, recorded)
    for row in skipped_rows(plan):
        store.write_row(run_dir, row)
    done = store.done_keys(run_dir) if resume else set()
    todo = [(w, pending(w, done)) for w in plan.work]
    return plan, [(w, pts) for w, pts in todo if pts]


def pending(work: Work, done: set[str]) -> list[Point]:
    corpus_hash = corpus.corpus_hash()
    return [p for p in work.points if p.key(corpus_hash) not in done]
