"""Serving rows in the aggregate: quality inherited from the offline rows, the level at the SLO,
its price per package beside the offline figure in cost.csv, the cheapest at the SLO, and the
report's chart and tables."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from harness.results.aggregate import aggregate
from harness.results.frame import frame_from_rows
from harness.results.pricing import package_usd_per_hour
from harness.results.publish.files import report
from harness.row import ResultRow
from tests.factories import quality, reference, row, tariffs, write_run

GROUP = "tiny-llama|vllm|none|kv=auto|cuda"


def level(output_tok_s: float, attainment: float, *, status: str = "ok", **kw: Any) -> ResultRow:
    """A serving row of GROUP (concurrency given by `concurrency=`, default 1)."""
    fields: dict[str, Any] = {
        "mode": "serving",
        "group": GROUP,
        "backend": "vllm",
        "status": status,
        "concurrency": 1,
        "requests_sent": 64,
        "requests_ok": 64,
        "requests_failed": 0,
        "output_tok_s": output_tok_s,
        "request_throughput": output_tok_s / 128,
        "goodput_rps": output_tok_s / 128 * attainment,
        "tpot_ms_p99": 20.0,
        "ttft_ms_p99": 300.0,
        "slo_tpot_ms": 50.0,
        "slo_ttft_ms": 2000.0,
        "slo_attainment_target": 0.99,
        "slo_attainment": attainment,
        # a serving row has no offline figures of its own
        "decode_tok_s": None,
        "total_tok_s": None,
        "tpot_ms_p50": None,
        "ppl": None,
        "ppl_ci_low": None,
        "ppl_ci_high": None,
        "dnll_vs_ref": None,
        "dnll_ci_low": None,
        "dnll_ci_high": None,
    }
    fields.update(kw)
    return row(**fields)


def runs() -> list[ResultRow]:
    """A reference (transformers) and one vLLM configuration of class 99.9 with three levels:
    c1 meets the SLO, c8 meets it at a higher speed, c32 is faster but misses it."""
    return [
        reference(group="tiny-llama|transformers|none|kv=auto|cuda"),
        row(group=GROUP, backend="vllm", decode_tok_s=900.0, **quality(100.05)),
        level(1000.0, 1.0, concurrency=1),
        level(3000.0, 0.995, concurrency=8),
        level(5000.0, 0.9, concurrency=32),  # faster, but 10 % of requests miss the SLO
        level(9000.0, 1.0, concurrency=64, status="error"),  # an error row never qualifies
    ]


def test_serving_rows_inherit_their_configurations_quality_and_stay_out_of_offline_tables() -> None:
    result = aggregate(frame_from_rows(runs()), tariffs())
    assert len(result.points) == 2 and (result.points["mode"] != "serving").all()
    assert len(result.table("serving")) == 4
    assert set(result.table("serving")["quality_class"]) == {"99.9"}
    assert result.table("serving")["pass_99_9"].all()
    assert result.counts["serving_rows"] == 4


def test_the_level_at_the_slo_is_the_fastest_ok_level_that_meets_the_attainment() -> None:
    result = aggregate(frame_from_rows(runs()), tariffs())
    (config,) = result.table("at_slo").to_dict(orient="records")
    assert config["level_at_slo"] == "concurrency 8"
    assert config["output_tok_s_at_slo"] == 3000.0
    assert (config["levels_meeting_slo"], config["levels_measured"]) == (2, 3)


def test_joules_per_million_tokens_at_the_slo_are_the_chosen_levels() -> None:
    rows = runs()
    rows[2].j_per_token_serving = 0.9  # c1
    rows[3].j_per_token_serving = 0.3  # c8: the level at the SLO
    rows[4].j_per_token_serving = 0.2  # c32: fewer joules, but misses the SLO
    result = aggregate(frame_from_rows(rows), tariffs())
    (config,) = result.table("at_slo").to_dict(orient="records")
    assert config["j_per_mtok_output_at_slo"] == pytest.approx(0.3e6)
    cheapest = list(result.table("cheapest_at_slo")["j_per_mtok_output_at_slo"])
    assert cheapest == pytest.approx([0.3e6] * len(cheapest)) and cheapest
    vllm = result.cost[result.cost["backend"] == "vllm"]
    assert list(vllm["j_per_mtok_output_at_slo"]) == pytest.approx([0.3e6] * 3)
    plain = aggregate(frame_from_rows(runs()), tariffs()).table("at_slo")  # not measured: NaN
    assert math.isnan(plain["j_per_mtok_output_at_slo"].iloc[0])


def test_no_level_meeting_the_slo_leaves_the_figure_empty_and_unpriced() -> None:
    rows = [*runs()[:2], level(1000.0, 0.5), level(2000.0, 0.98, concurrency=4)]
    result = aggregate(frame_from_rows(rows), tariffs())
    (config,) = result.table("at_slo").to_dict(orient="records")
    assert config["level_at_slo"] is None and math.isnan(config["output_tok_s_at_slo"])
    assert result.table("cheapest_at_slo").empty
    assert result.cost["usd_per_mtok_output_at_slo"].isna().all()


def test_cost_at_the_slo_sits_beside_the_offline_figure_with_the_offline_formula() -> None:
    result = aggregate(frame_from_rows(runs()), tariffs())
    cost = result.cost
    columns = list(cost.columns)
    at = columns.index("usd_per_mtok_output")
    assert columns[at + 1] == "usd_per_mtok_output_at_slo"
    vllm = cost[cost["backend"] == "vllm"]
    assert len(vllm) == 3  # one per package of the H100 tariff
    for rec in vllm.to_dict(orient="records"):
        usd_per_hour = package_usd_per_hour(
            rec["package_price_usd"], rec["package_days"], 1.0, 1 / rec["gpus_in_package"]
        )
        expected = usd_per_hour / (3000.0 * 3600) * 1e6
        assert rec["usd_per_mtok_output_at_slo"] == pytest.approx(float(expected))
        # offline: the same package at decode 900 tok/s, dearer than serving's 3000 tok/s
        assert rec["usd_per_mtok_output"] == pytest.approx(float(expected) * 3000 / 900)
    # the reference (transformers) has no serving rows: nothing at the SLO
    assert cost.loc[cost["backend"] == "transformers", "usd_per_mtok_output_at_slo"].isna().all()


def test_cheapest_at_the_slo_per_class_gpu_and_package_only_among_passing_configs() -> None:
    below = "tiny-llama|vllm|bnb-nf4|kv=auto|cuda"
    rows = [
        *runs(),
        row(group=below, backend="vllm", quantization="bnb-nf4", **quality(105.0)),
        level(50_000.0, 1.0, group=below, quantization="bnb-nf4"),  # fast, but fails quality
    ]
    result = aggregate(frame_from_rows(rows), tariffs())
    table = result.table("cheapest_at_slo")
    assert set(table["quality_class"]) == {"99", "99.9"}
    assert len(table) == 6  # 2 classes × 3 packages of one GPU
    assert set(table["quantization"]) == {"none"}  # the nf4 configuration is below both classes
    assert (table["output_tok_s_at_slo"] == 3000.0).all()


def test_the_report_has_the_chart_with_the_slo_line_and_the_chosen_level(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run-a", runs())
    out = report(run, tariffs())
    html = (out / "report.html").read_text()
    assert "Serving under load" in html and "throughput vs latency per load level" in html
    assert "TPOT target 50 ms" in html  # the SLO line
    assert "chosen at the SLO: concurrency 8" in html
    assert 'id="cheapest-at-slo"' in html
    md = (out / "README.md").read_text()
    assert "## Serving: cheapest at the latency SLO" in md and "concurrency 8" in md
    serving_csv = pd.read_csv(out / "serving.csv")
    assert len(serving_csv) == 4 and set(serving_csv["mode"]) == {"serving"}
    cost_csv = pd.read_csv(out / "cost.csv")
    assert "usd_per_mtok_output_at_slo" in cost_csv.columns
    summary = json.loads((out / "summary.json").read_text())
    assert summary["serving_at_slo"][0]["level_at_slo"] == "concurrency 8"
    assert {r["quality_class"] for r in summary["cheapest_at_slo"]} == {"99", "99.9"}


def test_a_run_without_serving_rows_publishes_as_before(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run-a", runs()[:2])
    result = aggregate(frame_from_rows(runs()[:2]), tariffs())
    assert (
        result.table("serving").empty
        and result.table("at_slo").empty
        and result.table("cheapest_at_slo").empty
    )
    out = report(run, tariffs())
    assert "Serving under load" not in (out / "report.html").read_text()


def test_the_results_side_chooses_the_level_with_the_slo_modules_rule() -> None:
    """One rule (harness.modes.serving.slo.choose_at_slo): the aggregate's level at the SLO is the
    level that rule chooses from the same rows, and a level with no output never qualifies."""
    from harness.modes.serving import price as srv
    from harness.modes.serving import slo

    rows = [*runs(), level(0.0, 1.0, concurrency=2)]  # meets the attainment, produces nothing
    result = aggregate(frame_from_rows(rows), tariffs())
    (config,) = result.table("at_slo").to_dict(orient="records")
    levels = srv.levels(result.table("serving"))
    chosen = slo.choose_at_slo(levels, 0.99)
    assert chosen is not None
    assert config["key_at_slo"] == result.table("serving")["key"].iloc[chosen.position]
    assert config["level_at_slo"] == "concurrency 8"
    assert config["levels_meeting_slo"] == sum(slo.qualifies(lv, 0.99) for lv in levels) == 2
