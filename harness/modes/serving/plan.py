"""A serving level's plan: the inference memory plan of its group's engine (harness.plan), and the
seconds of its load: closed loop, rounds of one batch; open loop, the arrivals' span."""

from __future__ import annotations

import math

from harness import plan as planner
from harness.modes.serving import search
from harness.modes.serving.spec import ServingLevel
from harness.spec.catalog import GpuSpec, ModelArch
from harness.spec.scenario import Point


def plan_serving_point(
    point: Point, card: GpuSpec, arch: ModelArch, options: planner.PlanOptions
) -> planner.PointPlan:
    """The level's memory as its engine's inference plan; its seconds are its load's
    (``serving_seconds``: no warm-ups, one run per round)."""
    level = point.serving
    assert level is not None
    plan = planner.inference_plan(
        point,
        card,
        arch,
        gpu_memory_utilization=options.gpu_memory_utilization,
        seconds=lambda _weights, ceiling: serving_seconds(point, card, arch, ceiling),
    )
    return plan.model_copy(
        update={
            "mode_contract": {"mode": "serving", "serving": level.model_dump()},
            "mode_note": f"serving {level.label} × {level.requests} requests{workload_note(level)}",
        }
    )


def workload_note(level: ServingLevel) -> str:
    """What the plan's line adds for a workload and the prefix-caching axis ("" for neither)."""
    parts = []
    if level.workload is not None and level.workload.trace is not None:
        parts.append(f"trace {level.workload.trace}")
    elif level.workload is not None:
        parts.append("multi-turn")
    if level.prefix_caching is not None:
        parts.append(f"prefix caching {'on' if level.prefix_caching else 'off'}")
    return "".join(f" · {part}" for part in parts)


def serving_seconds(point: Point, card: GpuSpec, arch: ModelArch, ceiling: float) -> float:
    """One load level: closed loop, ⌈requests ÷ concurrency⌉ rounds of one batch of `batch`
    requests (as `estimate_seconds` times one run); open loop, the arrivals' span (requests ÷
    rate) plus one request's run; plus the generator's start."""
    level = point.serving
    assert level is not None
    if level.search is not None and level.probe is None:  # the search's worst case (its rule)

        def probe_s(load: float) -> float:
            return serving_seconds(search.probe_point(point, 0, load), card, arch, ceiling)

        return search.worst_case_seconds(level.search, probe_s)
    one_run = planner.estimate_seconds(
        point.model_copy(update={"repeats": 1}), card, arch, 0, ceiling, 0
    )
    if level.concurrency is not None:
        span = math.ceil(level.requests / level.concurrency) * one_run
    else:
        span = level.requests / (level.request_rate or 1.0) + one_run
    return span + planner.GENERATOR_START_S
