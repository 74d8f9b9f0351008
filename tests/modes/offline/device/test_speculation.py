"""An offline pass's acceptance as the row's part: each figure with its workload, the tasks'
apart, nothing claimed on random weights, a replay's length stated (no engine: readings by
hand)."""

from __future__ import annotations

import pytest

from harness.measure.speculation import RANDOM_WEIGHTS, Counters, acceptance
from harness.modes.offline.device.speculation import (
    CORPUS_WORKLOAD,
    point_workload,
    speculation_part,
    tasks_workload,
)
from harness.spec.scenario import GroupKey
from harness.spec.speculative import Ngram
from harness.tasks.spec import TaskEntry

GROUP = GroupKey(
    target="cpu", model="tiny-llama", revision="main", backend="vllm", quantization="none",
    kv_cache_dtype="auto", speculative=Ngram(tokens=4),
)  # fmt: skip


def test_the_point_and_the_tasks_keep_their_own_workloads() -> None:
    # point: 20 drafts, 80 draft tokens, 30 accepted; tasks: 10 drafts, 40 tokens, 24 accepted
    point = acceptance(Counters(drafts=20, draft_tokens=80, accepted=30), CORPUS_WORKLOAD)
    tasks = acceptance(Counters(drafts=10, draft_tokens=40, accepted=24), "extract prompts: x")
    part = speculation_part(GROUP, point, tasks, ["s1", "s2"], ["t1"])
    assert (
        part.spec_workload == "corpus windows" and part.spec_tasks_workload == "extract prompts: x"
    )
    assert part.spec_acceptance_rate_pct == pytest.approx(37.5)  # 30 / 80
    assert part.spec_acceptance_length_tokens == pytest.approx(2.5)  # 1 + 30 / 20
    assert part.spec_tasks_acceptance_rate_pct == pytest.approx(60.0)  # 24 / 40
    assert part.spec_tasks_acceptance_length_tokens == pytest.approx(3.4)  # 1 + 24 / 10
    assert (part.greedy_sequences_sha, part.greedy_tasks_sha) == ("s1,s2", "t1")
    assert part.spec_synthetic_length_tokens is None


def test_random_weights_claim_no_acceptance_and_a_plain_group_only_digests() -> None:
    random = GROUP.model_copy(update={"weights": "random"})
    assert point_workload(random) == RANDOM_WEIGHTS and point_workload(GROUP) == CORPUS_WORKLOAD
    point = acceptance(Counters(drafts=20, draft_tokens=80, accepted=30), RANDOM_WEIGHTS)
    part = speculation_part(random, point, None, [], [])
    assert part.spec_workload == RANDOM_WEIGHTS and part.spec_acceptance_rate_pct is None
    plain = speculation_part(GROUP.model_copy(update={"speculative": None}), point, None, ["a"], [])
    assert plain.spec_workload is None and plain.greedy_sequences_sha == "a"


def test_the_tasks_workload_names_the_tasks_that_generate_only() -> None:
    # shipped tasks by name: snips-slots extracts (it generates), snips-intent classifies
    entries: list[TaskEntry] = ["snips-slots", "snips-intent"]
    assert tasks_workload(entries) == "generating tasks' prompts: snips-slots"
    assert tasks_workload(["snips-intent"]) == "no generation" == tasks_workload(None)
