"""The sweep's plan and budget — no GPU, no torch: every point's plan (harness.plan), the phases
a run pays per group (defaults measured here and on an H200, calibrated from this node's history:
harness.run.history), the wall time they add up to, and its price.

  wall time   = Σ phases (groups one after another on one device): the Ray start, a process per
                group, model load + engine start, the quality phase, server starts, each mode's
                points; each phase = its default × the node's measured ÷ default ratio
  GPU-hours   = card-hours: Σ phases × the cards its group holds (a layout's tensor × pipeline
                ranks, else 1) / 3600 when a GPU target is in the sweep, else 0
  CPU-hours   = the same card-hours of a sweep with no GPU target (a CPU node's "cards" are
                what its tariff counts: gpus_per_node), else 0
  cost (USD)  = those card-hours × the package-hour price per card of the node the sweep
                rents (the GPU's tariff, or the ``cpu`` tariff of a CPU-only sweep); a tariff
                file with no row for it leaves the cost out and says which (``unpriced``)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness import modes
from harness.errors import quote
from harness.plan import EFFICIENCY, PointPlan, default_card, param_counts, plan_point
from harness.spec import catalog
from harness.spec.engine_options import gpu_share
from harness.spec.engines import device_kind, engine
from harness.spec.scenario import Grid, GroupKey, Point, Scenario, Skip
from harness.units import GIB

LOAD_GB_S = 1.0  # disk → device, for the budget's load time per group

# The phases a run pays, as a person reads them (`harness plan`, the end-of-run line): the
# sweep's and every group's own, then each mode's (harness.modes: a phase its groups pay once,
# as serving's server start, and its points' own phase). harness.run.history records each
# phase's seconds and calibrates the budget from them.
GROUP_PHASES: dict[str, str] = {
    "cluster": "Ray start",
    "startup": "process start + imports",
    "load": "model load + engine start",
    "quality": "quality scoring",
}


def _phases() -> dict[str, str]:
    """GROUP_PHASES, then per mode (the registry's order) its once-a-group phase and its own."""
    out = dict(GROUP_PHASES)
    for mode in modes.REGISTRY.values():
        if mode.facts.start is not None:
            out[mode.facts.start.phase] = mode.facts.start.label
        out[mode.facts.phase] = mode.facts.phase_label
    return out


PHASES: dict[str, str] = _phases()
ANY = "*"  # a phase not of one engine or model (the Ray start), and a calibration's wildcard
# Defaults before any history, per device kind (per engine: harness.spec.engines, with the runs
# they were measured in):
# - cpu: `make bench` (scenarios/default.yaml, 6 groups) on this 2-core CPU, quiet, 2026-12-01
#   15:57: Ray start 3.0 s (5.7 s at 09:48); wall 138.3 s - Σ the rows' phases 111.3 s - Ray
#   start = 24.4 s for six group processes and the host's preload.
# - cuda: results/example/h200-2026-11-29 (`harness run`, two transformers groups in fresh Ray
#   actors): wall 41.0 s - phases 26.1 s = 14.9 s for the Ray start and two processes.
# - rocm: no run recorded; the cuda figures.
PROCESS_START_S = {"cpu": 4.0, "cuda": 5.0}  # a fresh process's start + imports: a vLLM group's
# Ray actor, or `harness measure`'s one process
# A group forked from its node's host (harness.modes.forks_from_host): a Ray task that Ray
# starts in a worker it already has, and a fork; the first group also waits for what is left of
# the host's imports after the Ray start. cpu: 2.26 s for the three groups of `make side-by-side`'s
# grid, 2026-12-01 18:30 (history). cuda: not measured on this path; the fresh process's figure.
FORKED_START_S = {"cpu": 0.75, "cuda": 5.0}
CLUSTER_START_S = {"cpu": 4.4, "cuda": 5.0}  # `ray.init` of a local node: cpu 3.0-4.2 and 5.7 s
# The tasks of a group (harness.tasks), in quality units: a scored continuation (a label, a
# choice) and a generated token of an extract item (batched 32 at a time), from the tiny model on
# this CPU with transformers, unloaded: 1,470 continuations in 18.5 s (12.6 ms each) and 210 items
# × 64 tokens in 26.8 s (2.0 ms a token), against that run's 47 ms quality unit (the ratios are
# kept: the shared-prefix scoring sped up ARC and the labels alike; not re-measured since).
TASK_CONTINUATION_UNITS = 0.0126 / 0.047
TASK_TOKEN_UNITS = 0.0020 / 0.047
# Tokens one scored continuation costs: it is scored after its prompt as one sequence (ARC-Easy's
# shipped items: queries of 124 and answers of 23 characters on average, at ~4 characters a
# token).
CONTINUATION_TOKENS = 31 + 6


Seconds = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]  # a budget's figure


