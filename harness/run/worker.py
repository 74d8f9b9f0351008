"""One group on one device: load once, score quality once, then time every (batch, context) point.

Each row is handed to `emit` the moment it exists (the store writes it atomically), so a crash
loses at most the point in flight. An OOM in a point becomes an `oom` row and the group goes on.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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
from harness.measure import energy, quality, roofline, timing
from harness.measure.memory import PhaseMemory, measure_phase
from harness.row import (
    Energy,
    HarnessTime,
    Memory,
    Part,
    Preallocation,
    Prediction,
    Quality,
    ResultRow,
    Roofline,
    Speed,
    Status,
)
from harness import modes
from harness.run import node, provenance
from harness.run.contracts import GroupItem, WorkContext, is_reference, point_row
from harness.run.store import keep_scores, load_scores, reference_artifact
from harness.spec import catalog, models
from harness.spec.scenario import GroupKey, Point
from harness.units import GIB, MIB, to_mib

if TYPE_CHECKING:
    from harness.run.sweep import Work

TOPK = 16  # reference top-k kept per position for KL (a lower bound of the full KL)
Emit = Callable[[ResultRow], None]


class GroupActor:
    """A Ray actor on a worker node, one per group (a fresh process: one group's memory figures
    never carry another's leftovers): measures the group and streams each item back with the
    node's id. Implements harness.run.driver.GroupActor; the CLI hands this class to the driver."""

    def __init__(self, simulate_on_cpu: bool = False) -> None:
        self.simulate_on_cpu = simulate_on_cpu
        os.environ["OMP_NUM_THREADS"] = str(node.node_threads())

    def measure(
        self, work: Work, points: list[Point], ctx: WorkContext, reference: WindowScores | None
    ) -> Iterator[tuple[GroupItem, str]]:
        import ray
        import torch

        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
        node_id = ray.get_runtime_context().get_node_id()
        override = "cpu" if self.simulate_on_cpu else None
        for item in iter_group(
            work.group, points, ctx, reference=reference, device_override=override
        ):
            yield item, node_id


def device_for(target: str) -> str:
    return "cpu" if target == "cpu" else "cuda"


# --- quality -------------------------------------------------------------------------------


def measure_quality(
    backend: Backend,
    tokens: list[int],
    group: GroupKey,
    ctx: WorkContext,
    ref: WindowScores | None,
) -> tuple[Quality, WindowScores]:
    """Perplexity (+CI), paired ΔNLL / KL / top-1 vs the reference, ARC-Easy accuracy."""
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
        out.top1_agree = quality.top1_agreement(ref.argmax, scores.argmax)
        if at_ref is not None and not np.isnan(at_ref).any():
            out.kl_vs_ref = float(quality.sparse_kl(ref.topk_logprobs, at_ref).mean())
    if settings.arc_items:
        arc = measure_arc(backend, settings.arc_items)
        out.arc_acc, out.arc_acc_norm, out.arc_items, hits = arc
        scores.arc_index = np.asarray(corpus.arc_indices(settings.arc_items))
        scores.arc_correct = hits  # kept beside the window scores: flips vs the reference
    out.quality_s = time.perf_counter() - started
    return out, scores


def measure_arc(backend: Backend, n: int) -> tuple[float, float, int, Any]:
    """(accuracy, length-normalised accuracy, items, per-item [acc, acc_norm] hits) on the n
    ARC-Easy items of ``corpus.arc_items(n)``."""
    items = corpus.arc_items(n)
    pairs = [(item.query + "\nAnswer:", " " + choice) for item in items for choice in item.choices]
    flat = backend.score_continuations(pairs)
    loglik: list[list[float]] = []
    chars: list[list[int]] = []
    at = 0
    for item in items:
        loglik.append(flat[at : at + len(item.choices)])
        chars.append([len(" " + c) for c in item.choices])
        at += len(item.choices)
    hits = quality.arc_hits(loglik, chars, [item.gold for item in items])
    return float(hits[:, 0].mean()), float(hits[:, 1].mean()), len(items), hits


# --- speed and memory ----------------------------------------------------------------------


def time_point(
    backend: Backend, point: Point, prompts: list[list[int]], device: str
) -> tuple[Speed, PhaseMemory, PhaseMemory]:
    """Memory in its own passes (a prefill-only call, then the first full call, which is also
    the first warm-up); timing afterwards, with no sampler thread competing for the cores."""
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
    return summarize_runs(runs, point), prefill_phase.result, decode_phase.result


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


def comparable_peak_mib(mem: Memory, device: str) -> float | None:
    """The measured figure that the plan's total predicts: on a GPU the device memory this
    process uses (it includes the CUDA/HIP context, as the plan's reserve does) when NVML sees
    the process, else the allocator's peak; on the CPU the process RSS peak."""
    if device.startswith("cuda") and not mem.memory_global_fallback:
        return mem.device_used_mib or mem.peak_mib_decode
    return mem.peak_mib_decode


def gap_pct(measured: float | None, predicted: float | None) -> float | None:
    if measured is None or not predicted:
        return None
    return 100.0 * (measured - predicted) / predicted


def card_for_device(device_name: str, target: str, ctx: WorkContext) -> catalog.GpuSpec | None:
    """The catalog card that really ran the group (None: an unknown GPU and no --gpu given)."""
    if target == "cpu":
        return catalog.gpu("cpu")
    found = catalog.gpu_for_device_name(device_name)
    if found is None and ctx.gpu:
        return catalog.gpu(ctx.gpu)
    return found


def prediction(
    point: Point, card: catalog.GpuSpec | None, weights_bytes: int | None, ctx: WorkContext
) -> tuple[Prediction, float | None]:
    """The plan's figures for the point on its card (an unknown card: the target's default card,
    as `harness plan` assumes), and the roofline decode ceiling where the card is known."""
    plan = planner.plan_point(
        point,
        card or planner.default_card(point.target, ctx.gpu),
        gpu_memory_utilization=ctx.vllm.gpu_memory_utilization,
    )
    out = Prediction(
        predicted_weights_mib=to_mib(plan.weights_gib * GIB),
        predicted_kv_cache_mib=to_mib(plan.kv_cache_gib * GIB),
        predicted_activations_mib=to_mib(plan.activations_gib * GIB),
        predicted_peak_mib=to_mib(plan.total_gib * GIB),
    )
    if weights_bytes is not None:
        out.weights_gap_pct = gap_pct(to_mib(weights_bytes), out.predicted_weights_mib)
    ceiling = None
    if card is not None and point.target != "cpu":
        arch = catalog.model(point.model)
        weights = weights_bytes or plan.weights_gib * GIB
        ceiling = planner.decode_ceiling_tok_s(card, weights, arch, point)
    return out, ceiling


# --- the group -----------------------------------------------------------------------------


# An engine that sizes its KV pool up front (vLLM on the CPU) gets the plan's largest KV cache
# of the group with this headroom: blocks are allocated whole (128 tokens on the CPU), so each
# sequence may hold up to one block it does not fill.
KV_POOL_HEADROOM = 1.25
KV_POOL_MIN_BYTES = 64 * MIB


# Quality scoring sends the engine sequences of its own: corpus windows, and ARC questions with
# each answer (up to ~170 tokens with the tiny model's 4,096-token vocabulary).
QUALITY_SEQUENCE_TOKENS = 1024


def engine_max_context(group: GroupKey, points: list[Point], ctx: WorkContext) -> int:
    """The longest sequence the group's engine will see: a point's, or a quality sequence's."""
    longest_point = max(p.context + p.output_tokens for p in points)
    quality = max(ctx.quality.window_tokens, QUALITY_SEQUENCE_TOKENS)
    return max(longest_point, min(quality, catalog.model(group.model).max_positions))


def kv_pool_bytes(group: GroupKey, points: list[Point], max_context: int) -> int:
    """The KV pool for the group: the plan's largest decode-time KV cache of its points, or one
    sequence of `max_context` tokens if that is larger, with headroom."""
    arch = catalog.model(group.model)
    first = points[0]
    largest = max(
        planner.kv_cache_bytes(arch, first.kv_cache_dtype, first.quantization, max_context, 1),
        *(
            planner.kv_cache_bytes(
                arch, p.kv_cache_dtype, p.quantization, p.context + p.output_tokens, p.batch
            )
            for p in points
        ),
    )
    return max(KV_POOL_MIN_BYTES, int(largest * KV_POOL_HEADROOM))


def measure_group(
    group: GroupKey, points: list[Point], ctx: WorkContext, emit: Emit
) -> list[ResultRow]:
    """In-process: the reference's scores are read from and saved to the run folder."""
    artifact = reference_artifact(ctx, group)
    rows: list[ResultRow] = []
    reference = None if is_reference(group, ctx) else load_scores(artifact)
    for item in iter_group(group, points, ctx, reference=reference):
        if isinstance(item, ResultRow):
            emit(item)
            rows.append(item)
        else:
            keep_scores(ctx, group, item)
    return rows


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
    meter: energy.EnergyMeter[Any] | None = None,
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
        # A borrowed tokenizer (see random_weights_tokenizer) may know ids the model's vocabulary
        # lacks: clip them below the vocabulary. Random weights make the text's meaning moot.
        top = catalog.model(group.model, group.revision).vocab_size - 1
        tokens = [min(t, top) for t in tokens]
        return LoadedGroup(tokens, None, Quality(), load_phase.result, load_s, facts)
    meter = meter or energy.EnergyMeter.unavailable("no meter given")
    mark = meter.start()
    quality_part, scores = measure_quality(backend, tokens, group, ctx, reference)
    spent = meter.stop(mark)
    free_memory(device)  # scoring's cached blocks must not count in the points' memory
    return LoadedGroup(tokens, scores, quality_part, load_phase.result, load_s, facts, spent)


def measure_point(
    backend: Backend,
    point: Point,
    group: LoadedGroup,
    card: catalog.GpuSpec | None,
    ctx: WorkContext,
    device: str,
    share_of_quality_s: float,
    meter: energy.EnergyMeter[Any] | None = None,
) -> tuple[Status, str | None, list[Part]]:
    """One point of a loaded group: (status, error, the row's parts). A point that fails (an
    OOM, say) keeps the group's figures and its prediction, and the group goes on."""
    predicted, ceiling = prediction(point, card, group.facts.weights_bytes, ctx)
    meter = meter or energy.EnergyMeter.unavailable("no meter given")
    joules = energy_part(meter, None, group.quality_energy)
    shared: list[Part] = [group.preallocation(), group.quality, HarnessTime(load_s=group.load_s),
                          joules]  # fmt: skip
    started = time.perf_counter()
    try:
        prompts = corpus.prompt_windows(group.tokens, point.batch, point.context)
        speed, prefill_mem, decode_mem = time_point(backend, point, prompts, device)
        phases = energy.point_energy(
            meter,
            lambda: backend.generate(prompts, 1),
            lambda: sum(backend.generate(prompts, point.output_tokens).new_tokens) - point.batch,
        )
    except Exception as exc:  # one failing point must not end the group
        free_memory(device)
        status: Status = "oom" if is_oom(exc) else "error"
        roof = Roofline(roofline_decode_tok_s=ceiling)
        return (
            status,
            f"{type(exc).__name__}: {exc}"[:2000],
            [group.engine_memory(), predicted, roof, *shared],
        )
    measured_s = time.perf_counter() - started + share_of_quality_s
    memory = measured_memory(group.load_memory, prefill_mem, decode_mem, group)
    predicted.peak_gap_pct = gap_pct(
        comparable_peak_mib(memory, device), predicted.predicted_peak_mib
    )
    roof = Roofline(roofline_decode_tok_s=ceiling)
    if ceiling and speed.decode_tok_s:
        roof.roofline_fraction = roofline.fraction(speed.decode_tok_s, ceiling)
    timing_part = HarnessTime(load_s=group.load_s, measured_s=measured_s)
    return "ok", None, [speed, memory, predicted, roof, group.preallocation(), group.quality,
                        timing_part, energy_part(meter, phases, group.quality_energy)]  # fmt: skip


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


def iter_group(
    group: GroupKey,
    points: list[Point],
    ctx: WorkContext,
    *,
    reference: WindowScores | None = None,
    device_override: str | None = None,
) -> Iterator[GroupItem]:
    """Load once, score quality once, then each point; yields the group's WindowScores once,
    and each point's ResultRow the moment it is measured. The backend is closed however this
    ends (a failure after the load, or a consumer that stops early), so an in-process `measure`
    never carries one group's engine memory into the next.

    `device_override="cpu"` runs GPU-target groups on the CPU: only the multi-node tests use it
    (routing on one machine); the rows' provenance then names the CPU that really ran them."""
    device = device_override or device_for(group.target)
    random = group.weights == "random"
    # a hub id: its snapshot; random weights need its config.json only
    resolved = models.resolve(group.model, group.revision, need="config" if random else "weights")
    tokenizer_dir = random_weights_tokenizer(resolved) if random else str(resolved.path)
    # serving points (load levels behind a server) run after the offline ones, engine closed
    served = [p for p in points if p.serving is not None]
    trained = [p for p in points if p.training is not None]  # a fresh model per training point
    points = [p for p in points if p.serving is None and p.training is None]
    corpus_hash = corpus.corpus_hash()
    prov = provenance.collect(device, corpus_hash, model_commit=resolved.commit)
    reference_group = is_reference(group, ctx)

    def row(
        point: Point, status: Status, error: str | None, parts: list[Part], card: str | None
    ) -> ResultRow:
        return point_row(
            point, *parts, run=ctx.run, corpus_hash=corpus_hash, status=status, error=error,
            is_reference=reference_group and point.serving is None, gpu=card, provenance=prov,
        )  # fmt: skip

    if trained:
        with energy.metering(device) as meter:
            yield from modes.get("training").load("run")(
                group, trained, ctx, row, device=device, model_path=str(resolved.path),
                tokenizer_path=tokenizer_dir, random_weights=random, meter=meter,
            )  # fmt: skip
    if points:
        yield from iter_offline(group, points, ctx, reference, device, resolved, tokenizer_dir, row)
    if served:
        card = card_for_device(prov.device_name or "", group.target, ctx)

        def serving_row(
            point: Point, status: Status, error: str | None, parts: list[Part], generator: str
        ) -> ResultRow:
            made = row(point, status, error, parts, card.name if card else None)
            made.provenance = prov.model_copy(update={"load_generator": generator})
            return made

        with energy.metering(device) as meter:
            yield from modes.get("serving").load("run")(
                group, served, ctx, serving_row, device=device, model_path=str(resolved.path),
                tokenizer_path=tokenizer_dir, random_weights=random, meter=meter,
            )  # fmt: skip


def iter_offline(
    group: GroupKey,
    points: list[Point],
    ctx: WorkContext,
    reference: WindowScores | None,
    device: str,
    resolved: models.ResolvedModel,
    tokenizer_dir: str,
    row: Callable[[Point, Status, str | None, list[Part], str | None], ResultRow],
) -> Iterator[GroupItem]:
    """The offline points of a group (see `iter_group`); the engine is closed however this ends."""
    random = group.weights == "random"
    max_context = engine_max_context(group, points, ctx)
    options = BackendOptions(
        device=device,
        model_path=str(resolved.path),
        tokenizer_path=tokenizer_dir,
        random_weights=random,
        seed=points[0].seed,
        vllm=ctx.vllm,
        max_context=max_context,
        kv_cache_bytes=kv_pool_bytes(group, points, max_context),
    )
    backend = backend_class(group.backend)(group, options)
    try:
        with energy.metering(device) as meter:
            try:
                reference = None if random else reference
                loaded = load_and_score(
                    backend, group, ctx, tokenizer_dir, device, reference, meter
                )
            except Exception as exc:  # a group that cannot load fails all its points
                failed: Status = "oom" if is_oom(exc) else "error"
                reason = f"load/quality: {type(exc).__name__}: {exc}"[:2000]
                for point in points:
                    yield row(point, failed, reason, [], None)
                return
            if loaded.scores is not None:
                yield loaded.scores
            card = card_for_device(provenance.device_name(device), group.target, ctx)
            quality_share = (loaded.quality.quality_s or 0.0) / len(points)
            for point in points:
                status, error, parts = measure_point(
                    backend, point, loaded, card, ctx, device, quality_share, meter
                )
                yield row(point, status, error, parts, card.name if card else None)
    finally:
        backend.close()
        free_memory(device)  # the engine's memory is gone before a server starts


def random_weights_tokenizer(resolved: models.ResolvedModel) -> str:
    """The tokenizer for a random-weights model's prompts: its own when its folder has one (a
    hub snapshot, say), else the shipped tiny model's (the catalog's configs ship none); the
    worker clips the ids below the model's vocabulary."""
    if resolved.has_tokenizer:
        return str(resolved.path)
    return str(models.PACKAGE_DATA / "tiny-llama")


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    name = type(exc).__name__
    return name in {"OutOfMemoryError", "OOMError"} or "out of memory" in str(exc).lower()


def free_memory(device: str) -> None:
    import gc

    gc.collect()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()
