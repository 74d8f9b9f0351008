"""What the training mode adds to a run's manifest: the n-gram leakage table."""

from __future__ import annotations

from typing import Any

from harness.modes.training import leakage
from harness.spec.scenario import Scenario


def manifest_entries(scenario: Scenario) -> dict[str, Any]:
    """``leakage``: the 13-gram overlap of every text a model or quantizer saw (the fine-tuning
    train block, the calibration text) with every eval text of the run (`leakage`; cached per set
    of input hashes). Computed for every run: a quantizer's calibration text counts too.
    ``leakage_warnings``: a line per scored task that shares n-grams with a text seen (the run
    prints them as it starts)."""
    train = scenario.training
    data = [(train.data.train, train.data.eval_fraction)] if train is not None else []
    seen, evals = leakage.shipped_texts(data, scenario.quality.task_texts())
    table = leakage.cached_overlaps(seen, evals)
    seeds = leakage.seed_leaks(scenario.quality.task_seeds())
    warnings = leakage.leaked_tasks(table) + leakage.leaked_seeds(seeds)
    return {"leakage": table, "seed_leakage": seeds, "leakage_warnings": warnings}
