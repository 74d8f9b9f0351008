"""The seconds a point takes on a card, by the roofline: the bytes a decode step reads, its
ceiling in tokens/s (one card, or stage after stage under a layout), the tensor ranks'
all-reduces, and a run's estimate (prefill at the compute peak + decode at the ceiling, over the
efficiency a budget assumes). Formulas: harness.plan's docstring ("Decode under a layout")."""

from __future__ import annotations

from harness.measure import roofline
from harness.plan import bytes as planbytes
from harness.plan.bytes import (
    kv_cache_bytes,
    param_counts,
    unquantized_bytes_per_param,
    weights_bytes,
)
from harness.spec.capabilities import Layout, compute_dtype_bytes
from harness.spec.catalog import GpuSpec, ModelArch
from harness.spec.scenario import Point

EFFICIENCY = {"cpu": 0.25, "cuda": 0.6, "rocm": 0.5}  # share of roofline a budget assumes


def decode_step_bytes(
    arch: ModelArch, weights: float, quantization: str, kv_cache_dtype: str, batch: int,
    context: int, new_tokens: int, layout: Layout | None = None, stage: int = 0,
) -> tuple[float, float]:  # fmt: skip
    """(weight bytes, KV-cache bytes) one decode step reads: ``weights`` (the whole model's, or
    under ``layout`` one rank's of ``stage``) less its input embedding where that is a lookup of
    B rows, not a read of the whole table (untied; or tied on a pipeline stage before the last,
    whose table is read as the output head on the last stage only), and the whole batch's KV
    cache at the mean decode context."""
    mean = roofline.mean_decode_context(context, new_tokens) if new_tokens >= 2 else context
    kv = kv_cache_bytes(arch, kv_cache_dtype, quantization, mean, batch)
    per_param = unquantized_bytes_per_param(arch, quantization)
    embeddings = param_counts(arch, layout, stage).embeddings
    head_here = layout is None or stage == layout.pipeline - 1  # the stage that runs the head
    lookup_only = 0 if arch.tie_embeddings and head_here else embeddings * per_param
    unread = planbytes.untouched_expert_bytes(arch, quantization, batch, layout, stage)
    return weights - lookup_only - unread, kv


def decode_ceiling_tok_s(card: GpuSpec, weights: float, arch: ModelArch, point: Point) -> float:
    """The bandwidth roofline (measure.roofline) for a point: the bytes a decode step reads
    (``decode_step_bytes``) at the card's bandwidth."""
    read, kv = decode_step_bytes(arch, weights, point.quantization, point.kv_cache_dtype,
                                 point.batch, point.context, point.output_tokens)  # fmt: skip
    return roofline.decode_ceiling_tok_s(card.bandwidth_gb_s, read, kv, point.batch)


def allreduce_seconds(card: GpuSpec, arch: ModelArch, point: Point, tokens: int) -> float:
    """Two all-reduces per layer (after attention, after the MLP) of `tokens` × hidden
    activations over the tensor ranks; a ring moves 2 (t − 1) / t of them through each card's
    link (catalog `interconnect_gb_s`). 0 on one rank or where the catalog has no link figure."""
    if point.layout is None or point.layout.tensor < 2 or not card.interconnect_gb_s:
        return 0.0
    t = point.layout.tensor
    act = compute_dtype_bytes(point.quantization, arch.dtype_bytes)
    per_layer = 2 * tokens * arch.hidden_size * act * 2 * (t - 1) / t
    return arch.num_layers * per_layer / (card.interconnect_gb_s * 1e9)


def layout_decode_ceiling_tok_s(card: GpuSpec, arch: ModelArch, point: Point) -> float:
    """Tokens/s of a batch under a layout: B / (Σ over stages of the stage's rank bytes read per
    step at the card's bandwidth (its weights less the embedding lookup, its KV at the mean
    decode context) + the step's all-reduces)."""
    layout, q = point.layout, point.quantization
    assert layout is not None
    step = allreduce_seconds(card, arch, point, point.batch)
    for s in range(layout.pipeline):
        read, kv_all = decode_step_bytes(
            arch, weights_bytes(arch, q, layout, s), q, point.kv_cache_dtype, point.batch,
            point.context, point.output_tokens, layout, s,
        )  # fmt: skip
        read += kv_all * planbytes.rank_kv_share(arch, layout, s)
        step += read / (card.bandwidth_gb_s * 1e9)
    return point.batch / step


def estimate_seconds(
    point: Point, card: GpuSpec, arch: ModelArch, weights: float, ceiling: float, warmups: int
) -> float:
    """(warmups + repeats) × (prefill at peak FLOP/s + decode at the roofline) / efficiency."""
    counts = param_counts(arch)
    active = counts.active_linear + counts.embeddings
    tensor = 1 if point.layout is None else point.layout.tensor
    peak = planbytes.format_peak(card, arch, point.quantization) * 1e12
    prefill_s = 2 * active * point.batch * point.context / (tensor * peak)
    prefill_s += allreduce_seconds(card, arch, point, point.batch * point.context)
    decode_s = point.batch * point.output_tokens / ceiling
    per_run = (prefill_s + decode_s) / EFFICIENCY[point.target]
    return (warmups + point.repeats) * per_run
