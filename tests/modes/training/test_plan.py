"""harness.modes.training.plan: a training step's phases carried into the PointPlan (no KV cache,
no roofline), the fit on the largest phase, and the time of its steps and evaluations by hand
(the tiny model: 4,196,608 parameters, tied embeddings)."""

from __future__ import annotations

import pytest

from harness import plan as planner
from harness.modes.training.memory import TrainingMemory
from harness.modes.training.plan import plan_training_point
from harness.modes.training.spec import TrainingPoint
from harness.spec import catalog
from harness.spec.scenario import Point
from harness.units import GIB

ARCH = catalog.model("tiny-llama")
CPU = catalog.gpu("cpu")  # 24 GiB, 0.16 bf16 TFLOP/s
OPTIONS = planner.PlanOptions(gpu_memory_utilization=0.9, warmups=1)  # not read by training
# LoRA r 8 on q, k, v, o of 4 layers: (4,096 + 3,072 + 3,072 + 4,096) × 4 (test_memory.py)
LORA_TRAINABLE = 57_344


def training_point(**kw: object) -> Point:
    train = TrainingPoint.model_validate(
        {"method": "lora", "micro_batch": 4, "grad_accum": 1, "seq_len": 256, "steps": 30, **kw}
    )
    return Point(
        model="tiny-llama", backend="transformers", quantization=train.base_format,
        kv_cache_dtype="auto", batch=train.micro_batch, context=train.seq_len, output_tokens=0,
        target="cpu", repeats=1, training=train,
    )  # fmt: skip


def test_the_phases_are_forward_backward_and_the_peak_with_no_cache_and_no_roofline() -> None:
    found = plan_training_point(training_point(), CPU, ARCH, OPTIONS)
    mem = found.mode_memory
    assert isinstance(mem, TrainingMemory)
    assert found.kv_cache_gib == 0.0 and found.roofline_decode_tok_s == 0.0
    assert found.prefill_gib * GIB == pytest.approx(mem.forward)
    assert found.decode_gib * GIB == pytest.approx(mem.backward)
    assert found.total_gib * GIB == pytest.approx(
        max(mem.forward, mem.backward, mem.optimizer_step)
    )
    assert found.load_gib * GIB == pytest.approx(mem.weights + mem.reserve)
    assert found.capacity_gib == 24.0 and found.fits and found.reason.startswith("fits: ")


def test_the_seconds_are_the_steps_and_the_evaluations_at_the_cpu_efficiency() -> None:
    # LoRA: 4 FLOPs per parameter and token; a step 4 × 1 × 256 = 1,024 tokens:
    # 30 × 4 × 4,196,608 × 1,024 = 515,679,191,040; evaluations every 10 steps and at the end
    # (30 // 10 + 1 = 4) of 32 windows × 256 tokens at 2 FLOPs: 2 × 4,196,608 × 8,192 × 4
    # = 275,028,901,888; 790,708,092,928 ÷ 0.16e12 ÷ 0.25 (CPU efficiency) = 19.7677 s
    found = plan_training_point(training_point(), CPU, ARCH, OPTIONS)
    assert found.est_seconds == pytest.approx(19.7677023232)
    # full fine-tune: 6 FLOPs per parameter and token, the evaluations the same:
    # (30 × 6 × 4,196,608 × 1,024 + 275,028,901,888) ÷ 0.04e12 = 26.2120 s
    full = plan_training_point(training_point(method="full"), CPU, ARCH, OPTIONS)
    assert full.est_seconds == pytest.approx((773_518_786_560 + 275_028_901_888) / 0.04e12)


def test_the_note_and_the_plan_contract_name_the_point_and_its_terms() -> None:
    found = plan_training_point(training_point(), CPU, ARCH, OPTIONS)
    assert found.mode_note.startswith(
        "train=lora mb=4 acc=1 seq=256 adamw × 30 steps · fwd/bwd/opt "
    )
    assert found.mode_note.endswith("trainable 57,344")
    contract = found.mode_contract
    assert contract["mode"] == "training" and contract["trainable_params"] == LORA_TRAINABLE
    assert contract["training"] == training_point().training.model_dump()  # type: ignore[union-attr]
    gib = contract["training_gib"]
    assert isinstance(gib, dict)
    assert set(gib) == {"weights", "gradients", "optimizer", "activations", "reserve",
                        "forward", "backward", "optimizer_step"}  # fmt: skip
    # AdamW: two fp32 moments per adapter value, 57,344 × 8 = 458,752 bytes
    assert gib["optimizer"] == pytest.approx(458_752 / GIB)


def test_a_card_smaller_than_the_largest_phase_does_not_fit_and_names_the_binding_term() -> None:
    small = CPU.model_copy(update={"memory_gib": 0.001})  # about 1 MiB
    found = plan_training_point(training_point(method="full"), small, ARCH, OPTIONS)
    assert not found.fits
    assert "GiB > 0.00 GiB on cpu; binding term: " in found.reason