class Budget(BaseModel):
    """The sweep's budget; every figure finite and ≥ 0 (the seam `plan_grid` checks: a history
    that would make one otherwise gives the defaults, with a warning)."""

    model_config = ConfigDict(extra="forbid")
    points: int
    skipped: int
    groups: int
    est_seconds: Seconds
    est_load_seconds: Seconds
    est_server_start_seconds: Seconds = 0.0  # one `vllm serve` start per group with serving
    est_quality_seconds: Seconds = 0.0  # each group's quality phase (windows + tasks scored)
    est_phase_seconds: dict[str, Seconds] = {}  # every phase (PHASES), calibrated where history is
    calibrated_from: str | None = None  # what calibrated the figures, in words (calibration_note)
    est_gpu_hours: Seconds
    est_cpu_hours: Seconds = 0.0  # card-hours of a sweep with no GPU target
    est_cost_usd: Seconds | None = None
    tariff: str | None = None
    unpriced: str | None = None  # why a tariff file given did not price the budget


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
    runs: int = 0  # the history runs that calibrated `seconds` (0: the default)
    noisy: bool = False  # those runs were all made while other work loaded the node

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.engine, self.device, self.model, self.phase)


# The phases whose seconds do not depend on the model (a process's start and imports, the Ray
# start): calibrated from the runs of any model on the same engine and device kind. Every other
# phase (a model's load, its quality, its points, its server's start) scales with the model and
# is calibrated only from runs of the same engine, device kind and model: another model's ratio
# on the same card kind says nothing about this one's.
MODEL_FREE_PHASES = frozenset({"cluster", "startup"})
PhaseKey = tuple[str, str, str, str]  # (engine, device kind, model or ANY, phase)


def calibration_key(engine: str, device: str, model: str, phase: str) -> PhaseKey:
    """The key a phase is calibrated under (MODEL_FREE_PHASES: any model's)."""
    return (engine, device, ANY if phase in MODEL_FREE_PHASES else model, phase)


