"""The worker on the shipped tiny model: complete rows, golden quality, self-reference, OOM rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.backends.transformers.backend import TransformersBackend
from harness.row import ResultRow
from harness.run.contracts import WorkContext
from harness.run.store import reference_artifact
from harness.run.worker import measure_group
from harness.spec.quality import QualitySettings
from harness.spec.scenario import Point
from tests import factories as F

# Loads an engine or starts Ray: not in `make test-fast` (tests/conftest.py).
pytestmark = pytest.mark.engine

QUALITY = QualitySettings(window_tokens=64, max_windows=4, arc_items=4, bootstrap_samples=200)


def context(tmp_path: Path) -> WorkContext:
    return F.work_context(tmp_path, QUALITY)


def point(**kw: Any) -> Point:
    return F.tiny_point(QUALITY, **{**kw})


def run(tmp_path: Path, points: list[Point]) -> list[ResultRow]:
    emitted: list[ResultRow] = []
    rows = measure_group(points[0].group, points, context(tmp_path), emitted.append)
    assert [r.key for r in rows] == [r.key for r in emitted]  # each row emitted as it is made
    return rows


def test_the_reference_measured_against_itself_gives_kl_0_and_top1_1(tmp_path: Path) -> None:
    (row,) = run(tmp_path, [point()])
    assert row.status == "ok", row.error
    assert row.is_reference
    assert row.kl_vs_ref == 0.0 and row.top1_agree == 1.0
    assert row.dnll_vs_ref == 0.0 and row.dnll_ci_low == 0.0 and row.dnll_ci_high == 0.0
    assert reference_artifact(context(tmp_path), point().group).is_file()


def test_golden_perplexity_of_the_shipped_model(tmp_path: Path) -> None:
    """fp32 tiny-llama on 4 evenly spaced 64-token windows of wiki.test: PPL 188.61
    (NLL 5.23968 nats/token), far below the uniform 4,096; recorded from this model."""
    (row,) = run(tmp_path, [point()])
    assert row.ppl == pytest.approx(188.6108, rel=1e-4)
    assert row.nll_mean == pytest.approx(5.239686, rel=1e-5)
    assert row.ppl_ci_low is not None and row.ppl_ci_high is not None
    assert row.ppl_ci_low <= row.ppl <= row.ppl_ci_high
    assert row.quality_windows == 4 and row.window_tokens == 64


def test_rows_are_complete_and_tokens_are_counted_from_outputs(tmp_path: Path) -> None:
    rows = run(tmp_path, [point(), point(batch=1, context=32)])
    for row in rows:
        assert row.status == "ok", row.error
        assert row.generated_tokens == row.batch * row.output_tokens
        for name in ("prefill_tok_s", "decode_tok_s", "ttft_ms_p50", "tpot_ms_p50", "itl_ms_p99",
                     "e2e_ms_p50", "peak_mib_load", "peak_mib_prefill", "peak_mib_decode",
                     "predicted_peak_mib", "ppl", "tasks"):  # fmt: skip
            assert getattr(row, name) is not None, name
        assert row.timer == "perf_counter" and row.memory_source == "rss-sampler"
        assert row.repeats_done is not None and row.repeats_done >= row.repeats
        assert row.roofline_fraction is None  # a CPU row has no catalog peak to compare with


def test_measured_weights_are_within_15_percent_of_the_plan(tmp_path: Path) -> None:
    for quantization in ("none", "bnb-int8", "bnb-nf4", "quanto-int4"):
        (row,) = run(tmp_path / quantization, [point(quantization=quantization)])
        assert row.weights_gap_pct is not None
        assert abs(row.weights_gap_pct) < 15, (quantization, row.weights_gap_pct)


def test_an_oom_in_one_point_is_a_row_and_the_group_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    real = TransformersBackend.generate

    def generate(self: TransformersBackend, prompts: list[list[int]], new_tokens: int) -> Any:
        if len(prompts) == 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(self, prompts, new_tokens)

    monkeypatch.setattr(TransformersBackend, "generate", generate)
    rows = run(tmp_path, [point(batch=2), point(batch=1)])
    assert [r.status for r in rows] == ["oom", "ok"]
    assert rows[0].predicted_peak_mib is not None and "out of memory" in (rows[0].error or "")


def test_a_group_that_cannot_load_fails_each_point_with_the_reason(tmp_path: Path) -> None:
    rows = run(tmp_path, [point(quantization="fp8"), point(quantization="fp8", batch=1)])
    assert [r.status for r in rows] == ["error", "error"]
    assert all("load/quality" in (r.error or "") for r in rows)


def test_an_int8_kv_cache_is_compared_with_the_reference(tmp_path: Path) -> None:
    run(tmp_path, [point()])  # the reference first, as the driver orders them
    (row,) = run(tmp_path, [point(kv_cache_dtype="int8")])
    assert row.status == "ok", row.error
    assert not row.is_reference
    assert row.dnll_ci_low is not None and row.dnll_ci_high is not None
    assert row.dnll_ci_low <= row.dnll_vs_ref <= row.dnll_ci_high  # type: ignore[operator]
    assert row.kl_vs_ref is not None and row.kl_vs_ref >= -1e-9
    assert row.top1_agree is not None and 0.9 < row.top1_agree <= 1.0


def test_rows_carry_the_paired_statistics_the_verdict_reads(tmp_path: Path) -> None:
    (ref,) = run(tmp_path, [point()])
    assert ref.dnll_ci90_low == ref.dnll_ci90_high == 0.0 and ref.dnll_sd == 0.0
    assert ref.tasks is not None
    (ref_arc,) = ref.tasks  # ARC-Easy, the shipped task arc-easy
    assert ref_arc.diff == 0.0 and ref_arc.paired_units == QUALITY.arc_items
    (row,) = run(tmp_path, [point(kv_cache_dtype="int8")])
    low, high = row.dnll_ci90_low, row.dnll_ci90_high
    assert low is not None and high is not None and row.dnll_sd is not None
    # the 90 % interval (both one-sided 95 % bounds) lies inside the 95 % one, around the mean
    assert row.dnll_ci_low <= low <= row.dnll_vs_ref <= high <= row.dnll_ci_high  # type: ignore[operator]
    # the reference's ARC answers travelled with its scores: the same items, paired
    assert row.tasks is not None
    (arc,) = row.tasks
    assert arc.name == "arc-easy" and arc.paired_units == QUALITY.arc_items
    assert arc.diff is not None and arc.diff_ci90_low <= arc.diff <= arc.diff_ci90_high  # type: ignore[operator]


def test_a_failure_after_the_load_still_closes_the_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error no point catches (here: planning the prediction) ends the group, and the engine's
    memory is released all the same: the next group of an in-process `measure` starts clean."""
    from harness.modes.offline.device import run as offline

    closed: list[bool] = []
    real_close = TransformersBackend.close

    def close(self: TransformersBackend) -> None:
        closed.append(True)
        real_close(self)

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("plan exploded")

    monkeypatch.setattr(TransformersBackend, "close", close)
    monkeypatch.setattr(offline, "prediction", broken)
    with pytest.raises(RuntimeError, match="plan exploded"):
        run(tmp_path, [point()])
    assert closed == [True]


