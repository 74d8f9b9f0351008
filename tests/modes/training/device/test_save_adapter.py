"""A LoRA point with `save_adapter` saves a PEFT folder bound to its base, usable as a model
entry's `adapter:`; a point without it saves nothing (and keeps its earlier key)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from harness import __version__
from harness.modes.training.device.run import adapter_folder, train_points
from harness.modes.training.spec import TrainingPoint
from harness.run.contracts import WorkContext
from harness.run.device import Job
from harness.spec import adapters, models
from harness.spec.quality import QualitySettings
from harness.spec.scenario import Point, Reference

# Loads an engine or starts Ray: not in `make test-fast` (tests/conftest.py).
pytestmark = pytest.mark.engine

TINY = str(models.PACKAGE_DATA / "tiny-llama")


def snips_point(save: bool) -> Point:
    return Point(
        model="tiny-llama", backend="transformers", quantization="none", kv_cache_dtype="auto",
        batch=2, context=64, output_tokens=0, target="cpu", repeats=1,
        training=TrainingPoint(method="lora", micro_batch=2, grad_accum=1, seq_len=64, steps=2,
                               lr=1e-2, lora_r=4, lora_alpha=8, eval_windows=4,
                               train_data="snips", eval_data="snips", save_adapter=save),
    )  # fmt: skip


def job(tmp_path: Path) -> Job:
    ctx = WorkContext(
        run_dir=str(tmp_path), run="r", reference=Reference(), quality=QualitySettings(),
        reference_backend="transformers",
    )  # fmt: skip
    return Job(ctx=ctx, device="cpu", model_path=TINY, tokenizer_dir=TINY, corpus_hash="c")


def test_a_lora_point_saves_its_adapter_bound_to_its_base(tmp_path: Path) -> None:
    point = snips_point(save=True)
    (row,) = train_points(point.group, [point], job(tmp_path))
    assert row.status == "ok", row.error
    folder = adapter_folder(point, job(tmp_path))
    assert {p.name for p in folder.iterdir()} >= {
        adapters.CONFIG,
        adapters.WEIGHTS,
        adapters.BINDING,
    }
    adapter = adapters.read_adapter(folder)
    assert adapter.rank == 4 and adapter.base_model == "tiny-llama"
    assert adapter.base_weights_sha256 == adapters.weights_hash(TINY)
    adapters.check_binding(adapter, "tiny-llama", "main", base_weights=Path(TINY))
    assert row.train_data == "snips" and row.loss_last is not None


def test_save_adapter_off_saves_nothing_and_keeps_the_key(tmp_path: Path) -> None:
    point = snips_point(save=False)
    (row,) = train_points(point.group, [point], job(tmp_path))
    assert row.status == "ok", row.error
    assert not (tmp_path / "adapters").exists()
    assert point.key("c") != snips_point(save=True).key("c")
    # the key's payload without the field is what a harness without save_adapter hashed
    fields = point.model_dump(
        exclude={"weights", "adapter", "serving", "layout", "speculative", "inputs"}
    )
    fields["training"].pop("save_adapter")
    payload = json.dumps({**fields, "mode": "training", "harness": __version__, "corpus": "c"},
                         sort_keys=True)  # fmt: skip
    assert point.key("c") == hashlib.sha256(payload.encode()).hexdigest()[:20]