class Calibration(BaseModel):
    """Measured ÷ default seconds per calibration_key, from the node's history
    (harness.run.history), with the runs behind each ratio and where they were read."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    factors: dict[PhaseKey, float] = {}
    runs: dict[PhaseKey, int] = {}  # the runs each factor is read from
    noisy: list[PhaseKey] = []  # factors read from loaded runs only (no quiet run had the key)
    source: str | None = None  # the history file ("" or None: none read)
    runs_read: int = 0  # every valid run in it, matching or not


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid")
    points: list[PointPlan]
    skipped: list[tuple[Skip, PointPlan | None]]
    budget: Budget
    phases: list[PhaseSeconds] = []  # the budget's phases per group (not in the --json contract)
    warnings: list[str] = []  # what will not happen as planned, said before anything runs

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
            "warnings": self.warnings,
        }


def plan_grid(
    grid: Grid,
    gpu: str | None = None,
    hourly_usd: float | None = None,
    *,
    calibration: Calibration | None = None,
    runner: str = "ray",
    node_cards: int | None = None,
) -> Plan:
    """Plan every point; what cannot fit joins the skips (with the binding term). The budget's
    phases are the defaults × `calibration` (harness.run.history); `runner` "in-process" (`harness
    measure`) pays no Ray start and no process per group. `node_cards`: the cards of the node
    `hourly_usd` rents (a group needing more is not priced on it)."""
    scenario: Scenario = grid.scenario
    default_gpu = gpu or scenario.gpu
    fitting: list[PointPlan] = []
    skipped: list[tuple[Skip, PointPlan | None]] = [(s, None) for s in grid.skipped]
    for point in grid.points:
        plan = plan_point(
            point,
            default_card(point.target, default_gpu),
            gpu_memory_utilization=gpu_share(scenario.engines, point.backend),
            warmups=scenario.warmups,
        )
        if plan.fits:
            fitting.append(plan)
        else:
            skipped.append((Skip(point=point, reason=f"does not fit: {plan.reason}"), plan))
    quality_s = quality_seconds(fitting, scenario)
    defaults = phase_seconds(fitting, quality_s, warmups=scenario.warmups, runner=runner)
    calibration = calibration or Calibration()
    phases = calibrate(defaults, calibration)
    try:
        result = budget(fitting, skipped, hourly_usd, phases=phases, node_cards=node_cards)
        result.calibrated_from = calibration_note(phases, calibration)
    except ValidationError as exc:  # the seam: a budget is finite and ≥ 0, else the defaults
        phases = defaults
        result = budget(fitting, skipped, hourly_usd, phases=phases, node_cards=node_cards)
        bad = exc.errors()[0]
        result.calibrated_from = (
            f"warning: the history at {calibration.source} gives a budget that is not finite "
            f"and ≥ 0 ({'.'.join(map(str, bad['loc']))}: {quote(bad.get('input'))}): the "
            "defaults are shown"
        )
    warnings = ungated_models([p.point for p in fitting])
    return Plan(points=fitting, skipped=skipped, budget=result, phases=phases, warnings=warnings)


def ungated_models(points: list[Point]) -> list[str]:
    """Each model whose every inference point runs on a layout of several cards: the quality
    reference runs on one card (harness.run.contracts.is_reference), so none of its rows will
    be gated, nor priced at equal quality."""
    inference = [p for p in points if p.weights == "checkpoint" and p.serving is None
                 and p.training is None]  # fmt: skip
    out = []
    for model in dict.fromkeys(p.model for p in inference):
        layouts = [p.layout for p in inference if p.model == model]
        if all(layout is not None for layout in layouts):
            labels = ", ".join(dict.fromkeys(layout.label for layout in layouts if layout))
            out.append(
                f"{model}: every point runs on several cards ({labels}), none on one card, where "
                "its quality reference runs: nothing of it will be gated or priced at equal "
                "quality (add a one-card layout: parallel tensor and pipeline [1, …])"
            )
    return out


def quality_seconds(fitting: Iterable[PointPlan], scenario: Scenario) -> dict[GroupKey, float]:
    """Seconds of each group's quality phase (once per group with checkpoint weights and
    offline points): a forward pass over every scored window and task continuation (ARC-Easy's
    among them) at the card's bf16 FLOP/s, 2 × active params per token, at the target's
    EFFICIENCY; at least the measured seconds per unit (windows, and the tasks' continuations and
    generated tokens)."""
    settings = scenario.quality
    continuations, generated = settings.task_calls()
    out: dict[GroupKey, float] = {}
    for p in fitting:
        point = p.point
        scores = modes.get(point.mode).facts.scores_quality
        if not scores or point.weights == "random" or point.group in out:
            continue
        arch = catalog.model(point.model, point.revision)
        windows = settings.max_windows or max(1, 300_000 // settings.window_tokens)
        tokens = windows * settings.window_tokens + continuations * CONTINUATION_TOKENS
        counts = param_counts(arch)
        flops = 2 * (counts.active_linear + counts.embeddings) * tokens
        card = catalog.gpu(p.gpu)
        roof_s = flops / (card.bf16_tflops * 1e12) / EFFICIENCY[point.target]
        units = windows + continuations * TASK_CONTINUATION_UNITS
        units += generated * TASK_TOKEN_UNITS
        unit_s = engine(point.backend).quality_unit_s.on(device_kind(point.target))
        out[point.group] = max(roof_s, units * unit_s)
    return out


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
    (the engine's start_s + weights at LOAD_GB_S; once a point for a mode that loads per point),
    the quality phase, each mode's phase paid once per group (serving: a server start), and each
    mode's points (at least the engine's step_floor_s a decode step where the mode says so,
    warm-ups and the energy pass included). Uncalibrated: seconds = default_s."""
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
    loads = len(plans) if modes.get(plans[0].point.mode).facts.load_per_point else 1
    weights_s = plans[0].weights_gib * GIB / (LOAD_GB_S * 1e9)
    present = {p.point.mode for p in plans}
    seconds: dict[str, float] = {}
    if runner == "ray":
        forks = modes.forks_from_host(group.backend, present)
        seconds["startup"] = (FORKED_START_S if forks else PROCESS_START_S)[kind]
    seconds["load"] = loads * (engine(group.backend).start_s.on(kind) + weights_s)
    if quality is not None:
        seconds["quality"] = quality
    for name, mode in modes.REGISTRY.items():  # the phases a group pays once, then the points'
        start = mode.facts.start
        if start is not None and name in present:
            seconds[start.phase] = start.default_s
    for name, mode in modes.REGISTRY.items():
        mine = [p for p in plans if p.point.mode == name]
        if mine:
            seconds[mode.facts.phase] = sum(point_seconds(p, warmups) for p in mine)
    return [
        _phase(phase, group.label, group.backend, group.target, group.model, s)
        for phase, s in seconds.items()
    ]


def _phase(phase: str, group: str, engine: str, device: str, model: str, s: float) -> PhaseSeconds:
    return PhaseSeconds(
        phase=phase, group=group, engine=engine, device=device, model=model, default_s=s, seconds=s
    )


