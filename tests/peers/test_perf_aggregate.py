"""harness.peers.perf_aggregate: the synthetic rows `make perf` aggregates, on a few rows: the
grid's cells, plausible figures by the rules stated there (checked against the catalog's
figures written out here), and the contract line it prints."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pandas as pd
import pytest

from harness.peers import perf_aggregate

ROOT = Path(__file__).resolve().parents[2]
ROWS = 60
# HBM GB/s per card, and the weights in GB of each model at 16 bits
BANDWIDTH = {"H100-SXM-80GB": 3350.0, "H200-141GB": 4800.0, "A100-SXM-80GB": 2039.0,
             "L40S": 864.0, "MI300X": 5300.0, "RTX-4090": 1008.0}  # fmt: skip
WEIGHTS_GB = {"tiny-llama": 0.01, "meta-llama/Llama-3.1-8B-Instruct": 16.0,
              "Qwen/Qwen2.5-7B-Instruct": 15.2}  # fmt: skip
BITS = {"none": 16, "bf16": 16, "bnb-int8": 8, "bnb-nf4": 4, "bnb-fp4": 4, "gptq-int4": 4,
        "quanto-int4": 4, "fp8": 8}  # fmt: skip
BASE_PPL = {"tiny-llama": 260.0, "meta-llama/Llama-3.1-8B-Instruct": 7.2,
            "Qwen/Qwen2.5-7B-Instruct": 7.6}  # fmt: skip


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return perf_aggregate.synthetic_frame(ROWS, seed=3)


def test_one_row_per_key_of_the_grid_and_the_same_seed_the_same_rows(frame: pd.DataFrame) -> None:
    assert len(frame) == ROWS and frame["key"].iloc[0] == "k000000000"
    assert frame["key"].iloc[-1] == "k000000059" and frame["key"].is_unique
    assert set(frame["gpu"]) <= set(BANDWIDTH) and set(frame["quantization"]) <= set(BITS)
    assert set(frame["batch"]) <= {1, 2, 4, 8, 16, 32}
    assert set(frame["context"]) <= {128, 512, 1024, 2048, 4096, 8192}
    pd.testing.assert_frame_equal(frame, perf_aggregate.synthetic_frame(ROWS, seed=3))
    assert not frame["model"].equals(perf_aggregate.synthetic_frame(ROWS, seed=4)["model"])


def test_each_row_follows_the_rules_of_its_cell(frame: pd.DataFrame) -> None:
    for rec in frame.to_dict(orient="records"):
        weights = WEIGHTS_GB[rec["model"]] * BITS[rec["quantization"]] / 16
        # e.g. an H100 at batch 4 on the 8B at 8 bits: 3,350 × 4 / 8 = 1,675 tok/s
        assert rec["roofline_decode_tok_s"] == pytest.approx(
            BANDWIDTH[rec["gpu"]] * rec["batch"] / weights
        )
        assert rec["target"] == ("rocm" if rec["gpu"] == "MI300X" else "cuda")
        # MiB predicted: GB of weights × 953.7 + batch × context / 8
        assert rec["predicted_peak_mib"] == pytest.approx(
            weights * 953.7 + rec["batch"] * rec["context"] * 0.125
        )
        reference = rec["quantization"] == "none" and rec["kv_cache_dtype"] == "auto"
        assert rec["is_reference"] == reference
        if reference:
            assert rec["ppl"] == BASE_PPL[rec["model"]] and rec["dnll_vs_ref"] == 0.0
        assert rec["dnll_vs_ref"] == pytest.approx(math.log(rec["ppl"] / BASE_PPL[rec["model"]]))
        if rec["status"] == "oom":
            assert math.isnan(rec["decode_tok_s"]) and math.isnan(rec["tpot_ms_p50"])
        else:
            # 20 % to 95 % of the roofline, or twice that (a row in a thousand, above it)
            share = rec["decode_tok_s"] / rec["roofline_decode_tok_s"]
            assert 0.2 <= share <= 0.95 * 2
            assert rec["tpot_ms_p50"] == pytest.approx(1000 * rec["batch"] / rec["decode_tok_s"])


def test_main_prints_the_contract_line_last(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tariffs = ROOT / "tariffs" / "example.yaml"
    argv = ["perf_aggregate.py", "--rows", "40", "--seed", "1", "--tariffs", str(tariffs)]
    monkeypatch.setattr(sys, "argv", argv)
    perf_aggregate.main()
    *_, last = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(r"aggregate: 40 rows in \d+\.\d\d s \(\d+ rows/s\)", last), last
