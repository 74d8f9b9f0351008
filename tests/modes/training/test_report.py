"""harness.modes.training.report: the report's training section (cost per package, cheapest to
the target, the rows, accumulation pairs, leakage) in Markdown and HTML; nothing for a run
without training rows or leakage."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from harness.modes.base import Column
from harness.modes.training import report
from harness.results.aggregate import Aggregate, aggregate
from harness.results.frame import frame_from_rows
from tests.factories import row, tariff, tariffs

WINDOWS = list(np.linspace(4.0, 6.0, 16))
LEAK = {"seen": "train | block", "eval": "task x", "n": 13, "shared": 8, "eval_ngrams": 8,
        "overlap": 1.0}  # fmt: skip


def training_row(method: str, **kw: Any) -> Any:
    fields: dict[str, Any] = {
        "mode": "training", "quantization": "none", "batch": 4, "context": 64,
        "output_tokens": 0, "repeats": 1, "decode_tok_s": None, "total_tok_s": None,
        "ppl": None, "dnll_vs_ref": None, "dnll_ci_low": None, "dnll_ci_high": None,
        "tpot_ms_p50": None, "decode_cv": None, "train_method": method, "micro_batch": 4,
        "grad_accum": 4, "seq_len": 64, "gradient_checkpointing": False, "optimizer": "adamw",
        "train_steps": 30, "lr": 1e-3, "tokens_per_step": 1024, "step_s": 2.0,
        "train_tok_s": 512.0, "eval_loss": float(np.mean(WINDOWS)), "eval_window_nll": WINDOWS,
        "eval_curve": [[0.0, 9.0], [10.0, 8.5], [20.0, 7.9]], "target_eval_loss": 8.0,
        "steps_to_target": 20,
    }  # fmt: skip
    return row(**{**fields, **kw})


def training_result() -> Aggregate:
    rows = [training_row("full"), training_row("lora")]
    return aggregate(frame_from_rows(rows), tariffs(tariff(hourly_usd=24.0)))


def plain_result() -> Aggregate:
    return aggregate(frame_from_rows([row()]), tariffs())


def test_md_table_escapes_pipes_and_says_when_there_are_no_rows() -> None:
    assert report.md_table([]) == "(no rows)\n"
    assert report.md_table([{"a": "1|2", "b": "x"}]) == "| a | b |\n|---|---|\n| 1\\|2 | x |\n"


def test_records_keep_the_present_columns_under_their_labels_formatted() -> None:
    frame = pd.DataFrame({"train_method": ["lora"], "train_tok_s": [512.25], "other": [1]})
    # floats to 4 significant digits; a column the headers do not name is left out
    assert report.records(frame, report.COST_HEADERS) == [
        {"method": "lora", "train tok/s": "512.2"}
    ]


def test_a_run_without_training_rows_or_leakage_has_no_section() -> None:
    result = plain_result()
    assert report.markdown_section(result) == []
    assert report.html_section(result, lambda *a: "T") == []


def test_leakage_alone_is_its_own_section() -> None:
    result = dataclasses.replace(plain_result(), leakage=[LEAK])
    text = "".join(report.markdown_section(result))
    assert "## Leakage: n-gram overlap" in text and "## Training" not in text
    # the leakage row, its pipe escaped: seen, eval, n, shared, eval n-grams, overlap 1.0
    assert "| train \\| block | task x | 13 | 8 | 8 | 1 |" in text


def test_the_markdown_section_prices_each_package_by_hand() -> None:
    text = "".join(report.REPORT.markdown(training_result(), "99", lambda rows: ""))
    assert "## Training: $ per 1M training tokens and cost to the target loss" in text
    headings = (
        "### Cheapest to the target loss per method and package",
        "### Training rows",
        "### Accumulation equivalence on the measured rows",
    )
    assert all(heading in text for heading in headings)
    # full, 3-day package at 8 % off $24/h for 8 GPUs: 24 × 0.92 / 8 = $2.76 an hour per GPU;
    # ÷ (512 tok/s × 3,600 s) × 1e6 = 1.4974 $/1M training tokens; to the target:
    # 20 steps × 2 s × 2.76 / 3,600 = $0.03067
    full_3_days = "| tiny-llama | full | 4 | 4 | 64 | H100-SXM-80GB | TestCloud | 3 | 512 | 1.497 |"
    assert full_3_days in text and "| 0.03067 |" in text


def test_the_html_section_renders_each_table_through_the_page_in_order() -> None:
    drawn: list[tuple[str, int]] = []

    def table(frame: pd.DataFrame, columns: Sequence[Column], table_id: str) -> str:
        drawn.append((table_id, len(frame)))
        return f"<table id={table_id}>"

    result = dataclasses.replace(training_result(), leakage=[LEAK])
    html = report.REPORT.html(result, "99", table)
    # 2 rows × 3 packages priced; the cheapest per method and package: 2 × 3; 2 rows; no
    # accumulation pair (both rows split their windows 4 × 4, a pair needs two splits)
    assert drawn == [
        ("training-cost", 6), ("training-target", 6), ("training-rows", 2),
        ("training-accumulation", 0), ("leakage", 1),
    ]  # fmt: skip
    assert html[0].startswith('<h2 id="training">')
    assert '<h2 id="leakage">Leakage: n-gram overlap</h2>' in html