def point_seconds(plan: PointPlan, warmups: int) -> float:
    """A point's planned seconds; for a mode with a step floor (offline), at least the engine's
    step_floor_s per decode step."""
    point = plan.point
    if not modes.get(point.mode).facts.step_floor:
        return plan.est_seconds
    runs = warmups + point.repeats + 1  # the timed runs, then the energy pass
    steps = runs * (point.output_tokens + 1)  # + the prefill's own step
    floor_s = engine(point.backend).step_floor_s.on(device_kind(point.target))
    return max(plan.est_seconds, steps * floor_s)


def calibrate(phases: list[PhaseSeconds], calibration: Calibration) -> list[PhaseSeconds]:
    """Each phase's seconds × its measured ÷ default ratio from the history, under its
    calibration_key (the same engine, device kind and model; any model for MODEL_FREE_PHASES);
    the default where no run matches."""
    out = []
    for p in phases:
        key = calibration_key(*p.key)
        factor = calibration.factors.get(key)
        if factor is None:
            out.append(p.model_copy(update={"seconds": p.default_s, "runs": 0}))
        else:
            runs = calibration.runs.get(key, 0)
            noisy = key in calibration.noisy
            update = {"seconds": p.default_s * factor, "runs": runs, "noisy": noisy}
            out.append(p.model_copy(update=update))
    return out


def calibration_note(phases: list[PhaseSeconds], calibration: Calibration) -> str:
    """What calibrated what, in words: per phase the runs (of which model, engine and device
    kind) its figure comes from, then the phases left at their defaults."""
    where = calibration.source
    if not where:
        return "defaults (no history read)"
    if not calibration.runs_read:
        return f"defaults (no history yet at {where})"
    by_source: dict[str, list[str]] = {}
    defaults: list[str] = []
    for phase, label in PHASES.items():
        mine = [p for p in phases if p.phase == phase]
        for words in dict.fromkeys(_runs_words(p) for p in mine if p.runs):
            by_source.setdefault(words, []).append(label)
        if any(not p.runs for p in mine):
            defaults.append(label)
    if not by_source:
        return f"defaults: no matching runs among the {calibration.runs_read} at {where}"
    parts = [f"{', '.join(labels)}: {words}" for words, labels in by_source.items()]
    if defaults:
        parts.append(f"defaults (no matching runs): {', '.join(defaults)}")
    return f"calibrated from {where}: {'; '.join(parts)}"


def _runs_words(p: PhaseSeconds) -> str:
    """'3 runs of tiny-llama/vllm on cpu'"""
    model = "any model" if p.phase in MODEL_FREE_PHASES or p.model == ANY else p.model
    engine = "" if p.engine == ANY else f"/{p.engine}"
    loaded = " made beside other load (noisy)" if p.noisy else ""
    return f"{p.runs} run{'s' if p.runs != 1 else ''} of {model}{engine} on {p.device}{loaded}"


def budget(
    fitting: Iterable[PointPlan],
    skipped: list[tuple[Skip, PointPlan | None]],
    hourly_usd: float | None,
    quality_s: dict[GroupKey, float] | None = None,
    phases: list[PhaseSeconds] | None = None,
    node_cards: int | None = None,
) -> Budget:
    """The sweep's wall time as the sum of its phases (groups one after another on one device),
    and its price: the package-hour price × that wall time when a GPU target is in it. A group
    whose layout needs more cards than the priced node has (`node_cards`) is left out of the
    price, and named (``unpriced``)."""
    fitting = list(fitting)
    if phases is None:
        phases = phase_seconds(fitting, quality_s or {})
    by_phase: dict[str, float] = {}
    for p in phases:
        by_phase[p.phase] = by_phase.get(p.phase, 0.0) + p.seconds
    seconds = sum(by_phase.values())
    on_gpu = any(p.point.target != "cpu" for p in fitting)
    cards = {p.point.group.label: p.point.group.cards for p in fitting}
    card_seconds = sum(p.seconds * cards.get(p.group, 1) for p in phases)
    gpu_hours = card_seconds / 3600 if on_gpu else 0.0
    cpu_hours = 0.0 if on_gpu else card_seconds / 3600
    too_big = sorted(g for g, k in cards.items() if node_cards is not None and k > node_cards)
    priced_hours = sum(p.seconds * cards.get(p.group, 1) for p in phases if p.group not in too_big)
    unpriced = (
        f"{len(too_big)} group(s) need more cards than the tariff's {node_cards}-card node, "
        f"left out of the cost: {', '.join(too_big)}"
        if too_big
        else None
    )
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
        est_cpu_hours=cpu_hours,
        est_cost_usd=priced_hours / 3600 * hourly_usd if hourly_usd is not None else None,
        unpriced=unpriced if hourly_usd is not None else None,
    )
