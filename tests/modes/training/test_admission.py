"""A training row's own check (harness.modes.training.admission), reached as the registry's
part; and its rows are never the reference (the mode's fact, read by admission)."""

from __future__ import annotations

from typing import Any

from harness import modes
from harness.modes.training.admission import training_problem
from harness.results.admission import row_inconsistency
from harness.row import ResultRow
from tests import factories as F


def training_row(**overrides: Any) -> ResultRow:
    fields: dict[str, Any] = {
        "mode": "training", "group": None, "batch": 2, "context": 256, "output_tokens": 0,
        "micro_batch": 2, "grad_accum": 4, "seq_len": 256,
        "tokens_per_step": 2048,  # 2 × 4 × 256
        **overrides,
    }  # fmt: skip
    return F.row(**fields)


def test_the_registry_hands_the_training_check_to_admission() -> None:
    assert modes.get("training").load("check") is training_problem


def test_a_consistent_training_row_passes() -> None:
    assert training_problem(training_row()) is None


def test_tokens_per_step_must_be_the_product_of_the_step_shape() -> None:
    row = training_row(tokens_per_step=4096)
    assert training_problem(row) == (
        "tokens_per_step 4096 ≠ micro_batch 2 × grad_accum 4 × seq_len 256 = 2048"
    )


def test_a_training_row_claiming_to_be_the_reference_is_refused() -> None:
    row = training_row(is_reference=True)
    assert row_inconsistency(row) == (
        "is_reference on a training row: training compares with the full fine-tune"
    )
