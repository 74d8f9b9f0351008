"""The sweep's budget: each group's phases (the quality phase from the corpus and the tasks it
scores), added up to the wall time (harness.budget)."""

from __future__ import annotations

import pytest

from harness import budget


def test_the_budget_carries_each_groups_quality_phase_and_all_items_cost_more() -> None:
    from harness.spec.scenario import Scenario, expand

    base = {
        "name": "q", "models": [{"id": "tiny-llama"}], "backend": ["transformers"],
        "quantization": ["none", "bf16"], "kv_cache_dtype": ["auto"], "batch": [1, 4],
        "context": [128], "output_tokens": 8, "targets": ["cpu"],
    }  # fmt: skip
    few = budget.plan_grid(expand(Scenario.model_validate({**base, "quality": {"arc_items": 10}})))
    every = budget.plan_grid(
        expand(Scenario.model_validate({**base, "quality": {"arc_items": "all"}}))
    )
    groups = 2  # none and bf16: one quality phase each, whatever the batches
    per_group = few.budget.est_quality_seconds / groups
    assert per_group > 0
    assert every.budget.est_quality_seconds > few.budget.est_quality_seconds
    assert every.budget.est_seconds - few.budget.est_seconds == pytest.approx(
        every.budget.est_quality_seconds - few.budget.est_quality_seconds
    )


def test_the_tasks_of_a_group_add_their_continuations_and_tokens_to_its_quality_phase() -> None:
    from harness.spec.scenario import Scenario, expand

    base = {
        "name": "q", "models": [{"id": "tiny-llama"}], "backend": ["transformers"],
        "quantization": ["none"], "kv_cache_dtype": ["auto"], "batch": [1],
        "context": [128], "output_tokens": 8, "targets": ["cpu"],
    }  # fmt: skip
    quality = {"arc_items": 0, "max_windows": 4}
    without = budget.plan_grid(expand(Scenario.model_validate({**base, "quality": quality})))
    tasks = {**quality, "tasks": ["snips-intent", "snips-slots"]}
    scenario = Scenario.model_validate({**base, "quality": tasks})
    assert scenario.quality.task_calls() == (210 * 7, 210 * 64)
    added = budget.plan_grid(expand(scenario)).budget.est_quality_seconds
    extra = (210 * 7 * budget.TASK_CONTINUATION_UNITS + 210 * 64 * budget.TASK_TOKEN_UNITS) * (
        0.0194  # a quality unit's floor, transformers on the CPU (harness.spec.engines)
    )
    # (the roofline floor of the four windows alone is a few hundredths of a second above theirs)
    assert added - without.budget.est_quality_seconds == pytest.approx(extra, rel=1e-2)
