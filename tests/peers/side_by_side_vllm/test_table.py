"""harness.peers.side_by_side_vllm.table: the harness's figures from a row, vLLM's from its parsed
runs, the ratio table, its Markdown and text forms and the contract line."""

from __future__ import annotations

from typing import Any

import pytest

from harness.peers.side_by_side_vllm import table as sbs


def row(**fields: Any) -> dict[str, Any]:
    base = {
        "key": "k",
        "status": "ok",
        "error": None,
        "batch": 4,
        "context": 512,
        "output_tokens": 32,
        "e2e_ms_p50": 200.0,
        "generated_tokens": 128,
        "total_tok_s": 10880.0,
        "decode_tok_s": 1100.0,
    }
    return {**base, **fields}


# --- figures of each tool ---------------------------------------------------------------------


def test_vllm_figures_decode_from_latency_at_o_and_at_one() -> None:
    latency = {"median_s": 0.20}
    latency_one = {"median_s": 0.076}
    throughputs = [{"output_tok_s": v, "total_tok_s": 10 * v} for v in (500.0, 600.0, 550.0)]
    figures = sbs.vllm_figures(latency, latency_one, throughputs, batch=4, output_len=32)
    assert figures["latency_s"] == 0.20
    assert figures["decode_tok_s"] == pytest.approx(4 * 31 / 0.124)
    assert figures["output_tok_s"] == 550.0  # median of the runs
    assert figures["total_tok_s"] == 5500.0


def test_vllm_figures_without_a_positive_decode_span_give_no_decode() -> None:
    figures = sbs.vllm_figures({"median_s": 0.1}, {"median_s": 0.12}, [], batch=1, output_len=32)
    assert figures["decode_tok_s"] is None
    assert figures["output_tok_s"] is None
    assert (
        sbs.vllm_figures({"median_s": 0.1}, None, [], batch=1, output_len=32)["decode_tok_s"]
        is None
    )


def test_harness_figures_from_a_row() -> None:
    figures = sbs.harness_figures(row())
    assert figures == {
        "latency_s": pytest.approx(0.2),
        "output_tok_s": pytest.approx(128 / 0.2),
        "total_tok_s": 10880.0,
        "decode_tok_s": 1100.0,
    }


def test_harness_figures_of_a_failed_row_are_refused() -> None:
    with pytest.raises(ValueError, match="oom"):
        sbs.harness_figures(row(status="oom", error="out of memory"))


# --- the table --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("harness", "vllm", "expected"),
    [(1.1, 1.0, 1.1), (None, 1.0, None), (1.0, None, None), (1.0, 0.0, None)],
)
def test_ratio_is_harness_over_vllm(harness: Any, vllm: Any, expected: Any) -> None:
    assert sbs.ratio(harness, vllm) == (expected if expected is None else pytest.approx(expected))


def test_within_ten_percent_includes_the_bounds() -> None:
    assert sbs.within(1.10) is True
    assert sbs.within(0.90) is True
    assert sbs.within(1.1001) is False
    assert sbs.within(0.85) is False
    assert sbs.within(None) is None


def points() -> list[dict[str, Any]]:
    return [
        {
            "label": sbs.point_label(4, 512, 32),
            "vllm": dict(latency_s=0.2, output_tok_s=640.0, total_tok_s=10880.0, decode_tok_s=None),
            "harness": dict(
                latency_s=0.19, output_tok_s=673.7, total_tok_s=12000.0, decode_tok_s=1100.0
            ),
        }
    ]


def test_comparison_rows_one_per_metric_with_ratio_and_verdict() -> None:
    table = sbs.comparison_rows(points())
    assert [r["metric"] for r in table] == list(sbs.METRICS)
    by = {r["metric"]: r for r in table}
    assert by["latency_s"]["point"] == "b4 c512 o32"
    assert by["latency_s"]["ratio"] == pytest.approx(0.95)
    assert by["latency_s"]["within"] is True
    assert by["total_tok_s"]["within"] is False
    assert by["decode_tok_s"]["ratio"] is None and by["decode_tok_s"]["within"] is None


def test_markdown_table_shows_the_load_averages_when_known() -> None:
    pts = points()
    pts[0]["load"] = "3 % / 12 %; 1.2 / 0.9"
    md = sbs.markdown_table(sbs.comparison_rows(pts))
    assert md.splitlines()[0].endswith("| others' CPU; load avg (vLLM / harness) |")
    assert md.splitlines()[2].endswith("| yes | 3 % / 12 %; 1.2 / 0.9 |")


def test_markdown_table_and_summary_line() -> None:
    table = sbs.comparison_rows(points())
    md = sbs.markdown_table(table)
    lines = md.strip().splitlines()
    assert lines[0] == "| point | figure | vLLM bench | harness | ratio | within 10 % |"
    assert len(lines) == 2 + len(sbs.METRICS)
    assert "| b4 c512 o32 | s per batch (median) | 0.2000 | 0.1900 | 0.950 | yes |" in lines
    assert "| 10,880 | 12,000 | 1.103 | **no** |" in md
    assert "| – | 1,100 | – | – |" in md
    assert sbs.text_table(table).splitlines()[0].startswith("point")
    assert sbs.summary_line(table, 1.234) == (
        "side-by-side-vllm: 2/3 figures within 10 %; ratio harness/vLLM latency 0.95..0.95, "
        "output tok/s 1.05..1.05, decode tok/s -; load avg 1.23"
    )
