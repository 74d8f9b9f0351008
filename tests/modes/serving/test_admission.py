"""A serving row's own check (harness.modes.serving.admission), reached as the registry's part."""

from __future__ import annotations

from harness import modes
from harness.modes.serving.admission import serving_problem
from harness.results.admission import row_inconsistency
from tests import factories as F


def test_the_registry_hands_the_serving_check_to_admission() -> None:
    assert modes.get("serving").load("check") is serving_problem


def test_requests_that_do_not_add_up_are_refused() -> None:
    # 60 ok + 3 failed = 63, not the 64 sent
    row = F.row(mode="serving", requests_sent=64, requests_ok=60, requests_failed=3)
    expected = "requests_ok 60 + requests_failed 3 ≠ requests_sent 64"
    assert serving_problem(row) == expected
    assert row_inconsistency(row) == expected


def test_goodput_above_the_throughput_is_refused() -> None:
    row = F.row(mode="serving", goodput_rps=5.0, request_throughput=4.0)
    problem = serving_problem(row)
    assert problem is not None
    assert problem.startswith("goodput_rps 5 is above request_throughput 4")


def test_the_serving_check_is_not_run_on_an_offline_row() -> None:
    # the same figures on an offline row: only the offline check reads the row
    row = F.row(requests_sent=64, requests_ok=60, requests_failed=3)
    assert row_inconsistency(row) is None
