"""The equal-quality gate's reference rule, and the error analysis using the same one."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from harness.results import gate
from harness.results.aggregate import aggregate, aggregate_run
from harness.results.frame import frame_from_rows
from harness.results.regressions import pairs
from harness.row import ResultRow
from tests import factories as F


def two_revisions() -> list[ResultRow]:
    """One model at two revisions in one run, each with its own reference and one int4
    configuration: their perplexities differ by revision, so mixing them shows."""
    return [
        F.reference(group="ref-main", revision="main", **F.quality(100.0)),
        F.reference(group="ref-v2", revision="v2", **F.quality(120.0, 120.0)),
        F.row(group="int4-main", revision="main", quantization="quanto-int4",
              **F.quality(100.5)),
        F.row(group="int4-v2", revision="v2", quantization="quanto-int4",
              **F.quality(120.6, 120.0)),
    ]  # fmt: skip


def test_gate_and_error_analysis_pick_the_same_reference_on_a_two_revision_run(
    tmp_path: Path,
) -> None:
    F.write_run(tmp_path, two_revisions())
    result = aggregate_run(tmp_path)
    points = result.points
    rule = gate.references(points, "ppl")
    assert result.regressions is not None
    analysed = result.regressions.summary.set_index("group")["reference_group"].to_dict()
    for config, reference, ppl_ref in (("int4-main", "ref-main", 100.0),
                                       ("int4-v2", "ref-v2", 120.0)):  # fmt: skip
        position = int(np.flatnonzero(points["group"] == config)[0])
        gated_against = set(points["group"].iloc[rule.rows_for(position)])
        assert gated_against == {reference}
        assert analysed[config] == reference
        assert points["ppl_ref"].iloc[position] == ppl_ref  # never the median of both revisions
        assert points["quality_class"].iloc[position] == "99"


def test_several_references_give_their_median_and_the_first_for_the_error_analysis() -> None:
    rows = [
        F.reference(group="ref-a", **F.quality(100.0)),
        F.reference(group="ref-b", backend="vllm", **F.quality(102.0)),
        F.reference(group="ref-c", target="rocm", gpu="MI300X", **F.quality(90.0)),
        F.row(group="int4", quantization="quanto-int4", **F.quality(100.5)),
    ]
    points = aggregate(frame_from_rows(rows)).points
    rule = gate.references(points, "ppl")
    position = int(np.flatnonzero(points["group"] == "int4")[0])
    # the same target's references (cuda: a and b), not rocm's
    assert list(points["group"].iloc[rule.rows_for(position)]) == ["ref-a", "ref-b"]
    assert points["ppl_ref"].iloc[position] == pytest.approx(101.0)
    assert [(points["group"].iloc[c], points["group"].iloc[r]) for c, r in pairs(points)] == [
        ("int4", "ref-a")
    ]


def test_quality_classes_follow_ppl_against_the_reference() -> None:
    rows = [
        F.reference(**F.quality(100.0)),
        F.row(quantization="bnb-int8", **F.quality(100.05)),  # ≤ 100/0.999 = 100.1001
        F.row(quantization="bnb-nf4", **F.quality(100.5)),  # ≤ 100/0.99 = 101.0101
        F.row(quantization="bnb-fp4", **F.quality(101.5)),  # beyond both
        F.row(quantization="quanto-int4", **F.quality(100 / 0.99)),  # on the line: a coin flip
        F.row(quantization="quanto-int2", ppl=None),
    ]
    points = aggregate(frame_from_rows(rows), F.tariffs()).points.set_index("quantization")
    assert points.loc["none", "quality_class"] == "99.9"
    assert points.loc["bnb-int8", "quality_class"] == "99.9"
    assert points.loc["bnb-nf4", "quality_class"] == "99"
    assert points.loc["bnb-fp4", "quality_class"] == "below"
    # its interval straddles the class-99 margin: neither shown within nor beyond it
    assert points.loc["quanto-int4", "quality_class"] == "undecided"
    assert points.loc["quanto-int4", "verdict_99"] == "undecided"
    assert points.loc["quanto-int4", "undecided_by_99"] == "ppl"
    assert points.loc["quanto-int2", "quality_class"] == "unknown"
    assert points.loc["bnb-nf4", "quality_pct"] == pytest.approx(100 / 100.5 * 100)
    # the paired ΔNLL CI travels with the class, also as a perplexity change in %
    assert points.loc["bnb-nf4", "dppl_pct"] == pytest.approx(0.5)
    assert (
        points.loc["bnb-nf4", "dppl_pct_ci_low"] < 0.5 < points.loc["bnb-nf4", "dppl_pct_ci_high"]
    )


def test_accuracy_gates_on_the_paired_items_when_the_row_measured_them() -> None:
    rows = [
        F.reference(**F.arc(0.60, 0, 0), **F.quality(100.0)),
        # 60 of 2,376 items lost, none gained: 2.5 points, beyond class 99's 0.6 for sure
        F.row(quantization="bnb-int8", **F.arc(0.60, 60, 0), **F.quality(100.05)),
        # 3 lost, 3 gained: within 0.6 points for sure, but not shown within 0.06 (class 99.9)
        F.row(quantization="bnb-nf4", **F.arc(0.60, 3, 3), **F.quality(100.05)),
        # ARC (a task) not measured where the run gates on it: never a pass on ppl alone
        F.row(quantization="bnb-fp4", **F.quality(100.05)),
    ]
    points = aggregate(frame_from_rows(rows), F.tariffs()).points.set_index("quantization")
    assert points.loc["bnb-int8", "verdict_99"] == "fail"
    assert points.loc["bnb-int8", "tasks_verdict_99"] == "fail"
    assert points.loc["bnb-int8", "ppl_verdict_99"] == "pass"
    assert points.loc["bnb-int8", "quality_class"] == "below"
    assert points.loc["bnb-nf4", "verdict_99"] == "pass"
    assert points.loc["bnb-nf4", "verdict_99_9"] == "undecided"
    assert points.loc["bnb-nf4", "undecided_by_99_9"] == "tasks"
    assert points.loc["bnb-nf4", "tasks_more_99_9"] > 0  # items that would decide it
    assert points.loc["bnb-nf4", "quality_class"] == "99"
    assert points.loc["bnb-fp4", "tasks_verdict_99"] == "not measured"
    assert points.loc["bnb-fp4", "ppl_verdict_99_9"] == "pass"
    assert points.loc["bnb-fp4", "verdict_99"] == "undecided"
    assert points.loc["bnb-fp4", "undecided_by_99"] == "tasks"
    assert points.loc["bnb-fp4", "unmeasured_gates"] == "tasks: no task scored on this row"
    assert points.loc["bnb-fp4", "quality_class"] == "undecided"


def test_one_flipped_item_of_a_hundred_never_fails_a_configuration() -> None:
    """The case that started it: KV fp8 lost 1 ARC item of 100 (0.28 → 0.27), McNemar p = 1,
    ΔNLL +0.0002 nats/token. The point comparison failed it; the paired test cannot tell."""
    rows = [
        F.reference(**F.arc(0.28, 0, 0, items=100), **F.quality(254.80, 254.80)),
        F.row(kv_cache_dtype="fp8", **F.arc(0.28, 1, 0, items=100),
              **F.quality(254.80 * math.exp(0.0002), 254.80, half_ci=0.0008)),
    ]  # fmt: skip
    points = aggregate(frame_from_rows(rows), F.tariffs()).points.set_index("kv_cache_dtype")
    fp8 = points.loc["fp8"]
    assert fp8["tasks"][0]["score"] == pytest.approx(0.27)
    assert fp8["tasks_verdict_99"] == "undecided" and fp8["ppl_verdict_99"] == "pass"
    assert fp8["verdict_99"] == "undecided"  # never "fail" on one flip
    # the items that would decide it at the observed spread, beyond the 100 scored
    assert fp8["tasks_needed_99"] > 100 and fp8["tasks_more_99"] == fp8["tasks_needed_99"] - 100
    # gated on perplexity alone (the default CPU scenario's choice), it passes class 99
    alone = aggregate(frame_from_rows(rows), F.tariffs(), gated=("ppl",)).points
    assert alone.set_index("kv_cache_dtype").loc["fp8", "verdict_99"] == "pass"


def test_the_reference_is_per_model_and_run_and_prefers_the_same_target() -> None:
    rows = [
        F.reference(target="cpu", gpu="cpu", **F.quality(100.0)),
        F.reference(target="cuda", **F.quality(110.0, 110.0)),
        F.row(target="cuda", quantization="bnb-nf4", **F.quality(110.5, 110.0)),  # 99 vs cuda ref
        F.row(target="rocm", gpu="MI300X", quantization="bnb-nf4", **F.quality(100.05)),
        F.row(model="no-ref", **F.quality(50.0)),
        F.row(run="run-b", quantization="bnb-nf4", **F.quality(100.05)),  # other run: no ref
    ]
    points = aggregate(frame_from_rows(rows), F.tariffs()).points
    by = points.set_index(["run", "model", "target", "quantization"])["ppl_ref"]
    assert by[("run-a", "tiny-llama", "cuda", "bnb-nf4")] == 110.0
    assert by[("run-a", "tiny-llama", "rocm", "bnb-nf4")] == pytest.approx(105.0)  # median, any
    assert np.isnan(by[("run-a", "no-ref", "cuda", "none")])
    assert np.isnan(by[("run-b", "tiny-llama", "cuda", "bnb-nf4")])
    result = aggregate(frame_from_rows(rows), F.tariffs())
    assert result.counts["models_without_reference"] == ["no-ref"]


def test_every_metric_the_gate_judges_says_what_its_units_are() -> None:
    from harness.results import gate
    from harness.spec.quality import GATE_METRICS

    assert tuple(gate.UNITS) == GATE_METRICS == ("ppl", "tasks", "context")
