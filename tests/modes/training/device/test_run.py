"""Training rows in the store and the worker's training phase: strict reading that knows a
training row generates nothing, old rows still read, and a point that fails leaves its plan."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.modes.training.device import trainer
from harness.modes.training.device.run import train_points
from harness.modes.training.spec import TrainingPoint
from harness.row import ResultRow
from harness.run import store
from harness.run.contracts import WorkContext
from harness.run.device import Job
from harness.spec import models
from harness.spec.quality import QualitySettings
from harness.spec.scenario import Point, Reference
from tests.factories import row, write_run

# Loads an engine or starts Ray: not in `make test-fast` (tests/conftest.py).
pytestmark = pytest.mark.engine

TINY = str(models.PACKAGE_DATA / "tiny-llama")


def training(**kw: object) -> ResultRow:
    fields: dict[str, object] = {
        "mode": "training", "output_tokens": 0, "train_method": "lora",
        "loss_curve": [10.0, 9.5], "eval_curve": [[0.0, 9.9], [2.0, 9.4]],
        "eval_window_nll": [9.1, 9.7], "train_peak_gap_pct": -3.0,
    }  # fmt: skip
    fields.update(kw)
    return row(**fields)


def test_a_training_row_reads_and_its_zero_output_tokens_is_allowed(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", [training()])
    rows, bad = store.read_rows(run)
    assert len(rows) == 1 and not bad
    assert rows[0].loss_curve == [10.0, 9.5]


def test_zero_output_tokens_on_an_offline_row_or_a_broken_curve_is_refused(tmp_path: Path) -> None:
    run = write_run(
        tmp_path / "run",
        [row(output_tokens=0), training(loss_curve=[10.0, -1.0]), training(eval_window_nll=[])],
    )
    rows, bad = store.read_rows(run)
    reasons = sorted(reason for _, reason in bad)
    assert len(rows) == 1 and len(bad) == 2, reasons
    assert any("output_tokens = 0" in r for r in reasons)
    assert any("loss_curve holds a value" in r for r in reasons)


def test_an_old_row_without_training_columns_still_reads(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", [row()])
    path = next((run / "points").glob("*.json"))
    data = json.loads(path.read_text())
    for name in [k for k in data if k.startswith(("train", "loss_", "eval_", "grad_"))]:
        del data[name]
    for name in ("micro_batch", "grad_accum", "seq_len", "optimizer", "lr", "steps_to_target"):
        data.pop(name, None)
    path.write_text(json.dumps(data))
    rows, bad = store.read_rows(run)
    assert len(rows) == 1 and not bad and rows[0].train_method is None


def lora_point(steps: int) -> Point:
    return Point(
        model="tiny-llama", backend="transformers", quantization="none", kv_cache_dtype="auto",
        batch=1, context=16, output_tokens=0, target="cpu", repeats=1,
        training=TrainingPoint(method="lora", micro_batch=1, grad_accum=1, seq_len=16,
                               steps=steps, eval_windows=2),
    )  # fmt: skip


def job(tmp_path: Path, model_path: str = TINY) -> Job:
    ctx = WorkContext(
        run_dir=str(tmp_path), run="r", reference=Reference(), quality=QualitySettings(),
        reference_backend="transformers",
    )  # fmt: skip
    return Job(ctx=ctx, device="cpu", model_path=model_path, tokenizer_dir=TINY, corpus_hash="c")


def test_a_point_that_fails_gives_an_error_row_with_its_plan_and_the_group_goes_on(
    tmp_path: Path,
) -> None:
    points = [lora_point(steps) for steps in (1, 2)]
    group = points[0].group
    broken = list(train_points(group, points, job(tmp_path, str(tmp_path / "none"))))
    assert [r.status for r in broken] == ["error", "error"]
    assert all(r.predicted_train_mib_backward and r.train_method == "lora" for r in broken)
    assert all(r.gpu == "cpu" for r in broken)  # the card it ran on, as offline rows say
    fine = list(train_points(group, points[:1], job(tmp_path)))
    assert fine[0].status == "ok" and fine[0].train_steps == 1


class OOMError(RuntimeError):
    """An engine's own OOM type (as some allocators name theirs), with no "out of memory" text."""


def torch_oom() -> BaseException:
    import torch

    return torch.OutOfMemoryError("HIP error: hipErrorOutOfMemory while allocating 2.00 GiB")


@pytest.mark.parametrize(
    "raised",
    [lambda: OOMError("could not allocate 2.00 GiB"), torch_oom],
    ids=["an OOMError type", "torch.OutOfMemoryError"],
)
def test_training_detects_an_oom_by_the_workers_rule_not_by_its_message_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raised: Callable[[], BaseException]
) -> None:
    """The rule `harness.run.device.is_oom` (shared with the offline and serving runners) knows
    OOMs by their type as well as by their text; training's own copy read the text only and
    called these `error` rows."""
    from harness.run.device import is_oom

    exc = raised()
    assert is_oom(exc) and "out of memory" not in str(exc).lower()

    def load_model(*args: object, **kwargs: object) -> object:
        raise exc

    monkeypatch.setattr(trainer, "load_model", load_model)
    point = lora_point(1)
    (oom,) = train_points(point.group, [point], job(tmp_path))
    assert oom.status == "oom", oom.error
    assert oom.predicted_train_mib_backward is not None and oom.train_method == "lora"
