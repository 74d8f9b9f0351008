"""A serving level's acceptance: the server's /metrics counters read before and after the level,
their difference, labelled with the level's workload (no engine: counters given by hand)."""

from __future__ import annotations

import pytest

from harness.measure.speculation import RANDOM_WEIGHTS, Counters
from harness.modes.serving.device.run import acceptance_workload, level_speculation
from harness.spec import scenario

SCENARIO = """\
name: spec-serving
models: [tiny-llama]
backend: [vllm]
quantization: [none]
batch: [1]
context: [128]
output_tokens: 16
targets: [cpu]
speculative: [none, {method: ngram, tokens: 4, lookup: [2, 4]}]
serving:
  concurrency: [2]
  requests: 8
  prompt_tokens: {mean: 64, sd: 0}
  output_tokens: {mean: 16, sd: 0}
  slo: {ttft_ms_p99: 2000, tpot_ms_p99: 200}
"""


def serving_points() -> list[scenario.Point]:
    grid = scenario.expand(scenario.parse(SCENARIO))
    return [p for p in grid.points if p.serving is not None]


def test_a_level_s_acceptance_is_the_difference_of_two_metrics_readings() -> None:
    plain, spec = serving_points()
    assert plain.speculative is None and spec.speculative is not None
    level = spec.serving
    assert level is not None
    before = Counters(drafts=100, draft_tokens=400, accepted=90, accepted_per_pos=(50, 25, 10, 5))
    after = Counters(drafts=160, draft_tokens=640, accepted=162, accepted_per_pos=(92, 40, 20, 10))
    part = level_speculation(spec, level, before, after)
    # the level: 60 drafts, 240 draft tokens, 72 accepted; per position 42, 15, 10, 5
    assert part.spec_workload == "serving prompts: corpus slices" == acceptance_workload(level)
    assert (part.spec_drafts, part.spec_draft_tokens, part.spec_accepted_tokens) == (60, 240, 72)
    assert part.spec_acceptance_rate_pct == pytest.approx(30.0)  # 72 / 240
    assert part.spec_acceptance_length_tokens == pytest.approx(2.2)  # 1 + 72 / 60
    assert part.spec_acceptance_per_pos_pct == "70.0,25.0,16.7,8.3"  # 42, 15, 10, 5 of 60


def test_no_speculation_no_reading_and_random_weights_claim_nothing() -> None:
    plain, spec = serving_points()
    assert plain.serving is not None and spec.serving is not None
    assert level_speculation(plain, plain.serving, None, None).spec_workload is None
    unread = level_speculation(spec, spec.serving, None, None)
    assert unread.spec_workload is None and unread.spec_acceptance_rate_pct is None
    random = spec.model_copy(update={"weights": "random"})
    counted = Counters(drafts=10, draft_tokens=40, accepted=40)
    part = level_speculation(random, spec.serving, Counters(), counted)
    assert part.spec_workload == RANDOM_WEIGHTS and part.spec_acceptance_rate_pct is None
