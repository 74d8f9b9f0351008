"""Serving points of a workload: prefix caching as an axis of the point key, a trace's own
arrival level, the point's shape from the workload's requests, and the block's refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import UserInputError
from harness.spec import scenario

TRACE = "{trace: mooncake-conversation, time_scale: 2.0, length_scale: 0.25, max_requests: 40}"


def text(serving: str) -> str:
    return f"""name: s
models: [tiny-llama]
backend: [vllm]
quantization: [fp32]
batch: [1]
context: [64]
output_tokens: 16
targets: [cpu]
serving:
{serving}  prompt_tokens: {{mean: 64, sd: 0}}
  output_tokens: {{mean: 16, sd: 0}}
  slo: {{ttft_ms_p99: 2000, tpot_ms_p99: 100}}
"""


def served(serving: str) -> list[scenario.Point]:
    grid = scenario.expand(scenario.parse(text(serving)))
    return [p for p in grid.points if p.serving is not None]


def test_prefix_caching_on_and_off_are_two_points_with_their_own_keys() -> None:
    points = served("  concurrency: [1, 4]\n  requests: 8\n  prefix_caching: [on, off]\n")
    assert [(p.serving.label, p.serving.prefix_caching) for p in points if p.serving] == [
        ("c1", True), ("c4", True), ("c1", False), ("c4", False),
    ]  # fmt: skip
    assert len({p.key("h") for p in points}) == 4
    without = served("  concurrency: [1, 4]\n  requests: 8\n")
    assert all(p.serving and p.serving.prefix_caching is None for p in without)
    assert {p.key("h") for p in without}.isdisjoint({p.key("h") for p in points})


def test_a_trace_level_arrives_at_the_traces_rate_and_burstiness() -> None:
    (point,) = served(f"  workload: {TRACE}\n  prefix_caching: [on]\n")
    level = point.serving
    assert level is not None and level.workload is not None and level.requests == 40
    # The trace's first 40 timestamps (ms): 10 at 0, 16 at 3000, 3 at 5999, 9 at 9000, 2 at
    # 12000; × time_scale 2 / 1000: 0, 6, 11.998, 18 and 24 s. 40 arrivals over 24 s:
    assert level.request_rate == pytest.approx(39 / 24.0)
    # 39 gaps: 35 of 0 s and 6, 5.998, 6.002, 6 s; mean m = 24 / 39, population variance
    # v = 144.000008 / 39 − m² = 3.3136097, shape = m² / v = 0.1142857 (4 / 35 if every non-zero
    # gap were 6 s): far burstier than Poisson (1)
    assert level.burstiness == pytest.approx(4 / 35, rel=1e-5)
    # Prompts: round(input_length × 0.25), at most 128 tokens per hash id; the longest output is
    # 232 tokens, so at most 2048 − 232 − 8 = 1808 prompt tokens (23 of 40 prompts are cut to
    # it); the 40 prompts sum to 57,340 tokens, 57,340 / 40 = 1,433.5, rounded half to even: 1434
    assert point.context == 1434 and point.batch == 1


def test_every_rate_level_of_a_trace_arrives_as_bursty_as_the_trace() -> None:
    points = served(f"  workload: {TRACE}\n  request_rate: [0.5]\n  concurrency: [2]\n")
    labels = [p.serving.label for p in points if p.serving]
    assert labels[:2] == ["c2", "r0.5"] and len(labels) == 3  # and the trace's own level
    bursts = {p.serving.burstiness for p in points if p.serving}
    (shape,) = bursts
    assert shape is not None and shape < 1.0  # the trace's gamma shape: burstier than Poisson


@pytest.mark.parametrize(
    ("serving", "expected"),
    [
        (f"  workload: {TRACE}\n  requests: 8\n", "a workload fixes its own requests"),
        ("  concurrency: [1]\n  requests: 8\n  prefix_caching: [on, on]\n", "twice"),
        ("  concurrency: [1]\n  workload: {multi_turn: {conversations: 2, turns: 2}, "
         "time_scale: 2}\n", "belong to a trace"),
        ("  concurrency: [1]\n  workload: {trace: x.jsonl}\n", "needs max_requests"),
    ],
)  # fmt: skip
def test_a_malformed_workload_is_refused_with_the_reason(serving: str, expected: str) -> None:
    with pytest.raises(UserInputError, match=expected):
        scenario.parse(text(serving))


def test_a_missing_trace_file_is_the_users_error(tmp_path: Path) -> None:
    missing = tmp_path / "none.jsonl"
    serving = f"  workload: {{trace: {missing}, max_requests: 3}}\n"
    with pytest.raises(UserInputError, match=str(missing)):
        scenario.expand(scenario.parse(text(serving)))


def test_multi_turn_points_send_conversations_times_turns_requests() -> None:
    points = served(
        "  concurrency: [2]\n"
        "  workload: {multi_turn: {conversations: 3, turns: 2, shared_system_tokens: 32}}\n"
    )
    (point,) = points
    assert point.serving is not None and point.serving.requests == 6
    # turn 0: 32 + 64; turn 1: 32 + 64 + 16 + 64 → mean (96 × 3 + 176 × 3) / 6
    assert point.context == 136 and point.output_tokens == 16
