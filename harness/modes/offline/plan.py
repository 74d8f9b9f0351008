"""An offline point's plan: the inference memory plan (harness.plan) and the time of its
warm-ups and repeats at the roofline."""

from __future__ import annotations

from harness import plan as planner
from harness.spec.catalog import GpuSpec, ModelArch
from harness.spec.scenario import Point


def plan_offline_point(
    point: Point, card: GpuSpec, arch: ModelArch, options: planner.PlanOptions
) -> planner.PointPlan:
    return planner.inference_plan(
        point,
        card,
        arch,
        gpu_memory_utilization=options.gpu_memory_utilization,
        seconds=lambda weights, ceiling: planner.estimate_seconds(
            point, card, arch, weights, ceiling, options.warmups
        ),
    )
