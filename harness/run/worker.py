"""One group on one device: load once, score quality once, then time every (batch, context) point.

Each row is handed to `emit` the moment it exists (the store writes it atomically), so a crash
loses at most the point in flight. An OOM in a point becomes an `oom` row and the group goes on.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from harness import corpus
from harness import plan as planner
from harness.backends.base import Backend, BackendOptions, Generation, WindowScores, backend_class
from harness.measure import quality, roofline, timing
from harness.measure.memory import PhaseMemory, measure_phase
from harness.row import ResultRow
from harness.run import node, provenance
from harness.run.contracts import GroupItem, WorkContext, is_reference, point_row
from harness.run.store import keep_scores, load_scores, reference_artifact
from harness.spec import catalog, models
from harness.spec.scenario import GroupKey, Point

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
) -> tuple[dict[str, Any], WindowScores]:
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
    out: dict[str, Any] = {
        "ppl": quality.perplexity(scores.nll_sum, scores.tokens),
        "ppl_ci_low": low,
        "ppl_ci_high": high,
        "nll_mean": float(scores.nll_sum.sum() / scores.tokens.sum()),
        "quality_windows": len(wins),
        "window_tokens": settings.window_tokens,
    }
    if ref is not None:
        d, d_low, d_high = quality.paired_dnll(
            ref.nll_sum, scores.nll_sum, scores.tokens, samples=samples, seed=seed
        )
        out.update(dnll_vs_ref=d, dnll_ci_low=d_low, dnll_ci_high=d_high)
        out["top1_agree"] = quality.top1_agreement(ref.argmax, scores.argmax)
        if at_ref is not None and not np.isnan(at_ref).any():
            out["kl_vs_ref"] = float(quality.sparse_kl(ref.topk_logprobs, at_ref).mean())
    if settings.arc_items:
        out.update(measure_arc(backend, settings.arc_items))
    out["quality_s"] = time.perf_counter() - started
    return out, scores


def measure_arc(backend: Backend, n: int) -> dict[str, Any]:
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
    acc, acc_norm = quality.arc_scores(loglik, chars, [item.gold for item in items])
    return {"arc_acc": acc, "arc_acc_norm": acc_norm, "arc_items": len(items)}


# --- speed and memory ----------------------------------------------------------------------


def time_point(
    backend: Backend, point: Point, prompts: list[list[int]], device: str
) -> tuple[dict[str, Any], PhaseMemory, PhaseMemory]:
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


def summarize_runs(runs: list[Generation], point: Point) -> dict[str, Any]:
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
    return {
        "prefill_tok_s": float(np.median([lat.prefill_tok_s for lat, _, _ in per_run])),
        "decode_tok_s": decode_summary.p50 if decode_summary else None,
        "decode_cv": decode_summary.cv if decode_summary else None,
        "total_tok_s": float(np.median(total_tok_s)),
        "ttft_ms_p50": float(np.median([lat.ttft_ms for lat, _, _ in per_run])),
        "tpot_ms_p50": float(np.median(tpots)) if tpots else None,
        "e2e_ms_p50": float(np.median([lat.e2e_ms for lat, _, _ in per_run])),
        "itl_ms_p50": itl_summary.p50 if itl_summary else None,
        "itl_ms_p90": itl_summary.p90 if itl_summary else None,
        "itl_ms_p99": itl_summary.p99 if itl_summary else None,
        "repeats_done": len(runs),
        "generated_tokens": int(np.median(generated)),
        "timer": runs[0].timer,
    }


def memory_columns(load: PhaseMemory, prefill: PhaseMemory, decode: PhaseMemory) -> dict[str, Any]:
    """Peaks per phase. Both engines run in this process (vLLM's engine core too), so this
    process's allocator and RSS see their memory."""
    return {
        "peak_mib_load": load.peak_allocated_mib,
        "peak_mib_prefill": prefill.peak_allocated_mib,
        "peak_mib_decode": decode.peak_allocated_mib,
        "reserved_mib_decode": decode.peak_reserved_mib,
        "device_used_mib": decode.device_used_mib,
        "memory_source": decode.source,
        "memory_global_fallback": decode.global_fallback,
    }


def comparable_peak_mib(mem: dict[str, Any], device: str) -> float | None:
    """The measured figure that the plan's total predicts: on a GPU the device memory this
    process uses (it includes the CUDA/HIP context, as the plan's reserve does) when NVML sees
    the process, else the allocator's peak; on the CPU the process RSS peak."""
    if device.startswith("cuda") and not mem.get("memory_global_fallback"):
        return mem.get("device_used_mib") or mem.get("peak_mib_decode")
    return mem.get("peak_mib_decode")


def gap_pct(measured: float | None, predicted: float | None) -> float | None:
    if measured is None or not predicted:
        return None
    return 100.0 * (measured - predicted) / predicted


def card_for_device(device_name: str, target: str, ctx: WorkContext) -> catalog.GpuSpec | None:
    if target == "cpu":
        return catalog.gpu("cpu")
    found = catalog.gpu_for_device_name(device_name)
    if found is None and ctx.gpu:
        return catalog.gpu(ctx.gpu)
    return found


def prediction_columns(
    point: Point, card: catalog.GpuSpec | None, weights_bytes: int | None, ctx: WorkContext
) -> dict[str, Any]:
    plan_card = card or catalog.gpu("H100-SXM-80GB")
    plan = planner.plan_point(
        point, plan_card, gpu_memory_utilization=ctx.vllm.gpu_memory_utilization
    )
    mib = 1024.0
    out: dict[str, Any] = {
        "predicted_weights_mib": plan.weights_gib * mib,
        "predicted_kv_cache_mib": plan.kv_cache_gib * mib,
        "predicted_activations_mib": plan.activations_gib * mib,
        "predicted_peak_mib": plan.total_gib * mib,
        "gpu": card.name if card else None,
    }
    if weights_bytes is not None:
        out["weights_mib_measured"] = weights_bytes / 2**20
        out["weights_gap_pct"] = gap_pct(out["weights_mib_measured"], out["predicted_weights_mib"])
    if card is not None and point.target != "cpu":
        arch = catalog.model(point.model)
        weights = weights_bytes or plan.weights_gib * 2**30
        out["roofline_decode_tok_s"] = planner.decode_ceiling_tok_s(card, weights, arch, point)
    return out


# --- the group -----------------------------------------------------------------------------


# An engine that sizes its KV pool up front (vLLM on the CPU) gets the plan's largest KV cache
# of the group with this headroom: blocks are allocated whole (128 tokens on the CPU), so each
# sequence may hold up to one block it does not fill.
KV_POOL_HEADROOM = 1.25
KV_POOL_MIN_BYTES = 64 * 2**20


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


def model_path(model_id: str, revision: str = "main") -> str:
    """Where the model's files are on this machine (a hub id: its cached snapshot)."""
    return str(models.resolve(model_id, revision, need="weights").path)


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


def iter_group(
    group: GroupKey,
    points: list[Point],
    ctx: WorkContext,
    *,
    reference: WindowScores | None = None,
    device_override: str | None = None,
) -> Iterator[GroupItem]:
    """Load once, score quality once, then each point; yields the group's WindowScores once,
    and each point's ResultRow the moment it is measured.

    `device_override="cpu"` runs GPU-target groups on the CPU: only the multi-node tests use it
    (routing on one machine); the rows' provenance then names the CPU that really ran them."""
    device = device_override or device_for(group.target)
    path = model_path(group.model, group.revision)
    max_context = engine_max_context(group, points, ctx)
    options = BackendOptions(
        device=device,
        model_path=path,
        seed=points[0].seed if points else 0,
        vllm=ctx.vllm,
        max_context=max_context,
        kv_cache_bytes=kv_pool_bytes(group, points, max_context),
    )
    corpus_hash = corpus.corpus_hash()
    prov = provenance.collect(device, corpus_hash)

    def row(point: Point, **fields: Any) -> ResultRow:
        return point_row(
            point, run=ctx.run, corpus_hash=corpus_hash,
            is_reference=is_reference(group, ctx), provenance=prov, **fields,
        )  # fmt: skip

    backend = backend_class(group.backend)(group, options)
    load_started = time.perf_counter()
    try:
        with measure_phase(device) as load_phase:
            backend.load()
        load_s = time.perf_counter() - load_started
        facts = backend.memory_facts()
        tokens = corpus.tokenize_eval(path)  # the eval corpus, for quality and for prompts
        shared, scores = measure_quality(backend, tokens, group, ctx, reference)
        free_memory(device)  # scoring's cached blocks must not count in the points' memory
    except Exception as exc:  # a group that cannot load fails all its points
        backend.close()
        status = "oom" if is_oom(exc) else "error"
        for point in points:
            yield row(
                point, status=status, error=f"load/quality: {type(exc).__name__}: {exc}"[:2000]
            )
        return
    yield scores
    card = card_for_device(prov.device_name or "", group.target, ctx)
    shared["load_s"] = load_s
    if facts.preallocated_bytes is not None:
        shared["engine_preallocated_mib"] = facts.preallocated_bytes / 2**20
    if facts.kv_cache_bytes is not None:
        shared["kv_cache_mib_measured"] = facts.kv_cache_bytes / 2**20
    for point in points:
        predicted = prediction_columns(point, card, facts.weights_bytes, ctx)
        started = time.perf_counter()
        try:
            prompts = corpus.prompt_windows(tokens, point.batch, point.context)
            speed, prefill_mem, decode_mem = time_point(backend, point, prompts, device)
        except Exception as exc:  # one failing point must not end the group
            free_memory(device)
            status = "oom" if is_oom(exc) else "error"
            yield row(
                point,
                status=status,
                error=f"{type(exc).__name__}: {exc}"[:2000],
                **shared,
                **predicted,
            )
            continue
        measured_s = time.perf_counter() - started + shared.get("quality_s", 0.0) / len(points)
        mem = memory_columns(load_phase.result, prefill_mem, decode_mem)
        extra: dict[str, Any] = {"measured_s": measured_s}
        extra["peak_gap_pct"] = gap_pct(
            comparable_peak_mib(mem, device), predicted["predicted_peak_mib"]
        )
        ceiling = predicted.get("roofline_decode_tok_s")
        if ceiling and speed["decode_tok_s"]:
            extra["roofline_fraction"] = roofline.fraction(speed["decode_tok_s"], ceiling)
        yield row(point, status="ok", **speed, **mem, **shared, **predicted, **extra)
    backend.close()


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
