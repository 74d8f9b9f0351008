"""A speculative row paired with its plain row: greedy identity before any price, the plain
figures beside it, acceptance per workload."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from harness.results import speculation as sp
from harness.results.frame import flag_rows, normalise

BASE = {
    "run": "r", "mode": "offline", "model": "tiny-llama", "revision": "main",
    "backend": "vllm", "quantization": "none", "kv_cache_dtype": "auto", "batch": 4,
    "context": 128, "output_tokens": 64, "target": "cpu", "status": "ok",
    "greedy_tasks_sha": "t1,t2,t3",
}  # fmt: skip


def row(spec: str | None, decode: float, sequences: str, **extra: object) -> dict[str, object]:
    return {**BASE, "speculative": spec, "decode_tok_s": decode, "tpot_ms_p50": 1000 / decode,
            "ttft_ms_p50": 5.0, "greedy_sequences_sha": sequences, **extra}  # fmt: skip


def frame(*rows: dict[str, object]) -> pd.DataFrame:
    return flag_rows(normalise(pd.DataFrame(list(rows))))


def test_an_identical_speculative_row_is_priced_with_its_plain_figures() -> None:
    out = frame(
        row(None, 100.0, "a,b,c,d"),
        row("ngram:k=4,lookup=2-4", 150.0, "a,b,c,d", spec_workload="corpus windows",
            spec_acceptance_rate_pct=30.6, spec_acceptance_length_tokens=2.0),
    )  # fmt: skip
    spec = out.iloc[1]
    assert spec["greedy_identical"] == "yes"
    assert spec["greedy_items"] == 7  # 4 sequences + 3 extract items
    assert spec["greedy_differing"] == 0
    assert spec["plain_decode_tok_s"] == 100.0 and spec["plain_tpot_ms_p50"] == 10.0
    assert spec["decode_speedup"] == pytest.approx(1.5)  # 150 / 100
    assert bool(spec["cost_eligible"]) and bool(out.iloc[0]["cost_eligible"])
    assert pd.isna(out.iloc[0]["greedy_identical"])  # a plain row is not checked


def test_a_speculative_row_that_differs_is_never_priced() -> None:
    out = frame(row(None, 100.0, "a,b,c,d"), row("ngram:k=4,lookup=2-4", 150.0, "a,b,x,d"))
    spec = out.iloc[1]
    assert (spec["greedy_identical"], spec["greedy_differing"]) == ("no", 1)
    assert not bool(spec["cost_eligible"])
    (line,) = sp.identity_lines(out)
    assert "DIFFERS from plain decoding on 1 of 7 items: not priced" in line


def test_without_a_plain_row_or_as_a_replay_it_is_never_priced() -> None:
    alone = frame(row("ngram:k=4,lookup=2-4", 150.0, "a,b,c,d"))
    assert alone.iloc[0]["greedy_identical"] == "unchecked"
    assert not bool(alone.iloc[0]["cost_eligible"])
    replay = frame(
        row(None, 100.0, "a,b,c,d"),
        row("ngram:k=4,synthetic=3,lookup=2-4", 180.0, "q,r,s,t",
            spec_synthetic_length_tokens=3.0),
    )  # fmt: skip
    assert replay.iloc[1]["greedy_identical"] == "synthetic"
    assert not bool(replay.iloc[1]["cost_eligible"])
    assert "synthetic acceptance 3" in sp.identity_lines(replay)[0]


def test_another_configuration_is_not_its_plain_row() -> None:
    out = frame(
        row(None, 100.0, "a,b,c,d", batch=1),
        row("ngram:k=4,lookup=2-4", 150.0, "a,b,c,d"),
    )
    assert out.iloc[1]["greedy_identical"] == "unchecked"
    assert np.isnan(out.iloc[1]["plain_decode_tok_s"])


def test_acceptance_is_tabled_per_workload_never_mixed() -> None:
    out = frame(
        row(None, 100.0, "a,b,c,d"),
        row("ngram:k=4,lookup=2-4", 150.0, "a,b,c,d", spec_workload="corpus windows",
            spec_acceptance_rate_pct=30.0, spec_acceptance_length_tokens=2.2, spec_drafts=50,
            spec_tasks_workload="extract prompts: snips-slots",
            spec_tasks_acceptance_rate_pct=60.0, spec_tasks_acceptance_length_tokens=3.4,
            spec_tasks_drafts=20),
    )  # fmt: skip
    table = sp.acceptance_table(out)
    assert list(table["spec_workload"]) == ["corpus windows", "extract prompts: snips-slots"]
    assert list(table["spec_acceptance_rate_pct"]) == [30.0, 60.0]
    assert table.iloc[0]["decode_speedup"] == pytest.approx(1.5)
    assert np.isnan(table.iloc[1]["decode_speedup"])  # the speed-up is the point's text's


def test_a_group_is_identical_only_when_every_row_of_it_is() -> None:
    out = frame(
        row(None, 100.0, "a,b,c,d", group="g-plain"),
        row(None, 100.0, "a,b,c,d", batch=1, group="g-plain"),
        row("ngram:k=4,lookup=2-4", 150.0, "a,b,c,d", group="g-spec"),
        row("ngram:k=4,lookup=2-4", 150.0, "a,x,c,d", batch=1, group="g-spec"),
    )
    (verdict,) = sp.group_identity(out).to_dict("records")
    # batch 4 identical, batch 1 differs on one item: the group's worst verdict is "no"
    assert verdict == {"run": "r", "group": "g-spec", "greedy_identical": "no"}


def test_serving_levels_join_the_acceptance_table_named_by_level_and_replays_never() -> None:
    offline = frame(
        row(None, 100.0, "a,b,c,d"),
        row("ngram:k=4,lookup=2-4", 150.0, "a,b,c,d", spec_workload="corpus windows",
            spec_acceptance_rate_pct=30.0, spec_acceptance_length_tokens=2.2, spec_drafts=50),
    )  # fmt: skip
    serving = pd.DataFrame([
        {**BASE, "mode": "serving", "speculative": "ngram:k=4,lookup=2-4", "level": "concurrency 4",
         "spec_workload": "replayed trace: mooncake-conversation",
         "spec_acceptance_rate_pct": 41.0, "spec_acceptance_length_tokens": 2.64},
        {**BASE, "mode": "serving", "speculative": "ngram:k=4,synthetic=2.5,lookup=2-4",
         "level": "concurrency 4", "spec_workload": "serving prompts: corpus slices",
         "spec_acceptance_rate_pct": 37.5, "spec_synthetic_length_tokens": 2.5},
    ])  # fmt: skip
    table = sp.acceptance_table(offline, serving)
    assert list(table["spec_workload"]) == [
        "corpus windows",
        "replayed trace: mooncake-conversation",
    ]
    assert table["level"].tolist()[1] == "concurrency 4" and table["level"].isna().tolist()[0]


def test_the_tasks_pass_is_tabled_once_per_group_whatever_the_points() -> None:
    tasks = {"spec_tasks_workload": "generating tasks' prompts: snips-slots",
             "spec_tasks_acceptance_rate_pct": 49.0, "spec_tasks_drafts": 301}  # fmt: skip
    out = frame(
        row(None, 100.0, "a,b,c,d"),
        row(None, 100.0, "a,b,c,d", batch=1),
        row("ngram:k=4,lookup=2-4", 150.0, "a,b,c,d", spec_workload="corpus windows",
            spec_acceptance_rate_pct=35.4, **tasks),
        row("ngram:k=4,lookup=2-4", 150.0, "a,b,c,d", batch=1, spec_workload="corpus windows",
            spec_acceptance_rate_pct=36.8, **tasks),
    )  # fmt: skip
    table = sp.acceptance_table(out)
    # two points' corpus windows, and the group's one tasks pass (no batch, no context)
    assert list(table["spec_acceptance_rate_pct"]) == [35.4, 49.0, 36.8]
    assert table.iloc[1]["configuration"] == "vllm none kv=auto spec=ngram:k=4,lookup=2-4"
