"""Comparing two runs: matching by point fields, paired and Welch tests, threshold verdicts."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from harness.errors import UserInputError
from harness.results.compare import Array, _verdict, compare, t_quantile_975
from harness.row import ResultRow
from harness.run.store import atomic_write_bytes, window_scores_path
from tests import factories as F


def _configs(
    run: str, decode_scale: float = 1.0, peak_scale: float = 1.0, **extra: object
) -> list[ResultRow]:
    out = []
    for quant, ppl in (("none", 100.0), ("bnb-nf4", 100.5)):
        for batch in (1, 4):
            out.append(
                F.row(
                    run=run,
                    quantization=quant,
                    batch=batch,
                    is_reference=quant == "none",
                    group=f"tiny-llama|transformers|{quant}|kv=auto|cuda",
                    decode_tok_s=1000.0 * batch * decode_scale,
                    decode_cv=0.02,
                    repeats_done=5,
                    peak_mib_decode=2000.0 * batch * peak_scale,
                    **F.quality(ppl),
                    **extra,
                )
            )
    return out


def _windows(run_dir: Path, group: str, nll: Array, tokens: Array) -> None:
    buffer = io.BytesIO()
    np.savez(buffer, nll_sum=nll, tokens=tokens)
    atomic_write_bytes(window_scores_path(run_dir, group), buffer.getvalue())


def test_rows_are_matched_by_point_fields_not_by_key(tmp_path: Path) -> None:
    a = F.write_run(tmp_path / "a", _configs("a"))
    b = F.write_run(tmp_path / "b", _configs("b"))
    result = compare(a, b, threshold_pct=2.0)
    assert len(result.table) == 4 * 4  # 4 configurations × 4 metrics
    assert (result.table["key_a"] != result.table["key_b"]).all()
    assert "gpu" in result.matched_on
    assert result.only_a.empty and result.only_b.empty


def test_a_real_speed_up_is_better_and_no_change_is_equivalent(tmp_path: Path) -> None:
    a = F.write_run(tmp_path / "a", _configs("a"))
    b = F.write_run(tmp_path / "b", _configs("b", decode_scale=1.10))
    table = compare(a, b, threshold_pct=2.0).table
    decode = table[table["metric"] == "decode_tok_s"]
    assert (decode["verdict"] == "better").all()
    assert decode["diff_pct"].to_numpy() == pytest.approx([10.0] * 4)
    # Welch: se = 2 % of the mean / √5 on each side, t(≈7.8 df) ≈ 2.31
    assert (decode["ci_low_pct"] > 2.0).all() and (decode["ci_high_pct"] < 18.0).all()
    memory = table[table["metric"] == "peak_mib_decode"]
    assert (memory["verdict"] == "equivalent").all() and memory["ci_low_pct"].isna().all()
    same = compare(a, a, threshold_pct=5.0).table
    assert (same.loc[same["metric"] == "decode_tok_s", "verdict"] == "equivalent").all()


def test_a_slowdown_within_noise_of_the_threshold_is_inconclusive(tmp_path: Path) -> None:
    a = F.write_run(tmp_path / "a", _configs("a"))
    b = F.write_run(tmp_path / "b", _configs("b", decode_scale=0.98))
    decode = compare(a, b, threshold_pct=2.0).table.query("metric == 'decode_tok_s'")
    assert (decode["verdict"] == "inconclusive").all()
    worse = compare(a, F.write_run(tmp_path / "c", _configs("c", decode_scale=0.8)), 2.0).table
    assert (worse.query("metric == 'decode_tok_s'")["verdict"] == "worse").all()


def test_more_memory_beyond_the_threshold_is_worse_without_a_ci(tmp_path: Path) -> None:
    a = F.write_run(tmp_path / "a", _configs("a"))
    b = F.write_run(tmp_path / "b", _configs("b", peak_scale=1.05))
    memory = compare(a, b, threshold_pct=2.0).table.query("metric == 'peak_mib_decode'")
    assert (memory["verdict"] == "worse").all() and (memory["method"] == "point").all()


def test_fewer_joules_per_token_is_better_and_unmeasured_energy_is_na(tmp_path: Path) -> None:
    a = F.write_run(tmp_path / "a", _configs("a", j_per_token_decode=0.10))
    b = F.write_run(tmp_path / "b", _configs("b", j_per_token_decode=0.08))
    energy = compare(a, b, threshold_pct=2.0).table.query("metric == 'j_per_token_decode'")
    assert list(energy["diff_pct"]) == pytest.approx([-20.0] * 4)
    assert (energy["verdict"] == "better").all() and (energy["method"] == "point").all()
    none = F.write_run(tmp_path / "none", _configs("none"))
    unmeasured = compare(a, none, threshold_pct=2.0).table
    assert (unmeasured.query("metric == 'j_per_token_decode'")["verdict"] == "n/a").all()


def test_ppl_uses_the_paired_window_test_when_both_runs_kept_windows(tmp_path: Path) -> None:
    a = F.write_run(tmp_path / "a", _configs("a"))
    b = F.write_run(tmp_path / "b", _configs("b"))
    rng = np.random.default_rng(0)
    tokens = np.full(200, 255.0)
    hard = rng.gamma(4.0, 300.0, 200)  # windows differ a lot from each other …
    for group in {r.group for r in _configs("x")}:
        assert group is not None
        _windows(a, group, hard, tokens)
        _windows(b, group, hard * (1 + rng.normal(0, 1e-4, 200)), tokens)  # … runs barely
    table = compare(a, b, threshold_pct=0.5).table
    ppl = table[table["metric"] == "ppl"]
    assert (ppl["method"] == "paired-windows").all()
    assert (ppl["verdict"] == "equivalent").all()
    assert (ppl["ci_high_pct"] - ppl["ci_low_pct"] < 0.1).all()  # tight: the pairing cancels


def test_groups_with_kept_window_scores_are_compared_paired(tmp_path: Path) -> None:
    """The worker keeps every group's per-window NLL at store.window_scores_path; a group whose
    windows are there gets the paired test, one without falls back to the CIs."""
    label = "tiny-llama|transformers|none|kv=auto|cuda"

    def rows(run: str) -> list[ResultRow]:
        return [
            F.reference(run=run, group=label),
            F.row(run=run, quantization="bnb-nf4", **F.quality(100.5)),
        ]

    a = F.write_run(tmp_path / "a", rows("a"))
    b = F.write_run(tmp_path / "b", rows("b"))
    tokens = np.full(64, 255.0)
    nll = np.random.default_rng(1).gamma(4.0, 300.0, 64)
    for run_dir, scale in ((a, 1.0), (b, 1.01)):
        buffer = io.BytesIO()
        np.savez(buffer, nll_sum=nll * scale, tokens=tokens)
        atomic_write_bytes(window_scores_path(run_dir, label), buffer.getvalue())
    ppl = compare(a, b, threshold_pct=1.0).table.query("metric == 'ppl'").set_index("quantization")
    assert ppl.loc["none", "method"] == "paired-windows"
    assert ppl.loc["bnb-nf4", "method"] == "welch-ci"
    # 1 % more NLL per window: ppl × exp(0.01 × mean NLL per token), far beyond 1 %
    assert ppl.loc["none", "verdict"] == "worse"


def test_ppl_falls_back_to_welch_on_the_cis_without_windows(tmp_path: Path) -> None:
    a = F.write_run(tmp_path / "a", _configs("a"))
    b = F.write_run(tmp_path / "b", _configs("b"))
    ppl = compare(a, b, threshold_pct=0.5).table.query("metric == 'ppl'")
    assert (ppl["method"] == "welch-ci").all()
    # ±2 % CIs on each side: the unpaired comparison cannot show a 0.5 % equivalence
    assert (ppl["verdict"] == "inconclusive").all()
    assert ppl["ci_high_pct"].iloc[0] == pytest.approx(2.0 * np.sqrt(2), rel=1e-3)


def test_two_runs_on_different_cards_are_compared_card_against_card(tmp_path: Path) -> None:
    a = F.write_run(tmp_path / "a", _configs("a"))
    b = F.write_run(tmp_path / "b", _configs("b", gpu="H200-141GB"))
    result = compare(a, b, threshold_pct=2.0)
    assert "gpu" not in result.matched_on
    assert set(result.table["gpu_b"]) == {"H200-141GB"}
    assert len(result.table) == 16  # 4 configurations × 4 metrics


def test_unmatched_duplicated_and_failed_rows_are_reported_not_compared(tmp_path: Path) -> None:
    rows_a = [*_configs("a"), F.row(run="a", context=999), F.row(run="a", status="oom")]
    rows_b = [*_configs("b"), F.row(run="b", context=4096), _configs("b")[0]]
    a = F.write_run(tmp_path / "a", rows_a)
    b = F.write_run(tmp_path / "b", rows_b)
    F.write_bad_file(b)
    result = compare(a, b, threshold_pct=2.0)
    assert result.only_a["context"].tolist() == [999]
    assert result.only_b["context"].tolist() == [4096]
    assert result.duplicates == {"a": 0, "b": 1}  # the oom twin is not compared; b repeats one
    assert [Path(p).name for p, _ in result.unreadable] == ["broken.json"]
    assert len(result.table) == 16  # 4 configurations × 4 metrics


def test_the_threshold_must_be_positive(tmp_path: Path) -> None:
    a = F.write_run(tmp_path / "a", _configs("a"))
    with pytest.raises(UserInputError, match="positive percentage"):
        compare(a, a, threshold_pct=0)


def test_verdicts_against_the_threshold() -> None:
    assert _verdict(-1.0, 1.0, 2.0, +1) == "equivalent"
    assert _verdict(2.5, 4.0, 2.0, +1) == "better"
    assert _verdict(2.5, 4.0, 2.0, -1) == "worse"
    assert _verdict(-4.0, -2.5, 2.0, -1) == "better"
    assert _verdict(1.0, 3.0, 2.0, +1) == "inconclusive"
    assert _verdict(float("nan"), 1.0, 2.0, +1) == "n/a"


def test_the_t_quantile_matches_tables() -> None:
    table = {2: 4.303, 4: 2.776, 10: 2.228, 30: 2.042, 1e9: 1.960}
    got = t_quantile_975(np.array(list(table)))
    assert got == pytest.approx(list(table.values()), rel=0.01)
    assert t_quantile_975(np.array([np.inf]))[0] == pytest.approx(1.959964, abs=1e-6)


def test_compare_cmd_prints_one_row_per_configuration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.cli.results import compare_cmd

    a = F.write_run(tmp_path / "a", _configs("a"))
    b = F.write_run(tmp_path / "b", _configs("b", decode_scale=1.1))
    compare_cmd(a, b, threshold_pct=2.0)
    out = capsys.readouterr().out
    assert "decode_tok_s: better 4" in out
    assert "matched 4 on" in out
