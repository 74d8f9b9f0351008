"""A training point's plan: the step's memory per phase (`memory`), the fit verdict on the
largest phase, and the time of its steps and evaluations."""

from __future__ import annotations

from harness import plan as planner
from harness.modes.training import memory
from harness.modes.training.spec import TrainingPoint
from harness.spec.capabilities import compute_dtype_bytes
from harness.spec.catalog import GpuSpec, ModelArch
from harness.spec.scenario import Point
from harness.units import GIB


def plan_training_point(
    point: Point, card: GpuSpec, arch: ModelArch, options: planner.PlanOptions
) -> planner.PointPlan:
    """A training step's memory per phase (harness.modes.training.memory): forward, backward and the
    optimizer step; the fit verdict on the largest; the time of `steps` steps + evaluations.
    Its kv_cache is 0 (training runs without a cache), prefill/decode carry forward/backward;
    ``options`` do not apply (no vLLM share, no warm-up runs)."""
    train = point.training
    assert train is not None
    mem = memory.plan_step(
        arch,
        train,
        base_weights_bytes=planner.weights_bytes(arch, point.quantization),
        act_bytes=compute_dtype_bytes(point.quantization, arch.dtype_bytes),
        runtime_bytes=planner.runtime_context_bytes(point.target),
        margin=planner.ALLOCATOR_MARGIN,
    )
    capacity = card.memory_gib * GIB
    fits, reason = planner.fit_verdict(mem.peak, capacity, mem.terms, card.name)
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
        est_seconds=training_seconds(point, card, arch),
        roofline_decode_tok_s=0.0,
        mode_memory=mem,
        mode_note=(
            f"{train.label} × {train.steps} steps · fwd/bwd/opt {mem.forward / GIB:.2f}/"
            f"{mem.backward / GIB:.2f}/{mem.optimizer_step / GIB:.2f} · "
            f"trainable {mem.trainable_params:,}"
        ),
        mode_contract=training_contract(train, mem),
    )


def training_seconds(point: Point, card: GpuSpec, arch: ModelArch) -> float:
    """The point's `steps` optimizer steps and its evaluations at the card's bf16 FLOP/s, at the
    target's efficiency."""
    train = point.training
    assert train is not None
    total = planner.param_counts(arch).total
    flops = train.steps * memory.step_flops(total, train) + memory.eval_flops(total, train)
    return flops / (card.bf16_tflops * 1e12) / planner.EFFICIENCY[point.target]


def training_contract(train: TrainingPoint, mem: memory.TrainingMemory) -> dict[str, object]:
    """What a training point adds to `harness plan --json`: its payload, its terms and phases
    (GiB) and its trainable parameters."""
    return {
        "mode": "training",
        "training": train.model_dump(),
        "training_gib": {
            **{k: v / GIB for k, v in mem.terms.items()},
            "forward": mem.forward / GIB,
            "backward": mem.backward / GIB,
            "optimizer_step": mem.optimizer_step / GIB,
        },
        "trainable_params": mem.trainable_params,
    }