def test_a_consumer_that_stops_early_still_closes_the_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.run import worker

    closed: list[bool] = []
    monkeypatch.setattr(TransformersBackend, "close", lambda self: closed.append(True))
    items = worker.iter_group(point().group, [point()], context(tmp_path))
    next(items)  # the group's window scores: the model is loaded
    items.close()
    assert closed == [True]


def test_a_rocm_point_is_planned_and_predicted_on_the_same_default_card(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No --gpu and a device the catalog does not know: `harness plan` and the worker's
    prediction both assume the target's default card (ROCm: MI300X), never a CUDA card."""
    from harness import budget, plan
    from harness.modes.offline.device import run as offline
    from harness.spec.scenario import Grid

    rocm = point(target="rocm")
    grid = Grid(scenario=scenario_for(rocm), points=[rocm], skipped=[])
    planned = budget.plan_grid(grid).points[0]
    seen: list[str] = []
    real = plan.plan_point

    def plan_point(p: Point, card: Any, **kwargs: Any) -> Any:
        seen.append(card.name)
        return real(p, card, **kwargs)

    monkeypatch.setattr(plan, "plan_point", plan_point)
    offline.prediction(rocm, None, None, context(tmp_path))
    assert planned.gpu == seen[0] == plan.default_card("rocm").name == "MI300X"


def scenario_for(p: Point) -> Any:
    from harness.spec.scenario import Scenario

    return Scenario(
        name="rocm", models=[{"id": p.model}], backend=[p.backend], quantization=[p.quantization],
        batch=[p.batch], context=[p.context], output_tokens=p.output_tokens, targets=[p.target],
    )  # fmt: skip
