"""Training rows in the results: priced per package by hand, gated against the full fine-tune
with a paired CI, in cost.csv and the report, and kept out of the inference tables."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.modes.training import price as trn
from harness.results.aggregate import aggregate, aggregate_run
from harness.results.frame import frame_from_rows
from harness.results.publish.files import write_published
from tests.factories import row, tariff, tariffs, write_run

WINDOWS = list(np.linspace(4.0, 6.0, 16))


def training_row(method: str, shift: float = 0.0, **kw: Any) -> Any:
    nll = [w + shift for w in WINDOWS]
    fields: dict[str, Any] = {
        "mode": "training", "quantization": "bnb-nf4" if method == "qlora" else "none",
        "batch": 4, "context": 64, "output_tokens": 0, "repeats": 1, "decode_tok_s": None,
        "total_tok_s": None, "ppl": None, "dnll_vs_ref": None, "dnll_ci_low": None,
        "dnll_ci_high": None, "tpot_ms_p50": None, "decode_cv": None, "train_method": method,
        "micro_batch": 4, "grad_accum": 4, "seq_len": 64, "gradient_checkpointing": False,
        "optimizer": "adamw", "train_steps": 30, "lr": 1e-3, "tokens_per_step": 1024,
        "step_s": 2.0, "train_tok_s": 512.0, "eval_loss": float(np.mean(nll)),
        "eval_window_nll": nll, "eval_curve": [[0.0, 9.0], [10.0, 8.5], [20.0, 7.9]],
        "target_eval_loss": 8.0, "steps_to_target": 20,
    }  # fmt: skip
    fields.update(kw)
    return row(**fields)


def test_price_per_million_training_tokens_and_to_the_target_by_hand() -> None:
    rows = [training_row("full"), training_row("lora", train_tok_s=1024.0, step_s=1.0)]
    result = aggregate(frame_from_rows(rows), tariffs(tariff(hourly_usd=24.0)))
    cost = result.table("training_cost")
    assert len(cost) == 2 * 3  # two rows × three packages of the H100 tariff
    first = cost[(cost["train_method"] == "full") & (cost["package_days"] == 3)].iloc[0]
    # the 3-day package at 8 % off $24/h: 24 × 24 h × 3 × 0.92 = $1,589.76, so per hour
    # 1,589.76 / 72 = $22.08 for the node's 8 GPUs, $2.76 for the one the row uses
    assert first["package_price_usd"] == pytest.approx(1589.76)
    assert first["gpus_in_package"] == 8
    # 2.76 $/h / (512 tok/s × 3600 s/h) × 1e6 = 1.4973958 $ per million training tokens
    assert first["usd_per_mtok_train"] == pytest.approx(1.4973958333)
    # to the target: 20 steps × 2.0 s = 40 s at 2.76 $/h = 40 × 2.76 / 3600 = $0.0306667
    assert first["usd_to_target"] == pytest.approx(0.0306666667)
    lora = cost[(cost["train_method"] == "lora") & (cost["package_days"] == 3)].iloc[0]
    # twice the tokens per second: 2.76 / (1024 × 3600) × 1e6 = 0.7486979
    assert lora["usd_per_mtok_train"] == pytest.approx(0.7486979167)
    best = trn.cheapest_to_target(cost)
    assert set(best["train_method"]) == {"full", "lora"} and len(best) == 2 * 3


def test_joules_per_million_training_tokens_beside_the_price() -> None:
    rows = [training_row("full", j_per_token_train=0.25), training_row("lora")]
    cost = aggregate(frame_from_rows(rows), tariffs()).table("training_cost")
    full = cost[cost["train_method"] == "full"]
    assert list(full["j_per_mtok_train"]) == pytest.approx([0.25e6] * 3)
    assert cost.loc[cost["train_method"] == "lora", "j_per_mtok_train"].isna().all()


def test_gate_against_the_full_fine_tune_is_paired_over_windows() -> None:
    rows = [
        training_row("full"),
        training_row("lora", shift=0.005),  # 0.5 % worse per window: passes class 99 only
        training_row("qlora", shift=0.5),  # half a nat worse: fails
    ]
    result = aggregate(frame_from_rows(rows))
    by = result.table("training").set_index("train_method")
    assert by.loc["full", "dloss_vs_full"] == 0 and by.loc["full", "train_pass_99"]
    assert by.loc["lora", "dloss_vs_full"] == pytest.approx(0.005)
    # every window differs by the same amount: the paired interval has no width
    assert by.loc["lora", "dloss_vs_full_ci_high"] == pytest.approx(0.005)
    assert by.loc["lora", "train_pass_99"] and not by.loc["lora", "train_pass_99_9"]
    assert by.loc["qlora", "dloss_vs_full"] == pytest.approx(0.5)
    assert not by.loc["qlora", "train_pass_99"]
    assert -math.log(0.999) < 0.005 < -math.log(0.99)
    # training rows never reach the inference tables
    assert result.points.empty and result.counts["training_rows"] == 3


def test_without_a_full_fine_tune_of_the_same_shape_there_is_no_verdict() -> None:
    rows = [training_row("full", micro_batch=1), training_row("lora")]
    result = aggregate(frame_from_rows(rows))
    lora = result.table("training")[result.table("training")["train_method"] == "lora"].iloc[0]
    assert lora["dloss_vs_full"] is None and lora["train_pass_99"] is None


def test_cost_csv_and_the_report_carry_the_training_rows(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", [row(), training_row("full"), training_row("lora")])
    result = aggregate_run(run, tariffs(tariff()))
    out = write_published(result, tmp_path / "published", tariffs(tariff()), "99")
    with (out / "cost.csv").open(newline="") as handle:
        cost = list(csv.DictReader(handle))
    modes = [c["mode"] for c in cost]
    assert modes.count("offline") == 3 and modes.count("training") == 6
    assert all(c["usd_per_mtok_train"] for c in cost if c["mode"] == "training")
    assert all(not c["usd_per_mtok_train"] for c in cost if c["mode"] == "offline")
    readme = (out / "README.md").read_text()
    assert "## Training: $ per 1M training tokens and cost to the target loss" in readme
    assert 'id="training"' in (out / "report.html").read_text()


def test_rows_that_split_the_same_step_differently_must_train_alike() -> None:
    curve = [10.0, 9.0, 8.5]
    rows = [
        training_row("lora", micro_batch=4, grad_accum=1, loss_curve=curve),
        training_row("lora", micro_batch=1, grad_accum=4, loss_curve=[c + 1e-6 for c in curve]),
        training_row("full", micro_batch=4, grad_accum=1, loss_curve=curve),
        # broken: the same windows per step, a different trajectory (e.g. a per-micro-batch mean)
        training_row("full", micro_batch=1, grad_accum=4, loss_curve=[10.0, 9.2, 8.9]),
        training_row("full", micro_batch=2, grad_accum=1, tokens_per_step=512, loss_curve=curve),
    ]
    pairs = trn.accumulation_pairs(aggregate(frame_from_rows(rows)).table("training"))
    by = pairs.set_index("train_method")
    assert len(pairs) == 2  # the 2×1 row has other tokens per step: no pair
    assert by.loc["lora", "equivalent"] and by.loc["lora", "max_abs_dloss_curve"] < 1e-5
    assert not by.loc["full", "equivalent"]
    assert by.loc["full", "max_abs_dloss_curve"] == pytest.approx(0.4)
