"""Training energy: J per optimizer step and per training token over extra steps run after the
measured ones, on recorded counter sequences and on the tiny model with a counter rising at a
known power; none is run, and the row says why, where the counter cannot be read."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.measure.energy import EnergyMeter, nvml_joules
from harness.modes.training.device.run import step_energy, train_points
from harness.modes.training.spec import TrainingPoint
from harness.row import ResultRow
from harness.run.contracts import WorkContext
from harness.run.device import Job
from harness.spec import models
from harness.spec.quality import QualitySettings
from harness.spec.scenario import Point, Reference
from tests.run.test_worker_energy import constant_power

# Loads an engine or starts Ray: not in `make test-fast` (tests/conftest.py).
pytestmark = pytest.mark.engine


def test_step_energy_by_hand_from_a_recorded_counter() -> None:
    """Readings 10,000 → 34,000 mJ over 3 steps in 1.2 s: 8 J a step, 20 W; 512 tokens a step."""
    reads: Iterator[int] = iter([10_000, 34_000])
    clock: Iterator[float] = iter([0.0, 1.2])
    meter = EnergyMeter("nvml", lambda: next(reads), nvml_joules, clock=lambda: next(clock))
    steps: list[int] = []
    part = step_energy(meter, lambda: steps.append(1), 512, min_duration_s=0.0)
    assert steps == [1]  # min_duration 0: one step
    assert part.energy_j_train_step == pytest.approx(24.0)
    assert part.j_per_token_train == pytest.approx(24.0 / 512)
    assert part.avg_power_w_train == pytest.approx(20.0)


def test_an_unreadable_counter_runs_no_extra_step() -> None:
    steps: list[int] = []
    part = step_energy(EnergyMeter.unavailable("nvml: no driver"), lambda: steps.append(1), 64)
    assert steps == [] and part.energy_unavailable_reason == "nvml: no driver"
    assert part.j_per_token_train is None


def lora_point(steps: int) -> Point:
    return Point(
        model="tiny-llama", backend="transformers", quantization="none", kv_cache_dtype="auto",
        batch=1, context=16, output_tokens=0, target="cpu", repeats=1,
        training=TrainingPoint(method="lora", micro_batch=2, grad_accum=2, seq_len=16,
                               steps=steps, eval_windows=2),
    )  # fmt: skip


def run_points(tmp_path: Path, meter: EnergyMeter[object]) -> ResultRow:
    ctx = WorkContext(
        run_dir=str(tmp_path), run="r", reference=Reference(), quality=QualitySettings(),
        reference_backend="transformers",
    )  # fmt: skip
    point = lora_point(2)
    tiny = str(models.PACKAGE_DATA / "tiny-llama")
    job = Job(ctx=ctx, device="cpu", model_path=tiny, tokenizer_dir=tiny, corpus_hash="c",
              meter=meter)  # fmt: skip
    (row,) = train_points(point.group, [point], job)
    return row


def test_a_training_row_on_a_counter_at_a_known_power(tmp_path: Path) -> None:
    watts = 25.0
    row = run_points(tmp_path, constant_power(watts))
    assert row.status == "ok", row.error
    assert row.energy_source == "rapl-package" and row.energy_unavailable_reason is None
    assert row.avg_power_w_train == pytest.approx(watts, rel=0.02)
    assert row.energy_j_train_step is not None and row.j_per_token_train is not None
    assert row.j_per_token_train == pytest.approx(row.energy_j_train_step / (2 * 2 * 16))
    assert row.train_steps == 2  # the extra steps are energy's, not the row's


def test_a_training_row_without_a_counter_says_why(tmp_path: Path) -> None:
    row = run_points(tmp_path, EnergyMeter.unavailable("rapl: /x does not exist"))
    assert row.status == "ok", row.error
    assert row.j_per_token_train is None and row.energy_j_train_step is None
    assert row.energy_unavailable_reason == "rapl: /x does not exist"
