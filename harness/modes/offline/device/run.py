"""The offline points of a group (device side): load the engine once, score the group's quality
once, then time every (batch, context) point on that one load (mode: offline).

Each row is yielded the moment it exists, so a crash loses at most the point in flight. An OOM in
a point becomes an `oom` row and the group goes on; a group that cannot load fails all its points
with the reason. The engine is closed however this ends.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness import corpus
from harness import plan as planner
from harness.backends.base import (
    Backend,
    BackendOptions,
    Generation,
    MemoryFacts,
    WindowScores,
    backend_class,
)
from harness.measure import energy, quality, roofline, timing, verdict
from harness.measure.memory import PhaseMemory, measure_phase
from harness.measure.speculation import Acceptance
from harness.modes.offline.device import speculation as spec
from harness.row import (
    Energy,
    HarnessTime,
    Memory,
    Part,
    Preallocation,
    Prediction,
    Quality,
    Roofline,
    Speed,
    Status,
    Tasks,
)
from harness.row.tasks import TaskScore
from harness.run.contracts import GroupItem, WorkContext, is_reference
from harness.run.device import (
    Job,
    Runner,
    comparable_peak_mib,
    failure_status,
    failure_text,
    free_memory,
    gap_pct,
    kv_pool_bytes,
    point_plan,
    predicted,
)
from harness.spec import catalog, inputs
from harness.spec.scenario import GroupKey, Point
from harness.tasks import metrics as task_metrics
from harness.tasks.kinds import kind_of
from harness.tasks.spec import TaskSpec, render_prompt
from harness.units import GIB, to_mib

TOPK = 16  # reference top-k kept per position for KL (a lower bound of the full KL)


# --- quality -------------------------------------------------------------------------------


def measure_quality(
    backend: Backend,
    tokens: list[int],
    group: GroupKey,
    ctx: WorkContext,
    ref: WindowScores | None,
    planned: tuple[tuple[str, str], ...] = (),
) -> tuple[Quality, WindowScores, Tasks]:
    """Perplexity (+CI), paired ΔNLL / KL / top-1 vs the reference, and the scenario's tasks
    (ARC-Easy among them; paired per item or per field), each task file checked against the
    hash the group was ``planned`` with (its points' inputs)."""
    started = time.perf_counter()
    settings = ctx.quality
    wins = corpus.windows(tokens, settings.window_tokens, settings.max_windows)
    reference = is_reference(group, ctx)
    scores = backend.score_windows(wins, None if ref is None else ref.topk_ids, TOPK)
    if reference:
        ref = scores
        at_ref: Any = scores.topk_logprobs  # its own logprobs at its own top-k ids: KL is exactly 0
    else:
        at_ref = scores.logprobs_at_ref
    samples, seed = settings.bootstrap_samples, 0
    low, high = quality.bootstrap_ppl_ci(scores.nll_sum, scores.tokens, samples=samples, seed=seed)
    out = Quality(
        ppl=quality.perplexity(scores.nll_sum, scores.tokens),
        ppl_ci_low=low,
        ppl_ci_high=high,
        nll_mean=float(scores.nll_sum.sum() / scores.tokens.sum()),
        quality_windows=len(wins),
        window_tokens=settings.window_tokens,
    )
    if ref is not None:
        d, d_low, d_high = quality.paired_dnll(
            ref.nll_sum, scores.nll_sum, scores.tokens, samples=samples, seed=seed
        )
        out.dnll_vs_ref, out.dnll_ci_low, out.dnll_ci_high = d, d_low, d_high
        bounds = verdict.dnll_interval(
            ref.nll_sum, scores.nll_sum, ref.tokens, scores.tokens, samples=samples, seed=seed
        )
        out.dnll_ci90_low, out.dnll_ci90_high, out.dnll_sd = bounds.low, bounds.high, bounds.sd
        out.top1_agree = quality.top1_agreement(ref.argmax, scores.argmax)
        if at_ref is not None and not np.isnan(at_ref).any():
            out.kl_vs_ref = float(quality.sparse_kl(ref.topk_logprobs, at_ref).mean())
    tasks_part, scores.task_arrays = Tasks(), None
    if tasks := settings.scored_tasks():
        inputs.check_planned(tasks, planned)  # a task file edited since the plan fails here
        tasks_part, scores.task_arrays = measure_tasks(
            backend, tasks, None if reference else ref, reference=reference
        )
    out.quality_s = time.perf_counter() - started
    return out, scores, tasks_part


def measure_tasks(
    backend: Backend,
    tasks: Sequence[TaskSpec],
    ref: WindowScores | None,
    *,
    reference: bool = False,
) -> tuple[Tasks, dict[str, Any]]:
    """The scenario's tasks on this loaded engine (harness.tasks; ARC-Easy is the shipped
    `arc-easy`): each item scored, its per-item results kept beside the window scores, paired
    with the reference's (``reference``: this group is the reference, paired with itself; no
    ``ref``: nothing paired)."""
    ref_outcomes = task_metrics.from_arrays((ref.task_arrays or {}) if ref is not None else {})
    scores: list[TaskScore] = []
    arrays: dict[str, Any] = {}
    for task in tasks:
        outcome = score_task(backend, task)
        arrays.update(task_metrics.to_arrays(task.name, outcome))
        paired = outcome if reference else ref_outcomes.get(task.name)
        scores.append(task_metrics.summarize(task.name, task, outcome, paired))
    return Tasks(tasks=scores), arrays


def score_task(backend: Backend, task: TaskSpec) -> task_metrics.Outcome:
    """One task's items through the engine, as its kind scores them (harness.tasks.kinds: each
    option's log-likelihood after the prompt, or a greedy generation of at most
    ``max_new_tokens``)."""
    shots = task.shot_items()
    prompts = [render_prompt(task, item, shots) for item in task.scored]
    outcome: task_metrics.Outcome = kind_of(task.kind).score(backend, task, prompts)
    return outcome


# --- speed and memory ----------------------------------------------------------------------


def time_point(
    backend: Backend, point: Point, prompts: list[list[int]], device: str
) -> tuple[Speed, PhaseMemory, PhaseMemory, list[str]]:
    """Memory in its own passes (a prefill-only call, then the first full call, which is also
    the first warm-up); timing afterwards, with no sampler thread competing for the cores. Last:
    the first timed run's per-sequence greedy digests (where the engine gives them)."""
    with measure_phase(device) as prefill_phase:
        backend.generate(prompts, 1)
    with measure_phase(device) as decode_phase:
        backend.generate(prompts, point.output_tokens)
    runs: list[Generation] = timing.repeat_until(
        lambda: backend.generate(prompts, point.output_tokens),
        warmups=max(point.warmups - 1, 0),
        min_repeats=point.repeats,
        min_duration_s=point.min_duration_s,
    )
    digests = runs[0].token_digests
    return summarize_runs(runs, point), prefill_phase.result, decode_phase.result, digests


def summarize_runs(runs: list[Generation], point: Point) -> Speed:
    """Medians over repeats; ITL percentiles over every step of every repeat."""
    per_run = []
    itl: list[float] = []
    generated = []
    for run in runs:
        new = min(run.new_tokens)
        lat = timing.derive_latencies(
            run.step_ms,
            batch=point.batch,
            context_tokens=point.context,
            new_tokens=new,
            e2e_ms=run.e2e_ms,
        )
        tpot = lat.tpot_ms
        if tpot is None and new > 1:  # engines without per-step marks: decode time / steps
            tpot = (lat.e2e_ms - lat.ttft_ms) / (new - 1)
        per_run.append((lat, tpot, sum(run.new_tokens)))
        itl.extend(lat.itl_ms)
        generated.append(sum(run.new_tokens))
    decode = [lat.decode_tok_s for lat, _, _ in per_run if lat.decode_tok_s is not None]
    decode_summary = timing.summarize(decode) if decode else None
    itl_summary = timing.summarize(itl) if itl else None
    total_tok_s = [(point.batch * point.context + n) / (lat.e2e_ms / 1e3) for lat, _, n in per_run]
    tpots = [t for _, t, _ in per_run if t is not None]
    return Speed(
        prefill_tok_s=float(np.median([lat.prefill_tok_s for lat, _, _ in per_run])),
        decode_tok_s=decode_summary.p50 if decode_summary else None,
        decode_cv=decode_summary.cv if decode_summary else None,
        total_tok_s=float(np.median(total_tok_s)),
        ttft_ms_p50=float(np.median([lat.ttft_ms for lat, _, _ in per_run])),
        tpot_ms_p50=float(np.median(tpots)) if tpots else None,
        e2e_ms_p50=float(np.median([lat.e2e_ms for lat, _, _ in per_run])),
        itl_ms_p50=itl_summary.p50 if itl_summary else None,
        itl_ms_p90=itl_summary.p90 if itl_summary else None,
        itl_ms_p99=itl_summary.p99 if itl_summary else None,
        repeats_done=len(runs),
        generated_tokens=int(np.median(generated)),
        timer=runs[0].timer,
    )


def measured_memory(
    load: PhaseMemory, prefill: PhaseMemory, decode: PhaseMemory, group: LoadedGroup
) -> Memory:
    """Peaks per phase. Both engines run in this process (vLLM's engine core too), so this
    process's allocator and RSS see their memory; the engine's own figures from the group."""
    return Memory(
        peak_mib_load=load.peak_allocated_mib,
        peak_mib_prefill=prefill.peak_allocated_mib,
        peak_mib_decode=decode.peak_allocated_mib,
        reserved_mib_decode=decode.peak_reserved_mib,
        device_used_mib=decode.device_used_mib,
        memory_source=decode.source,
        memory_global_fallback=decode.global_fallback,
        weights_mib_measured=group.weights_mib,
        kv_cache_mib_measured=group.kv_cache_mib,
    )


def prediction(
    point: Point,
    card: catalog.GpuSpec | None,
    weights_bytes: int | None,
    ctx: WorkContext,
    carried: planner.PointPlan | None = None,
) -> tuple[Prediction, float | None]:
    """The plan's figures for the point on its card (an unknown card: the target's default card,
    as `harness plan` assumes): the `carried` one orchestration made, where it was made for that
    card (`point_plan`); and the roofline decode ceiling where the card is known."""
    plan = point_plan(point, card, ctx, carried)
    out = predicted(plan, carried)
    if weights_bytes is not None:
        out.weights_gap_pct = gap_pct(to_mib(weights_bytes), out.predicted_weights_mib)
    ceiling = None
    if card is not None and point.target != "cpu":
        arch = catalog.model(point.model, point.revision)
        weights = weights_bytes or plan.weights_gib * GIB
        ceiling = planner.decode_ceiling_tok_s(card, weights, arch, point)
    return out, ceiling


# --- the engine ----------------------------------------------------------------------------


# Quality scoring sends the engine sequences of its own: corpus windows, and ARC questions with
# each answer (up to ~170 tokens with the tiny model's 4,096-token vocabulary).
QUALITY_SEQUENCE_TOKENS = 1024


def engine_max_context(group: GroupKey, points: list[Point], ctx: WorkContext) -> int:
    """The longest sequence the group's engine will see: a point's, or a quality sequence's."""
    longest_point = max(p.context + p.output_tokens for p in points)
    quality = max(ctx.quality.window_tokens, QUALITY_SEQUENCE_TOKENS)
    positions = catalog.model(group.model, group.revision).max_positions
    return max(longest_point, min(quality, positions))


def largest_kv_bytes(group: GroupKey, points: list[Point], max_context: int) -> float:
    """The plan's largest decode-time KV cache of the group's points, or one sequence of
    `max_context` tokens if that is larger (the pool is `harness.run.device.kv_pool_bytes`)."""
    arch = catalog.model(group.model, group.revision)
    first = points[0]
    draft = planner.speculative_kv_scale(first, arch)  # a draft's KV shares the pool
    return draft * max(
        planner.kv_cache_bytes(arch, first.kv_cache_dtype, first.quantization, max_context, 1),
        *(
            planner.kv_cache_bytes(
                arch, p.kv_cache_dtype, p.quantization, p.context + p.output_tokens, p.batch
            )
            for p in points
        ),
    )


def engine_options(group: GroupKey, points: list[Point], job: Job) -> BackendOptions:
    """The group's engine: its longest sequence and, where the engine sizes its KV pool up
    front (vLLM on the CPU), the pool its points need."""
    max_context = engine_max_context(group, points, job.ctx)
    pool = kv_pool_bytes(largest_kv_bytes(group, points, max_context))
    return job.backend_options(points[0].seed, max_context, pool)


# --- the group -----------------------------------------------------------------------------


@dataclass
class LoadedGroup:
    """What loading the group and scoring its quality gives every one of its points."""

    tokens: list[int]  # the eval corpus, tokenized: quality windows and prompts
    scores: WindowScores | None  # None: random weights, no quality scored
    quality: Quality
    load_memory: PhaseMemory
    load_s: float
    facts: MemoryFacts
    quality_energy: energy.Span | None = None  # None: no quality scored (random weights)
    tasks: Tasks = field(default_factory=Tasks)  # the scenario's tasks (none: an empty part)
    # speculative decoding: the acceptance of the tasks' generations (None: no speculation), and
    # every vLLM group's per-item greedy digests of them (harness.measure.speculation)
    spec_tasks: Acceptance | None = None
    task_digests: list[str] = field(default_factory=list)

    @property
    def weights_mib(self) -> float | None:
        return None if self.facts.weights_bytes is None else to_mib(self.facts.weights_bytes)

    @property
    def kv_cache_mib(self) -> float | None:
        return None if self.facts.kv_cache_bytes is None else to_mib(self.facts.kv_cache_bytes)

    def engine_memory(self) -> Memory:
        """What the engine says of its memory, for rows without measured peaks."""
        return Memory(
            weights_mib_measured=self.weights_mib, kv_cache_mib_measured=self.kv_cache_mib
        )

    def preallocation(self) -> Preallocation:
        reserved = self.facts.preallocated_bytes
        return Preallocation(engine_preallocated_mib=None if reserved is None else to_mib(reserved))


def load_and_score(
    backend: Backend,
    group: GroupKey,
    ctx: WorkContext,
    tokenizer_dir: str,
    device: str,
    reference: WindowScores | None,
    meter: energy.EnergyMeter[Any],
    planned: tuple[tuple[str, str], ...] = (),
) -> LoadedGroup:
    """Load the model once (its memory measured), then score the group's quality once (not on
    random weights: their quality columns stay empty)."""
    started = time.perf_counter()
    with measure_phase(device) as load_phase:
        backend.load()
    load_s = time.perf_counter() - started
    facts = backend.memory_facts()
    tokens = corpus.tokenize_eval(tokenizer_dir)  # the eval corpus, for quality and for prompts
    if group.weights == "random":
        # A borrowed tokenizer (see worker.random_weights_tokenizer) may know ids the model's
        # vocabulary lacks: clip them below the vocabulary. Random weights make the text's
        # meaning moot.
        top = catalog.model(group.model, group.revision).vocab_size - 1
        tokens = [min(t, top) for t in tokens]
        return LoadedGroup(tokens, None, Quality(), load_phase.result, load_s, facts)
    mark = meter.start()
    counted = backend.speculation_counters()
    quality_part, scores, tasks_part = measure_quality(
        backend, tokens, group, ctx, reference, planned
    )
    spec_tasks = spec.pass_acceptance(backend, counted, spec.tasks_workload(ctx.quality.tasks))
    spent = meter.stop(mark)
    free_memory(device)  # scoring's cached blocks must not count in the points' memory
    return LoadedGroup(tokens, scores, quality_part, load_phase.result, load_s, facts, spent,
                       tasks_part, spec_tasks, backend.text_digests())  # fmt: skip


def measure_point(
    backend: Backend,
    point: Point,
    group: LoadedGroup,
    card: catalog.GpuSpec | None,
    ctx: WorkContext,
    device: str,
    share_of_quality_s: float,
    meter: energy.EnergyMeter[Any],
    carried: planner.PointPlan | None = None,
) -> tuple[Status, str | None, list[Part]]:
    """One point of a loaded group: (status, error, the row's parts). A point that fails (an
    OOM, say) keeps the group's figures and its prediction (from the `carried` plan), and the
    group goes on."""
    predicted_part, ceiling = prediction(point, card, group.facts.weights_bytes, ctx, carried)
    joules = energy_part(meter, None, group.quality_energy)
    shared: list[Part] = [group.preallocation(), group.quality, group.tasks,
                          HarnessTime(load_s=group.load_s), joules]  # fmt: skip
    started = time.perf_counter()
    try:
        prompts = corpus.prompt_windows(group.tokens, point.batch, point.context)
        counted = backend.speculation_counters()
        speed, prefill_mem, decode_mem, digests = time_point(backend, point, prompts, device)
        accepted = spec.pass_acceptance(backend, counted, spec.point_workload(point.group))
        phases = energy.point_energy(
            meter,
            lambda: backend.generate(prompts, 1),
            lambda: sum(backend.generate(prompts, point.output_tokens).new_tokens) - point.batch,
        )
    except Exception as exc:  # one failing point must not end the group
        free_memory(device)
        roof = Roofline(roofline_decode_tok_s=ceiling)
        return (
            failure_status(exc),
            failure_text(exc),
            [group.engine_memory(), predicted_part, roof, *shared],
        )
    measured_s = time.perf_counter() - started + share_of_quality_s
    memory = measured_memory(group.load_memory, prefill_mem, decode_mem, group)
    predicted_part.peak_gap_pct = gap_pct(
        comparable_peak_mib(decode_mem, device), predicted_part.predicted_peak_mib
    )
    roof = Roofline(roofline_decode_tok_s=ceiling)
    if ceiling and speed.decode_tok_s:
        roof.roofline_fraction = roofline.fraction(speed.decode_tok_s, ceiling)
    timing_part = HarnessTime(load_s=group.load_s, measured_s=measured_s)
    speculation = spec.speculation_part(
        point.group, accepted, group.spec_tasks, digests, group.task_digests
    )
    return "ok", None, [speed, memory, predicted_part, roof, group.preallocation(), group.quality,
                        group.tasks, timing_part, speculation,
                        energy_part(meter, phases, group.quality_energy)]  # fmt: skip


def energy_part(
    meter: energy.EnergyMeter[Any], phases: energy.PhaseEnergy | None, quality: energy.Span | None
) -> Energy:
    """The row's energy columns; every figure that is None has its reason in the row."""
    reasons = [
        meter.unavailable_reason,
        phases.reason if phases else None,
        quality.reason if quality else None,
    ]
    out = Energy(
        energy_source=meter.source,
        energy_j_quality=quality.joules if quality else None,
        energy_unavailable_reason="; ".join(dict.fromkeys(r for r in reasons if r)) or None,
    )
    if phases is not None:
        out.energy_j_prefill, out.energy_j_decode = phases.energy_j_prefill, phases.energy_j_decode
        out.j_per_token_decode = phases.j_per_token_decode
        out.avg_power_w_decode = phases.avg_power_w_decode
    return out


def iter_offline(group: GroupKey, points: list[Point], job: Job) -> Iterator[GroupItem]:
    """The offline points of a group (the `Runner` contract): the group's WindowScores once
    (not for random weights), then each point's row; the engine is closed however this ends,
    and its memory released before the next mode's runner starts (a server, say)."""
    device = job.device
    backend = backend_class(group.backend)(group, engine_options(group, points, job))
    try:
        try:
            reference = None if job.random_weights else job.reference
            loaded = load_and_score(
                backend, group, job.ctx, job.tokenizer_dir, device, reference, job.meter,
                points[0].inputs,
            )  # fmt: skip
        except Exception as exc:  # a group that cannot load fails all its points
            reason = failure_text(exc, "load/quality")
            for point in points:
                yield job.row(point, failure_status(exc), reason, [])
            return
        if loaded.scores is not None:
            yield loaded.scores
        card = job.card(group.target)
        quality_share = (loaded.quality.quality_s or 0.0) / len(points)
        for point in points:
            status, error, parts = measure_point(
                backend, point, loaded, card, job.ctx, device, quality_share, job.meter,
                job.plans.get(point),
            )  # fmt: skip
            yield job.row(point, status, error, parts, card=card.name if card else None)
    finally:
        backend.close()
        free_memory(device)


_CONTRACT: Runner = iter_offline  # mypy checks the runner against harness.run.device.Runner
