"""A training point's plan: the step's memory per phase (`memory`), the fit verdict on the
largest phase, and the time of its steps and evaluations."""

from __future__ import annotations

from harness import plan as planner
from harness.modes.training import memory
from harness.spec.capabilities import compute_dtype_bytes
from harness.spec.catalog import GpuSpec, ModelArch
from harness.spec.scenario import Point
from harness.units import GIB


def plan_training_point(
    point: Point,
    card: GpuSpec,
    arch: ModelArch,
    *,
    gpu_memory_utilization: float,
    warmups: int,
) -> planner.PointPlan:
    """A training step's memory per phase (harness.modes.training.memory): forward, backward and the
    optimizer step; the fit verdict on the largest; the time of `steps` steps + evaluations.
    Its kv_cache is 0 (training runs without a cache), prefill/decode carry forward/backward."""
    train = point.training
    assert train is not None
    base = planner.weights_bytes(arch, point.quantization)
    context = planner.runtime_context_bytes(point.target)
    mem = memory.plan_step(
        arch,
        train,
        base_weights_bytes=base,
        act_bytes=compute_dtype_bytes(point.quantization, arch.dtype_bytes),
        runtime_bytes=context,
        margin=planner.ALLOCATOR_MARGIN,
    )
    capacity = card.memory_gib * GIB
    fits = mem.peak <= capacity
    terms = mem.terms
    binding = max(terms, key=lambda t: terms[t])
    reason = (
        f"fits: {mem.peak / GIB:.2f} of {capacity / GIB:.2f} GiB"
        if fits
        else f"needs {mem.peak / GIB:.2f} GiB > {capacity / GIB:.2f} GiB on {card.name}; "
        f"binding term: {binding} ({terms[binding] / GIB:.2f} GiB)"
    )
    total = planner.param_counts(arch).total
    flops = train.steps * memory.step_flops(total, train)
    flops += memory.eval_flops(total, train)
    seconds = flops / (card.bf16_tflops * 1e12) / planner.EFFICIENCY[point.target]
    return planner.PointPlan(
        point=point,
        gpu=card.name,
        weights_gib=mem.weights / GIB,
        kv_cache_gib=0.0,
        activations_gib=mem.activations / GIB,
        reserve_gib=mem.reserve / GIB,
        load_gib=(mem.weights + mem.reserve) / GIB,
        prefill_gib=mem.forward / GIB,
        decode_gib=mem.backward / GIB,
        total_gib=mem.peak / GIB,
        capacity_gib=capacity / GIB,
        fits=fits,
        reason=reason,
        est_seconds=seconds,
        roofline_decode_tok_s=0.0,
        mode_memory=mem,
        mode_note=(
            f"{train.label} × {train.steps} steps · fwd/bwd/opt {mem.forward / GIB:.2f}/"
            f"{mem.backward / GIB:.2f}/{mem.optimizer_step / GIB:.2f} · "
            f"trainable {mem.trainable_params:,}"
        ),
        mode_contract={
            "mode": "training",
            "training": train.model_dump(),
            "training_gib": {
                **{k: v / GIB for k, v in mem.terms.items()},
                "forward": mem.forward / GIB,
                "backward": mem.backward / GIB,
                "optimizer_step": mem.optimizer_step / GIB,
            },
            "trainable_params": mem.trainable_params,
        },
    )
