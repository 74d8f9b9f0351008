"""Aggregation: cost per package, cheapest, Pareto, effects, flags, counts (the gate: test_gate)."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.errors import UserInputError
from harness.results.aggregate import Aggregate, aggregate, aggregate_run
from harness.results.frame import Array, frame_from_rows
from harness.results.pareto import pareto_mask
from harness.row import ResultRow
from harness.spec.tariffs import Package, TariffTable
from tests import factories as F

ROOT = Path(__file__).resolve().parents[2]


def _agg(
    rows: list[ResultRow], tariffs: TariffTable | None = None, utilisation: float = 1.0
) -> Aggregate:
    table = tariffs if tariffs is not None else F.tariffs()
    return aggregate(frame_from_rows(rows), table, utilisation)


# --- cost -------------------------------------------------------------------------------------


def test_cost_of_one_row_on_a_30_day_package_matches_the_hand_computation_to_the_cent() -> None:
    """An 8 × H100 node at $23.92/node-hour; 30-day package at −20 %; utilisation 0.75; the row
    decodes 800 tok/s (1,000 tok/s in total) on one GPU.

    package price  = 23.92 × 24 × 30 × 0.8                     = $13,777.92
    $/hour of work = 13,777.92 ÷ (30 × 24) ÷ 0.75               = $25.5147 per node-hour used
    one GPU's share = 25.5147 × 1 ÷ 8                            = $3.18933 per hour
    $/Mtok output  = 3.18933 ÷ (800 × 3600) × 10⁶  = 3.18933 ÷ 2.88 = $1.1074 → $1.11
    $/Mtok total   = 3.18933 ÷ (1000 × 3600) × 10⁶ = 3.18933 ÷ 3.6  = $0.88593 → $0.89
    tokens/package = 800 × 3600 × 30 × 24 × 0.75 × (8 ÷ 1)      = 12,441,600,000
      (check: 13,777.92 ÷ 12,441.6 M = $1.1074 per Mtok)
    breakeven util = 13,777.92 ÷ (23.92 × 30 × 24)              = 0.80
    hourly billing = 23.92 ÷ 8 ÷ (800 × 3600) × 10⁶  = 2.99 ÷ 2.88 = $1.0382 → $1.04
      (cheaper than the package here, as 0.75 < breakeven 0.80)
    """
    rows = [F.reference(decode_tok_s=800.0, total_tok_s=1000.0)]
    result = _agg(rows, F.tariffs(F.tariff(packages=[Package(days=30, discount_pct=20)])), 0.75)
    cost = result.cost
    assert len(cost) == 1
    c = cost.iloc[0]
    assert c["package_price_usd"] == pytest.approx(13777.92)
    assert round(c["usd_per_mtok_output"], 2) == 1.11
    assert c["usd_per_mtok_output"] == pytest.approx(1.107407, abs=1e-6)
    assert round(c["usd_per_mtok_total"], 2) == 0.89
    assert c["tokens_per_package"] == pytest.approx(12_441_600_000)
    assert c["breakeven_utilisation"] == pytest.approx(0.8)
    assert round(c["usd_per_mtok_output_hourly"], 2) == 1.04
    assert not c["package_beats_hourly"]
    assert (c["gpus_in_package"], c["gpus_used"], c["utilisation"]) == (8, 1, 0.75)


def test_cost_csv_columns_are_all_present() -> None:
    cost = _agg(F.small_grid()).cost
    assert set(F.COST_CSV_CONTRACT) <= set(cost.columns)


def test_a_row_is_priced_only_on_tariffs_of_its_own_gpu() -> None:
    rows = [F.reference(gpu="L40S"), F.reference(gpu="H200-141GB", model="other")]
    tariffs = F.tariffs(F.tariff(), F.tariff("L40S", gpus_per_node=1, hourly_usd=1.4))
    result = _agg(rows, tariffs)
    assert set(result.cost["gpu"]) == {"L40S"}
    assert len(result.cost) == 3  # three packages of the L40S tariff
    assert result.counts["eligible_without_tariff"] == 1


def test_a_row_needing_more_gpus_than_the_node_has_is_not_priced() -> None:
    frame = frame_from_rows([F.reference(), F.reference(model="big")])
    frame["layout"] = ["tp=2", "tp=16"]  # 2 and 16 cards; the tariff's node has 8
    result = aggregate(frame, F.tariffs())
    assert set(result.cost["model"]) == {"tiny-llama"}
    two = result.cost.iloc[0]
    assert two["gpus_used"] == 2 and two["replicas_per_node"] == 4  # ⌊8 / 2⌋
    assert two["tokens_per_package"] == pytest.approx(
        1000 * 3600 * 24 * two["package_days"] * (8 / 2)
    )


def test_rows_above_the_roofline_are_flagged_counted_and_never_priced() -> None:
    rows = [
        F.reference(),
        F.row(quantization="bnb-nf4", decode_tok_s=9000.0, roofline_decode_tok_s=5000.0),
        F.row(quantization="bnb-int8", status="oom", decode_tok_s=None),
        F.row(quantization="bnb-fp4", status="error", error="boom", decode_tok_s=None),
    ]
    result = _agg(rows)
    flagged = result.points.loc[result.points["exceeds_roofline"], "quantization"].tolist()
    assert flagged == ["bnb-nf4"]
    assert set(result.cost["quantization"]) == {"none"}
    assert result.counts["flagged_above_roofline"] == 1
    assert result.counts["excluded_not_ok"] == 2
    assert result.counts["by_status"] == {"ok": 2, "oom": 1, "error": 1}
    assert len(result.points) == 4  # every row kept in points, priced or not


def test_utilisation_outside_zero_to_one_is_a_user_error() -> None:
    for bad in (0.0, 1.5, -0.2):
        with pytest.raises(UserInputError, match="utilisation"):
            _agg([F.reference()], utilisation=bad)


def test_without_tariffs_nothing_is_priced_but_everything_else_is_computed() -> None:
    result = aggregate(frame_from_rows(F.small_grid()), None)
    assert result.cost.empty and result.cheapest.empty and result.gpu_ratios.empty
    assert not result.main_effects.empty and not result.pareto_throughput_latency.empty
    assert result.counts["priced_rows"] == 0


# --- cheapest and ratios ----------------------------------------------------------------------


def _two_gpu_tariffs() -> TariffTable:
    return F.tariffs(
        F.tariff(),
        F.tariff("RTX-4090", provider="R", gpus_per_node=1, hourly_usd=0.6),
        F.tariff("RTX-4090", provider="Dear", gpus_per_node=1, hourly_usd=0.9),
    )


def test_cheapest_passing_matches_a_brute_force_over_the_whole_cost_table() -> None:
    result = _agg(F.small_grid(), _two_gpu_tariffs(), 0.7)
    cost = result.cost
    for name, flag in (("99", "pass_99"), ("99.9", "pass_99_9")):
        passing = cost[cost[flag]]
        brute = passing.loc[
            passing.groupby(["model", "gpu", "package_days"])["usd_per_mtok_output"].idxmin()
        ]
        got = result.cheapest[result.cheapest["quality_class"] == name]
        merged = got.merge(brute, on=["model", "gpu", "package_days"], suffixes=("", "_b"))
        assert len(merged) == len(brute) == 6  # 2 GPUs × 3 packages
        assert np.allclose(merged["usd_per_mtok_output"], merged["usd_per_mtok_output_b"])
    # the 99 class may use the faster nf4 weights; 99.9 may not
    assert set(result.cheapest.loc[result.cheapest["quality_class"] == "99", "quantization"]) == {
        "bnb-nf4"
    }
    assert "bnb-nf4" not in set(
        result.cheapest.loc[result.cheapest["quality_class"] == "99.9", "quantization"]
    )
    assert set(result.cheapest["provider"]) == {"TestCloud", "R"}  # the dearer 4090 never wins


def test_gpu_ratios_are_reciprocal_and_the_cheapest_gpu_has_ratio_one() -> None:
    result = _agg(F.small_grid(), _two_gpu_tariffs())
    ratios = result.gpu_ratios
    assert len(ratios) == 2 * 2 * 3  # (a, b) and (b, a) × 2 classes × 3 packages
    pairs = ratios.set_index(["quality_class", "package_days", "gpu_a", "gpu_b"])[
        "cost_ratio_a_over_b"
    ]
    for (cls, days, a, b), value in pairs.items():
        assert value * pairs[(cls, days, b, a)] == pytest.approx(1.0)
    per = result.cheapest.groupby(["model", "quality_class", "package_days"])
    assert (per["ratio_to_cheapest_gpu"].min() == 1.0).all()


# --- Pareto -----------------------------------------------------------------------------------


def _brute_front(group: Array, x: Array, y: Array, maximise_y: bool) -> Array:
    sign = -1 if maximise_y else 1
    out = []
    for i in range(len(x)):
        dominated = any(
            group[j] == group[i]
            and x[j] <= x[i]
            and sign * y[j] <= sign * y[i]
            and (x[j] < x[i] or sign * y[j] < sign * y[i])
            for j in range(len(x))
        )
        out.append(not dominated and not np.isnan(x[i]) and not np.isnan(y[i]))
    return np.array(out)


@pytest.mark.parametrize("maximise_y", [False, True])
def test_pareto_mask_matches_a_brute_force_with_ties_and_gaps(maximise_y: bool) -> None:
    rng = np.random.default_rng(3)
    n = 300
    group = rng.integers(0, 4, n)
    x = rng.integers(0, 25, n).astype(float)  # many ties in x
    y = rng.integers(0, 25, n).astype(float)
    x[rng.random(n) < 0.05] = np.nan
    got = pareto_mask(group, x, y, maximise_y=maximise_y)
    assert (got == _brute_front(group, x, y, maximise_y)).all()


def test_the_cost_quality_front_is_the_front_of_the_whole_cost_table() -> None:
    rows = F.small_grid()
    rows.append(F.row(quantization="bnb-fp4", **F.quality(100.3), decode_tok_s=9000.0))
    result = _agg(rows, _two_gpu_tariffs())
    cost = result.cost.dropna(subset=["ppl"]).reset_index(drop=True)
    group = cost.groupby(["model", "package_days"]).ngroup().to_numpy()
    x, y = cost["usd_per_mtok_output"].to_numpy(), cost["ppl"].to_numpy()
    brute = cost[_brute_front(group, x, y, False)]
    got = result.pareto_cost_quality
    key = ["model", "package_days", "usd_per_mtok_output", "ppl"]
    assert sorted(map(tuple, got[key].round(9).to_numpy().tolist())) == sorted(
        map(tuple, brute[key].round(9).drop_duplicates().to_numpy().tolist())
    )
    assert "bnb-fp4" in set(got["quantization"])


def test_the_throughput_latency_front_keeps_only_undominated_points() -> None:
    front = _agg(F.small_grid()).pareto_throughput_latency
    for _, sub in front.groupby(["model", "device"]):
        ordered = sub.sort_values("tpot_ms_p50")
        assert ordered["decode_tok_s"].is_monotonic_increasing


# --- factor effects (harness.results.effects) -------------------------------------------------


def test_main_effects_are_level_means_minus_the_axis_mean() -> None:
    effects = _agg(F.small_grid()).main_effects
    h100 = effects[
        (effects["device"] == "H100-SXM-80GB") & (effects["metric"] == "peak_mib_decode")
    ]
    batch = h100[h100["axis"] == "batch"].set_index("level")
    # peak = 1000 + batch × context / 8: mean over contexts 128, 512 = 1000 + 40 × batch
    assert batch.loc["1", "mean"] == pytest.approx(1040.0)
    assert batch.loc["4", "mean"] == pytest.approx(1160.0)
    assert batch.loc["4", "effect"] == pytest.approx(60.0)
    assert batch["n"].tolist() == [12, 12]
    ppl = effects[(effects["metric"] == "ppl") & (effects["axis"] == "batch")]
    assert np.allclose(ppl["effect"], 0.0)  # quality does not depend on batch


def test_interactions_appear_only_for_complete_pairs() -> None:
    rows = F.small_grid()
    result = _agg(rows)
    inter = result.interactions
    # decode ∝ batch × 1/(1 + ctx/1024): multiplicative, so batch × context interact
    bc = inter[
        (inter["axis_a"] == "batch")
        & (inter["axis_b"] == "context")
        & (inter["metric"] == "decode_tok_s")
    ]
    assert len(bc) == 2 * 4  # two devices × 2 × 2 cells
    assert not np.allclose(bc["interaction"], 0.0)
    assert np.allclose(bc.groupby("device")["interaction"].sum(), 0.0)
    # quantization × KV dtype: additive in decode → no interaction
    qk = inter[
        (inter["axis_a"] == "quantization")
        & (inter["axis_b"] == "kv_cache_dtype")
        & (inter["metric"] == "decode_tok_s")
    ]
    assert np.allclose(qk["interaction"], 0.0, atol=1e-9)
    # remove one (quantization, KV) cell on the 4090: that pair is no longer complete there
    partial = [
        r
        for r in rows
        if not (r.gpu == "RTX-4090" and r.quantization == "bnb-nf4" and r.kv_cache_dtype == "int8")
    ]
    inter = _agg(partial).interactions
    qk = inter[(inter["axis_a"] == "quantization") & (inter["axis_b"] == "kv_cache_dtype")]
    assert set(qk["device"]) == {"H100-SXM-80GB"}


# --- runs on disk -----------------------------------------------------------------------------


def test_an_unreadable_point_file_is_named_and_skipped(tmp_path: Path) -> None:
    run = F.write_run(tmp_path / "run", [F.reference(), F.row(quantization="bnb-nf4")])
    bad = F.write_bad_file(run, "half-written.json")
    result = aggregate_run(run, F.tariffs())
    assert len(result.points) == 2
    assert result.counts["unreadable_files"] == 1
    ((path, why),) = result.unreadable
    assert path == str(bad) and why == "model: Field required (+8 more)"


def test_an_empty_or_missing_run_folder_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match="run folder not found"):
        aggregate_run(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserInputError, match="no point files"):
        aggregate_run(tmp_path / "empty")


def test_aggregate_cmd_refuses_a_bad_class_and_prints_the_headline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.cli.results import aggregate_cmd

    run = F.write_run(tmp_path / "run", F.small_grid())
    with pytest.raises(UserInputError, match="not a quality class"):
        aggregate_cmd(run, quality_class="98")
    aggregate_cmd(run, tariffs=ROOT / "tariffs" / "example.yaml", quality_class="99.9")
    out = capsys.readouterr().out
    assert "quality class 99.9" in out and "GPU against GPU" in out


# --- scale ------------------------------------------------------------------------------------


def test_the_perf_script_prints_its_contract_line() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "perf_aggregate.py"), "--rows", "20000"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    last = done.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"aggregate: 20000 rows in \d+\.\d+ s \(\d+ rows/s\)", last), last


def test_many_models_and_devices_aggregate_consistently() -> None:
    rows = [
        F.reference(model=m, gpu=g, **F.quality(100.0))
        for m, g in itertools.product(["a", "b", "c"], ["H100-SXM-80GB", "RTX-4090", "L40S"])
    ]
    result = _agg(rows, _two_gpu_tariffs())
    assert set(result.cheapest["model"]) == {"a", "b", "c"}
    assert result.counts["eligible_without_tariff"] == 3  # the L40S rows
    assert isinstance(result.points, pd.DataFrame)


def test_random_weight_rows_are_never_priced_and_are_published_as_speed_only() -> None:
    rows = [
        F.reference(model="m", ppl=100.0),
        F.row(model="m", weights="random", is_reference=False),
        F.row(model="arch-only", weights="random"),
    ]
    result = _agg(rows)
    assert set(result.cost["key"]) == {rows[0].key}
    assert result.counts["priced_rows"] == 1
    assert result.counts["random_weights_not_priced"] == 2
    assert list(result.speed_only["key"]) == [rows[1].key, rows[2].key]
    assert "arch-only" not in result.counts["models_without_reference"]
    assert (result.points.loc[result.points["weights"] == "random", "quality_class"]
            == "unknown").all()  # fmt: skip
