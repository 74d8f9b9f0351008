"""Acceptance from the engine's counters: readings, differences, the figures by hand."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from harness.measure import speculation as sp


@dataclass
class Counter:  # vllm.v1.metrics.reader.Counter's shape
    name: str
    value: int
    labels: dict[str, str]


@dataclass
class Vector:  # vllm.v1.metrics.reader.Vector's shape
    name: str
    values: list[int]
    labels: dict[str, str]


def reading(drafts: int, tokens: int, accepted: int, per_pos: list[int]) -> list[object]:
    return [
        Counter(sp.DRAFTS, drafts, {}),
        Counter(sp.DRAFT_TOKENS, tokens, {}),
        Counter(sp.ACCEPTED, accepted, {}),
        Vector(sp.ACCEPTED_PER_POS, per_pos, {}),
        Counter("vllm:prompt_tokens", 999, {}),
    ]


def test_the_issue_s_reading_gives_its_figures() -> None:
    # issue 39, vLLM CPU 0.32, tiny-llama, ngram k=4: drafts 76, draft tokens 248, accepted 76
    counters = sp.from_engine_metrics(reading(76, 248, 76, [40, 20, 10, 6]))
    assert counters is not None
    got = sp.acceptance(counters, "corpus windows")
    assert got.rate_pct == pytest.approx(100 * 76 / 248)  # 30.6 %
    assert got.mean_length_tokens == pytest.approx(2.0)  # 1 + 76 / 76
    # per position: 40/76, 20/76, 10/76, 6/76
    assert got.per_pos_pct == pytest.approx((52.63, 26.32, 13.16, 7.89), abs=0.01)
    assert got.per_pos_text() == "52.6,26.3,13.2,7.9"
    assert got.workload == "corpus windows"


def test_a_pass_is_the_difference_of_two_readings() -> None:
    before = sp.from_engine_metrics(reading(10, 40, 12, [8, 4, 0, 0]))
    after = sp.from_engine_metrics(reading(30, 120, 42, [20, 12, 6, 4]))
    assert before is not None and after is not None
    delta = after.since(before)
    # 30 - 10 drafts, 120 - 40 tokens, 42 - 12 accepted, per position 12, 8, 6, 4
    assert (delta.drafts, delta.draft_tokens, delta.accepted) == (20, 80, 30)
    assert delta.accepted_per_pos == (12, 8, 6, 4)
    assert sp.acceptance(delta, "x").mean_length_tokens == pytest.approx(2.5)  # 1 + 30 / 20
    with pytest.raises(ValueError, match="went down"):
        before.since(after)


def test_an_engine_without_speculation_has_no_reading_and_nothing_drafted_no_figure() -> None:
    assert sp.from_engine_metrics([Counter("vllm:prompt_tokens", 3, {})]) is None
    empty = sp.acceptance(sp.Counters(), "x")
    assert empty.rate_pct is None and empty.mean_length_tokens is None
    assert empty.per_pos_text() is None


def test_two_engines_sum_and_a_server_page_reads_the_same() -> None:
    counters = sp.from_engine_metrics([*reading(1, 4, 2, [1, 1]), *reading(3, 12, 2, [2])])
    assert counters == sp.Counters(drafts=4, draft_tokens=16, accepted=4, accepted_per_pos=(3, 1))
    page = [
        ("vllm:spec_decode_num_drafts_total", {"engine": "0"}, 4.0),
        ("vllm:spec_decode_num_draft_tokens_total", {"engine": "0"}, 16.0),
        ("vllm:spec_decode_num_accepted_tokens_total", {"engine": "0"}, 4.0),
        ("vllm:spec_decode_num_accepted_tokens_per_pos_total", {"position": "1"}, 1.0),
        ("vllm:spec_decode_num_accepted_tokens_per_pos_total", {"position": "0"}, 3.0),
    ]
    assert sp.from_prometheus(page) == counters


def test_item_digests_compare_item_by_item() -> None:
    a = [sp.item_digest([1, 2, 3]), sp.item_digest([4, 5])]
    b = [sp.item_digest([1, 2, 3]), sp.item_digest([4, 6])]
    assert len(a[0]) == sp.ITEM_DIGEST_HEX
    assert sp.differing_items(a, a) == 0
    assert sp.differing_items(a, b) == 1
    assert sp.differing_items(a, a[:1]) is None
