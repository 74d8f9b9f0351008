"""An offline row's own check (harness.modes.offline.admission), reached as the registry's part."""

from __future__ import annotations

from harness import modes
from harness.modes.offline.admission import offline_problem
from harness.results.admission import row_inconsistency
from tests import factories as F


def test_the_registry_hands_the_offline_check_to_admission() -> None:
    assert modes.get("offline").load("check") is offline_problem


def test_a_first_token_after_the_whole_generation_is_refused() -> None:
    row = F.row(ttft_ms_p50=50.0, e2e_ms_p50=40.0)
    assert offline_problem(row) == "ttft_ms_p50 50 is above e2e_ms_p50 40"
    assert row_inconsistency(row) == "ttft_ms_p50 50 is above e2e_ms_p50 40"


def test_more_tokens_than_batch_times_output_is_refused() -> None:
    # batch 2 × output_tokens 32 = 64 tokens at most
    row = F.row(batch=2, output_tokens=32, generated_tokens=65)
    assert offline_problem(row) == "generated_tokens 65 is above batch 2 × output_tokens 32 = 64"


def test_a_plain_row_passes() -> None:
    assert offline_problem(F.row()) is None
