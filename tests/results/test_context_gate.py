"""The gate per context length: a configuration whose long-context items hold at 1k and fall
apart at 4k passes its 1k points, fails its 4k points, and is undecided at 8k with the reason
"quality not measured at this context"; each judged context in words with its sample size."""

from __future__ import annotations

from typing import Any

import pytest

from harness.measure import verdict
from harness.results import context_gate, gate
from harness.results.frame import frame_from_rows
from tests import factories as F

ITEMS = 1000  # long-context items per context


def context_part(context: int, lost: int, dnll: float, ref_right: int = 900) -> dict[str, Any]:
    """A long-context category at ``context`` tokens: ``lost`` right→wrong flips of ``ref_right``
    right items of ITEMS, and an answer ΔNLL of ``dnll`` nats/token ± 0.005 (90 %)."""
    interval = verdict.paired_proportion_ci(ref_right - lost, lost, 0, ITEMS - ref_right)
    return {
        "category": f"ctx-{context}", "items": ITEMS, "score": (ref_right - lost) / ITEMS,
        "unit_rate": (ref_right - lost) / ITEMS, "ref_rate": ref_right / ITEMS,
        "diff": interval.estimate, "diff_ci90_low": interval.low,
        "diff_ci90_high": interval.high, "paired_units": interval.n,
        "dnll": dnll, "dnll_ci90_low": dnll - 0.005, "dnll_ci90_high": dnll + 0.005,
        "dnll_sd": 0.096,
    }  # fmt: skip


def long_task(*categories: dict[str, Any]) -> dict[str, Any]:
    n = ITEMS * len(categories)
    return {"name": "longctx-single-needle-after", "kind": "longctx", "items": n,
            "units": n, "categories": list(categories)}  # fmt: skip


DEGRADED = long_task(context_part(1024, 0, 0.0), context_part(4096, 300, 0.8))


def test_a_context_passes_when_both_scores_hold_and_fails_when_either_drops() -> None:
    judged = context_gate.context_verdicts([DEGRADED], 0.99)
    # class 99, 1k: no flip among 1000 items, Newcombe's 90 % interval ±0.0027 against the
    # margin 0.01 × 0.9 = 0.009, and ΔNLL 0 ± 0.005 against −ln 0.99 = 0.01005: pass;
    # 4k: 300 of 900 right items lost, a drop of 0.30 ≫ 0.009 (and ΔNLL 0.8 ≫ 0.01): fail
    assert [(j.context, j.verdict) for j in judged] == [(1024, "pass"), (4096, "fail")]
    assert context_gate.in_words(judged) == "pass at 1k (1000 items), fail at 4k (1000 items)"
    strict = context_gate.context_verdicts([DEGRADED], 0.999)
    # class 99.9: margins 0.0009 and 0.001, inside both 1k intervals: undecided
    assert [(j.context, j.verdict) for j in strict] == [(1024, "undecided"), (4096, "fail")]


def test_a_row_is_gated_at_the_shortest_judged_context_at_or_above_its_own() -> None:
    judged = context_gate.context_verdicts([DEGRADED], 0.99)
    assert context_gate.row_verdict(judged, 256)[0].context == 1024  # type: ignore[union-attr]
    assert context_gate.row_verdict(judged, 1024)[0].context == 1024  # type: ignore[union-attr]
    assert context_gate.row_verdict(judged, 2048)[0].context == 4096  # type: ignore[union-attr]
    none, why = context_gate.row_verdict(judged, 8192)
    assert none is None
    assert why == ("context: quality not measured at this context (judged up to 4,096 tokens)")


def test_the_gate_prices_a_configuration_only_at_the_contexts_where_it_passed() -> None:
    ref_tasks = [long_task(context_part(1024, 0, 0.0), context_part(4096, 0, 0.0))]
    rows = [F.reference(context=c, tasks=ref_tasks) for c in (1024, 4096, 8192)]
    rows += [
        F.row(kv_cache_dtype="int4", context=c, tasks=[DEGRADED], **F.quality(100.0))
        for c in (1024, 4096, 8192)
    ]
    out = gate.quality_gate(frame_from_rows(rows), gated=["ppl", "context"])
    cand = out[out["kv_cache_dtype"] == "int4"].sort_values("context")
    assert cand["context_verdict_99"].tolist() == ["pass", "fail", "not measured"]
    assert cand["verdict_99"].tolist() == ["pass", "fail", "undecided"]
    assert cand["pass_99"].tolist() == [True, False, False]
    assert "quality not measured at this context" in cand["unmeasured_gates"].iloc[2]
    assert cand["context_judged_at_99"].iloc[0] == 1024
    assert cand["context_verdicts_99"].iloc[0] == "pass at 1k (1000 items), fail at 4k (1000 items)"


def test_an_undecided_context_says_how_many_more_items_would_decide_it() -> None:
    few = long_task(context_part(4096, 0, 0.008))  # ΔNLL 0.008 ± 0.005 vs margin 0.01005
    judged = context_gate.context_verdicts([few], 0.99)
    assert judged[0].verdict == "undecided" and judged[0].needed is not None
    assert context_gate.in_words(judged).startswith("undecided at 4k (needs ")


@pytest.mark.parametrize("tokens, label", [(4096, "4k"), (1024, "1k"), (1000, "1000")])
def test_context_labels(tokens: int, label: str) -> None:
    assert context_gate.tokens_label(tokens) == label
