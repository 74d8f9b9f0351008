"""The sweep's plan and budget — no GPU, no torch: every point's plan (harness.plan), the phases
a run pays per group (defaults measured here and on an H200, calibrated from this node's history:
harness.run.history), the wall time they add up to, and its price.

  wall time   = Σ phases (groups one after another on one device): the Ray start, a process per
                group, model load + engine start, the quality phase, server starts, each mode's
                points; each phase = its default × the node's measured ÷ default ratio
  GPU-hours   = wall time / 3600 when a GPU target is in the sweep, else 0
  cost (USD)  = GPU-hours × the package-hour price
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

from harness.plan import EFFICIENCY, PointPlan, default_card, param_counts, plan_point
from harness.spec import catalog
from harness.spec.capabilities import forks_from_host
from harness.spec.scenario import Grid, GroupKey, Scenario, Skip
from harness.units import GIB

LOAD_GB_S = 1.0  # disk → device, for the budget's load time per group
# Serving: a `vllm serve` start per group (process, engine, health check: 30-100 s measured on the
# 2-core CPU with the tiny model).
SERVER_START_S = 90.0

# The phases a run pays, as a person reads them (`harness plan`, the end-of-run line); a point's
# own seconds are its mode's phase (MODE_PHASE). harness.run.history records each phase's seconds
# and calibrates the budget from them.
PHASES: dict[str, str] = {
    "cluster": "Ray start",
    "startup": "process start + imports",
    "load": "model load + engine start",
    "quality": "quality scoring",
    "measured": "measured work",
    "server_start": "server starts",
    "serving": "serving levels",
    "training": "training steps",
}
MODE_PHASE = {"offline": "measured", "serving": "serving", "training": "training"}
ANY = "*"  # a phase not of one engine or model (the Ray start), and a calibration's wildcard
# Defaults before any history, per (engine, device kind), from runs measured here and on the H200:
# - cpu: `make bench` (scenarios/default.yaml, 6 groups) on this 2-core CPU, quiet, 2026-12-01
#   15:57 (transformers groups forked from the node's host, harness.run.host; vLLM groups in fresh
#   actors): load_s transformers 0.10-0.25 s (the host imported the engine; a fresh process's
#   first load, imports included, took 3.5-3.7 s at 09:48, results/bench-cpu, and `harness
#   measure` pays that once for its first group), vLLM 0.32 15.9-21.6 s; Ray start 3.0 s (5.7 s
#   at 09:48); wall 138.3 s - Σ the rows' phases 111.3 s - Ray start = 24.4 s for six group
#   processes and the host's preload.
# - cuda: results/example/h200-2026-11-29 (`harness run`, two transformers groups in fresh Ray
#   actors): load_s 7.0 and 8.2 s; wall 41.0 s - phases 26.1 s = 14.9 s for the Ray start and two
#   processes; results/example/h200-2026-11-30: vLLM 0.26's engine start with CUDA graphs, 51.9 s
#   (tiny model, with 16 windows scored) and 51.2 s (8B architecture).
# - rocm: no run recorded; the cuda figures.
ENGINE_START_S = {
    ("transformers", "cpu"): 0.2,
    ("vllm", "cpu"): 18.8,
    ("transformers", "cuda"): 7.6,
    ("vllm", "cuda"): 51.0,
}
PROCESS_START_S = {"cpu": 4.0, "cuda": 5.0}  # a fresh process's start + imports: a vLLM group's
# Ray actor, or `harness measure`'s one process
# A group forked from its node's host (spec.capabilities.forks_from_host): a Ray task that Ray
# starts in a worker it already has, and a fork; the first group also waits for what is left of
# the host's imports after the Ray start. cpu: 2.26 s for the three groups of `make side-by-side`'s
# grid, 2026-12-01 18:30 (history). cuda: not measured on this path; the fresh process's figure.
FORKED_START_S = {"cpu": 0.75, "cuda": 5.0}
CLUSTER_START_S = {"cpu": 4.4, "cuda": 5.0}  # `ray.init` of a local node: cpu 3.0-4.2 and 5.7 s
# Per-call latency bounds a small model rather than the roofline: the seconds of one decode step
# (any batch; the timed runs, warm-ups and the energy pass) and of one scored quality unit (a
# window or an ARC item) at least, per (engine, device kind), from the same runs' rows (timing =
# measured_s less the quality share):
# - cpu: transformers 2.3-14.1 ms a step (median 5.8, 12 rows), vLLM 1.8-9.7 ms (median 3.4);
#   quality (15:57, ARC scored with a shared prefix) 64 windows + 100 ARC items a group:
#   transformers 9.5 s over three groups (19.4 ms a unit), vLLM 22.0 s (44.6 ms a unit);
# - cuda: transformers on the H200 (38 rows, 9 groups) 3.7-16.8 ms a step (median 7.8), quality
#   13.4-52.5 ms a unit (median 26; before the shared-prefix ARC scoring, and vLLM's assumed the
#   same); vLLM (CUDA graphs): no small-model step recorded, the 8B architecture's batch-1 step
#   was 5.0 ms (bandwidth-bound), so 3 ms is assumed.
STEP_FLOOR_S = {
    ("transformers", "cpu"): 0.0058,
    ("vllm", "cpu"): 0.0034,
    ("transformers", "cuda"): 0.0078,
    ("vllm", "cuda"): 0.003,
}
QUALITY_UNIT_S = {
    ("transformers", "cpu"): 0.0194,
    ("vllm", "cpu"): 0.0446,
    ("transformers", "cuda"): 0.026,
    ("vllm", "cuda"): 0.026,
}
# The tasks of a group (harness.tasks), in quality units: a scored continuation (a label, a
# choice) and a generated token of an extract item (batched 32 at a time), from the tiny model on
# this CPU with transformers, unloaded: 1,470 continuations in 18.5 s (12.6 ms each) and 210 items
# × 64 tokens in 26.8 s (2.0 ms a token), against that run's 47 ms quality unit (the ratios are
# kept: the shared-prefix scoring sped up ARC and the labels alike; not re-measured since).
TASK_CONTINUATION_UNITS = 0.0126 / 0.047
TASK_TOKEN_UNITS = 0.0020 / 0.047
# Tokens one ARC-Easy item costs to score: each choice is scored after its query as one sequence
# (the shipped items: 4.0 choices, queries of 124 and answers of 23 characters on average, at
# ~4 characters a token).
ARC_TOKENS_PER_ITEM = 4 * (31 + 6)
ARC_ITEMS_IN_CORPUS = 2376  # harness/data/corpus/arc_easy.jsonl (its README); checked by a test


class Budget(BaseModel):
    model_config = ConfigDict(extra="forbid")
    points: int
    skipped: int
    groups: int
    est_seconds: float
    est_load_seconds: float
    est_server_start_seconds: float = 0.0  # one `vllm serve` start per group with serving levels
    est_quality_seconds: float = 0.0  # each group's quality phase (windows + ARC items scored)
    est_phase_seconds: dict[str, float] = {}  # every phase (PHASES), calibrated where history is
    calibrated_from: str | None = None  # the history file the figures were calibrated from
    est_gpu_hours: float
    est_cost_usd: float | None = None
    tariff: str | None = None


class PhaseSeconds(BaseModel):
    """One phase of one group (of the sweep, for the Ray start: group ``""``), in seconds: the
    defaults' figure and the one calibrated from the node's history (harness.run.history)."""

    model_config = ConfigDict(extra="forbid")
    phase: str  # a key of PHASES
    group: str  # GroupKey.label, "" for the sweep's own phases
    engine: str  # the backend, ANY for the Ray start
    device: str  # cpu | cuda | rocm
    model: str  # ANY for the Ray start
    default_s: float
    seconds: float

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.engine, self.device, self.model, self.phase)


# measured ÷ default seconds per (engine, device, model, phase); model ANY: any model
Calibration = dict[tuple[str, str, str, str], float]


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid")
    points: list[PointPlan]
    skipped: list[tuple[Skip, PointPlan | None]]
    budget: Budget
    phases: list[PhaseSeconds] = []  # the budget's phases per group (not in the --json contract)

    def contract(self) -> dict[str, object]:
        """The `harness plan --json` object (a contract: see README)."""
        skipped = []
        for skip, plan in self.skipped:
            row: dict[str, object] = plan.contract() if plan else skip.point.model_dump()
            row["reason"] = skip.reason
            skipped.append(row)
        return {
            "points": [p.contract() for p in self.points],
            "skipped": skipped,
            "budget": self.budget.model_dump(),
        }


def plan_grid(
    grid: Grid,
    gpu: str | None = None,
    hourly_usd: float | None = None,
    *,
    calibration: Calibration | None = None,
    runner: str = "ray",
) -> Plan:
    """Plan every point; what cannot fit joins the skips (with the binding term). The budget's
    phases are the defaults × `calibration` (harness.run.history); `runner` "in-process" (`harness
    measure`) pays no Ray start and no process per group."""
    scenario: Scenario = grid.scenario
    default_gpu = gpu or scenario.gpu
    fitting: list[PointPlan] = []
    skipped: list[tuple[Skip, PointPlan | None]] = [(s, None) for s in grid.skipped]
    util = scenario.vllm.gpu_memory_utilization
    for point in grid.points:
        plan = plan_point(
            point,
            default_card(point.target, default_gpu),
            gpu_memory_utilization=util,
            warmups=scenario.warmups,
        )
        if plan.fits:
            fitting.append(plan)
        else:
            skipped.append((Skip(point=point, reason=f"does not fit: {plan.reason}"), plan))
    quality_s = quality_seconds(fitting, scenario)
    phases = phase_seconds(fitting, quality_s, warmups=scenario.warmups, runner=runner)
    phases = calibrate(phases, calibration or {})
    return Plan(
        points=fitting,
        skipped=skipped,
        budget=budget(fitting, skipped, hourly_usd, phases=phases),
        phases=phases,
    )


def quality_seconds(fitting: Iterable[PointPlan], scenario: Scenario) -> dict[GroupKey, float]:
    """Seconds of each group's quality phase (once per group with checkpoint weights and
    offline points): a forward pass over every scored window and ARC item at the card's bf16
    FLOP/s, 2 × active params per token, at the target's EFFICIENCY; at least the measured
    seconds per unit (windows, ARC items, and the tasks' continuations and generated tokens)."""
    settings = scenario.quality
    out: dict[GroupKey, float] = {}
    for p in fitting:
        point = p.point
        if point.mode != "offline" or point.weights == "random" or point.group in out:
            continue
        arch = catalog.model(point.model, point.revision)
        windows = settings.max_windows or max(1, 300_000 // settings.window_tokens)
        arc = ARC_ITEMS_IN_CORPUS if settings.arc_count is None else settings.arc_count
        tokens = windows * settings.window_tokens + arc * ARC_TOKENS_PER_ITEM
        counts = param_counts(arch)
        flops = 2 * (counts.active_linear + counts.embeddings) * tokens
        card = catalog.gpu(p.gpu)
        roof_s = flops / (card.bf16_tflops * 1e12) / EFFICIENCY[point.target]
        continuations, generated = settings.task_calls()
        units = windows + arc + continuations * TASK_CONTINUATION_UNITS
        units += generated * TASK_TOKEN_UNITS
        unit_s = QUALITY_UNIT_S[(point.backend, device_kind(point.target))]
        out[point.group] = max(roof_s, units * unit_s)
    return out


def device_kind(target: str) -> str:
    """The device kind a default was measured on: rocm has none of its own yet (cuda's)."""
    return "cuda" if target == "rocm" else target


def phase_seconds(
    fitting: Iterable[PointPlan],
    quality_s: dict[GroupKey, float],
    *,
    warmups: int = 1,
    runner: str = "ray",
) -> list[PhaseSeconds]:
    """Every phase a run pays, per group. Ray: the Ray start once and a process per group (a
    child forked from the node's host, or a fresh actor); in one process: its start and
    imports once. Then the model load and engine start
    (ENGINE_START_S + weights at LOAD_GB_S; training loads per point), the quality phase, a server
    start per serving group, and each mode's points (offline points at least STEP_FLOOR_S a
    decode step, warm-ups and the energy pass included). Uncalibrated: seconds = default_s."""
    groups: dict[GroupKey, list[PointPlan]] = {}
    for p in fitting:
        groups.setdefault(p.point.group, []).append(p)
    out: list[PhaseSeconds] = []
    if groups:  # Ray: its start; in one process: that process's imports, once
        device = device_kind(next(iter(groups)).target)
        ray = runner == "ray"
        phase, table = ("cluster", CLUSTER_START_S) if ray else ("startup", PROCESS_START_S)
        out.append(_phase(phase, "", ANY, device, ANY, table[device]))
    for group, plans in groups.items():
        out += group_phases(group, plans, quality_s.get(group), warmups=warmups, runner=runner)
    return out


def group_phases(
    group: GroupKey, plans: list[PointPlan], quality: float | None, *, warmups: int, runner: str
) -> list[PhaseSeconds]:
    """One group's phases (phase_seconds)."""
    kind = device_kind(group.target)
    loads = len(plans) if plans[0].point.mode == "training" else 1
    weights_s = plans[0].weights_gib * GIB / (LOAD_GB_S * 1e9)
    seconds: dict[str, float] = {}
    if runner == "ray":
        forks = forks_from_host(group.backend, {p.point.mode for p in plans})
        seconds["startup"] = (FORKED_START_S if forks else PROCESS_START_S)[kind]
    seconds["load"] = loads * (ENGINE_START_S[(group.backend, kind)] + weights_s)
    if quality is not None:
        seconds["quality"] = quality
    if any(p.point.serving is not None for p in plans):
        seconds["server_start"] = SERVER_START_S
    for mode, phase in MODE_PHASE.items():
        mine = [p for p in plans if p.point.mode == mode]
        if mine:
            seconds[phase] = sum(point_seconds(p, warmups) for p in mine)
    return [
        _phase(phase, group.label, group.backend, group.target, group.model, s)
        for phase, s in seconds.items()
    ]


def _phase(phase: str, group: str, engine: str, device: str, model: str, s: float) -> PhaseSeconds:
    return PhaseSeconds(
        phase=phase, group=group, engine=engine, device=device, model=model, default_s=s, seconds=s
    )


def point_seconds(plan: PointPlan, warmups: int) -> float:
    """A point's planned seconds; an offline point at least STEP_FLOOR_S per decode step."""
    point = plan.point
    if point.mode != "offline":
        return plan.est_seconds
    runs = warmups + point.repeats + 1  # the timed runs, then the energy pass
    steps = runs * (point.output_tokens + 1)  # + the prefill's own step
    return max(plan.est_seconds, steps * STEP_FLOOR_S[(point.backend, device_kind(point.target))])


def calibrate(phases: list[PhaseSeconds], calibration: Calibration) -> list[PhaseSeconds]:
    """Each phase's seconds × its measured ÷ default ratio from the history: the exact (engine,
    device, model, phase) first, else the same engine and device on any model, else the
    defaults."""
    out = []
    for p in phases:
        wildcard = (p.engine, p.device, ANY, p.phase)
        factor = calibration.get(p.key, calibration.get(wildcard, 1.0))
        out.append(p.model_copy(update={"seconds": p.default_s * factor}))
    return out


def budget(
    fitting: Iterable[PointPlan],
    skipped: list[tuple[Skip, PointPlan | None]],
    hourly_usd: float | None,
    quality_s: dict[GroupKey, float] | None = None,
    phases: list[PhaseSeconds] | None = None,
) -> Budget:
    """The sweep's wall time as the sum of its phases (groups one after another on one device),
    and its price: the package-hour price × that wall time when a GPU target is in it."""
    fitting = list(fitting)
    if phases is None:
        phases = phase_seconds(fitting, quality_s or {})
    by_phase: dict[str, float] = {}
    for p in phases:
        by_phase[p.phase] = by_phase.get(p.phase, 0.0) + p.seconds
    seconds = sum(by_phase.values())
    on_gpu = any(p.point.target != "cpu" for p in fitting)
    gpu_hours = seconds / 3600 if on_gpu else 0.0
    return Budget(
        points=len(fitting),
        skipped=len(skipped),
        groups=len({p.point.group for p in fitting}),
        est_seconds=seconds,
        est_load_seconds=by_phase.get("load", 0.0),
        est_server_start_seconds=by_phase.get("server_start", 0.0),
        est_quality_seconds=by_phase.get("quality", 0.0),
        est_phase_seconds=by_phase,
        est_gpu_hours=gpu_hours,
        est_cost_usd=gpu_hours * hourly_usd if hourly_usd is not None else None,
    )
