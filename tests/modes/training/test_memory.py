"""The training memory plan against figures computed by hand for the shipped tiny model
(hidden 256, 4 layers, 4 heads × 64, 2 KV heads, MLP 768, vocab 4,096, tied embeddings, fp32)."""

from __future__ import annotations

from harness import plan
from harness.modes.training import memory
from harness.modes.training.spec import TrainingPoint
from harness.spec import catalog
from harness.spec.scenario import Point
from harness.units import GIB


def training_point(**kw: object) -> Point:
    train = TrainingPoint.model_validate(
        {"method": "lora", "micro_batch": 4, "grad_accum": 1, "seq_len": 256, "steps": 30, **kw}
    )
    return Point(
        model="tiny-llama", backend="transformers", quantization=train.base_format,
        kv_cache_dtype="auto", batch=train.micro_batch, context=train.seq_len, output_tokens=0,
        target="cpu", repeats=1, training=train,
    )  # fmt: skip


# By hand, per layer with r = 8: q (256 → 256) 8·(256+256) = 4,096; k and v (256 → 128)
# 8·(256+128) = 3,072 each; o (256 → 256) 4,096; 14,336 per layer × 4 layers.
LORA_TRAINABLE = 57_344
# AdamW: two fp32 moments per adapter value: 57,344 × 8 bytes.
LORA_ADAMW_BYTES = 458_752
# Full fine-tune: embeddings 4,096·256 = 1,048,576; per layer q 65,536 + k 32,768 + v 32,768
# + o 65,536 + gate/up/down 3 × 196,608 + two norms 512 = 786,944; × 4 + final norm 256.
FULL_TRAINABLE = 1_048_576 + 4 * 786_944 + 256


def test_lora_trainable_parameters_and_optimizer_memory_match_the_hand_computation() -> None:
    arch = catalog.model("tiny-llama")
    mem = plan.plan_point(training_point(), catalog.gpu("cpu")).mode_memory
    assert mem is not None
    assert mem.trainable_params == LORA_TRAINABLE
    assert mem.optimizer == LORA_ADAMW_BYTES
    assert mem.gradients == LORA_TRAINABLE * 4  # fp32 gradients of the adapters
    # every LoRA tensor of the tiny model is below bitsandbytes' 4,096-value 8-bit threshold:
    # AdamW8bit keeps them in 32-bit, so the 8-bit optimizer saves nothing here
    eight = plan.plan_point(training_point(optimizer="adamw-8bit"), catalog.gpu("cpu")).mode_memory
    assert eight is not None and eight.optimizer == LORA_ADAMW_BYTES
    assert max(memory.lora_tensors(arch, 8, ("q_proj",))) == 2048


def test_full_fine_tune_counts_every_parameter_and_8bit_moments_are_a_quarter() -> None:
    full = plan.plan_point(training_point(method="full"), catalog.gpu("cpu")).mode_memory
    assert full is not None and full.trainable_params == FULL_TRAINABLE
    assert full.trainable_params == plan.param_counts(catalog.model("tiny-llama")).total
    assert full.optimizer == FULL_TRAINABLE * 8
    eight = plan.plan_point(
        training_point(method="full", optimizer="adamw-8bit"), catalog.gpu("cpu")
    ).mode_memory
    assert eight is not None
    # uint8 moments + absmax per 256 + maps on the big tensors, fp32 moments on the 2,304 norm
    # values: a little over a quarter of the 32-bit states
    assert 0.25 < eight.optimizer / full.optimizer < 0.27


def test_phases_and_checkpointing_follow_the_formulas() -> None:
    plain = plan.plan_point(training_point(method="full"), catalog.gpu("cpu"))
    ckpt = plan.plan_point(
        training_point(method="full", gradient_checkpointing=True), catalog.gpu("cpu")
    )
    assert plain.mode_memory is not None and ckpt.mode_memory is not None
    assert ckpt.mode_memory.activations < plain.mode_memory.activations / 2
    mem = plain.mode_memory
    assert mem.backward == mem.weights + mem.optimizer + mem.gradients + mem.activations + (
        mem.logits_grad + mem.reserve
    )
    assert plain.total_gib * GIB == max(mem.forward, mem.backward, mem.optimizer_step)
    accum = plan.plan_point(training_point(method="full", grad_accum=4), catalog.gpu("cpu"))
    assert accum.mode_memory is not None
    assert accum.mode_memory.forward == mem.forward + mem.gradients  # gradients live across micros
    qlora = plan.plan_point(training_point(method="qlora"), catalog.gpu("cpu"))
    assert qlora.weights_gib < plain.weights_gib


def test_a_training_step_that_cannot_fit_is_skipped_with_its_binding_term() -> None:
    point = training_point(method="full", micro_batch=4096, seq_len=2048)
    result = plan.plan_point(point, catalog.gpu("cpu"))
    assert not result.fits and "binding term: activations" in result.reason
