"""harness.peers.side_by_side: a `harness run`'s figures from its rows, and the summary with its
contract line; on hand-made rows and runs."""

from __future__ import annotations

from typing import Any

import pytest

from harness.peers.side_by_side import GRID, SCENARIO, describe, harness_figures, summary_lines


def row(group: str, quant: str, batch: int, **fields: Any) -> dict[str, Any]:
    base = {"group": group, "quantization": quant, "batch": batch, "context": 128,
            "status": "ok", "measured_s": 2.0, "quality_s": 1.0, "load_s": 3.0,
            "repeats_done": 5, "e2e_ms_p50": 100.0, "decode_tok_s": 50.0, "ppl": 250.0}  # fmt: skip
    return {**base, **fields}


def test_quality_and_load_count_once_per_group_and_failed_rows_not_at_all() -> None:
    rows = [
        row("a", "none", 1),
        row("a", "none", 4, decode_tok_s=150.0),
        row("b", "bnb-nf4", 1, ppl=260.0),
        row("b", "bnb-nf4", 4, status="oom", measured_s=None),
    ]
    figures = harness_figures(rows)
    assert (figures["points_ok"], figures["points"]) == (3, 4)
    assert figures["measured_s"] == 6.0
    assert figures["quality_s"] == 2.0  # a's and b's, once each
    assert figures["timing_s"] == 4.0
    assert figures["load_s"] == 6.0
    assert figures["repeats_s"] == pytest.approx(3 * 5 * 0.1)
    assert figures["decode"] == {"none_bs1_seq128": 50.0, "none_bs4_seq128": 150.0,
                                 "bnb-nf4_bs1_seq128": 50.0}  # fmt: skip
    assert figures["ppl"] == {"none": 250.0, "bnb-nf4": 260.0}


def run(tool: str, tag: str, wall: float, measured: float) -> dict[str, Any]:
    return {"tool": tool, "tag": tag, "wall_s": wall, "measured_s": measured, "load_s": 1.0,
            "decode": {"none_bs1_seq128": 10.0}, "ppl": {"none": 250.0}, "points_ok": 12,
            "points": 12, "load_before": 0.1, "load_after": 0.2, "foreign_cpu_s": 4.0,
            "timing_s": 1.0, "quality_s": 1.0, "repeats_s": 0.5, "sweep_s": 8.0,
            "loop_s": 9.0, "import_s": 2.0}  # fmt: skip


def test_the_last_line_is_the_contract_with_means_and_ratios() -> None:
    results = [
        run("ob-process", "ob-process-1", 30.0, 6.0),
        run("harness", "harness-1a", 10.0, 5.0),
        run("ob-inline", "ob-inline-1", 20.0, 6.0),
        run("harness", "harness-1b", 14.0, 5.6),
    ]
    lines = summary_lines(results)
    assert "pair ob-process-1 / harness-1a: 3.00" in lines
    assert "pair ob-inline-1 / harness-1b: 1.43" in lines
    assert lines[-1] == (
        "side-by-side: optimum-benchmark process 30.0 s, inline 20.0 s, harness 12.0 s; "
        "ratio process/harness 2.50, inline/harness 1.67; harness measured share 45.0 %"
    )
    assert "foreign CPU ≈ 4 CPU-s (40 % of the machine)" in describe(results[1], cores=1)


def test_both_tools_get_the_same_grid() -> None:
    assert f"quantization: [{', '.join(GRID['quants'])}]" in SCENARIO
    assert f"repeats: {GRID['iterations']}" in SCENARIO
    assert f"output_tokens: {GRID['new_tokens']}" in SCENARIO
